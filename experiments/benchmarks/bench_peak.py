"""How close the update runs to this machine's peak: the achieved FLOP/s of the training forward + backward, divided
by the matmul throughput this machine reaches at the model's own shapes, in fp32 and (where the CPU has it) bf16.

    python benchmarks/bench_peak.py [--model embedded] [--rows 4] [--tokens 480] [--policy-frac 0.05]
        [--repeats 5] [--threads 2] [--machine TEXT] [--out results/peak.jsonl]

1. Matmul throughput: torch.matmul of (N × K) @ (K × M) for each linear layer shape of the model (q, k, v, o, gate,
   up, down; N = rows × tokens), and the output layer at the policy positions, timed in fp32 and bf16; the
   throughput at the model's mix is total FLOPs / total seconds over the shapes, weighted by how often each occurs.
   This is the ceiling a forward + backward made of these matmuls could reach here (not the vendor's peak).
2. The update's forward + backward: policy.token_forward over `rows` right-padded episodes of `tokens` tokens with
   log-probs at `policy_frac` of the positions (the trainer's layout), in fp32 and under bf16 autocast
   (torch.autocast('cpu', torch.bfloat16)), each from the same weights. Its FLOPs are counted as the issue asks:
   6 × (the non-embedding parameters) × tokens for the backbone, plus 6 × (vocab × hidden) × policy tokens for the
   output layer, which runs only there; attention's T²-terms are left out (about 10% at 480 tokens), so the
   fractions are slight underestimates.
bf16 runs only where the CPU reports avx512_bf16 or amx_bf16 (or on CUDA): elsewhere it is emulated and slower, and
the line says "no bf16 hardware". Prints GFLOP/s and fractions and appends one JSON line to --out.
"""
from __future__ import annotations

import argparse
import statistics
import time


def timed(fn, repeats: int) -> list[float]:
    fn()  # warm-up: first-call allocations and oneDNN kernel selection
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="embedded")
    p.add_argument("--rows", type=int, default=4, help="episodes in the minibatch (train.minibatch_size)")
    p.add_argument("--tokens", type=int, default=480, help="tokens per episode (a cooking episode: 430-510)")
    p.add_argument("--policy-frac", type=float, default=0.05, help="share of positions that are policy tokens")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--machine", default="", help="how to name the machine in the results")
    p.add_argument("--out", default="", help="append one JSON line (e.g. results/peak.jsonl)")
    a = p.parse_args()

    import torch

    from agentrl_lib.models import base_model, load_policy
    from agentrl_lib.policy import token_forward
    from experiments.benchmarks.benchutil import load1, machine_info, write_result

    torch.set_num_threads(a.threads)
    info = machine_info(a.machine)
    bf16_hw = torch.cuda.is_available() or bool({"avx512_bf16", "amx_bf16"} & set(info["cpu_flags"]))
    policy, tok = load_policy(a.model, device="cpu", dtype="float32")
    cfg = base_model(policy).config
    H, F, V, L = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size, cfg.num_hidden_layers
    kv = cfg.num_key_value_heads * (H // cfg.num_attention_heads)
    N = a.rows * a.tokens
    n_policy = max(1, round(N * a.policy_frac))
    # (N, K, M, count per forward): q, o; k, v; gate, up; down; the output layer at the policy positions
    shapes = [(N, H, H, 2 * L), (N, H, kv, 2 * L), (N, H, F, 2 * L), (N, F, H, L), (n_policy, H, V, 1)]
    dtypes = {"float32": torch.float32, **({"bfloat16": torch.bfloat16} if bf16_hw else {})}
    matmul = {}
    for name, dt in dtypes.items():
        flops = secs = 0.0
        for n, k, m, count in shapes:
            x, w = torch.randn(n, k, dtype=dt), torch.randn(k, m, dtype=dt)
            t = statistics.median(timed(lambda: torch.matmul(x, w), a.repeats))
            flops += 2 * n * k * m * count
            secs += t * count
        matmul[name] = round(flops / secs / 1e9, 1)

    n_params = sum(p.numel() for n, p in policy.named_parameters() if "embed_tokens" not in n and "lm_head" not in n)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, len(tok), (a.rows, a.tokens), generator=g)
    attn = torch.ones_like(ids)
    mask = torch.zeros(a.rows, a.tokens)
    step = max(1, round(0.5 / a.policy_frac))
    mask[:, a.tokens // 2::step] = 1  # policy tokens spread over the second half (turns come after the prompt)
    n_policy = int(mask[:, 1:].sum())
    fb_flops = 6 * n_params * N + 6 * V * H * n_policy
    policy.train()

    def fwd_bwd(dtype: str):
        def run():
            policy.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bfloat16"):
                out = token_forward(policy, ids, attn, mask, 0.7, None, with_entropy=True, share_prefix=False)
                loss = -(out["logprobs"].sum() + 0.01 * out["entropy"].sum()) / n_policy
            loss.backward()
        return run

    load = load1()
    update = {}
    for name in dtypes:
        secs = timed(fwd_bwd(name), a.repeats)
        med = statistics.median(secs)
        gflops = fb_flops / med / 1e9
        update[name] = {"seconds": [round(s, 3) for s in secs], "median_seconds": round(med, 3),
                        "gflops": round(gflops, 1), "fraction_of_matmul_peak": round(gflops / matmul[name], 3)}
    result = {"bench": "peak", "rows": a.rows, "tokens": a.tokens, "policy_tokens": n_policy,
              "non_embedding_params": n_params, "update_flops": fb_flops, "matmul_gflops": matmul,
              "update": update, "bf16_hardware": bf16_hw, "load_before": load, "load_after": load1(), **info}
    print(f"{info['cpu']} ({', '.join(info['cpu_flags'])}), {a.threads} threads; forward + backward of {a.rows} × "
          f"{a.tokens} tokens, {n_policy} policy tokens = {fb_flops / 1e9:.0f} GFLOP")
    for name in dtypes:
        u = update[name]
        print(f"  {name:8s} matmul at the model's shapes {matmul[name]:7.1f} GFLOP/s; "
              f"update {u['median_seconds']:.2f} s "
              f"= {u['gflops']:.1f} GFLOP/s = {100 * u['fraction_of_matmul_peak']:.0f}% of it")
    if "bfloat16" in update:
        result["bf16_speedup"] = round(update["float32"]["median_seconds"] / update["bfloat16"]["median_seconds"], 2)
        print(f"  bf16 autocast: {result['bf16_speedup']}x fp32")
    else:
        print("  bf16: no bf16 hardware on this CPU (avx512_bf16 / amx_bf16): not measured")
    write_result(a.out, result, a, seed=0)


if __name__ == "__main__":
    main()
