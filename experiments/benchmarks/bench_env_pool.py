"""Cost of running env steps in worker processes (ProcessPool) instead of in the trainer's process (SerialPool).

    python benchmarks/bench_env_pool.py --games DIR [--slots 8] [--turns 8] [--rounds 5] [--machine TEXT]
                                        [--out results/env_pool.jsonl]

On a games dir (e.g. 16 cooking games from `agentrl make-games textworld --challenge tw-cooking --challenge-args
"--recipe 1 --take 1 --go 1" --n 16`), both pools play the same batches: `slots` episodes reset together, then
`turns` batched steps whose actions are drawn once (the walkthrough's next command half of the time, else a random
admissible command) and replayed identically in both pools, as a rollout calls them. Prints per batched call:
median step time (ms) and median reset time, the first call of a fresh pool (process start), and the workers'
memory (RSS, MB); appends them as one JSON line to --out (book/benchmarks.md's table "Env steps in worker
processes", and the numbers book/when_things_go_wrong.md quotes).
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def plan(games, slots: int, turns: int, rounds: int, seed: int):
    """Fixed (games, actions per turn) for each round, drawn by playing the games once in this process."""
    from agentrl_lib.envs.textworld import TextWorldEnv

    rng = random.Random(seed)
    env = TextWorldEnv()
    out = []
    for _ in range(rounds):
        chosen = [rng.choice(games.games) for _ in range(slots)]
        acts = []
        for g in chosen:
            r, seq, walk = env.reset(g.path), [], list(g.walkthrough)
            for _ in range(turns):
                if r.done:
                    break
                a = walk.pop(0) if walk and rng.random() < 0.5 else rng.choice(r.info.admissible or ["look"])
                seq.append(a)
                r = env.step(a)
            acts.append(seq)
        out.append((chosen, acts))
    env.close()
    return out


def run(pool, rounds) -> dict:
    t = time.perf_counter()
    first = rounds[0][0]
    pool.reset(list(range(len(first))), [g.path for g in first])
    first_call = time.perf_counter() - t
    resets, steps = [], []
    for chosen, acts in rounds:
        slots = list(range(len(chosen)))
        t = time.perf_counter()
        pool.reset(slots, [g.path for g in chosen])
        resets.append(time.perf_counter() - t)
        for turn in range(max(map(len, acts))):
            live = [i for i in slots if turn < len(acts[i])]
            t = time.perf_counter()
            pool.step(live, [acts[i][turn] for i in live])
            steps.append((time.perf_counter() - t) / len(live))
    return {"first_call_s": round(first_call, 3), "reset_ms_median": round(1000 * statistics.median(resets), 2),
            "step_ms_per_episode_median": round(1000 * statistics.median(steps), 3),
            "step_ms_per_episode_mean": round(1000 * statistics.mean(steps), 3), "batched_steps": len(steps)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--games", required=True)
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--machine", default="", help="how to name the machine in the results, e.g. '2-core shared CPU'")
    ap.add_argument("--out", default="", help="append one JSON line (e.g. results/env_pool.jsonl)")
    a = ap.parse_args(argv)
    from agentrl_lib.envs.base import load_game_set
    from agentrl_lib.envs.pool import SerialPool
    from agentrl_lib.envs.process_pool import ProcessPool

    games = load_game_set(a.games)
    rounds = plan(games, a.slots, a.turns, a.rounds, a.seed)
    from experiments.benchmarks.benchutil import load1, machine_info, write_result

    res = {"bench": "env_pool", "games": str(games.root), "n_games": len(games), "family": games.family,
           "slots": a.slots, "turns": a.turns, "rounds": a.rounds, **machine_info(a.machine), "load_before": load1()}
    with SerialPool(a.slots, family=games.family) as sp:
        res["serial"] = run(sp, rounds)
    with ProcessPool(a.slots, family=games.family) as pp:
        res["process"] = run(pp, rounds)
        res["process"]["worker_rss_mb"] = [round(_rss_mb(pp.pid(i)), 1) for i in range(a.slots)]
    s, p = res["serial"], res["process"]
    res["step_overhead_ms_per_episode"] = round(p["step_ms_per_episode_median"] - s["step_ms_per_episode_median"], 3)
    res["load_after"] = load1()
    print(json.dumps(res, indent=1))
    write_result(a.out, res, a, seed=a.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
