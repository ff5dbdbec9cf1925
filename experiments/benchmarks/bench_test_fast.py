"""What the quick test run costs: `make test-fast` (pytest over tests/ without the tests marked trains, subprocess or
slow) in this checkout, repeated, against its budget (tests/conftest.py QUICK_RUN_BUDGET_S, 3 minutes on the
project's 2-core machine kind).

    python benchmarks/bench_test_fast.py [--repeats 3] [--root .] [--machine TEXT] [--log runs/test_fast.log]
                                         [--out results/test_fast.jsonl]

Each repeat runs `make test-fast` in the checkout (`--root`) and its venv (`make venv` first, not timed) and reads
pytest's summary line (counts, pytest's own seconds) and the session line tests/conftest.py prints (wall and CPU
seconds). Appends one
JSON line to --out: every repeat, the medians, the load average before each repeat and after the last, the budget,
the machine (book/install.md quotes it through experiments/benchmarks/page_numbers.py). Other work on the CPU adds
to the wall time: run it on an idle machine and read `load_before`. Exit status: 1 when a repeat failed (the line is
written either way, `ok` false).
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from experiments.benchmarks.bench_make_test import pytest_summaries

SESSION = re.compile(r"session wall time (\d+) s .*?, CPU time (\d+) s")
"""tests/conftest.py's last line, e.g. 'session wall time 142 s (2.4 min), CPU time 201 s, on AMD EPYC, ...'."""


def one_run(root: Path, log) -> dict:
    """One `make test-fast` in `root`: {wall_seconds, ok, pytest: {passed, deselected, ..., seconds},
    session_wall_seconds, cpu_seconds, load_before}."""
    load = round(os.getloadavg()[0], 2)
    t0 = time.perf_counter()
    p = subprocess.run(["make", "test-fast"], cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.perf_counter() - t0
    log.write(f"===== make test-fast ({wall:.0f} s, exit {p.returncode})\n{p.stdout}\n")
    summary = (pytest_summaries(p.stdout) or [{}])[-1]
    session = SESSION.search(p.stdout)
    return {"wall_seconds": round(wall, 1), "ok": p.returncode == 0, "pytest": summary,
            "session_wall_seconds": int(session.group(1)) if session else None,
            "cpu_seconds": int(session.group(2)) if session else None, "load_before": load}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3, help="make test-fast runs, one after another (>= 1)")
    ap.add_argument("--root", default="", help="the checkout whose Makefile runs (default: this one)")
    ap.add_argument("--machine", default="", help='what the machine is, e.g. "2-core shared CPU"')
    ap.add_argument("--log", default="runs/test_fast.log", help="every run's output (default: runs/test_fast.log)")
    ap.add_argument("--out", default="results/test_fast.jsonl", help="append one JSON line ('' : print only)")
    a = ap.parse_args(argv)
    if a.repeats < 1:
        ap.error("--repeats must be >= 1")
    from experiments.benchmarks.benchutil import load1, machine_info, write_result
    from experiments.benchmarks.results_lines import ROOT

    root = Path(a.root).resolve() if a.root else ROOT
    subprocess.run(["make", "venv"], cwd=root, check=True, stdout=subprocess.DEVNULL)
    budget = int(re.search(r"^QUICK_RUN_BUDGET_S = (\d+)", (root / "tests" / "conftest.py").read_text(), re.M)
                 .group(1))
    row = {"bench": "test_fast", **machine_info(a.machine), "budget_seconds": budget, "repeats": []}
    Path(a.log).parent.mkdir(parents=True, exist_ok=True)
    with open(a.log, "w") as log:
        for i in range(a.repeats):
            row["repeats"].append(one_run(root, log))
            r = row["repeats"][-1]
            print(f"repeat {i + 1}: {r['wall_seconds']:.0f} s wall, {r['cpu_seconds']} s CPU, load "
                  f"{r['load_before']} before, {'ok' if r['ok'] else 'FAILED'}", flush=True)
    runs = row["repeats"]
    row["ok"] = all(r["ok"] for r in runs)
    row["wall_seconds_median"] = round(statistics.median(r["wall_seconds"] for r in runs), 1)
    row["cpu_seconds_median"] = statistics.median(r["cpu_seconds"] or 0 for r in runs)
    row["pytest"] = runs[-1]["pytest"]
    row["load_after"] = load1()
    write_result(a.out, row, a, seed="none (no random draws beyond the tests' own fixed seeds)")
    print(f"make test-fast: median {row['wall_seconds_median']:.0f} s wall over {len(runs)} runs (budget {budget} s)")
    return 0 if row["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
