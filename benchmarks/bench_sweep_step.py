"""One whole RL step of the findings' sweep (configs/cooking.yaml: 4 games × group 4 = 16 episodes, ≤ 8 turns × ≤ 24
tokens), `Trainer.step` from a fresh Trainer per measurement, with each performance lever toggled and all together.

The command `python benchmarks/bench_sweep_step.py` as the book types it. The code, and how to run it:
experiments/benchmarks/bench_sweep_step.py.
"""
from experiments.benchmarks.bench_sweep_step import main

if __name__ == "__main__":
    raise SystemExit(main())
