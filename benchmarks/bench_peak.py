"""How close the update runs to this machine's peak: the achieved FLOP/s of the training forward + backward, divided
by the matmul throughput this machine reaches at the model's own shapes, in fp32 and (where the CPU has it) bf16.

The command `python benchmarks/bench_peak.py` as the book types it. The code, and how to run it:
experiments/benchmarks/bench_peak.py.
"""
from experiments.benchmarks.bench_peak import main

if __name__ == "__main__":
    raise SystemExit(main())
