"""Time of torch.optim.AdamW's three implementations (update.ADAMW_IMPLS: the plain per-tensor loop, foreach, fused)
over a policy's weights, alone and inside one whole update (forward + backward + clip + step), in one run.

The command `python benchmarks/bench_adamw.py` as the book types it. The code, and how to run it:
experiments/benchmarks/bench_adamw.py.
"""
from experiments.benchmarks.bench_adamw import main

if __name__ == "__main__":
    raise SystemExit(main())
