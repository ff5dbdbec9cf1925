"""Peak memory and time of the SFT warm-up with and without micro-batches (`agentrl sft --micro-batch-size`): the
same gradient steps (TRL's gradient accumulation; the loss is the mean over each step's assistant tokens), passed
`micro` walkthroughs at a time.

The command `python benchmarks/bench_sft_memory.py` as the book types it. The code, and how to run it:
experiments/benchmarks/bench_sft_memory.py.
"""
from experiments.benchmarks.bench_sft_memory import main

if __name__ == "__main__":
    raise SystemExit(main())
