"""What the embedded model does on generated ALFWorld games, and what each stage costs: the numbers of book page
*Environments* ("ALFWorld offline").

    python benchmarks/bench_alfworld_embedded.py [--train-games 60] [--eval-games 12] [--max-turns 24] [--rl-steps 3]
        [--games-per-step 2] [--group-size 4] [--no-gradient-checkpointing] [--model embedded] [--seed 0]
        [--machine TEXT] [--out results/alfworld_embedded.jsonl] [--work DIR]

Each stage is one `agentrl` command in its own process (timed wall-clock, peak RSS from the OS: os.wait4), in a fresh
working folder (a temporary one unless --work; made games are not taken from the cache):
  games.train   make-games alfworld --split train --n TRAIN_GAMES --seed SEED
  games.unseen  make-games alfworld --split valid_unseen --n EVAL_GAMES --seed SEED (floor plans never in train)
  eval.base     eval --model MODEL (default: the embedded SmolLM2-135M-Instruct) on the valid_unseen games, greedy
  sft           sft on the train games' planner walkthroughs (1 epoch, the CLI's other defaults)
  eval.sft      eval of the SFT model on the same games
  rl            train --algo ppo --reward sparse --init <sft> for --rl-steps steps on the train games
Appends one JSON line to --out: per stage its seconds, peak RSS (GiB) and what it measured (game counts, skipped
candidates and walkthrough lengths; success, invalid-action rate and each game's commands; SFT losses; per RL step
success, invalid rate, rollout / update seconds and the longest trajectory in tokens). About half an hour on a 2-core
CPU, the SFT stage's peak near 10 GB (results/alfworld_embedded.jsonl holds what was measured).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # no spinning threads on a shared CPU; read when torch loads



def run_stage(args: list[str], log: Path) -> dict:
    """Run `python -m agentrl_lib.cli ARGS` to its end, its output to `log`; {seconds, peak_rss_gib}. Raises
    RuntimeError with the log's last lines when it fails."""
    t = time.perf_counter()
    with open(log, "w") as f:
        p = subprocess.Popen([sys.executable, "-m", "agentrl_lib.cli", *args], stdout=f, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(p.pid, 0)  # the child's own peak RSS (its env workers not counted)
        p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode:
        tail = "\n".join(log.read_text().splitlines()[-8:])
        raise RuntimeError(f"agentrl {' '.join(args[:2])} failed (exit {p.returncode}):\n{tail}")
    return {"seconds": round(time.perf_counter() - t, 1), "peak_rss_gib": round(usage.ru_maxrss / 1024 ** 2, 2)}


def game_stats(folder: Path) -> dict:
    """Games made, walkthrough lengths, and the generator's skipped candidates by reason (the manifest's params)."""
    from agentrl_lib.envs.base import load_game_set

    games = load_game_set(folder)
    lengths = [len(g.walkthrough) for g in games.games]
    # make-games alfworld always writes both (alfworld_gen.make_alfworld_games); a KeyError here is a changed manifest
    return {"n": len(games), "floor_plans": len(games.params["games_per_floor_plan"]),
            "skipped": games.params["skipped"], "walkthrough_mean": round(statistics.mean(lengths), 2),
            "walkthrough_max": max(lengths)}


def eval_stats(path: Path) -> dict:
    res = json.loads(path.read_text())
    keep = ("success_rate", "invalid_rate", "mean_turns", "mean_score_frac", "n_games", "env_errors", "max_turns")
    return {**{k: res[k] for k in keep}, "per_game": res["per_game"]}


def rl_stats(run: Path) -> dict:
    steps = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    keep = ("step", "episodes", "success_rate", "invalid_rate", "mean_turns", "env_errors", "seq_len_max",
            "rollout_seconds", "update_seconds", "step_seconds")
    return {"steps": [{k: s.get(k) for k in keep} for s in steps],
            "step_seconds_median": round(statistics.median(s["step_seconds"] for s in steps), 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train-games", type=int, default=60, help="ALFWorld train games (10 per task type at 60)")
    ap.add_argument("--eval-games", type=int, default=12, help="valid_unseen games the models are evaluated on")
    ap.add_argument("--max-turns", type=int, default=24, help="turn limit of evaluation and RL episodes")
    ap.add_argument("--rl-steps", type=int, default=3)
    ap.add_argument("--games-per-step", type=int, default=2)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--gradient-checkpointing", action=argparse.BooleanOptionalAction, default=True,
                    help="in the RL updates (about half the update's memory; book page Benchmarks)")
    ap.add_argument("--model", default="embedded", help="the base model (default: SmolLM2-135M-Instruct, embedded)")
    ap.add_argument("--seed", type=int, default=0, help="games, SFT and RL seed")
    ap.add_argument("--machine", default="", help="how to name the machine in the results, e.g. '2-core shared CPU'")
    ap.add_argument("--out", default="", help="append one JSON line (e.g. results/alfworld_embedded.jsonl)")
    ap.add_argument("--work", default="", help="working folder (default: a temporary one, removed at the end)")
    a = ap.parse_args(argv)
    if min(a.train_games, a.eval_games, a.max_turns, a.rl_steps, a.games_per_step, a.group_size) < 1:
        ap.error("--train-games, --eval-games, --max-turns, --rl-steps, --games-per-step and --group-size must be >= 1")
    if a.work and Path(a.work).exists() and any(Path(a.work).iterdir()):
        ap.error(f"--work {a.work} is not empty: name a new folder (every stage starts fresh)")
    from experiments.benchmarks.benchutil import load1, machine_info, write_result

    res = {"bench": "alfworld_embedded", **machine_info(a.machine), "load_before": load1(), "stages": {}}
    with tempfile.TemporaryDirectory(prefix="agentrl-alfworld-") as tmp:
        work = Path(a.work or tmp)
        work.mkdir(parents=True, exist_ok=True)
        train, unseen, sft, rl = (work / n for n in ("alf-train", "alf-unseen", "sft", "rl"))
        turns = ["--max-turns", str(a.max_turns)]
        stages = [
            ("games.train", ["make-games", "alfworld", "--split", "train", "--n", str(a.train_games),
                             "--seed", str(a.seed), "--out", str(train)], lambda: game_stats(train)),
            ("games.unseen", ["make-games", "alfworld", "--split", "valid_unseen", "--n", str(a.eval_games),
                              "--seed", str(a.seed), "--out", str(unseen)], lambda: game_stats(unseen)),
            ("eval.base", ["eval", "--model", a.model, "--games", str(unseen), *turns,
                           "--out", str(work / "eval_base.json")], lambda: eval_stats(work / "eval_base.json")),
            ("sft", ["sft", "--model", a.model, "--games", str(train), "--epochs", "1", "--seed", str(a.seed), *turns,
                     "--out", str(sft)],
             lambda: {k: v for k, v in json.loads((sft / "sft_summary.json").read_text()).items()
                      if k in ("examples", "skipped", "tokens", "assistant_tokens", "epochs", "lr", "batch_size",
                               "train_loss")}),
            ("eval.sft", ["eval", "--model", str(sft), "--games", str(unseen), *turns,
                          "--out", str(work / "eval_sft.json")], lambda: eval_stats(work / "eval_sft.json")),
            ("rl", ["train", "--algo", "ppo", "--reward", "sparse", "--init", str(sft), "--games", str(train),
                    *turns, "--steps", str(a.rl_steps), "--games-per-step", str(a.games_per_step),
                    "--group-size", str(a.group_size), "--seed", str(a.seed),
                    "--gradient-checkpointing" if a.gradient_checkpointing else "--no-gradient-checkpointing",
                    "--out", str(rl)], lambda: rl_stats(rl)),
        ]
        for name, args, measure in stages:
            print(f"[{time.strftime('%H:%M:%S')}] {name}: agentrl {' '.join(args)}", flush=True)
            try:
                res["stages"][name] = {**run_stage(args, work / f"{name}.log"), **measure()}
            except RuntimeError as e:
                print(f"bench_alfworld_embedded: stage {name}: {e}", file=sys.stderr)
                return 1
            print(f"  {res['stages'][name]['seconds']} s, peak RSS {res['stages'][name]['peak_rss_gib']} GiB",
                  flush=True)
    res["load_after"] = load1()
    print(json.dumps({k: v for k, v in res.items() if k != "stages"}, indent=1))
    write_result(a.out, res, a, seed=a.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
