"""Peak memory and time of one RL gradient step: plain, with gradient checkpointing, with token-budget micro-batches
(train.max_tokens_per_microbatch) and with both, on one minibatch of trajectories of the lengths given (default: one
long episode and three shorter ones, as a rollout batch has them; ALFWorld's 24 turns are ≈ 1,100-1,250 tokens with
the embedded SmolLM2-135M).

    python benchmarks/bench_update_memory.py [--model embedded] [--lengths 1200,600,400,300] [--budget 1200]
                                             [--repeats 2] [--label TEXT] [--out results/bench_update_memory.jsonl]

Each setting runs in its own process (peak RSS is per process): load the policy, build one right-padded minibatch
laid out as rollouts lay them out (prompt, then turns of ~8 policy tokens and ~40 environment tokens), then
`repeats` times: update.accumulate_microbatches (PPO: clipped surrogate, entropy, value head; budget 0 = the
whole minibatch in one pass, as the trainer does by default) → AdamW step. Prints the median step time, the peak
RSS and each setting's ratios to plain, and appends one JSON line with all of it to --out.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import time

ITSELF = [sys.executable, "-m", "experiments.benchmarks.bench_update_memory"]
"""The command that runs this module again in a fresh process (one measurement per process)."""
SETTINGS = {"plain": (False, False, 0), "checkpointing": (True, False, 0), "microbatch": (False, True, 0),
            "microbatch+checkpointing": (True, True, 0), "lora": (False, False, 16)}
"""setting → (gradient checkpointing, token-budget micro-batches, LoRA rank: 0 = every weight trains; 16 = a peft
adapter on every linear projection, alpha 32, as `--lora-rank 16`: only the adapter has gradients and AdamW state)."""


def one_setting(model: str, lengths: list[int], budget: int, repeats: int, checkpointing: bool,
                lora_rank: int = 0) -> dict:
    import resource

    import torch

    from agentrl_lib.config import AlgoConfig
    from agentrl_lib.models import base_model, enable_gradient_checkpointing, load_policy
    from agentrl_lib.policy import ValueHead, token_forward
    from agentrl_lib.update import accumulate_microbatches, microbatches

    torch.manual_seed(0)
    policy, tok = load_policy(model, device="cpu", lora_rank=lora_rank)
    if checkpointing:
        enable_gradient_checkpointing(policy)
    head = ValueHead(base_model(policy).config.hidden_size)
    trainable = [p for p in policy.parameters() if p.requires_grad]  # LoRA: the adapter's only
    opt = torch.optim.AdamW(trainable + list(head.parameters()), lr=1e-6)
    B, T = len(lengths), max(lengths)
    ids = torch.randint(0, len(tok), (B, T))
    attn = torch.zeros(B, T, dtype=torch.long)
    mask = torch.zeros(B, T)
    prompt, turn, env = 300, 8, 40  # the layout of an ALFWorld trajectory
    for b, n in enumerate(lengths):
        attn[b, :n] = 1
        for start in range(min(prompt, n // 4), n - turn, turn + env):
            mask[b, start:start + turn] = 1
    adv, ret = torch.randn(B, T) * mask, torch.randn(B, T) * mask
    batch = {"input_ids": ids, "attention_mask": attn, "mask": mask, "old_logprobs": torch.full((B, T), -1.0) * mask,
             "advantages": adv, "returns": ret, "old_values": torch.zeros_like(ret)}
    forward = functools.partial(token_forward, policy, temperature=0.7, value_head=head)
    policy.train()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        accumulate_microbatches(forward, batch, AlgoConfig(), budget)
        opt.step()
        times.append(time.perf_counter() - t)
    return {"checkpointing": checkpointing, "budget": budget, "lora_rank": lora_rank,
            "trainable_params": sum(p.numel() for p in trainable), "microbatches": microbatches(lengths, budget),
            "step_seconds": times, "step_seconds_median": statistics.median(times),
            "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2,
            "policy_tokens": int(mask.sum()), "tokens": int(attn.sum()), "padded_tokens": B * T,
            "threads": torch.get_num_threads()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="embedded")
    p.add_argument("--lengths", default="1200,600,400,300", help="tokens of each trajectory of the minibatch")
    p.add_argument("--budget", type=int, default=1200, help="max_tokens_per_microbatch of the micro-batch settings")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--settings", default=",".join(SETTINGS), help=f"comma-separated, of {', '.join(SETTINGS)}")
    p.add_argument("--label", default="", help="the workload the lengths stand for, e.g. 'the swe sweep' (the book "
                   "shows the newest line of each label)")
    p.add_argument("--out", default="", help="append one JSON line with every setting's numbers (e.g. "
                   "results/bench_update_memory.jsonl)")
    p.add_argument("--_one", choices=list(SETTINGS), help=argparse.SUPPRESS)
    a = p.parse_args()
    lengths = [int(x) for x in a.lengths.split(",")]
    if a._one:
        ckpt, micro, rank = SETTINGS[a._one]
        print(json.dumps(one_setting(a.model, lengths, a.budget if micro else 0, a.repeats, ckpt, rank)))
        return
    res = {}
    for name in a.settings.split(","):
        out = subprocess.run([*ITSELF, "--model", a.model, "--lengths", a.lengths, "--budget",
                              str(a.budget), "--repeats", str(a.repeats), "--_one", name],
                             capture_output=True, text=True, check=True)
        res[name] = r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{name:25s} step {r['step_seconds_median']:6.1f} s (median of {a.repeats})   peak RSS "
              f"{r['peak_rss_gb']:5.2f} GB   (lengths {a.lengths}, micro-batches {r['microbatches']}, "
              f"{r['threads']} threads)", flush=True)
    if "plain" in res:
        for name, r in res.items():
            if name != "plain":
                print(f"{name} / plain: time x{r['step_seconds_median'] / res['plain']['step_seconds_median']:.2f}, "
                      f"peak memory x{r['peak_rss_gb'] / res['plain']['peak_rss_gb']:.2f}")
    if a.out:
        import platform

        from agentrl_lib.paths import git_commit
        from experiments.benchmarks.benchutil import write_result

        line = {"bench": "update_memory", "model": a.model, "lengths": lengths, "budget": a.budget,
                "repeats": a.repeats, "commit": git_commit(), "machine": platform.platform(),
                "cpus": os.cpu_count(), "load_avg": os.getloadavg(), "settings": res, **({"label": a.label} if a.label
                                                                                          else {})}
        write_result(a.out, line, a, seed=0)  # torch.manual_seed(0): the same ids, head and layout in every setting


if __name__ == "__main__":
    main()
