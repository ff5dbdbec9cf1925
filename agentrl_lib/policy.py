"""The policy as a token model: log-probs, values and entropy at the policy tokens of a batch of trajectories, and
the critic's value head.

Introduced in notebooks/00_quickstart.md §4.
"""
from __future__ import annotations

import torch
from torch import nn

from .losses import entropy_from_logits
from .models import base_model


class ValueHead(nn.Module):
    """V(s_t) = w·h_t + b on the backbone's last hidden state h_t (float32). Initialised to output 0."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.linear = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.linear(hidden.float()).squeeze(-1)


def token_forward(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, mask: torch.Tensor,
                  temperature: float = 1.0, value_head: ValueHead | None = None,
                  with_entropy: bool = False) -> dict[str, torch.Tensor]:
    """Log-probs (and values, entropy) of the policy tokens of a batch, computing the output layer only there.

    Token t is predicted from the hidden state at t − 1, so logits are taken at positions t − 1 for every t with
    mask[t] = 1; the 49k-wide output layer runs on policy tokens only (a large share of a full forward on CPU).

    Args:
        input_ids, attention_mask: (B, T) long, right-padded.  mask: (B, T) 0/1, policy tokens.
        temperature: logits are divided by it (the rollout's sampling temperature, so π_old and π_θ match).
    Returns:
        dict with 'logprobs' (B, T) float32; 'values' (B, T) if value_head; 'entropy' (B, T) if with_entropy.
        All are 0 where mask is 0.
    """
    base = base_model(model)
    backbone = base.get_decoder() if hasattr(base, "get_decoder") else base.model
    hidden = backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (B, T, H)
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
                temperature: float = 1.0, with_entropy: bool = False) -> dict[str, torch.Tensor]:
        return token_forward(self.policy, input_ids, attention_mask, mask, temperature, self.value_head, with_entropy)
