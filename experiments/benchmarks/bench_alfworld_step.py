"""Step time of ALFWorld's stock text env vs agentrl_lib's AlfWorldEnv on the same generated games and actions.

    python benchmarks/bench_alfworld_step.py [--games 6] [--steps 40] [--seed 0] [--games-dir DIR] [--machine TEXT]
        [--out results/alfworld_step.jsonl]

Each game is played along one fixed action sequence (its walkthrough interleaved with random admissible commands,
drawn once and replayed identically in every env). Envs compared:
  stock AlfredTWEnv   alfworld.agents.environment.alfred_tw_env.AlfredTWEnv(config).init_env(batch_size=1), as
                      ALFWorld's training scripts use it (textworld.gym batch env; config built here, no expert)
  stock + expert      the same with ALFWorld's default DAgger config (handcoded expert)
  stock PddlEnv       textworld's PddlEnv + AlfredDemangler in this process (the engine without gym plumbing)
  AlfWorldEnv         ours, expert="walkthrough" (default) and expert="none"
Prints the median step time (ms) of each and the ratios to ours; with --out, appends them as one JSON line (the
book page *Environments* quotes it).
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path


def action_sequences(games, steps: int, seed: int) -> list[list[str]]:
    from agentrl_lib.envs.alfworld import AlfWorldEnv

    rng = random.Random(seed)
    env = AlfWorldEnv(expert="none")
    seqs = []
    for g in games:
        r = env.reset(g.path)
        seq, walk = [], list(g.walkthrough)
        while len(seq) < steps and not r.done:
            # mostly random admissible commands, the walkthrough's next step now and then
            a = walk.pop(0) if walk and rng.random() < 0.3 and walk[0] in r.info.admissible else \
                rng.choice(r.info.admissible)
            seq.append(a)
            r = env.step(a)
        seqs.append(seq)
    env.close()
    return seqs


def time_ours(games, seqs, expert: str) -> list[float]:
    from agentrl_lib.envs.alfworld import AlfWorldEnv

    env = AlfWorldEnv(expert=expert)
    times = []
    for g, seq in zip(games, seqs):
        env.reset(g.path)
        for a in seq:
            t = time.perf_counter()
            env.step(a)
            times.append(time.perf_counter() - t)
    env.close()
    return times


def time_stock_pddlenv(games, seqs) -> list[float]:
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
    from textworld.envs import PddlEnv

    times = []
    for g, seq in zip(games, seqs):
        env = AlfredDemangler(PddlEnv(textworld.EnvInfos(admissible_commands=True, won=True)), shuffle=False)
        env.load(str(Path(g.path) / "game.tw-pddl"))
        env.reset()
        for a in seq:
            t = time.perf_counter()
            env.step(a)
            times.append(time.perf_counter() - t)
        env.close()
    return times


def stock_config(root: str, expert: bool) -> dict:
    """ALFWorld's base_config.yaml, the parts AlfredTWEnv reads."""
    return {"env": {"goal_desc_human_anns_prob": 0, "task_types": [1, 2, 3, 4, 5, 6], "domain_randomization": False,
                    "expert_type": "handcoded"},
            "dataset": {"data_path": root, "eval_id_data_path": root, "eval_ood_data_path": root,
                        "num_train_games": -1, "num_eval_games": -1},
            "general": {"training_method": "dagger" if expert else "dqn"},
            "rl": {"training": {"max_nb_steps_per_episode": 1000}},
            "dagger": {"training": {"max_nb_steps_per_episode": 1000}}}


def time_stock_alfred(games, seqs, root: str, expert: bool) -> list[float]:
    from alfworld.agents.environment.alfred_tw_env import AlfredTWEnv

    times = []
    for g, seq in zip(games, seqs):
        stock = AlfredTWEnv(stock_config(root, expert), train_eval="train")
        stock.game_files = [str(Path(g.path) / "game.tw-pddl")]
        env = stock.init_env(batch_size=1)
        env.reset()
        for a in seq:
            t = time.perf_counter()
            env.step([a])
            times.append(time.perf_counter() - t)
        env.close()
    return times


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--games", type=int, default=6)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--games-dir", default=str(Path(tempfile.gettempdir()) / "agentrl_bench_alfworld"),
                   help="where the games are made (reused when already there)")
    p.add_argument("--machine", default="", help="how to name the machine in the results, e.g. '2-core shared CPU'")
    p.add_argument("--out", default="", help="append one JSON line (e.g. results/alfworld_step.jsonl)")
    args = p.parse_args(argv)
    if min(args.games, args.steps) < 1:
        p.error("--games and --steps must be >= 1")
    from experiments.benchmarks.benchutil import load1, machine_info, write_result

    res = {"bench": "alfworld_step", **machine_info(args.machine), "load_before": load1()}

    from agentrl_lib.envs.alfworld_gen import make_alfworld_games

    gs = make_alfworld_games(args.games_dir, n=args.games, seed=args.seed, split="train", progress=False)
    games = gs.games
    seqs = action_sequences(games, args.steps, args.seed)
    print(f"{len(games)} games ({', '.join(g.params['task_type'] + '@' + g.params['floor_plan'] for g in games)}),"
          f" {sum(map(len, seqs))} steps each env", flush=True)
    rows = {}
    rows["AlfWorldEnv expert=walkthrough"] = time_ours(games, seqs, "walkthrough")
    rows["AlfWorldEnv expert=none"] = time_ours(games, seqs, "none")
    rows["stock PddlEnv+AlfredDemangler"] = time_stock_pddlenv(games, seqs)
    rows["stock AlfredTWEnv (no expert)"] = time_stock_alfred(games, seqs, str(gs.root), expert=False)
    try:
        rows["stock AlfredTWEnv (handcoded expert)"] = time_stock_alfred(games, seqs, str(gs.root), expert=True)
    except Exception as e:  # report, do not hide
        print(f"stock AlfredTWEnv with handcoded expert failed: {type(e).__name__}: {e}", file=sys.stderr)
    ours = statistics.median(rows["AlfWorldEnv expert=walkthrough"])
    print(f"{'env':40s} {'median ms':>10s} {'mean ms':>10s} {'÷ ours':>8s}")
    for name, ts in rows.items():
        med = statistics.median(ts)
        print(f"{name:40s} {med * 1e3:10.2f} {statistics.mean(ts) * 1e3:10.2f} {med / ours:8.1f}x")
    res.update(games=len(games), steps=len(rows["AlfWorldEnv expert=walkthrough"]), load_after=load1(),
               envs={name: {"step_ms_median": round(statistics.median(ts) * 1e3, 3),
                            "step_ms_mean": round(statistics.mean(ts) * 1e3, 3)} for name, ts in rows.items()})
    write_result(args.out, res, args, seed=args.seed)


if __name__ == "__main__":
    main()
