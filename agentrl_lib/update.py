"""The update of one RL step: the loss of a minibatch over ONE batch dict, its micro-batches, and the no-grad passes.

The batch dict travels down the step (trainer.Trainer.step); each stage adds its tensors under one name that never
changes on the way down. Every entry is (B, T), right-padded, one row per kept episode:

    input_ids, attention_mask   long     the episode's tokens as sampled (rollout.collate)
    mask                        float32  1 on policy (action) tokens: the tokens that train
    behaviour_logprobs          float32  log-probs of the sampled tokens under the behaviour policy (the rollout's)
    turn_end                    float32  1 on each turn's last policy token
    token_rewards               float32  each turn's reward on its end token (rewards.place_on_tokens)
    old_logprobs                float32  π_old: a no-grad forward of the weights that sampled, or = behaviour_logprobs
    old_values                  float32  V_old, the critic's values before the update (estimators with a critic)
    ref_logprobs                float32  π_ref, the frozen reference policy (algo.kl_coef > 0)
    is_weights                  float32  truncated importance weights π_old / π_behaviour (TIS on)
    advantages                  float32  the estimator's advantages
    returns                     float32  the critic's value targets (estimators with a critic)

`select(batch, rows)` is the one row slicer: a minibatch, a micro-batch and a data-parallel rank's share are all
`select`s of the batch, each cut to its own longest row (right padding: the columns after it change nothing).

`forward` below is a function (input_ids, attention_mask, mask, with_entropy=False) -> dict of (b, t) float32
'logprobs' [, 'values'] [, 'entropy'], 0 off the policy tokens: `policy.token_forward` with the model, temperature
and value head bound (functools.partial), or the data-parallel wrapper of `policy.TokenModel`.

`no_grad_forward` runs the no-grad passes over the whole batch (π_old, V_old, π_ref), each rank its rows;
`make_optimizer` is the optimizer the update steps. Whether the loss is weighted by truncated IS, and the bf16
guard, are precision.py's (tis_applies, bf16_logprob_gap).

Introduced in notebooks/03_policy.md §4 (minibatch_loss).
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Callable

import torch

from .config import AlgoConfig, TrainConfig
from .losses import kl_k3, masked_mean, policy_loss, value_loss
from .policy import ValueHead, prompt_groups, token_forward

if TYPE_CHECKING:
    from .distributed import DataParallel, SingleProcess

Forward = Callable[..., dict]


def select(batch: dict[str, torch.Tensor], rows: torch.Tensor, T: int | None = None) -> dict[str, torch.Tensor]:
    """The rows `rows` (1-D long) of every (B, T) tensor of `batch`, cut to their first T columns (default: the
    longest of these rows, from attention_mask). Returns a new dict of (len(rows), T) tensors (copies)."""
    if T is None:
        T = int(batch["attention_mask"][rows].sum(1).max())
    return {k: v[rows, :T] for k, v in batch.items()}


def minibatch_loss(forward: Forward, mb: dict[str, torch.Tensor], algo: AlgoConfig, max_tokens: float | None = None,
                   n_tokens: float | None = None, n_episodes: int | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """The loss of one minibatch, shared by every estimator:

        L = policy loss (algo.loss_mode: the clipped surrogate; TIS weights) − c_H · entropy  [+ c_v · clipped value
            loss, with a critic]
            [+ β · KL_k3(π_θ ‖ π_ref)]

    Args:
        forward: see the module docstring; a critic is present iff its output holds 'values'.
        mb: a `select` of the batch dict (module docstring): input_ids, attention_mask, mask, old_logprobs,
            advantages; returns and old_values with a critic; ref_logprobs for the KL term (absent: no KL term);
            is_weights for TIS (absent: weight 1).
        max_tokens: the most policy tokens an episode can have (max_turns × max_new_tokens), the constant of
            algo.loss_agg 'seq_mean_token_sum_norm' (losses.LOSS_AGGS).
        n_tokens, n_episodes: the denominators of every token mean (Σ mask) and of Dr. GRPO's B; None = this
            minibatch's. A micro-batch or a data-parallel rank passes the whole minibatch's: its loss and metrics are
            then its share L_r of the minibatch's, Σ_r L_r = L (agentrl_lib/distributed.py).
    Returns: (loss, metrics: policy_loss (the surrogate alone), clip_frac, dual_clip_frac, approx_kl, ratio_mean,
        entropy [, value_loss, value_clip_frac] [, kl_ref]).
    Source: PPO (Schulman et al. 2017, eq. 7 and 9), dual clip (Ye et al. 2020), k3 KL (Schulman 2020).
    """
    mask = mb["mask"]
    out = forward(mb["input_ids"], mb["attention_mask"], mask, with_entropy=True)
    loss, pm = policy_loss(out["logprobs"], mb["old_logprobs"], mb["advantages"], mask, algo, mb.get("is_weights"),
                           max_tokens, n_tokens, n_episodes)
    ent = masked_mean(out["entropy"], mask, n_tokens)
    loss = loss - algo.entropy_coef * ent
    pm["entropy"] = ent.item()
    if "values" in out:  # the critic
        vl, vm = value_loss(out["values"], mb["old_values"], mb["returns"], mask, algo.vf_clip, n_tokens)
        loss = loss + algo.vf_coef * vl
        pm.update(vm)
    if "ref_logprobs" in mb:
        kl = kl_k3(out["logprobs"], mb["ref_logprobs"], mask, n_tokens)
        loss = loss + algo.kl_coef * kl
        pm["kl_ref"] = kl.item()
    return loss, pm


def microbatches(lengths: list[int], max_tokens: int) -> list[list[int]]:
    """Cut the rows of one minibatch into micro-batches of at most `max_tokens` padded tokens each (rows × the
    micro-batch's longest row), longest rows first, so each micro-batch pads only to its own longest row.

    Gradient accumulation over the micro-batches, with the whole minibatch's token and episode counts as the loss
    denominators, gives the minibatch's gradient (accumulate_microbatches); only the peak memory changes.

    Args:
        lengths: the tokens of each row (its attention-mask sum), in minibatch order.
        max_tokens: the budget (train.max_tokens_per_microbatch); <= 0: one micro-batch holding every row. A row
            longer than the budget is a micro-batch of its own (a sequence is never cut).
    Returns: lists of positions into `lengths`; every position exactly once.
    """
    if max_tokens <= 0:
        return [list(range(len(lengths)))]
    out: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        if out and (len(out[-1]) + 1) * lengths[out[-1][0]] <= max_tokens:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def accumulate_microbatches(forward: Forward, mb: dict[str, torch.Tensor], algo: AlgoConfig, budget: int = 0,
                            max_tokens: float | None = None, n_tokens: float | None = None,
                            n_episodes: int | None = None, backward: Callable[[torch.Tensor], None] | None = None
                            ) -> tuple[torch.Tensor, dict[str, float]]:
    """The loss of minibatch `mb` and its gradient, accumulated over the micro-batches of `microbatches` (budget
    train.max_tokens_per_microbatch; 0: one micro-batch): each micro-batch is cut to its own longest row and its loss
    L_m (minibatch_loss) takes the minibatch's token and episode counts as denominators, so Σ_m L_m is the
    minibatch's loss, the accumulated gradient its gradient and the summed metrics its metrics. Peak memory follows
    the budget, not the longest episode.

    Args:
        mb: a `select` of the batch dict (the minibatch's rows), as for minibatch_loss.
        max_tokens: Dr. GRPO's L_max (minibatch_loss).
        n_tokens, n_episodes: the denominators (default: mb's own Σ mask and row count); a data-parallel rank passes
            the whole minibatch's (distributed.py).
        backward: called on each micro-batch's loss (default `loss.backward()`; data parallelism: DataParallel's
        backward).
    Returns: (Σ_m L_m as a 0-dim float32 tensor without grad, Σ_m of each metric); gradients are in the parameters.
    """
    lengths = mb["attention_mask"].sum(1)
    n_tokens = mb["mask"].sum().item() if n_tokens is None else n_tokens
    n_episodes = len(lengths) if n_episodes is None else n_episodes
    total, sums = 0.0, {}
    for part in microbatches(lengths.tolist(), budget):
        loss, pm = minibatch_loss(forward, select(mb, torch.tensor(part)), algo, max_tokens, n_tokens, n_episodes)
        (backward or torch.Tensor.backward)(loss)
        total += loss.item()
        for k, v in pm.items():
            sums[k] = sums.get(k, 0.0) + v
    return torch.tensor(total), sums


def prompt_chunks(lengths: list[int], groups: list[list[int]], budget: int) -> list[list[int]]:
    """Chunks of whole prompt groups (policy.prompt_groups), so that a forward can share each group's prompt: groups
    packed longest first while a chunk holds at most `budget` padded tokens (rows × its longest row); a group over
    the budget is cut by `microbatches`. Every row exactly once."""
    out: list[list[int]] = []
    for g in sorted(groups, key=lambda g: -max(lengths[i] for i in g)):
        longest = max(lengths[i] for i in g)
        if len(g) * longest > budget:
            out += [[g[j] for j in part] for part in microbatches([lengths[i] for i in g], budget)]
        elif out and (len(out[-1]) + len(g)) * max(lengths[i] for i in out[-1]) <= budget:
            out[-1] += g
        else:
            out.append(list(g))
    return out


@torch.no_grad()
def forward_in_chunks(forward: Forward, batch: dict[str, torch.Tensor], budget: int,
                      groups: list[list[int]] | None = None) -> dict[str, torch.Tensor]:
    """`forward` (without entropy) over the batch in chunks of at most `budget` padded tokens each, each chunk cut to
    its own longest row, the results scattered back into (B, T): the padding that the batch's longest episode puts on
    shorter rows costs no work. Chunks hold rows of similar length (microbatches), or whole prompt groups when
    `groups` is given (prompt_chunks: a forward that shares prefixes then shares them). Used for the no-grad passes
    (π_old, V_old, π_ref); the same results as one forward over the batch up to float rounding.

    Args: batch: holds input_ids, attention_mask (B, T) long and mask (B, T) float; budget > 0 tokens per chunk;
        groups: policy.prompt_groups of the batch, or None.
    Returns: forward's dict ('logprobs' [, 'values']), each (B, T) float32, 0 off the policy tokens.
    """
    out: dict[str, torch.Tensor] = {}
    lengths = batch["attention_mask"].sum(1)
    parts = microbatches(lengths.tolist(), budget) if groups is None else prompt_chunks(lengths.tolist(), groups,
                                                                                         budget)
    for part in parts:
        rows = torch.tensor(part, device=lengths.device)
        T = int(lengths[rows].max())
        res = forward(batch["input_ids"][rows, :T], batch["attention_mask"][rows, :T], batch["mask"][rows, :T])
        for k, v in res.items():
            out.setdefault(k, torch.zeros_like(batch["mask"]))[rows, :T] = v
    return out


def no_grad_forward(model, batch: dict[str, torch.Tensor], train: TrainConfig, dp: DataParallel | SingleProcess,
                    value_head: ValueHead | None = None) -> dict[str, torch.Tensor]:
    """A no-grad pass (π_old, V_old, π_ref; call it under torch.no_grad): policy.token_forward of `model` (with
    `value_head`, at train.temperature) over the whole batch in chunks of rows of similar length (forward_in_chunks;
    budget train.max_tokens_per_microbatch, or train.minibatch_size × the longest row when that is 0: never more than
    a training minibatch holds; whole prompt groups with train.share_prefix). With data parallelism each rank forwards
    its rows (dp.rows) and the results are gathered (dp.gather_rows): every rank gets the whole batch's.

    Returns: {'logprobs' [, 'values' with a value head]}: (B, T) float32, 0 off the policy tokens.
    """
    B = batch["input_ids"].shape[0]
    rows = dp.rows(torch.arange(B, device=batch["input_ids"].device))
    if not len(rows):  # more ranks than episodes: this one has none
        keys = ("logprobs",) + (("values",) if value_head is not None else ())
        return {k: dp.gather_rows(batch["mask"].new_zeros((0, batch["mask"].shape[1])), B) for k in keys}
    mine = select(batch, rows, T=batch["input_ids"].shape[1])
    budget = train.max_tokens_per_microbatch or train.minibatch_size * int(mine["attention_mask"].sum(1).max())
    share = train.share_prefix
    forward = functools.partial(token_forward, model, temperature=train.temperature, value_head=value_head,
                                share_prefix=share)
    out = forward_in_chunks(forward, mine, budget, prompt_groups(mine["input_ids"], mine["mask"]) if share else None)
    return {k: dp.gather_rows(v, B) for k, v in out.items()}


ADAMW_IMPLS = ("fused", "foreach", "plain")
"""torch.optim.AdamW's implementations, fastest first: 'fused' (one kernel per parameter group, fused=True; on CPU
since torch 2.4), 'foreach' (multi-tensor ops, foreach=True), 'plain' (a Python loop over the tensors,
foreach=False). They compute the same update up to float rounding (foreach: bit-identical to plain; fused: within a
few float32 ulps; tests/test_update.py). One step over SmolLM2-135M's 134.5M fp32 weights on the 2-core AMD EPYC
(AVX-512, avx512_bf16, no AMX; 2 threads, loaded machine): plain 0.76 s, foreach 1.01 s, fused 0.14 s (5.4x); a whole
4-episode minibatch update is ~17 CPU-s of forward + backward, so fused gains it ~5% (results/adamw_speed.jsonl,
benchmarks/bench_adamw.py)."""


def adamw(groups: list[dict], impl: str | None = None, **kwargs) -> torch.optim.AdamW:
    """torch.optim.AdamW over `groups` in implementation `impl` (ADAMW_IMPLS), or, with impl None, the fastest this
    torch offers for these parameters: fused is tried (the constructor refuses devices and dtypes it has no kernel
    for), then foreach, then plain. `kwargs` go to AdamW (weight_decay, betas, eps). The chosen one is
    `adamw_impl(opt)`. Raises ValueError for an impl not in ADAMW_IMPLS; whatever AdamW raises for a forced one."""
    if impl is not None and impl not in ADAMW_IMPLS:
        raise ValueError(f"AdamW implementation must be one of {', '.join(ADAMW_IMPLS)} (got {impl!r})")
    flags = {"fused": {"fused": True}, "foreach": {"foreach": True}, "plain": {"foreach": False}}
    for name in (impl,) if impl else ADAMW_IMPLS:
        try:
            return torch.optim.AdamW(groups, **flags[name], **kwargs)
        except (RuntimeError, ValueError, TypeError):
            if impl or name == "plain":
                raise
    raise AssertionError("unreachable")  # plain always constructs or raises above


def adamw_impl(opt: torch.optim.Optimizer) -> str:
    """Which of ADAMW_IMPLS `opt` steps with (read from its first parameter group's fused / foreach flags)."""
    g = opt.param_groups[0]
    return "fused" if g.get("fused") else "foreach" if g.get("foreach") else "plain"


def set_adamw_impl(opt: torch.optim.Optimizer, impl: str) -> None:
    """Switch `opt` to implementation `impl` after load_state_dict, which copies the saved groups' fused / foreach
    flags (a checkpoint of a plain optimizer would otherwise resume plain). fused keeps each state['step'] as a
    float32 scalar on its parameter's device (torch's note [special device hosting for step]); the others on the
    CPU. Raises ValueError for an impl not in ADAMW_IMPLS."""
    if impl not in ADAMW_IMPLS:
        raise ValueError(f"AdamW implementation must be one of {', '.join(ADAMW_IMPLS)} (got {impl!r})")
    for g in opt.param_groups:
        g["fused"], g["foreach"] = (True, None) if impl == "fused" else (None, impl == "foreach")
        for p in g["params"]:
            st = opt.state.get(p)
            if st and torch.is_tensor(st.get("step")):
                st["step"] = st["step"].to(dtype=torch.float32,
                                           device=p.device if impl == "fused" or g.get("capturable") else "cpu")


def make_optimizer(policy, value_head: ValueHead | None, train: TrainConfig, impl: str | None = None
                   ) -> torch.optim.AdamW:
    """AdamW without weight decay: the policy's trainable weights at train.lr, then the value head's (a critic) at
    train.value_lr; checkpoint.apply_training_state sets the lrs in this order. The fastest implementation this torch
    has for them (`adamw`; `impl` forces one): fused on CPU and CUDA with torch 2.13, the same update up to float
    rounding.

    Raises: ValueError when a weight to train is not float32 (an optimizer updating bf16/fp16 weights in place loses
    small updates: load the model in precision.TRAINING_WEIGHTS and autocast the forward, precision.training_precision)."""
    groups = [{"params": [p for p in policy.parameters() if p.requires_grad], "lr": train.lr}]
    if value_head is not None:
        groups.append({"params": list(value_head.parameters()), "lr": train.value_lr})
    low = sorted({str(p.dtype) for g in groups for p in g["params"] if p.dtype != torch.float32})
    if low:
        raise ValueError(f"the weights to train are {', '.join(low)}, not float32: AdamW would update them in place "
                         "and lose most small updates (bf16 keeps 8 significant bits); load the model in float32 "
                         "and run bf16 as autocast (precision.training_precision)")
    return adamw(groups, impl, weight_decay=0.0)
