"""Env step and reset time of each environment family, in this process (no pool), on games the family's own maker
generates: what one turn of a rollout costs before any model runs.

    python benchmarks/bench_env_step.py [--families textworld,alfworld,bandit,frozenlake,sokoban] [--games 4]
        [--turns 8] [--seed 0] [--machine TEXT] [--out results/env_step.jsonl]

Per family: `games` games made with its maker (TextWorld: tw-cooking --recipe 1 --take 1 --go 1; the others their
defaults) under a temporary folder, one env; each game reset, then up to `turns` steps, each action drawn with a seeded
RNG from the admissible commands when the env lists them (else the walkthrough's next command, else "look"). Prints
and records the median and 90th percentile of step and reset times (ms) and the games' generation time (s).

swe (not in the default list: it needs bubblewrap, and a task set takes ~10 s a task to make) plays each task's
walkthrough and splits its steps: `command_ms` (a bash command in the sandbox: cat, sed, patch), `test_run_ms` (the
walkthrough's pytest step), `submit_ms` (the gold submission: the diff applied to a fresh copy, the tests run) and
`noop_submit_ms` (reset, then submit with nothing changed: the recorded unpatched score, no test run) beside
`noop_uncached_ms` (the same evaluation with swe_tasks.score_submission's cache off: what it cost before the
cache), and `submit_memo_ms` (the gold fix submitted again in a second episode: the remembered score).
"""
from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time

FAMILIES = "textworld,alfworld,bandit,frozenlake,sokoban"
MAKER_ARGS = {"textworld": {"challenge": "tw-cooking", "challenge_args": "--recipe 1 --take 1 --go 1"},
              "swe": {"packages": "toolz"}}


def q(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def one_family(name: str, n: int, turns: int, seed: int, tmp: str) -> dict:
    import inspect

    from agentrl_lib.envs import get_family

    fam = get_family(name)
    t = time.perf_counter()
    params = inspect.signature(fam.make_games).parameters
    extra = {k: v for k, v in MAKER_ARGS.get(name, {}).items() if k in params}
    if "progress" in params:
        extra["progress"] = False
    games = fam.make_games(f"{tmp}/{name}", n, seed=seed, **extra)
    make_s = time.perf_counter() - t
    env = fam.make_env(**fam.env_kwargs())
    rng = random.Random(seed)
    resets, steps = [], []
    try:
        for g in games.games:
            t = time.perf_counter()
            r = env.reset(g.path)
            resets.append(time.perf_counter() - t)
            walk = list(g.walkthrough or [])
            for _ in range(turns):
                if r.done:
                    break
                adm = r.info.admissible
                action = rng.choice(adm) if adm else (walk.pop(0) if walk else "look")
                t = time.perf_counter()
                r = env.step(action)
                steps.append(time.perf_counter() - t)
    finally:
        env.close()
    ms = 1000.0
    extra = swe_steps(games, fam) if name == "swe" else {}
    return {**extra, "games": len(games.games), "steps": len(steps), "make_games_s": round(make_s, 2),
            "step_ms_median": round(ms * statistics.median(steps), 3), "step_ms_p90": round(ms * q(steps, 0.9), 3),
            "reset_ms_median": round(ms * statistics.median(resets), 3), "reset_ms_p90": round(ms * q(resets, 0.9), 3)}


def swe_steps(games, fam) -> dict:
    """The swe walkthrough's steps by kind (module docstring), in ms: median over the games."""
    import json
    from pathlib import Path

    from agentrl_lib.envs import swe_tasks
    from agentrl_lib.envs.swe_tasks import score_submission

    kinds: dict[str, list[float]] = {"command_ms": [], "test_run_ms": [], "submit_ms": [], "noop_submit_ms": [],
                                     "noop_uncached_ms": [], "submit_memo_ms": []}
    env = fam.make_env(**fam.env_kwargs(), log=False)
    try:
        for g in games.games:
            swe_tasks._scores.clear()  # the generic loop above scored the gold fix already
            env.reset(g.path)
            for action in g.walkthrough:
                t = time.perf_counter()
                r = env.step(action)
                dt = time.perf_counter() - t
                kinds["submit_ms" if r.done else "test_run_ms" if "pytest" in action else "command_ms"].append(dt)
            env.reset(g.path)
            for action in g.walkthrough[2:-1]:  # the fix and the test run again
                env.step(action)
            t = time.perf_counter()
            env.step(g.walkthrough[-1])
            kinds["submit_memo_ms"].append(time.perf_counter() - t)
            env.reset(g.path)
            t = time.perf_counter()
            env.step("```bash\nsubmit\n```")
            kinds["noop_submit_ms"].append(time.perf_counter() - t)
            task, base = json.loads((Path(g.path) / "task.json").read_text()), Path(g.path) / "repo"
            t = time.perf_counter()
            score_submission(task, base, base, cache=False)
            kinds["noop_uncached_ms"].append(time.perf_counter() - t)
    finally:
        env.close()
    return {k: round(1000.0 * statistics.median(v), 1) for k, v in kinds.items() if v}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--families", default=FAMILIES, help="comma-separated registered families")
    p.add_argument("--games", type=int, default=4)
    p.add_argument("--turns", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--machine", default="", help="how to name the machine in the results, e.g. '2-core shared CPU'")
    p.add_argument("--out", default="", help="append one JSON line (e.g. results/env_step.jsonl)")
    a = p.parse_args()

    from experiments.benchmarks.benchutil import load1, machine_info, write_result

    result = {"bench": "env_step", **machine_info(a.machine), "load_before": load1(), "families": {}}
    if a.families != FAMILIES:  # the book shows the newest line of each set of families measured
        result["families_measured"] = a.families
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.families.split(","):
            r = result["families"][name] = one_family(name, a.games, a.turns, a.seed, tmp)
            print(f"{name:12s} step {r['step_ms_median']:8.3f} ms (p90 {r['step_ms_p90']:.3f})   reset "
                  f"{r['reset_ms_median']:8.2f} ms   {r['steps']} steps on {r['games']} games (made in "
                  f"{r['make_games_s']} s)", flush=True)
            if "submit_ms" in r:
                print(f"{'':12s} command {r['command_ms']} ms, test run {r['test_run_ms']} ms, submit "
                      f"{r['submit_ms']} ms (again: {r['submit_memo_ms']} ms), no-op submit {r['noop_submit_ms']} ms "
                      f"(uncached {r['noop_uncached_ms']} ms)", flush=True)
    result["load_after"] = load1()
    write_result(a.out, result, a, seed=a.seed)


if __name__ == "__main__":
    main()
