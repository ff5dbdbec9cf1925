"""A decode loop that steps only the rows still writing their reply (`model.generator: hf-live`).

`HFGenerator` calls transformers' `generate`, which steps every row of the batch until the turn's longest reply
stops: at the findings' RL start 82% of the decoded row-steps went to rows that had already ended their reply, and a
decode step over 16 rows costs about 4× one over 1 row (book/benchmarks.md, "Where the rollout's time goes").
`LiveRowsGenerator` keeps HFGenerator's state (padded ids, attention mask, KV cache of everything encoded) and its
`start` / `keep` / `append`, and replaces `generate` with its own loop:

1. prefill every row's uncached positions (the new environment turn) in one forward;
2. each step, sample one token for each live row from softmax(logits / T) (argmax at T = 0), forward the live rows'
   new tokens, and drop from the working cache the rows whose token was eos (their eos is forwarded first, as
   `generate` does);
3. at the end of the turn, rebuild the batch's cache: every row's keys and values, zero and masked after its reply,
   up to the turn's last token (not included, as with `generate`: the next turn's prefill encodes it).

The distribution sampled is the same as HFGenerator's (plain softmax(logits / T), no warper); the tokens differ
from `generate`'s for the same seed, since the random draws are made over other rows (greedy decoding picks the same
tokens up to float rounding). tests/test_generation_live.py checks it against `generate` (greedy) and every returned
log-prob against a plain forward of the whole conversation, with negative controls.
"""
from __future__ import annotations

import torch

from .generation import HFGenerator
from .generation_protocol import TurnSample
from .models import CACHE_ARG


def _layers(cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(keys, values) of each layer of a transformers DynamicCache, each (B, kv_heads, T, head_dim)."""
    return [(layer.keys, layer.values) for layer in cache.layers]


def _cache_of(layers: list[tuple[torch.Tensor, torch.Tensor]]):
    """A DynamicCache holding these (keys, values) per layer."""
    from transformers import DynamicCache

    cache = DynamicCache()
    for i, (k, v) in enumerate(layers):
        cache.update(k, v, i)
    return cache


class LiveRowsGenerator(HFGenerator):
    """HFGenerator whose `generate` decodes only the rows still writing (module docstring). Args as HFGenerator."""

    @torch.no_grad()
    def generate(self, max_new_tokens: int, temperature: float) -> TurnSample:
        """One turn for every row: up to `max_new_tokens` tokens each, until eos.

        Args:
            temperature: 0 = greedy; otherwise sampling from softmax(logits / T) with torch's global generator.
        Returns:
            TurnSample: each row's ids (up to and incl. eos), the log-probs of the distribution sampled (T = 1 when
            greedy), truncated (no eos within max_new_tokens) and sampler_gap 0.0 (no warper: the sampled
            distribution is softmax(logits / T) by construction).
        """
        from transformers import DynamicCache

        B, width = self.ids.shape
        cache = self.cache if self.cache is not None else DynamicCache()
        past = cache.get_seq_length()
        positions = (self.attn.cumsum(-1) - 1).clamp(min=0)  # position ids as generate derives them
        out = self.model(input_ids=self.ids[:, past:], attention_mask=self.attn, position_ids=positions[:, past:],
                         use_cache=True, logits_to_keep=1, **{CACHE_ARG: cache})
        logits = out.logits[:, -1].float()  # (B, V): the next token of every row
        live = torch.arange(B, device=self.device)  # batch rows of the working cache, in order
        attn = self.attn  # (live, columns) mask of the working cache + the token about to be forwarded
        next_pos = self.attn.sum(-1)  # (B,) position id of each row's next token
        ids = [[] for _ in range(B)]
        lps = [[] for _ in range(B)]
        ended: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}  # row → its keys / values at its end
        for step in range(max_new_tokens):
            logp = torch.log_softmax(logits / temperature if temperature > 0 else logits, dim=-1)  # (live, V)
            tok = (torch.multinomial(logp.exp(), 1).squeeze(1) if temperature > 0 else logp.argmax(-1))  # (live,)
            chosen = logp.gather(-1, tok.unsqueeze(-1)).squeeze(-1)
            for r, t, lp in zip(live.tolist(), tok.tolist(), chosen.tolist()):
                ids[r].append(t)
                lps[r].append(lp)
            if step == max_new_tokens - 1:
                break  # the turn's last tokens are not forwarded (as with generate): the next prefill encodes them
            done = tok == self.eos_id
            attn = torch.cat([attn, torch.ones_like(attn[:, :1])], dim=1)
            out = self.model(input_ids=tok.unsqueeze(1), attention_mask=attn,
                             position_ids=next_pos[live].unsqueeze(1), use_cache=True, **{CACHE_ARG: cache})
            next_pos[live] += 1
            if done.any():  # these rows' eos is in the cache now: keep their keys / values, drop them
                for i in done.nonzero().squeeze(1).tolist():
                    ended[int(live[i])] = [(k[i].clone(), v[i].clone()) for k, v in _layers(cache)]
                keep = (~done).nonzero().squeeze(1)
                live, attn = live[keep], attn[keep]
                if keep.numel() == 0:
                    break
                cache.batch_select_indices(keep)
                logits = out.logits[keep, -1].float()
            else:
                logits = out.logits[:, -1].float()
        for i, r in enumerate(live.tolist()):  # rows that reached max_new_tokens
            ended[r] = [(k[i], v[i]) for k, v in _layers(cache)]
        steps = max(len(x) for x in ids)
        length = width + steps - 1  # cache columns after the turn: everything but the turn's last column
        rebuilt = []
        for layer, (k0, v0) in enumerate(ended[0]):
            k = k0.new_zeros((B, k0.shape[0], length, k0.shape[2]))
            v = v0.new_zeros((B, v0.shape[0], length, v0.shape[2]))
            for r in range(B):
                kr, vr = ended[r][layer]
                n = min(kr.shape[1], length)
                k[r, :, :n], v[r, :, :n] = kr[:, :n], vr[:, :n]
            rebuilt.append((k, v))
        self.cache = _cache_of(rebuilt)
        new = torch.full((B, steps), self.pad_id, dtype=torch.long, device=self.device)
        new_attn = torch.zeros_like(new)
        for r, row in enumerate(ids):
            new[r, :len(row)] = torch.tensor(row, dtype=torch.long)
            new_attn[r, :len(row)] = 1
        self.ids, self.attn = torch.cat([self.ids, new], dim=1), torch.cat([self.attn, new_attn], dim=1)
        truncated = [self.eos_id not in row for row in ids]
        return TurnSample(ids, lps, truncated, 0.0)
