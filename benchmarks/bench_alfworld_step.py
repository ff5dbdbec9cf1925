"""Step time of ALFWorld's stock text env vs agentrl_lib's AlfWorldEnv on the same generated games and actions.

The command `python benchmarks/bench_alfworld_step.py` as the book types it. The code, and how to run it:
experiments/benchmarks/bench_alfworld_step.py.
"""
from experiments.benchmarks.bench_alfworld_step import main

if __name__ == "__main__":
    raise SystemExit(main())
