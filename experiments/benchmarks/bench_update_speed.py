"""Time of the update stage of one RL step — the no-grad π_old (and V_old) forward over the rollout batch, then one
epoch of minibatch gradient steps — in two or three layouts, on the same batch, weights and minibatches:

- padded: every forward padded to the rollout batch's longest episode (one token_forward over the batch; each
  minibatch's rows at the batch's full width): the trainer's layout before this benchmark's change.
- cut:    the trainer's layout (update.forward_in_chunks for the no-grad pass: rows of similar length together, each
  chunk cut to its longest row; each minibatch cut to its own longest row by accumulate_microbatches): the same
  numbers up to float rounding (tests/test_update.py), no work on padding.
- behaviour (GRPO only; `--layouts padded,cut,behaviour`): cut, with algo.old_logprobs 'behaviour': π_old is the
  rollout's log-probs, so no no-grad pass runs (here the cut layout's π_old stands in for the rollout's; a critic
  would still need the pass for its values).
- shared:  cut, with train.share_prefix: each group's first prompt forwarded once in the no-grad pass (chunks of whole
  groups) and wherever a random-row minibatch holds several rows of one group. The same numbers as cut.
- grouped: shared, with train.group_minibatches: each minibatch a whole group (minibatch = group size here), so the
  update's forward and backward share the prompt too. Other minibatches than cut's, so other losses.

    python benchmarks/bench_update_speed.py [--model embedded] [--lengths L1,L2,...] [--policy-tokens P1,P2,...]
        [--algo ppo] [--layouts padded,cut,shared,grouped] [--minibatch 4] [--group-size 4] [--prompt 278]
        [--repeats 3] [--threads 2] [--machine TEXT]
        [--out results/update_speed.jsonl]

The default lengths are a real rollout batch's: configs/cooking.yaml (4 games × group 4, ≤ 8 turns × ≤ 24 tokens)
from the 16-walkthrough SFT model, step 0 of seed 0 (tokens per episode and policy tokens per episode as the trainer
collated them). The batch is laid out as rollouts lay it out (the prompt, then turns of policy tokens and environment
tokens); the token ids are random (the cost of a forward does not depend on them), except that the episodes of a
group (consecutive blocks of --group-size) share their first --prompt tokens, as a group's episodes share the system
prompt and the game's first observation (273-284 tokens on these games). The layouts alternate within each
repeat (both see the same load of a shared machine), each from the same weights and optimizer state. Each run records
its wall time and this process's CPU time (time.process_time, all threads; run with OMP_WAIT_POLICY=PASSIVE so that
waiting threads do not spin): on a machine shared with other jobs the CPU time is the steadier measure of the work.
Prints the
median seconds of each layout and the ratio, and appends one JSON line to --out. Peak memory is one process's for both
layouts: bench_update_memory.py measures memory per setting.
"""
from __future__ import annotations

import argparse
import copy
import functools
import statistics
import time

# configs/cooking.yaml, step 0 of seed 0 from the 16-walkthrough SFT model (see the module docstring)
COOKING_LENGTHS = "429,429,429,429,470,471,471,471,500,500,464,503,508,456,487,456"
COOKING_POLICY_TOKENS = "19,19,19,19,27,28,28,28,28,28,19,31,29,20,25,20"


