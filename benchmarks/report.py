"""The benchmark tables of the book's page book/benchmarks.md (a notebook that displays them), rendered from the results
files the benchmark scripts write (the newest line of each), with the machine, date, commit and load each line records:
no number is typed by hand. `--write` re-executes the page.

The command `python benchmarks/report.py` as the book types it. The code, and how to run it:
experiments/benchmarks/report.py.
"""
from experiments.benchmarks.report import main

if __name__ == "__main__":
    raise SystemExit(main())
