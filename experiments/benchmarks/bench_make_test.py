"""What the README's two commands cost a newcomer: a fresh clone's install and `make test`, then `make book`, timed
phase by phase, with the tests' counts read from pytest's summary lines.

    python benchmarks/bench_make_test.py [--source .] [--keep DIR] [--machine TEXT] [--log runs/make_test.log]
                                         [--out results/make_test.jsonl]

Clones the HEAD of `--source` (committed work only, as CI sees it) into a temporary folder and runs there, in order,
each phase timed (wall seconds):

- `venv`: `make venv` — Python packages from pip (its wheel cache as this machine has it: `pip_cache_mb` records
  the cache's size before; a cold cache adds the downloads and jericho's build);
- `prerequisites`: `make browser sandbox vllm-or-skip` — Debian's chromium and bubblewrap where missing (`found`
  records which were installed before), and the optional vLLM environment `.venv-vllm`;
- `test`: `make test` — ruff, pytest over tests/ and the notebooks under nbval in fast mode (the book in headless
  Chromium included), then tests/test_vllm.py in .venv-vllm; with PYTEST_ADDOPTS=-rs, so `skipped` lists each
  skipped test's file and reason;
- `book`: `make book` — the static site; `book_pages` counts its HTML pages, `book_mib` its size.

`AGENTRL_HOME` (converted models, generated games) points into the clone, so the model's conversion and the games'
generation are paid as on a fresh machine. Appends one JSON line to --out (book/install.md and book/the_book.md
quote it through experiments/benchmarks/page_numbers.py): the phases, the counts and seconds of both pytest runs,
load averages, machine; every phase's output goes to --log. Exit status: make test's; the line is written either way
(`ok` false when a phase failed).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SUMMARY = re.compile(r"^=*\s*((?:\d+ (?:passed|failed|skipped|errors?|xfailed|xpassed|warnings?|deselected)"
                     r"(?:, )?)+) in ([\d.]+)s\b", re.M)
"""pytest's last line, e.g. '919 passed, 3 skipped, 2 warnings in 1236.12s (0:20:36)'."""


def pytest_summaries(output: str) -> list[dict]:
    """Every pytest summary line of `output`, in order, as {"passed": n, "skipped": n, ..., "seconds": s}; the counts
    pytest did not print are absent."""
    out = []
    for m in SUMMARY.finditer(output):
        row = {}
        for part in m.group(1).split(", "):
            n, kind = part.split(" ", 1)
            row[{"error": "errors", "warning": "warnings"}.get(kind, kind)] = int(n)
        row["seconds"] = float(m.group(2))
        out.append(row)
    return out


SKIP = re.compile(r"^SKIPPED \[(\d+)\] ([^:\s]+)(?::\d+)?: (.*)$", re.M)
"""One line of pytest's `-rs` summary, e.g. 'SKIPPED [1] tests/test_gpu.py:12: needs a CUDA GPU'."""


def skip_reasons(output: str) -> list[dict]:
    """The skipped tests of `output` (pytest run with -rs) as [{"n": count, "file": path, "reason": text}]."""
    return [{"n": int(m.group(1)), "file": m.group(2), "reason": m.group(3).strip()} for m in SKIP.finditer(output)]


def _du_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1024 ** 2 if path.exists() else 0.0


def run_phase(name: str, cmd: list[str], cwd: Path, env: dict, log) -> tuple[float, int, str]:
    """Run `cmd` in `cwd`; its output goes to `log` and is returned. Returns (wall seconds, exit status, output)."""
    print(f"[{time.strftime('%H:%M:%S')}] {name}: {' '.join(cmd)}", flush=True)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.perf_counter() - t0
    log.write(f"===== {name} ({wall:.0f} s, exit {p.returncode})\n{p.stdout}\n")
    print(f"  {wall:.0f} s, exit {p.returncode}", flush=True)
    return wall, p.returncode, p.stdout


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--source", default=".", help="the checkout whose HEAD is cloned (default: this one)")
    p.add_argument("--keep", default="", help="clone into this folder and keep it (default: a temporary one, deleted)")
    p.add_argument("--machine", default="", help='what the machine is, e.g. "2-core shared CPU"')
    p.add_argument("--log", default="runs/make_test.log", help="every phase's output (default: runs/make_test.log)")
    p.add_argument("--out", default="results/make_test.jsonl")
    a = p.parse_args()
    from experiments.benchmarks.benchutil import load1, machine_info, write_result

    source = Path(a.source).resolve()
    commit = subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    work = Path(a.keep).resolve() if a.keep else Path(tempfile.mkdtemp(prefix="agentrl-fresh-"))
    clone = work / "agentrl"
    subprocess.run(["git", "clone", "-q", str(source), str(clone)], check=True)
    env = {**os.environ, "AGENTRL_HOME": str(work / "agentrl_home")}
    env.pop("VIRTUAL_ENV", None)
    pip_cache = Path(os.environ.get("PIP_CACHE_DIR", Path.home() / ".cache" / "pip"))
    row = {"bench": "make_test", "source_commit": commit, "pip_cache_mb": round(_du_mb(pip_cache)),
           "found": {t: shutil.which(t) is not None for t in ("chromium", "bwrap")},
           "load_before": load1(), "phases": {}, "ok": True}
    failed = 0
    Path(a.log).parent.mkdir(parents=True, exist_ok=True)
    with open(a.log, "w") as log:
        for name, cmd in (("venv", ["make", "venv"]), ("prerequisites", ["make", "browser", "sandbox", "vllm-or-skip"]),
                          ("test", ["make", "test"]), ("book", ["make", "book"])):
            # -rs: pytest lists every skipped test with its reason (PYTEST_ADDOPTS reaches both pytest runs)
            wall, rc, output = run_phase(name, cmd, clone, {**env, "PYTEST_ADDOPTS": "-rs"} if name == "test" else env,
                                         log)
            row["phases"][name] = round(wall, 1)
            if name == "test":
                runs = pytest_summaries(output)
                row["pytest"], row["pytest_vllm"] = (runs + [None, None])[:2]
                row["skipped"] = skip_reasons(output)
                failed = rc
            if rc:
                row["ok"] = False
                if name != "test":
                    break
    html = clone / "book" / "_build" / "html"
    row["book_pages"] = len([f for f in html.rglob("*.html") if not any(d.startswith("_") for d in f.relative_to(
        html).parts[:-1]) and f.name not in ("genindex.html", "search.html", "py-modindex.html")])
    row["book_mib"] = round(_du_mb(html), 1)
    row["total_seconds"] = round(sum(row["phases"].values()), 1)
    row["load_after"] = load1()
    # commit: the clone's (the tested code), not this checkout's, which machine_info would name
    write_result(a.out, {**row, **machine_info(a.machine), "commit": commit}, a, seed=0)
    print({k: row[k] for k in ("phases", "pytest", "pytest_vllm", "book_pages", "book_mib", "ok") if k in row})
    print(f"appended to {a.out}; every phase's output: {a.log}")
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    return failed or (0 if row["ok"] else 1)


if __name__ == "__main__":
    sys.exit(main())
