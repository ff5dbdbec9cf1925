"""What the embedded model does on generated ALFWorld games, and what each stage costs: the numbers of book page
*Environments* ("ALFWorld offline").

The command `python benchmarks/bench_alfworld_embedded.py` as the book types it. The code, and how to run it:
experiments/benchmarks/bench_alfworld_embedded.py.
"""
from experiments.benchmarks.bench_alfworld_embedded import main

if __name__ == "__main__":
    raise SystemExit(main())
