"""The "Findings at small scale" tables of the book's page book/findings.md and of the README, computed from the
results files (never typed by hand).

The command `python results/findings.py` as the book types it. The code, and how to run it:
experiments/findings_page.py.
"""
from experiments.findings_page import main

if __name__ == "__main__":
    raise SystemExit(main())