def build_batch(lengths: list[int], policy_tokens: list[int], vocab: int, prompt: int = 278, group_size: int = 1):
    """A right-padded rollout batch: row b has lengths[b] tokens, of which policy_tokens[b] are the policy's, in turns
    of ~5 tokens after a `prompt`-token prompt, the environment's reply between them; the rows of each block of
    `group_size` share their prompt. Returns (ids, attention_mask, mask), (B, T) with T = max(lengths)."""
    import torch

    g = torch.Generator().manual_seed(0)
    B, T = len(lengths), max(lengths)
    first_action = min(prompt, max(1, min(lengths) - 2 * max(policy_tokens)))  # room for every row's turns after it
    ids = torch.randint(1, vocab, (B, T), generator=g)
    attn, mask = torch.zeros(B, T, dtype=torch.long), torch.zeros(B, T)
    for b, (n, p) in enumerate(zip(lengths, policy_tokens)):
        attn[b, :n] = 1
        turns = max(1, round(p / 5))
        start = first_action  # the first action follows the prompt, at the same place in every row
        stride = max((n - start) // turns, 1)
        left = p
        for k in range(turns):
            take = min(left if k == turns - 1 else round(p / turns), stride, n - (start + k * stride))
            mask[b, start + k * stride:start + k * stride + take] = 1
            left -= take
    for b in range(B):  # the group's first row's prompt
        first = b - b % group_size
        ids[b, :first_action] = ids[first, :first_action]
    return ids * attn, attn, mask


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="embedded")
    p.add_argument("--lengths", default=COOKING_LENGTHS, help="tokens of each episode of the rollout batch")
    p.add_argument("--policy-tokens", default=COOKING_POLICY_TOKENS, help="policy tokens of each episode")
    p.add_argument("--algo", default="ppo", choices=["ppo", "grpo"], help="ppo: with the value head (V_old, value "
                   "loss); grpo: without")
    p.add_argument("--layouts", default="padded,cut,shared,grouped",
                   help="comma-separated, of padded, cut, behaviour (grpo), shared, grouped")
    p.add_argument("--minibatch", type=int, default=4, help="episodes per gradient step (train.minibatch_size)")
    p.add_argument("--group-size", type=int, default=4, help="episodes per group (algo.group_size)")
    p.add_argument("--prompt", type=int, default=278, help="tokens of the first prompt, shared within a group")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--machine", default="", help="how to name the machine in the results, e.g. '2-core shared CPU'")
    p.add_argument("--out", default="", help="append one JSON line (e.g. results/update_speed.jsonl)")
    a = p.parse_args()

    import torch

    from agentrl_lib.config import AlgoConfig
    from agentrl_lib.models import base_model, load_policy
    from agentrl_lib.policy import ValueHead, prompt_groups, token_forward
    from agentrl_lib.update import accumulate_microbatches, forward_in_chunks, minibatch_loss, select
    from experiments.benchmarks.benchutil import load1, machine_info, peak_rss_gib, write_result

    layouts = tuple(a.layouts.split(","))
    if not set(layouts) <= {"padded", "cut", "behaviour", "shared", "grouped"} or "cut" not in layouts:
        raise SystemExit(f"--layouts must list cut and any of padded, behaviour, shared, grouped (got {a.layouts})")
    if "behaviour" in layouts and a.algo != "grpo":
        raise SystemExit("--layouts behaviour needs --algo grpo: with a critic the no-grad pass runs for its values")
    torch.set_num_threads(a.threads)
    lengths = [int(x) for x in a.lengths.split(",")]
    policy_tokens = [int(x) for x in a.policy_tokens.split(",")]
    if len(lengths) != len(policy_tokens):
        raise SystemExit(f"--lengths has {len(lengths)} episodes and --policy-tokens {len(policy_tokens)}: give one "
                         "number per episode in each")
    torch.manual_seed(0)
    policy, tok = load_policy(a.model, device="cpu", dtype="float32")
    head = ValueHead(base_model(policy).config.hidden_size) if a.algo == "ppo" else None
    params = [x for x in policy.parameters() if x.requires_grad] + ([] if head is None else list(head.parameters()))
    ids, attn, mask = build_batch(lengths, policy_tokens, len(tok), a.prompt, a.group_size)
    B, T = ids.shape
    algo = AlgoConfig.from_preset(a.algo)
    temp = 0.7
    adv = torch.randn(B, T) * mask
    ret = torch.randn(B, T) * mask if head is not None else None
    batch = {"input_ids": ids, "attention_mask": attn, "mask": mask, "advantages": adv}
    if ret is not None:
        batch["returns"] = ret
    forward = functools.partial(token_forward, policy, temperature=temp, value_head=head, share_prefix=False)
    shared_forward = functools.partial(token_forward, policy, temperature=temp, value_head=head, share_prefix=True)
    groups = prompt_groups(ids, mask)
    start_policy = copy.deepcopy(policy.state_dict())
    start_head = None if head is None else copy.deepcopy(head.state_dict())
    perm = torch.randperm(B, generator=torch.Generator().manual_seed(0))
    minibatches = [perm[s:s + a.minibatch] for s in range(0, B, a.minibatch)]
    by_group = torch.tensor([i for g in torch.randperm(len(groups), generator=torch.Generator().manual_seed(0)).tolist()
                             for i in groups[g]])
    group_minibatches = [by_group[s:s + a.minibatch] for s in range(0, B, a.minibatch)]

    def update(layout: str) -> dict:
        policy.load_state_dict(start_policy)
        if head is not None:
            head.load_state_dict(start_head)
        opt = torch.optim.AdamW(params, lr=1e-5)
        policy.train()
        t0, c0 = time.perf_counter(), time.process_time()
        with torch.no_grad():
            if layout == "padded":
                old = token_forward(policy, ids, attn, mask, temp, head)
            elif layout == "cut":
                old = forward_in_chunks(forward, batch, a.minibatch * int(attn.sum(1).max()))
            elif layout in ("shared", "grouped"):
                old = forward_in_chunks(shared_forward, batch, a.minibatch * int(attn.sum(1).max()), groups)
            else:  # behaviour: the rollout's log-probs, no pass
                old = behaviour_logprobs
        t1 = time.perf_counter()
        losses = []
        full = {**batch, "old_logprobs": old["logprobs"], **({"old_values": old["values"]} if "values" in old else {})}
        for idx in (group_minibatches if layout == "grouped" else minibatches):
            opt.zero_grad(set_to_none=True)
            if layout == "padded":  # the rows padded to the batch's longest episode
                loss, _ = minibatch_loss(forward, select(full, idx, T=T), algo)
                loss.backward()
            else:
                fwd = shared_forward if layout in ("shared", "grouped") else forward
                loss, _ = accumulate_microbatches(fwd, select(full, idx), algo)
            opt.step()
            losses.append(loss.item())
        t2, c2 = time.perf_counter(), time.process_time()
        return {"seconds": round(t2 - t0, 3), "cpu_seconds": round(c2 - c0, 3), "no_grad_seconds": round(t1 - t0, 3),
                "minibatch_seconds": round(t2 - t1, 3), "losses": [round(x, 6) for x in losses]}

    with torch.no_grad():  # what the rollout would have sampled with: π at the starting weights
        behaviour_logprobs = forward_in_chunks(functools.partial(token_forward, policy, temperature=temp), batch,
                                               a.minibatch * T)
    runs = {k: [] for k in layouts}
    update("cut")  # warm-up: first-call allocations
    for r in range(a.repeats):
        for name in (layouts if r % 2 == 0 else layouts[::-1]):  # alternate the order: neither always goes first
            load = load1()
            runs[name].append({**update(name), "load_before": load, "load_after": load1()})
            last = runs[name][-1]
            print(f"repeat {r + 1} {name:6s}: {last['seconds']:7.1f} s, CPU {last['cpu_seconds']:.1f} s "
                  f"(no-grad {last['no_grad_seconds']:.1f} s)", flush=True)
    tokens = int(attn.sum())
    result = {"bench": "update_speed", "algo": a.algo, "episodes": B, "minibatch": a.minibatch,
              "group_size": a.group_size, "prompt": a.prompt, "tokens": tokens,
              "padded_tokens": B * T, "policy_tokens": int(mask.sum()), "lengths": lengths,
              **machine_info(a.machine), "peak_rss_gib": round(peak_rss_gib(), 2)}
    for name in layouts:
        med = statistics.median(x["seconds"] for x in runs[name])
        result[name] = {"runs": runs[name], "median_seconds": med,
                        "median_cpu_seconds": statistics.median(x["cpu_seconds"] for x in runs[name]),
                        "median_no_grad_seconds": statistics.median(x["no_grad_seconds"] for x in runs[name]),
                        "median_minibatch_seconds": statistics.median(x["minibatch_seconds"] for x in runs[name]),
                        "tokens_per_s": round(tokens / med, 1)}
    drift = max(abs(x - y) for name in layouts if name != "grouped"  # grouped: other minibatches, other losses
                for x, y in zip(runs[name][0]["losses"], runs["cut"][0]["losses"]))
    result["max_loss_difference"] = drift
    print(f"{B} episodes, {tokens} tokens ({B * T} padded to the longest), {a.algo}, minibatch {a.minibatch}, "
          f"medians of {a.repeats}; largest loss difference between layouts {drift:.1e}")
    for name in layouts:
        if name != "padded" and "padded" in layouts:
            result[name]["speedup_vs_padded"] = round(result["padded"]["median_seconds"] /
                                                      result[name]["median_seconds"], 2)
        if name not in ("padded", "cut"):
            result[name]["speedup_vs_cut"] = round(result["cut"]["median_seconds"] / result[name]["median_seconds"], 2)
            result[name]["cpu_speedup_vs_cut"] = round(result["cut"]["median_cpu_seconds"] /
                                                       result[name]["median_cpu_seconds"], 2)
        print(f"  {name:9s} {result[name]['median_seconds']:6.1f} s  {result[name]['tokens_per_s']:6.1f} tokens/s"
              + (f"  {result[name]['speedup_vs_padded']}x padded" if "speedup_vs_padded" in result[name] else "")
              + (f"  {result[name]['speedup_vs_cut']}x cut" if "speedup_vs_cut" in result[name] else ""))
    if "padded" in layouts:
        result["speedup"] = result["cut"]["speedup_vs_padded"]
    write_result(a.out, result, a, seed=0)


if __name__ == "__main__":
    main()
