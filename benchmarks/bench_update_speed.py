"""Time of the update stage of one RL step — the no-grad π_old (and V_old) forward over the rollout batch, then one
epoch of minibatch gradient steps — in two or three layouts, on the same batch, weights and minibatches.

The command `python benchmarks/bench_update_speed.py` as the book types it. The code, and how to run it:
experiments/benchmarks/bench_update_speed.py.
"""
from experiments.benchmarks.bench_update_speed import main

if __name__ == "__main__":
    raise SystemExit(main())
