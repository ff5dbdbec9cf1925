"""The LoRA demo's SFT learning rate, chosen on training data only: the demo's SFT stage run with full fine-tuning
at its default learning rate and with a rank-r LoRA adapter at several learning rates, each SFT model then scored by
its mean negative log-likelihood per action token over every training walkthrough (one no-grad pass). The LoRA rate
whose fit is nearest full fine-tuning's is the one `agentrl demo --lora-rank` should take (book/demo.md): the RL
stage then starts from a comparably fitted model. No held-out game is played, so nothing is tuned on them.

The command `python benchmarks/bench_lora_sft_lr.py` as the book types it. The code, and how to run it:
experiments/benchmarks/bench_lora_sft_lr.py.
"""
from experiments.benchmarks.bench_lora_sft_lr import main

if __name__ == "__main__":
    raise SystemExit(main())
