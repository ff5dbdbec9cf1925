"""Does bf16 autocast change what the policy samples? The rollout of the sweep step (configs/cooking.yaml: 16
episodes, T = 0.7), at the same weights, in fp32 and under train.mixed_precision bf16, over several steps' games and
seeds.

The command `python benchmarks/bench_bf16_rollout.py` as the book types it. The code, and how to run it:
experiments/benchmarks/bench_bf16_rollout.py.
"""
from experiments.benchmarks.bench_bf16_rollout import main

if __name__ == "__main__":
    raise SystemExit(main())
