"""One GRPO step of agentrl's Trainer against TRL's GRPOTrainer with a multi-turn `rollout_func`, on the same
workload, measured in one run.

The command `python benchmarks/bench_rl_step_vs_trl.py` as the book types it. The code, and how to run it:
experiments/benchmarks/bench_rl_step_vs_trl.py.
"""
from experiments.benchmarks.bench_rl_step_vs_trl import main

if __name__ == "__main__":
    raise SystemExit(main())
