"""What the README's two commands cost a newcomer: a fresh clone's install and `make test`, then `make book`, timed
phase by phase, with the tests' counts read from pytest's summary lines.

The command `python benchmarks/bench_make_test.py` as the book types it. The code, and how to run it:
experiments/benchmarks/bench_make_test.py.
"""
from experiments.benchmarks.bench_make_test import main

if __name__ == "__main__":
    raise SystemExit(main())
