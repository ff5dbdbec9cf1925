"""How a sweep should use a small CPU: runs one after another with every core each (`regenerate.py --jobs 1`), or
several runs at once with a share of the cores each (`--jobs J`, OMP_NUM_THREADS = cores // J)?

    python benchmarks/bench_sweep_jobs.py --init RUN_OR_MODEL_DIR [--config configs/cooking.yaml] [--algo grpo]
        [--steps 2] [--jobs 2] [--eval-games 8] [--repeats 2] [--machine TEXT] [--out results/sweep_jobs.jsonl]

Each arm trains the same J short runs of the real command (`agentrl train --config C --init I --steps N --seed s`,
seeds 0..J-1, then greedy evaluation on the first --eval-games held-out games of the config's set):
- serial:   the J runs one after another, each with OMP_NUM_THREADS = cores (what `--jobs 1` does);
- parallel: the J runs at once, each with OMP_NUM_THREADS = cores // J (what `--jobs J` does).
The arms alternate within each repeat (serial first in even repeats, parallel first in odd: the same drift of a
shared machine on both). Per arm: wall seconds from the first start to the last end, the CPU seconds of the runs
(user + system of the ended `agentrl` processes, getrusage; env workers they did not reap are missed), and the
largest run's peak memory so far (ru_maxrss of the children: the maximum over every run the bench has ended).
Reports each arm's median wall, the throughput ratio (serial wall / parallel wall) of the medians and pair by pair, and
whether a run computes the same at a share of the cores: each seed's per-step metrics (losses, gradient norm,
rewards, sampled token counts; not the timings) and its held-out outcome, serial against parallel. Appends one JSON
line to --out (book/benchmarks.md: python benchmarks/report.py --write).
Memory: a run of configs/cooking.yaml peaked at 9.7 GB (AMD EPYC, 11-27: the largest run's peak over the whole
bench, getrusage's ru_maxrss of the children); J = 2 runs at once fit a 24 GB machine with nothing heavy beside
them. Run it on an otherwise quiet machine: a sweep beside it takes cores from both arms unevenly.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from experiments import ROOT  # the checkout: experiments.checkout_root
from experiments.benchmarks.benchutil import game_subset, load1, machine_info, write_result

TIMING = ("seconds", "per_s")  # metrics keys that time a step (step_seconds, gen_tokens_per_s): differ by design


def train_command(a: argparse.Namespace, seed: int, out: Path, eval_games: str) -> list[str]:
    """The `agentrl train` command of one short run (the sweep's command, fewer steps, a smaller held-out set)."""
    return [sys.executable, "-m", "agentrl_lib.cli", "train", "--config", a.config, "--init", a.init,
            "--algo", a.algo, "--steps", str(a.steps), "--seed", str(seed), "--checkpoint-every", "1000",
            "--eval-games", eval_games, "--out", str(out)]


def run_arm(a: argparse.Namespace, arm: str, root: Path, eval_games: str) -> dict:
    """Run the J seeds of one arm (serial or parallel) into root/arm-seed; returns its wall, CPU and peak memory."""
    cores = os.cpu_count() or 2
    threads = cores if arm == "serial" else max(1, cores // a.jobs)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false",
           "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    cmds = [train_command(a, s, root / f"{arm}-s{s}", eval_games) for s in range(a.jobs)]
    logs = [open(root / f"{arm}-s{s}.log", "w") for s in range(a.jobs)]
    if arm == "serial":
        codes = [subprocess.run(c, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
                 for c, log in zip(cmds, logs)]
    else:
        procs = [subprocess.Popen(c, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
                 for c, log in zip(cmds, logs)]
        codes = [p.wait() for p in procs]
    wall = time.perf_counter() - t0
    for log in logs:
        log.close()
    if any(codes):
        bad = codes.index(next(c for c in codes if c))
        tail = (root / f"{arm}-s{bad}.log").read_text().strip().splitlines()[-3:]
        raise SystemExit(f"the {arm} run of seed {bad} failed (exit {codes[bad]}): {' / '.join(tail)}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"arm": arm, "threads": threads, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
            "load1_after": load1(), "peak_rss_gib": round(after.ru_maxrss / 1024 ** 2, 2)}


def outcome(run_dir: Path) -> dict:
    """The computed (not timed) part of a run: its per-step metrics less the timings, and its held-out outcome."""
    steps = [{k: v for k, v in json.loads(line).items() if not any(t in k for t in TIMING)}
             for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    ev = json.loads((run_dir / "eval.json").read_text())
    return {"steps": steps, "eval": {k: ev.get(k) for k in ("success_rate", "mean_turns", "per_game") if k in ev}}


def max_rel_diff(x, y) -> float:
    """The largest relative difference between the numbers of two equal-shaped JSON values (inf where their shapes
    or non-numeric values differ)."""
    if isinstance(x, dict) and isinstance(y, dict):
        if x.keys() != y.keys():
            return float("inf")
        return max((max_rel_diff(x[k], y[k]) for k in x), default=0.0)
    if isinstance(x, list) and isinstance(y, list):
        if len(x) != len(y):
            return float("inf")
        return max((max_rel_diff(u, v) for u, v in zip(x, y)), default=0.0)
    if isinstance(x, (int, float)) and isinstance(y, (int, float)) and not isinstance(x, bool):
        return abs(x - y) / max(abs(x), abs(y), 1e-12)
    return 0.0 if x == y else float("inf")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--init", required=True, help="the RL start (an SFT run dir or a model name)")
    p.add_argument("--config", default="configs/cooking.yaml")
    p.add_argument("--algo", default="grpo")
    p.add_argument("--steps", type=int, default=2, help="RL steps per run")
    p.add_argument("--jobs", type=int, default=2, help="runs per arm (the parallel arm runs them at once)")
    p.add_argument("--eval-games", type=int, default=8, help="held-out games each run is evaluated on")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--machine", default="")
    p.add_argument("--out", default="results/sweep_jobs.jsonl")
    a = p.parse_args()
    if a.jobs < 2 or a.repeats < 1 or a.steps < 1:
        raise SystemExit("--jobs must be at least 2, --repeats and --steps at least 1")
    from agentrl_lib.config import RunConfig
    from agentrl_lib.envs.base import load_game_set

    held = load_game_set(RunConfig.load(a.config).train.eval_games)
    arms: dict[str, list[dict]] = {"serial": [], "parallel": []}
    with tempfile.TemporaryDirectory(prefix="bench_sweep_jobs-") as tmp:
        eval_games = game_subset(str(held.root), [g.name for g in held.games[:a.eval_games]], f"{tmp}/heldout")
        outcomes: dict[str, list] = {}
        for r in range(a.repeats):
            for arm in (("serial", "parallel") if r % 2 == 0 else ("parallel", "serial")):
                root = Path(tmp) / f"r{r}"
                root.mkdir(exist_ok=True)
                m = run_arm(a, arm, root, eval_games)
                arms[arm].append(m)
                print(f"repeat {r} {arm:8s}: {m['wall_s']:7.1f} s wall, {m['cpu_s']:7.1f} s CPU, "
                      f"{m['threads']} thread(s) a run, load {m['load1_after']}", flush=True)
                outcomes.setdefault(arm, [outcome(root / f"{arm}-s{s}") for s in range(a.jobs)])
        diff = max(max_rel_diff(outcomes["serial"][s], outcomes["parallel"][s]) for s in range(a.jobs))
    med = {arm: statistics.median(m["wall_s"] for m in ms) for arm, ms in arms.items()}
    pairs = [s["wall_s"] / q["wall_s"] for s, q in zip(arms["serial"], arms["parallel"])]
    row = {"bench": "sweep_jobs", **machine_info(a.machine), "algo": a.algo, "steps": a.steps, "jobs": a.jobs,
           "eval_games": a.eval_games, "repeats": a.repeats, "arms": arms,
           "median_wall_s": med, "throughput_ratio": round(med["serial"] / med["parallel"], 3),
           "pair_ratios": [round(x, 3) for x in pairs],
           "same_outcomes": diff == 0.0, "max_rel_diff": diff if diff != float("inf") else "shapes differ",
           "held_out": {arm: [o["eval"].get("success_rate") for o in outs] for arm, outs in outcomes.items()}}
    print(f"serial {med['serial']:.0f} s, parallel {med['parallel']:.0f} s (medians): the parallel arm does the same "
          f"runs {row['throughput_ratio']:.2f}x as fast (pairs {', '.join(f'{x:.2f}' for x in pairs)}); "
          + ("every seed computed the same at 1 thread as at all cores" if diff == 0.0 else
             f"the runs computed differently at fewer threads (max relative difference {diff:.3g})"))
    write_result(a.out, row, a, seed="0..jobs-1")


if __name__ == "__main__":
    main()
