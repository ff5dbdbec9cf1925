"""Peak memory and time of one RL gradient step, with and without gradient checkpointing, on trajectories as long as
ALFWorld's (24 turns ≈ 1,100-1,250 tokens with the embedded SmolLM2-135M).

    python benchmarks/bench_update_memory.py [--model embedded] [--seq-len 1200] [--minibatch 4] [--repeats 2]

Each setting runs in its own process (peak RSS is per process): load the policy, build one minibatch of
trajectories laid out as rollouts lay them out (prompt, then turns of ~8 policy tokens and ~40 environment tokens),
then `repeats` times: the trainer's `minibatch_loss` (PPO: clipped surrogate, entropy, value head) → backward →
AdamW step. Prints the median step time, the peak RSS and the ratios checkpointing / plain.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time


def one_setting(model: str, seq_len: int, minibatch: int, repeats: int, checkpointing: bool) -> dict:
    import resource

    import torch

    from agentrl_lib.config import AlgoConfig
    from agentrl_lib.models import base_model, enable_gradient_checkpointing, load_policy
    from agentrl_lib.policy import ValueHead
    from agentrl_lib.trainer import minibatch_loss

    torch.manual_seed(0)
    policy, tok = load_policy(model, device="cpu")
    if checkpointing:
        enable_gradient_checkpointing(policy)
    head = ValueHead(base_model(policy).config.hidden_size)
    opt = torch.optim.AdamW(list(policy.parameters()) + list(head.parameters()), lr=1e-6)
    ids = torch.randint(0, len(tok), (minibatch, seq_len))
    mask = torch.zeros(minibatch, seq_len)
    prompt, turn, env = 300, 8, 40  # the layout of an ALFWorld trajectory
    for start in range(prompt, seq_len - turn, turn + env):
        mask[:, start:start + turn] = 1
    attn = torch.ones_like(ids)
    old = torch.full((minibatch, seq_len), -1.0) * mask
    adv, ret = torch.randn(minibatch, seq_len) * mask, torch.randn(minibatch, seq_len) * mask
    policy.train()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        loss, _ = minibatch_loss(policy, head, ids, attn, mask, old, adv, AlgoConfig(), 0.7, ret,
                                 torch.zeros_like(ret))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t)
    return {"checkpointing": checkpointing, "step_seconds_median": statistics.median(times),
            "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2,
            "policy_tokens": int(mask.sum()), "tokens": minibatch * seq_len, "threads": torch.get_num_threads()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="embedded")
    p.add_argument("--seq-len", type=int, default=1200)
    p.add_argument("--minibatch", type=int, default=4)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--_one", choices=["plain", "checkpointing"], help=argparse.SUPPRESS)
    a = p.parse_args()
    if a._one:
        print(json.dumps(one_setting(a.model, a.seq_len, a.minibatch, a.repeats, a._one == "checkpointing")))
        return
    res = {}
    for name in ("plain", "checkpointing"):
        out = subprocess.run([sys.executable, __file__, "--model", a.model, "--seq-len", str(a.seq_len),
                              "--minibatch", str(a.minibatch), "--repeats", str(a.repeats), "--_one", name],
                             capture_output=True, text=True, check=True)
        res[name] = json.loads(out.stdout.strip().splitlines()[-1])
        r = res[name]
        print(f"{name:14s} step {r['step_seconds_median']:6.1f} s (median of {a.repeats})   peak RSS "
              f"{r['peak_rss_gb']:5.2f} GB   ({a.minibatch} x {a.seq_len} tokens, {r['policy_tokens']} policy tokens, "
              f"{r['threads']} threads)", flush=True)
    p_, c_ = res["plain"], res["checkpointing"]
    print(f"checkpointing / plain: time x{c_['step_seconds_median'] / p_['step_seconds_median']:.2f}, "
          f"peak memory x{c_['peak_rss_gb'] / p_['peak_rss_gb']:.2f}")


if __name__ == "__main__":
    main()
