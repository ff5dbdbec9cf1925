"""The experiments: the code behind the commands that regenerate the results, measure the benchmarks and write the
pages that quote them. The core library is agentrl_lib (what a run is); this package is what the workbook does with
it (which runs, which measurements, which tables). Its modules are run through the thin scripts the book types:

    python results/regenerate.py ...     experiments.regenerate      the sweeps' job runner (experiments.sweep_plans
                                                                     reads their plans, configs/sweeps/PART.yaml)
    python results/findings.py --write   experiments.findings_page   the findings tables of book/findings.md, README
    python benchmarks/bench_*.py ...     experiments.benchmarks      the side-by-side benchmarks, their tables
    python benchmarks/report.py --write                              (report) and the pages' numbers (page_numbers)
    python book/build.py                 experiments.book_build      the Jupyter Book

Every one of them reads and writes the checkout's files (results/, book/, configs/, README.md): ROOT below.
"""
from __future__ import annotations

import os
from pathlib import Path

CHECKOUT_ENV = "AGENTRL_CHECKOUT"
"""The environment variable that names the checkout explicitly (it wins over the search of checkout_root)."""


def is_checkout(path: Path) -> bool:
    """True when `path` is an agentrl checkout: it holds pyproject.toml, results/ and book/."""
    return (path / "pyproject.toml").is_file() and (path / "results").is_dir() and (path / "book").is_dir()


def checkout_root() -> Path:
    """The agentrl checkout the experiments read and write: $AGENTRL_CHECKOUT when set; else the nearest of the
    working directory and its parents that is a checkout (is_checkout), since the book types every command from the
    checkout's root; else the folder this package sits in when that is a checkout (an editable install run from
    elsewhere); else the working directory. Never raises: a command run outside any checkout fails where it first
    reads a missing file."""
    if os.environ.get(CHECKOUT_ENV):
        return Path(os.environ[CHECKOUT_ENV]).resolve()
    cwd = Path.cwd().resolve()
    source = Path(__file__).resolve().parent.parent
    return next((p for p in (cwd, *cwd.parents, source) if is_checkout(p)), cwd)


ROOT = checkout_root()
"""The checkout (checkout_root), found once when the package is imported; each module keeps its own ROOT (tests
point one module elsewhere with monkeypatch)."""
