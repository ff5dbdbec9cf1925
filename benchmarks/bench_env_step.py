"""Env step and reset time of each environment family, in this process (no pool), on games the family's own maker
generates: what one turn of a rollout costs before any model runs.

The command `python benchmarks/bench_env_step.py` as the book types it. The code, and how to run it:
experiments/benchmarks/bench_env_step.py.
"""
from experiments.benchmarks.bench_env_step import main

if __name__ == "__main__":
    raise SystemExit(main())
