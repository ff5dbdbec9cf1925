"""What the bf16 guard (train.bf16_max_logprob_gap) reads at the start of a run, for several starting models: the
mean |log π_bf16 − log π_fp32| over the first batch's action tokens (precision.bf16_logprob_gap), as the first step of
`agentrl train --mixed-precision bf16` computes it (Trainer step 0's rollout under autocast, π_old forwarded under
autocast, then the same batch in fp32).

The command `python benchmarks/bench_bf16_guard.py` as the book types it. The code, and how to run it:
experiments/benchmarks/bench_bf16_guard.py.
"""
from experiments.benchmarks.bench_bf16_guard import main

if __name__ == "__main__":
    raise SystemExit(main())
