"""Where the batched multi-turn rollout's time goes, turn by turn: the model's prefills and decode steps, the rest of
`generate`, the environments, and the Python between them.

The command `python benchmarks/bench_rollout_profile.py` as the book types it. The code, and how to run it:
experiments/benchmarks/bench_rollout_profile.py.
"""
from experiments.benchmarks.bench_rollout_profile import main

if __name__ == "__main__":
    raise SystemExit(main())
