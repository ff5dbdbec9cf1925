"""Speed of the batched multi-turn rollout (HFGenerator: all live episodes in one `generate` call per turn, the KV
cache kept across turns) against slower ways to play the same episodes, measured side by side in one run.

The command `python benchmarks/bench_rollout.py` as the book types it. The code, and how to run it:
experiments/benchmarks/bench_rollout.py.
"""
from experiments.benchmarks.bench_rollout import main

if __name__ == "__main__":
    raise SystemExit(main())
