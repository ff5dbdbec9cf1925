"""Peak memory and time of one RL gradient step: plain, with gradient checkpointing, with token-budget micro-batches
(train.max_tokens_per_microbatch) and with both, on one minibatch of trajectories of the lengths given (default: one
long episode and three shorter ones, as a rollout batch has them; ALFWorld's 24 turns are ≈ 1,100-1,250 tokens with
the embedded SmolLM2-135M).

The command `python benchmarks/bench_update_memory.py` as the book types it. The code, and how to run it:
experiments/benchmarks/bench_update_memory.py.
"""
from experiments.benchmarks.bench_update_memory import main

if __name__ == "__main__":
    raise SystemExit(main())
