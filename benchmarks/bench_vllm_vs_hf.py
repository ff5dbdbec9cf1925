"""Generation speed of the vLLM backend against the transformers one, through the same `Generator` protocol the
rollouts use. Runs in the vLLM environment (`make vllm`).

The command `python benchmarks/bench_vllm_vs_hf.py` as the book types it. The code, and how to run it:
experiments/benchmarks/bench_vllm_vs_hf.py.
"""
from experiments.benchmarks.bench_vllm_vs_hf import main

if __name__ == "__main__":
    raise SystemExit(main())
