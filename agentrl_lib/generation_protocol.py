"""The generation protocol: `Generator`, what a backend implements (start / generate / keep / append / sync; see
generation.py's docstring), and `TurnSample`, what its `generate` returns. Its own module so that both backends import
it without importing each other: generation.py (HFGenerator, the GENERATORS registry) builds the vLLM backend of
generation_vllm.py on demand, which imports only this.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch


@dataclass
class TurnSample:
    """What one batched `generate` call returns per live row."""

    ids: list[list[int]]
    """Sampled ids of each row, up to and including the first end token."""
    logprobs: list[list[float]]
    """log π_behaviour of each sampled id: log-softmax of the scores the token was actually drawn from."""
    truncated: list[bool]
    """True for rows that hit max_new_tokens without an end token."""
    sampler_gap: float
    """max |log-softmax(processed scores) − log-softmax(raw logits / T)| over the sampled ids: 0 (to float error) when
    the sampler is plain softmax(logits / T); large when a hidden logits warper (top-k, top-p, penalties) is active."""
    hidden: list[torch.Tensor] | None = None
    """Per row, (len(ids[r]), H) float32: the backbone's last hidden state that sampled each id (the one the output
    layer read), from backends whose decode loop reads it (LiveRowsGenerator); None from the others. A critic's value
    head applied to it gives V_old without a second forward (trainer's `_old_forward`, algo.old_logprobs
    'behaviour')."""


class Generator(Protocol):
    """A generation backend (see the module docstring)."""

    eos_id: int
    """The token that ends an assistant turn (a reply stops after it)."""
    pad_id: int
    """The padding token of the rows."""
    context_limit: int
    """Tokens a row may hold (the model's context): the trainer and evaluate check the turn budget against it
    (config.check_context_room) before any rollout."""
    share_prefix: bool
    """The run's train.share_prefix, set by the trainer: encode each distinct first context of a batch once (the
    episodes of a group share their prompt). A backend that cannot share prefixes keeps the attribute and ignores
    it (vLLM's engine caches prefixes itself)."""

    def start(self, contexts: list[list[int]]) -> None: ...

    def generate(self, max_new_tokens: int, temperature: float) -> TurnSample: ...

    def keep(self, rows: list[int]) -> None: ...

    def append(self, blocks: list[list[int]]) -> None: ...

    def sync(self, policy) -> None: ...
