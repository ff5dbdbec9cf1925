"""How a sweep should use a small CPU: runs one after another with every core each (`regenerate.py --jobs 1`), or
several runs at once with a share of the cores each (`--jobs J`, OMP_NUM_THREADS = cores // J)?

The command `python benchmarks/bench_sweep_jobs.py` as the book types it. The code, and how to run it:
experiments/benchmarks/bench_sweep_jobs.py.
"""
from experiments.benchmarks.bench_sweep_jobs import main

if __name__ == "__main__":
    raise SystemExit(main())
