"""Cost of running env steps in worker processes (ProcessPool) instead of in the trainer's process (SerialPool).

The command `python benchmarks/bench_env_pool.py` as the book types it. The code, and how to run it:
experiments/benchmarks/bench_env_pool.py.
"""
from experiments.benchmarks.bench_env_pool import main

if __name__ == "__main__":
    raise SystemExit(main())
