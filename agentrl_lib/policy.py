"""The policy as a token model: log-probs, values and entropy at the policy tokens of a batch of trajectories, and
the critic's value head.

Introduced in notebooks/00_quickstart.md §4.
"""
from __future__ import annotations

import torch
from torch import nn

from .losses import entropy_from_logits
from .models import CACHE_ARG, base_model


class ValueHead(nn.Module):
    """V(s_t) = w·h_t + b on the backbone's last hidden state h_t (float32). Initialised to output 0."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.linear = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        with torch.autocast(hidden.device.type, enabled=False):  # fp32 values under train.mixed_precision bf16 too
            return self.linear(hidden.float()).squeeze(-1)


def prompt_groups(input_ids: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
    """Rows that share their first prompt: identical tokens before each row's first policy token. The episodes of one
    group (the same game, G times) share it; so do repeated games. Rows without policy tokens stand alone.

    Args: input_ids (B, T) long; mask (B, T) 0/1 policy tokens.
    Returns: lists of row indices, every row exactly once, in order of first appearance.
    """
    first = mask.float().argmax(1).tolist()  # the first policy token of each row (0: none)
    has = mask.sum(1).gt(0).tolist()
    groups: dict[tuple, list[int]] = {}
    for i, ids in enumerate(input_ids.tolist()):
        key = tuple(ids[:first[i]]) if has[i] else ("row", i)
        groups.setdefault(key, []).append(i)
    return list(groups.values())


def common_prefix_length(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> int:
    """The longest prefix that every row of a batch shares, at most the shortest row's length − 1 (every row keeps at
    least one token of its own). input_ids, attention_mask: (n, T) long, right-padded."""
    n = int(attention_mask.sum(1).min()) - 1
    if n <= 0 or input_ids.shape[0] < 2:
        return max(n, 0)
    same = (input_ids[:, :n] == input_ids[:1, :n]).all(0)
    return n if bool(same.all()) else int((~same).nonzero()[0])


def hidden_states(backbone, input_ids: torch.Tensor, attention_mask: torch.Tensor, mask: torch.Tensor,
                  share_prefix: bool = True, min_prefix: int = 16) -> torch.Tensor:
    """The backbone's last hidden states (B, T, H) of a right-padded batch. With `share_prefix`, the rows that share
    their first prompt (prompt_groups) forward their common prefix (common_prefix_length, P tokens) once: its KV cache
    is repeated for the n rows and each row's remaining tokens attend to it (positions P, P+1, ...). The same
    numbers as one forward over the batch up to float rounding (tests/test_policy.py), gradients included; the work
    falls from n·T to P + n·(T − P) token positions — the episodes of a group share their system prompt and first
    observation, about 60% of a cooking episode.

    Not shared: a group of one row, a prefix under `min_prefix` tokens, or a backbone that trains with gradient
    checkpointing (transformers turns the KV cache off there). Source: the KV-cache prefix sharing of vLLM's
    automatic prefix caching and SGLang's RadixAttention, applied to a training forward.
    """
    B, T = input_ids.shape
    checkpointing = getattr(backbone, "gradient_checkpointing", False) and backbone.training
    if not share_prefix or checkpointing:
        return backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    parts, order, alone = [], [], []
    for rows in prompt_groups(input_ids, mask):
        r = torch.tensor(rows, device=input_ids.device)
        ids, am = input_ids[r], attention_mask[r]
        P = common_prefix_length(ids, am)
        if len(rows) < 2 or P < min_prefix:
            alone += rows
            continue
        n = len(rows)
        pre = backbone(input_ids=ids[:1, :P], use_cache=True)  # the shared prefix, once
        cache = getattr(pre, CACHE_ARG)
        cache.batch_repeat_interleave(n)  # its keys and values for each of the n rows (differentiable)
        positions = torch.arange(P, T, device=ids.device).expand(n, T - P)
        rest = backbone(input_ids=ids[:, P:], attention_mask=am, position_ids=positions, use_cache=True,
                        **{CACHE_ARG: cache}).last_hidden_state  # (n, T - P, H)
        parts.append(torch.cat([pre.last_hidden_state.expand(n, -1, -1), rest], dim=1))
        order += rows
    if alone:  # the rows that share nothing: one ordinary forward
        r = torch.tensor(alone, device=input_ids.device)
        parts.append(backbone(input_ids=input_ids[r], attention_mask=attention_mask[r]).last_hidden_state)
        order += alone
    if order == list(range(B)):
        return torch.cat(parts)
    return torch.cat(parts)[torch.argsort(torch.tensor(order, device=input_ids.device))]


def token_forward(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, mask: torch.Tensor,
                  temperature: float = 1.0, value_head: ValueHead | None = None,
                  with_entropy: bool = False, share_prefix: bool = True) -> dict[str, torch.Tensor]:
    """Log-probs (and values, entropy) of the policy tokens of a batch, computing the output layer only there.

    Token t is predicted from the hidden state at t − 1, so logits are taken at positions t − 1 for every t with
    mask[t] = 1; the 49k-wide output layer runs on policy tokens only (a large share of a full forward on CPU).

    Args:
        input_ids, attention_mask: (B, T) long, right-padded.  mask: (B, T) 0/1, policy tokens.
        temperature: logits are divided by it (the rollout's sampling temperature, so π_old and π_θ match).
        share_prefix: rows that share their first prompt forward it once (hidden_states; train.share_prefix).
    Returns:
        dict with 'logprobs' (B, T) float32; 'values' (B, T) if value_head; 'entropy' (B, T) if with_entropy.
        All are 0 where mask is 0.
    """
    base = base_model(model)
    backbone = base.get_decoder() if hasattr(base, "get_decoder") else base.model
    hidden = hidden_states(backbone, input_ids, attention_mask, mask, share_prefix)  # (B, T, H)
    sel = mask[:, 1:].bool()  # (B, T-1): position t-1 predicts token t
    h = hidden[:, :-1][sel]  # (N, H)
    logits = base.get_output_embeddings()(h).float() / max(temperature, 1e-6)  # (N, V)
    targets = input_ids[:, 1:][sel]
    logp = torch.log_softmax(logits, dim=-1).gather(-1, targets[:, None]).squeeze(-1)  # (N,)
    B, T = input_ids.shape
    zeros = torch.zeros(B, T - 1, device=input_ids.device)

    def scatter(x: torch.Tensor) -> torch.Tensor:
        return torch.cat([torch.zeros(B, 1, device=input_ids.device), zeros.masked_scatter(sel, x)], dim=1)

    out = {"logprobs": scatter(logp)}
    if value_head is not None:
        out["values"] = scatter(value_head(h))
    if with_entropy:
        out["entropy"] = scatter(entropy_from_logits(logits))
    return out


def values_at(value_head: ValueHead, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """V at the policy tokens from the hidden states that sampled them: the 'values' of token_forward (which reads
    position t − 1's hidden state for token t) without a forward, when the rollout kept those states.

    Args: value_head; hidden (B, T, H) float32, at each policy token t the last hidden state that sampled it (the
        rollout's, collate's behaviour_hidden); mask (B, T) 0/1 policy tokens.
    Returns: (B, T) float32, 0 where mask is 0.
    """
    sel = mask.bool()
    return torch.zeros(mask.shape, device=mask.device).masked_scatter(sel, value_head(hidden[sel]))


class TokenModel(nn.Module):
    """The policy and its value head as one module whose forward is token_forward: what data-parallel training wraps
    in DistributedDataParallel (distributed.DataParallel.prepare). DDP all-reduces the gradients of a backward only
    after a forward through its wrapper, and token_forward calls the backbone and the output layer directly, so the
    trainer's update forward goes through this module (in a single process, distributed.SingleProcess.prepare returns
    it as it is).

    Args: policy (a causal LM, LoRA or not), value_head (ValueHead or None): kept as they are, not copied.
    """

    def __init__(self, policy, value_head: ValueHead | None = None):
        super().__init__()
        self.policy, self.value_head = policy, value_head

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, mask: torch.Tensor,
                temperature: float = 1.0, with_entropy: bool = False, share_prefix: bool = True
                ) -> dict[str, torch.Tensor]:
        return token_forward(self.policy, input_ids, attention_mask, mask, temperature, self.value_head, with_entropy,
                             share_prefix)
