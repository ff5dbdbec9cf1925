"""Generation speed of the vLLM backend against the transformers one, through the same `Generator` protocol the
rollouts use. Runs in the vLLM environment (`make vllm`):

    .venv-vllm/bin/python benchmarks/bench_vllm_vs_hf.py [--model embedded] [--batch 8] [--new-tokens 24]
        [--turns 1] [--repeats 3] [--threads N] [--backends hf,vllm] [--machine TEXT]
        [--out FILE.json | FILE.jsonl]

One batch of `batch` chat prompts (the embedded SmolLM2 by default, fp32), each asked for a story so that replies
rarely end early. Both backends are built first (vLLM sets process-wide thread settings when it starts, so both then
run under them) and warmed up with one untimed call; then the repeats alternate between them, so that on a shared
machine both see the same load. A repeat: start → generate (`new_tokens`, T = 0.7), and with --turns > 1,
`turns - 1` more turns of append (a feedback turn of ~20 tokens) → generate, as a multi-turn rollout does. Prints
generated tokens/s per repeat and their median, the vLLM engine's start time and the time of one weight sync; the
JSON also has the 1-minute load average before and after each repeat.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time


def run_backend(gen, contexts, feedback, new_tokens: int, turns: int, seed: int) -> dict:
    """One rollout-shaped run: `turns` generate calls with a feedback turn appended between them (after the end
    token a reply cut at new_tokens lacks, as rollout.rollout does). Returns tokens, seconds, tokens_per_s."""
    import torch

    torch.manual_seed(seed)
    gen.start(contexts)
    tokens, seconds, truncated = 0, 0.0, []
    for turn in range(turns):
        if turn:
            gen.append([([gen.eos_id] if t else []) + list(feedback) for t in truncated])
        t0 = time.perf_counter()
        sample = gen.generate(new_tokens, 0.7)
        seconds += time.perf_counter() - t0
        tokens += sum(len(x) for x in sample.ids)
        truncated = sample.truncated
    return {"tokens": tokens, "seconds": round(seconds, 3), "tokens_per_s": round(tokens / seconds, 2)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="embedded")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--new-tokens", type=int, default=24)
    p.add_argument("--turns", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=0, help="torch / OpenMP threads (default: torch's own)")
    p.add_argument("--backends", default="hf,vllm", help="comma-separated keys of generation.GENERATORS")
    p.add_argument("--machine", default="", help='how the results name this machine, e.g. "2-core shared CPU"')
    p.add_argument("--out")
    a = p.parse_args(argv)
    if a.threads:
        os.environ["OMP_NUM_THREADS"] = str(a.threads)  # read by vLLM when it starts

    import torch

    if a.threads:
        torch.set_num_threads(a.threads)

    from agentrl_lib.generation import GENERATORS
    from agentrl_lib.models import load_policy
    from agentrl_lib.paths import git_commit
    from agentrl_lib.prompts import ChatFormat

    model, tok = load_policy(a.model, "cpu", "float32")
    chat = ChatFormat(tok)
    topics = ["a lighthouse", "a lost key", "a red fox", "a cooking contest", "a storm at sea", "an old library",
              "a mountain village", "a clockmaker"]
    contexts = [chat.prompt_ids("You are a helpful assistant.", f"Write a long story about {topics[i % 8]}.")
                for i in range(a.batch)]
    feedback = chat.user_turn_ids("Go on with the story, please.")
    result = {"model": a.model, "batch": a.batch, "new_tokens": a.new_tokens, "turns": a.turns, "temperature": 0.7,
              "dtype": "float32", "torch_threads": torch.get_num_threads(), "cpus": os.cpu_count(),
              "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
              "device": a.machine or f"{os.cpu_count()}-core CPU",
              "machine": platform.machine(), "commit": git_commit(), "prompt_tokens": [len(c) for c in contexts]}
    names = a.backends.split(",")
    gens = {}
    for name in names:
        t = time.perf_counter()
        gens[name] = GENERATORS[name](model, tok)
        result[name] = {"start_seconds": round(time.perf_counter() - t, 2), "runs": []}
        run_backend(gens[name], contexts, feedback, 4, 1, seed=99)  # warm-up: first-call allocations, kernels
    for seed in range(a.repeats):  # interleaved, so that both backends see the same load of a shared machine
        for name in names:
            load = os.getloadavg()[0]
            result[name]["runs"].append({**run_backend(gens[name], contexts, feedback, a.new_tokens, a.turns, seed),
                                         "load_before": round(load, 2), "load_after": round(os.getloadavg()[0], 2)})
    for name in names:
        row = result[name]
        row["median_tokens_per_s"] = statistics.median(r["tokens_per_s"] for r in row["runs"])
        if name == "vllm":
            t = time.perf_counter()
            gens[name].sync(model)
            row["sync_seconds"] = round(time.perf_counter() - t, 2)
        sync = f", sync {row['sync_seconds']} s" if "sync_seconds" in row else ""
        print(f"{name}: {[r['tokens_per_s'] for r in row['runs']]} tok/s, median {row['median_tokens_per_s']} "
              f"(start {row['start_seconds']} s{sync})", flush=True)
    if "hf" in result and "vllm" in result:
        result["speedup"] = round(result["vllm"]["median_tokens_per_s"] / result["hf"]["median_tokens_per_s"], 2)
        print(f"vLLM / HF: {result['speedup']}x")
    result.setdefault("config", {k: v for k, v in vars(a).items() if k != "out"})
    result.setdefault("seed", "per repeat")  # repeat r samples with torch seed r
    if a.out:  # a .jsonl file gets one more line; any other path is written as one JSON object
        with open(a.out, "a" if a.out.endswith(".jsonl") else "w") as f:
            f.write(json.dumps(result) + "\n" if a.out.endswith(".jsonl") else json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
