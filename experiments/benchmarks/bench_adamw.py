"""Time of torch.optim.AdamW's three implementations (update.ADAMW_IMPLS: the plain per-tensor loop, foreach, fused)
over a policy's weights, alone and inside one whole update (forward + backward + clip + step), in one run:

- step:   the optimizer step alone on fixed gradients (random, fp32, ~1e-3): each implementation from the same start
          weights with a fresh optimizer, one untimed step (allocates the moments), then --steps timed steps; the
          median step. After the same steps, the largest difference of its weights from the plain loop's, in float32
          ulps at each weight's scale max(|w|, lr) (tests/test_update.py uses the same measure; fused ≈ 2, foreach 0).
- update: one minibatch of the RL update as the trainer runs it (update.accumulate_microbatches on a PPO loss over
          a rollout-shaped batch built as bench_update_speed.py builds it: --lengths / --policy-tokens, default the
          first minibatch of configs/cooking.yaml's step-0 batch), gradient clipping to 1.0, then the step; seconds of
          forward + backward and of the step, medians.

The implementations alternate order from round to round (each sees the same load of a shared machine); every round
starts each from the same weights. Records wall and CPU seconds (time.process_time: steadier on a shared machine),
the CPU (benchutil.machine_info names it from /proc/cpuinfo, with its avx512 / bf16 flags), and appends one JSON
line to --out. Short by design (about 2-4 minutes for the embedded model on 2 cores): the machine is shared.

    python benchmarks/bench_adamw.py [--model embedded] [--impls plain,foreach,fused] [--rounds 3] [--steps 3]
        [--lengths 429,470,500,464] [--policy-tokens 19,27,28,19] [--threads 2] [--machine TEXT]
        [--out results/adamw_speed.jsonl]
"""
from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="embedded")
    p.add_argument("--impls", default="plain,foreach,fused", help="comma-separated, of plain, foreach, fused")
    p.add_argument("--rounds", type=int, default=3, help="rounds; each times every implementation")
    p.add_argument("--steps", type=int, default=3, help="timed optimizer steps per implementation and round")
    p.add_argument("--lengths", default="429,470,500,464", help="tokens of each episode of the update's minibatch")
    p.add_argument("--policy-tokens", default="19,27,28,19", help="policy tokens of each episode")
    p.add_argument("--prompt", type=int, default=278, help="tokens before the first action")
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--machine", default="", help="how to name the machine in the results, e.g. '2-core shared CPU'")
    p.add_argument("--out", default="", help="append one JSON line (e.g. results/adamw_speed.jsonl)")
    a = p.parse_args()

    import torch

    from agentrl_lib.config import AlgoConfig
    from agentrl_lib.models import load_policy
    from agentrl_lib.policy import token_forward
    from agentrl_lib.update import ADAMW_IMPLS, accumulate_microbatches, adamw, adamw_impl
    from experiments.benchmarks.bench_update_speed import build_batch
    from experiments.benchmarks.benchutil import load1, machine_info, peak_rss_gib, write_result

    impls = a.impls.split(",")
    if not set(impls) <= set(ADAMW_IMPLS) or "plain" not in impls:
        raise SystemExit(f"--impls must list plain and any of {', '.join(ADAMW_IMPLS)} (got {a.impls})")
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    policy, tok = load_policy(a.model, device="cpu", dtype="float32")
    params = [x for x in policy.parameters() if x.requires_grad]
    n_params = sum(x.numel() for x in params)
    start = [x.detach().clone() for x in params]
    g = torch.Generator().manual_seed(0)
    grads = [torch.randn(x.shape, generator=g) * 1e-3 for x in params]

    def reset() -> None:
        with torch.no_grad():
            for x, s in zip(params, start):
                x.copy_(s)

    def fresh(impl: str):
        reset()
        opt = adamw([{"params": params, "lr": a.lr}], impl, weight_decay=0.0)
        assert adamw_impl(opt) == impl
        for x, gr in zip(params, grads):
            x.grad = gr.clone()
        opt.step()  # untimed: allocates the moments
        return opt

    # ---- the optimizer step alone
    step_runs: dict[str, list[dict]] = {k: [] for k in impls}
    ulps: dict[str, float] = {}
    plain_after = None
    eps = torch.finfo(torch.float32).eps
    for r in range(a.rounds):
        for impl in (impls if r % 2 == 0 else impls[::-1]):
            opt = fresh(impl)
            load, times, cpus = load1(), [], []
            for _ in range(a.steps):
                t0, c0 = time.perf_counter(), time.process_time()
                opt.step()
                times.append(time.perf_counter() - t0)
                cpus.append(time.process_time() - c0)
            step_runs[impl].append({"seconds": round(statistics.median(times), 4),
                                    "cpu_seconds": round(statistics.median(cpus), 4), "load_before": load})
            if r == 0:  # every implementation took 1 + steps steps on the same gradients from the same weights
                after = [x.detach().clone() for x in params]
                if impl == "plain":
                    plain_after = after
                else:
                    ulps[impl] = None  # filled below, once plain's weights exist
                    step_runs[impl][-1]["_after"] = after
            del opt
            print(f"round {r + 1} step   {impl:8s}: {step_runs[impl][-1]['seconds']:.3f} s", flush=True)
    for impl in impls:
        if impl != "plain":
            after = step_runs[impl][0].pop("_after")
            ulps[impl] = max(((x - y).abs() / eps / y.abs().clamp(min=a.lr)).max().item()
                             for x, y in zip(after, plain_after))
    del plain_after

    # ---- one whole update: forward + backward of one minibatch, clip, step
    lengths = [int(x) for x in a.lengths.split(",")]
    policy_tokens = [int(x) for x in a.policy_tokens.split(",")]
    if len(lengths) != len(policy_tokens):
        raise SystemExit(f"--lengths has {len(lengths)} episodes and --policy-tokens {len(policy_tokens)}")
    ids, attn, mask = build_batch(lengths, policy_tokens, len(tok), a.prompt, 1)
    algo = AlgoConfig.from_preset("grpo")
    forward = lambda *x, **k: token_forward(policy, *x, temperature=0.7, **k)  # noqa: E731
    with torch.no_grad():
        old = token_forward(policy, ids, attn, mask, temperature=0.7)["logprobs"]
    mb = {"input_ids": ids, "attention_mask": attn, "mask": mask, "old_logprobs": old,
          "advantages": torch.randn(ids.shape, generator=g) * mask}
    update_runs: dict[str, list[dict]] = {k: [] for k in impls}
    losses: dict[str, float] = {}
    policy.train()
    for r in range(a.rounds):
        for impl in (impls if r % 2 == 0 else impls[::-1]):
            opt = fresh(impl)
            reset()  # the warm-up step moved the weights: every implementation's update starts from the same ones
            load = load1()
            t0, c0 = time.perf_counter(), time.process_time()
            opt.zero_grad(set_to_none=True)
            loss, _ = accumulate_microbatches(forward, mb, algo)
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            t1, c1 = time.perf_counter(), time.process_time()
            opt.step()
            t2, c2 = time.perf_counter(), time.process_time()
            losses.setdefault(impl, loss.item())
            update_runs[impl].append({"seconds": round(t2 - t0, 3), "cpu_seconds": round(c2 - c0, 3),
                                      "forward_backward_seconds": round(t1 - t0, 3),
                                      "step_seconds": round(t2 - t1, 4), "step_cpu_seconds": round(c2 - c1, 4),
                                      "load_before": load})
            del opt
            print(f"round {r + 1} update {impl:8s}: {update_runs[impl][-1]['seconds']:.2f} s "
                  f"(step {update_runs[impl][-1]['step_seconds']:.3f} s)", flush=True)

    def med(runs: list[dict], key: str) -> float:
        return statistics.median(x[key] for x in runs)

    result = {"bench": "adamw_speed", "params": n_params, "lr": a.lr, "update_tokens": int(attn.sum()),
              "update_policy_tokens": int(mask.sum()), "episodes": len(lengths),
              **machine_info(a.machine), "load_after": load1(), "peak_rss_gib": round(peak_rss_gib(), 2),
              "step": {}, "update": {}}
    for impl in impls:
        result["step"][impl] = {"runs": step_runs[impl], "median_seconds": med(step_runs[impl], "seconds"),
                                "median_cpu_seconds": med(step_runs[impl], "cpu_seconds")}
        u = update_runs[impl]
        result["update"][impl] = {"runs": u, "median_seconds": med(u, "seconds"),
                                  "median_cpu_seconds": med(u, "cpu_seconds"),
                                  "median_forward_backward_seconds": med(u, "forward_backward_seconds"),
                                  "median_step_seconds": med(u, "step_seconds"), "loss": losses[impl]}
        if impl != "plain":
            result["step"][impl]["max_ulps_vs_plain"] = round(ulps[impl], 3)
            for part in ("step", "update"):
                res = result[part][impl]
                res["speedup_vs_plain"] = round(result[part]["plain"]["median_seconds"] / res["median_seconds"], 2)
                res["cpu_speedup_vs_plain"] = round(result[part]["plain"]["median_cpu_seconds"]
                                                    / res["median_cpu_seconds"], 2)
    print(f"{n_params / 1e6:.1f}M fp32 weights, {a.threads} threads, medians of {a.rounds} rounds "
          f"({result['cpu']}):")
    for impl in impls:
        s, u = result["step"][impl], result["update"][impl]
        print(f"  {impl:8s} step {s['median_seconds']:.3f} s"
              + (f" ({s['speedup_vs_plain']}x plain, {s['max_ulps_vs_plain']} ulp from it)" if impl != "plain" else "")
              + f"; update {u['median_seconds']:.2f} s (step {u['median_step_seconds']:.3f} s)"
              + (f", {u['speedup_vs_plain']}x plain" if impl != "plain" else ""))
    write_result(a.out, result, a, seed=0)


if __name__ == "__main__":
    main()
