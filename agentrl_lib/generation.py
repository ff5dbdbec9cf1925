"""Generation backends: how the policy samples one turn for every live episode of a rollout.

The protocol (`Generator`, with its TurnSample, in generation_protocol.py) that `rollout.rollout` drives, once per
rollout:

    gen.start(contexts)                   token ids of each episode so far (system + first observation + header)
    sample = gen.generate(n, T)           one reply per live row → TurnSample (ids up to and incl. eos, log-probs)
    gen.keep(rows)                        only these rows (indices into the live rows) go on
    gen.append(blocks)                    each kept row's next environment turn, as token ids
    ... generate / keep / append until every episode ends ...
    gen.sync(policy)                      after each update (Trainer.step): the next rollout samples the new weights

A backend keeps whatever state it needs between calls (HF: padded ids and the KV cache) and exposes eos_id (the token
that ends a reply), pad_id and context_limit (tokens a row may hold). The log-probs it returns must be those of the
distribution it sampled. A new backend is one class implementing these five methods plus one GENERATORS line; the
vLLM backend (generation_vllm.py) is registered by a factory that imports vLLM only when it is used.

Introduced in notebooks/00_quickstart.md §2.
"""
from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache, DynamicLayer

from .config_values import ConfigError
from .generation_protocol import Generator, TurnSample
from .models import CACHE_ARG, base_model

__all__ = ["GENERATORS", "Generator", "HFGenerator", "LiveRowsGenerator", "TurnSample", "check_generator",
           "distinct_rows", "get_generator", "sampling_config"]


def _left_pad(seqs: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, width - len(s):] = torch.tensor(s, dtype=torch.long)
        attn[i, width - len(s):] = 1
    return ids.to(device), attn.to(device)


def distinct_rows(contexts: list[list[int]]) -> tuple[list[int], list[int]]:
    """The distinct contexts of a batch: (firsts, rows_of), where firsts[k] is the row where the k-th distinct
    context first appears and rows_of[r] = k for every row r holding it: contexts[r] == contexts[firsts[rows_of[r]]].

    Example: [[1, 2], [3], [1, 2]] → ([0, 1], [0, 1, 0]).
    """
    seen: dict[tuple[int, ...], int] = {}
    firsts, rows_of = [], []
    for r, c in enumerate(contexts):
        k = seen.setdefault(tuple(c), len(firsts))
        if k == len(firsts):
            firsts.append(r)
        rows_of.append(k)
    return firsts, rows_of


def sampling_config(temperature: float, max_new_tokens: int, eos_id: int, pad_id: int):
    """A complete `GenerationConfig` whose sampling distribution is exactly softmax(logits / T), or greedy at T = 0.

    transformers fills every field left at None from the model's own generation config and then from its global
    defaults, which include top_k = 50 (../shared/NOTES.md): a `do_sample=True` call that does not set top_k samples
    from the top 50 tokens only, while an RL loss that uses log softmax(logits / T) assumes the full distribution. So
    every field that adds a logits processor is set here to its neutral value, independent of how the model was
    loaded: top_k 0, top_p 1, min_p / typical_p / epsilon / eta cut-offs off, no repetition penalty, no n-gram ban,
    no suppressed or forced tokens.

    Args:
        temperature: > 0 samples from softmax(logits / T); 0 = greedy.
    Returns: transformers.GenerationConfig.
    """
    from transformers import GenerationConfig

    sample = temperature > 0
    warpers = dict(temperature=temperature, top_k=0, top_p=1.0, min_p=None, typical_p=1.0, epsilon_cutoff=0.0,
                   eta_cutoff=0.0, top_h=None) if sample else {}  # warpers only run when sampling
    return GenerationConfig(
        max_new_tokens=max_new_tokens, do_sample=sample, **warpers,
        repetition_penalty=1.0, no_repeat_ngram_size=0, encoder_repetition_penalty=1.0,
        bad_words_ids=None, suppress_tokens=None, begin_suppress_tokens=None, forced_bos_token_id=None,
        forced_eos_token_id=None, min_length=0, min_new_tokens=None, renormalize_logits=False,
        num_beams=1, num_return_sequences=1, eos_token_id=eos_id, pad_token_id=pad_id,
        output_logits=True, output_scores=True, return_dict_in_generate=True, use_cache=True)


class GrowingLayer(DynamicLayer):
    """A DynamicLayer that appends in place: keys / values (B, kv_heads, T, head_dim) are views into a buffer with
    room to spare (256 positions, or half the length if more). See GrowingKVCache."""

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
            self.buf_k = self.buf_v = None
        n, m = self.get_seq_length(), key_states.shape[-2]
        if (self.buf_k is None or n + m > self.buf_k.shape[-2] or self.buf_k.shape[:2] != key_states.shape[:2]
                or (n and self.keys.data_ptr() != self.buf_k.data_ptr())):  # full, or keys replaced (rows selected)
            shape = (*key_states.shape[:2], n + m + max(256, (n + m) // 2), key_states.shape[-1])
            self.buf_k, self.buf_v = key_states.new_empty(shape), value_states.new_empty(shape)
            if n:
                self.buf_k[..., :n, :], self.buf_v[..., :n, :] = self.keys, self.values
        self.buf_k[..., n:n + m, :], self.buf_v[..., n:n + m, :] = key_states, value_states
        self.keys, self.values = self.buf_k[..., :n + m, :], self.buf_v[..., :n + m, :]
        return self.keys, self.values


class GrowingKVCache(DynamicCache):
    """A transformers DynamicCache whose layers append in place (`GrowingLayer`); the generators' default.

    DynamicCache appends a decoded token by `torch.cat` of the whole layer: every decode step copies the entire KV
    cache (at 16 rows × 650 positions: 30 layers × 2 copies of 8 MB a step). Here each step writes only its new
    positions into a buffer with room to spare; the buffer is re-allocated (one copy) when it is full or when its
    rows were replaced (`batch_select_indices`, after rows leave). Exact: the same keys and values in the same
    attention, only stored elsewhere (tests/test_generation_live.py compares both generators' tokens and log-probs
    with DynamicCache's, with a negative control). A small gain on a CPU, where the decode step is bound by reading
    the weights: 1.15× on a 16-row decode step at 656 positions, 1.09-1.16× on a cooking rollout (book/benchmarks.md,
    benchmarks/bench_rollout_profile.py and bench_rollout.py). Shapes as DynamicCache: keys / values
    (B, kv_heads, T, head_dim)."""

    def __init__(self):
        Cache.__init__(self, layer_class_to_replicate=GrowingLayer)


def new_cache(grow: bool = True):
    """An empty KV cache for `generate` or a forward: a GrowingKVCache, or with grow=False transformers' DynamicCache
    (appends by concatenation)."""
    return GrowingKVCache() if grow else DynamicCache()


class HFGenerator:
    """Generation with a transformers model's own `generate`, the live episodes as one padded batch plus the KV cache
    of everything already encoded.

    Between turns each row gets new tokens (its environment turn) of a different length; they are appended as a
    block left-padded *within the block*, so rows keep padding holes. The attention mask is 0 on every hole (left
    padding, post-eos padding of rows that finished early, in-block padding), and `generate` derives position ids from
    the cumulative mask, so each row sees exactly the positions of its contiguous trajectory. Only new tokens are
    encoded each turn instead of the whole history.

    The episodes of a group start from the same context (system prompt + the game's first observation, ~280 tokens
    on the cooking games), so `start` encodes each distinct context once and copies its KV cache to the group's rows
    (`share_prefix`, on by default): at group size G the first turn's prefill processes 1/G of the positions. Exact
    up to float rounding (the same attention over the same keys; the first generate call then encodes only each
    row's last context token); tests/test_generation.py compares it with the plain prefill.

    Args:
        model: a causal LM (the policy itself: `sync` has nothing to copy).
        tokenizer: its tokenizer; eos_id is its eos token (the end of an assistant turn), pad_id its pad token.
        share_prefix: encode each distinct starting context once per `start` (False: every row's own prefill, as
            before; benchmarks/bench_rollout.py measures both).
        grow_cache: keep the KV cache in a GrowingKVCache, which appends in place (False: transformers'
            DynamicCache, which copies the whole cache at every decoded token; both exact).
    Attributes: ids, attn (B, width) long — the live rows' tokens and attention mask; cache — the KV cache;
        shared_positions — context positions `start` did not have to encode (sum over rows; 0 without repeats).
    """

    def __init__(self, model, tokenizer, share_prefix: bool = True, grow_cache: bool = True):
        self.model = model
        self.eos_id = tokenizer.convert_tokens_to_ids(tokenizer.eos_token)
        self.pad_id = tokenizer.pad_token_id
        self.context_limit = getattr(model.config, "max_position_embeddings", 8192) or 8192
        self.share_prefix, self.grow_cache = share_prefix, grow_cache
        self.ids = self.attn = self.cache = None
        self.shared_positions = 0

    def start(self, contexts: list[list[int]]) -> None:
        """A new batch: one row per context (token ids), left-padded. With `share_prefix` and a context that
        several rows share, the cache holds every row's context but its last token, each distinct context encoded
        once (`_prefill_distinct`); otherwise the cache starts empty."""
        self.device = next(self.model.parameters()).device
        self.ids, self.attn = _left_pad(contexts, self.pad_id, self.device)
        self.cache = new_cache(self.grow_cache)
        self.shared_positions = 0
        if not self.share_prefix or self.ids.shape[1] < 2:
            return
        firsts, rows_of = distinct_rows(contexts)
        if len(firsts) < len(contexts):
            self.cache = self._prefill_distinct(firsts, rows_of)
            self.shared_positions = sum(len(c) - 1 for c in contexts) - sum(len(contexts[i]) - 1 for i in firsts)

    @torch.no_grad()
    def _prefill_distinct(self, firsts: list[int], rows_of: list[int]):
        """Encode ids[firsts, :-1] (the distinct contexts but their last token; left padding and position ids as
        `generate` makes them) into a new cache, then copy each distinct context's cache to its rows: row r gets the
        cache of firsts[rows_of[r]]. `generate` sees a cache one token shorter than ids and encodes that token."""
        idx = torch.tensor(firsts, dtype=torch.long, device=self.device)
        ids, attn = self.ids[idx, :-1], self.attn[idx, :-1]
        positions = (attn.cumsum(-1) - 1).masked_fill(attn == 0, 0)  # generate's position ids
        cache = new_cache(self.grow_cache)
        self.model(input_ids=ids, attention_mask=attn, position_ids=positions, use_cache=True, logits_to_keep=1,
                   **{CACHE_ARG: cache})
        cache.batch_select_indices(torch.tensor(rows_of, dtype=torch.long, device=self.device))
        return cache

    @torch.no_grad()
    def generate(self, max_new_tokens: int, temperature: float) -> TurnSample:
        """One batched `generate` call for all live rows, continuing from the KV cache; the sampled tokens, their
        attention mask (0 after each row's eos) and the new cache are appended to the batch.

        Args:
            temperature: 0 = greedy; otherwise plain sampling from softmax(logits / T) (`sampling_config`: no top-k,
                top-p or other warper), so the returned log-probs are the exact behaviour-policy log-probs.
        Returns:
            TurnSample. Log-probs are those of the distribution sampled (T = 1 when greedy), read from the processed
            scores; `sampler_gap` compares them with softmax(raw logits / T).
        """
        eos_id, sample = self.eos_id, temperature > 0
        width = self.ids.shape[1]
        gen_cfg = sampling_config(temperature, max_new_tokens, eos_id, self.pad_id)
        out = self.model.generate(input_ids=self.ids, attention_mask=self.attn, generation_config=gen_cfg,
                                  **{CACHE_ARG: self.cache})
        new = out.sequences[:, width:]  # (B, n_steps)
        scores = torch.stack(out.scores, dim=1).float()  # (B, n_steps, V): what the next token was drawn from
        token_logp = torch.log_softmax(scores, dim=-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)  # (B, n_steps)
        raw = torch.stack(out.logits, dim=1).float() / (temperature if sample else 1.0)
        raw_logp = torch.log_softmax(raw, dim=-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
        ids, lps, truncated, gap = [], [], [], 0.0
        new_attn = torch.zeros_like(new)
        for r, (row, lp) in enumerate(zip(new.tolist(), token_logp.tolist())):
            n = row.index(eos_id) + 1 if eos_id in row else len(row)
            ids.append(row[:n])
            lps.append(lp[:n])
            truncated.append(eos_id not in row[:n])
            new_attn[r, :n] = 1
            if n:
                gap = max(gap, (token_logp[r, :n] - raw_logp[r, :n]).abs().max().item())
        self.ids, self.attn = out.sequences, torch.cat([self.attn, new_attn], dim=1)
        self.cache = getattr(out, CACHE_ARG)
        return TurnSample(ids, lps, truncated, gap)

    def keep(self, rows: list[int]) -> None:
        """Keep only `rows` (indices into the current rows, in order); the cache follows."""
        if rows == list(range(self.ids.shape[0])):
            return  # every row stays: no copy of the cache
        idx = torch.tensor(rows, dtype=torch.long, device=self.device)
        self.ids, self.attn = self.ids[idx], self.attn[idx]
        if self.cache is not None:
            self.cache.batch_select_indices(idx)

    def append(self, blocks: list[list[int]]) -> None:
        """Append one block of token ids to each row (left-padded within the block); encoded by the next generate."""
        ids, attn = _left_pad(blocks, self.pad_id, self.device)
        self.ids = torch.cat([self.ids, ids], dim=1)
        self.attn = torch.cat([self.attn, attn], dim=1)

    def sync(self, policy) -> None:
        """Nothing to do: this backend generates with the policy object itself."""


def _layers(cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(keys, values) of each layer of a transformers DynamicCache, each (B, kv_heads, T, head_dim)."""
    return [(layer.keys, layer.values) for layer in cache.layers]


def _cache_of(layers: list[tuple[torch.Tensor, torch.Tensor]], grow: bool):
    """A new_cache(grow) holding these (keys, values) per layer."""
    cache = new_cache(grow)
    for i, (k, v) in enumerate(layers):
        cache.update(k, v, i)
    return cache


class LiveRowsGenerator(HFGenerator):
    """A decode loop that steps only the rows still writing their reply (`model.generator: hf-live`, the default),
    drawing the very tokens transformers' `generate` draws.

    `HFGenerator` calls transformers' `generate`, which steps every row of the batch until the turn's longest reply
    stops: at the findings' RL start 82% of the decoded row-steps went to rows that had already ended their reply,
    and a decode step over 16 rows costs about 4× one over 1 row (book/benchmarks.md, "Where the rollout's time
    goes"). LiveRowsGenerator keeps HFGenerator's state (padded ids, attention mask, KV cache of everything encoded)
    and its `start` / `keep` / `append`, and replaces `generate` with its own loop:

    1. prefill every row's uncached positions (the new environment turn) in one forward;
    2. each step, pick one token for each live row and forward only the rows of the working cache (live rows, and
       ended rows not yet compacted away, which are fed a masked pad token);
    3. compact lazily: the rows that ended leave the working cache (one copy of the rows that stay) only once they
       are at least `compact_at` of it (default half), so a turn makes a few copies instead of one per ending row;
    4. at the end of the turn, the batch's cache is the working cache cut to the turn's last token (not included,
       as with `generate`: the next turn's prefill encodes it), or, if rows left it, rebuilt from their saved keys and
       values. Columns after a row's eos are masked (attention 0) either way: zero where the row left the cache, the
       masked pad tokens' keys where it stayed in it (as `generate` leaves them).

    Identical draws. For one sample per row, torch.multinomial(p, 1) is argmax(p / E) with E ~ Exp(1) drawn by
    `torch.empty_like(p).exponential_(1)` (ATen's multinomial fast path, the exponential form of the Gumbel-max trick:
    Gumbel 1954; Maddison et al. 2014). `generate` draws E for every row of its batch at every step, finished rows
    included; this loop draws the same (B, V) tensor at every step and uses the live rows' slices, so with the same
    seed it samples `generate`'s tokens wherever the two forwards agree to float rounding (a flip needs two tokens'
    p / E within rounding: tests/test_generation_live.py checks token-for-token equality over seeds, temperatures and
    lengths; benchmarks/bench_sweep_step.py's `exact_check` on a real step). Greedy (T = 0) is argmax of the logits.
    The distribution is plain softmax(logits / T) computed as `generate` computes it (float32 logits / T, softmax).

    Args as HFGenerator, and:
        compact_at: fraction of the working cache's rows that must have ended before they leave it (0 = at once, as
            the first version did; 1 = never during a turn: every row is stepped, as `generate` does).
    """

    def __init__(self, model, tokenizer, share_prefix: bool = True, grow_cache: bool = True, compact_at: float = 0.5):
        super().__init__(model, tokenizer, share_prefix=share_prefix, grow_cache=grow_cache)
        if not 0.0 <= compact_at <= 1.0:
            raise ValueError(f"compact_at must be in [0, 1] (got {compact_at})")
        self.compact_at = compact_at

    @staticmethod
    def draw(probs: torch.Tensor, rows: torch.Tensor, batch: int) -> torch.Tensor:
        """One token per live row, the draw `generate`'s torch.multinomial(P, 1) makes for these rows of its batch.

        Args:
            probs: (L, V) float32 — softmax(logits / T) of the live rows.
            rows: (L,) long — each live row's row in the batch `generate` would step (all `batch` rows).
            batch: B, the rows `generate` steps (every row of the turn, ended ones included).
        Returns: (L,) long token ids: argmax(probs / E[rows]) with E (B, V) ~ Exp(1) drawn from torch's global
            generator exactly as ATen's multinomial draws it (one `exponential_` over a (B, V) float32 tensor).
        """
        noise = torch.empty((batch, probs.shape[-1]), dtype=probs.dtype, device=probs.device).exponential_(1)
        return (probs / noise[rows]).argmax(-1)

    @torch.no_grad()
    def generate(self, max_new_tokens: int, temperature: float) -> TurnSample:
        """One turn for every row: up to `max_new_tokens` tokens each, until eos.

        Args:
            temperature: 0 = greedy; otherwise sampling from softmax(logits / T) with torch's global generator,
                consuming it exactly as `generate` does (one (B, V) exponential draw per decode step).
        Returns:
            TurnSample: each row's ids (up to and incl. eos), the log-probs of the distribution sampled (T = 1 when
            greedy), truncated (no eos within max_new_tokens), sampler_gap 0.0 (no warper: the sampled
            distribution is softmax(logits / T) by construction) and hidden: each row's (n, H) float32 last hidden
            states that sampled its ids (for V_old without a second forward).
        """
        B, width = self.ids.shape
        sample, cache, dev = temperature > 0, self.cache, self.device
        base = base_model(self.model)  # the backbone and output layer, called as the causal LM calls them, so that
        backbone, head = base.get_decoder(), base.get_output_embeddings()  # the hidden state that samples is kept
        past = cache.get_seq_length()
        positions = (self.attn.cumsum(-1) - 1).clamp(min=0)  # position ids as generate derives them
        h = backbone(input_ids=self.ids[:, past:], attention_mask=self.attn, position_ids=positions[:, past:],
                     use_cache=True, **{CACHE_ARG: cache}).last_hidden_state[:, -1]  # (W, H)
        logits = head(h).float()  # (W, V): the next token of every row of the working cache
        work = torch.arange(B, device=dev)  # (W,) the batch row of each working-cache row
        alive = torch.ones(B, dtype=torch.bool, device=dev)  # (W,) still writing its reply
        attn = self.attn  # (W, columns) mask of the working cache + the token about to be forwarded
        next_pos = self.attn.sum(-1)  # (B,) position id of each row's next token
        ids: list[list[int]] = [[] for _ in range(B)]
        lps: list[list[float]] = [[] for _ in range(B)]
        hid: list[list[torch.Tensor]] = [[] for _ in range(B)]  # (H,) hidden state that sampled each id
        saved: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}  # row that left the cache → its keys / values
        for step in range(max_new_tokens):
            live = alive.nonzero().squeeze(1)  # working-cache rows still writing
            scores = logits[live] / temperature if sample else logits[live]  # (L, V) generate's processed scores
            tok = self.draw(torch.softmax(scores, dim=-1), work[live], B) if sample else scores.argmax(-1)  # (L,)
            chosen = torch.log_softmax(scores, dim=-1).gather(-1, tok.unsqueeze(-1)).squeeze(-1)
            for r, t, lp, hr in zip(work[live].tolist(), tok.tolist(), chosen.tolist(), h[live].float()):
                ids[r].append(t)
                lps[r].append(lp)
                hid[r].append(hr)
            if step == max_new_tokens - 1:
                break  # the turn's last tokens are not forwarded (as with generate): the next prefill encodes them
            feed = torch.full((len(work),), self.pad_id, dtype=torch.long, device=dev)
            feed[live] = tok
            attn = torch.cat([attn, alive.long().unsqueeze(1)], dim=1)  # ended rows: a masked pad column
            h = backbone(input_ids=feed.unsqueeze(1), attention_mask=attn, position_ids=next_pos[work].unsqueeze(1),
                         use_cache=True, **{CACHE_ARG: cache}).last_hidden_state[:, -1]  # (W, H)
            next_pos[work[live]] += 1
            alive[live[tok == self.eos_id]] = False  # their eos is in the cache now
            logits = head(h).float()
            if not alive.any():
                break
            ended = (~alive).nonzero().squeeze(1)
            if len(ended) and len(ended) >= self.compact_at * len(work):  # compaction: ended rows leave
                for i in ended.tolist():
                    saved[int(work[i])] = [(k[i].clone(), v[i].clone()) for k, v in _layers(cache)]
                keep = alive.nonzero().squeeze(1)
                cache.batch_select_indices(keep)
                work, alive, attn, logits, h = work[keep], alive[keep], attn[keep], logits[keep], h[keep]
        steps = max(len(x) for x in ids)
        length = width + steps - 1  # cache columns after the turn: everything but the turn's last column
        if not saved:  # every row is still in the working cache, in batch order
            cache.crop(length - cache.get_seq_length())  # this transformers' crop: minus the columns to remove
            self.cache = cache
        else:
            for i, r in enumerate(work.tolist()):
                saved[r] = [(k[i], v[i]) for k, v in _layers(cache)]
            rebuilt = []
            for layer, (k0, v0) in enumerate(saved[0]):
                k = k0.new_zeros((B, k0.shape[0], length, k0.shape[2]))
                v = v0.new_zeros((B, v0.shape[0], length, v0.shape[2]))
                for r in range(B):
                    kr, vr = saved[r][layer]
                    n = min(kr.shape[1], length)
                    k[r, :, :n], v[r, :, :n] = kr[:, :n], vr[:, :n]
                rebuilt.append((k, v))
            self.cache = _cache_of(rebuilt, self.grow_cache)
        new = torch.full((B, steps), self.pad_id, dtype=torch.long, device=dev)
        new_attn = torch.zeros_like(new)
        for r, row in enumerate(ids):
            new[r, :len(row)] = torch.tensor(row, dtype=torch.long)
            new_attn[r, :len(row)] = 1
        self.ids, self.attn = torch.cat([self.ids, new], dim=1), torch.cat([self.attn, new_attn], dim=1)
        truncated = [self.eos_id not in row for row in ids]
        return TurnSample(ids, lps, truncated, 0.0, hidden=[torch.stack(x) for x in hid])


def vllm_generator(model, tokenizer):
    """`generation_vllm.VLLMGenerator(model, tokenizer)`, imported only now: `import agentrl_lib` never needs vLLM.

    Raises:
        ModuleNotFoundError: vLLM is not installed; the message is one line naming `make vllm`.
    """
    check_generator("vllm")
    from .generation_vllm import VLLMGenerator

    return VLLMGenerator(model, tokenizer)


def check_generator(name: str) -> None:
    """Fail early, with one line, when backend `name` needs a package this environment lacks (the CLI calls it before
    games or models load). Only 'vllm' has one: vLLM, found without importing it.

    Raises:
        ModuleNotFoundError: generation_vllm.INSTALL_HINT.
    """
    import importlib.util

    if name == "vllm" and importlib.util.find_spec("vllm") is None:
        from .generation_vllm import INSTALL_HINT  # this module imports no vLLM

        raise ModuleNotFoundError(INSTALL_HINT, name="vllm")


GENERATORS = {"hf": HFGenerator, "hf-live": LiveRowsGenerator, "vllm": vllm_generator}
"""Generation backends by name: each a class (or factory) built as cls(model, tokenizer) implementing `Generator`.
'hf-live' (LiveRowsGenerator, model.generator's default) decodes only the rows still writing, with `generate`'s own
draws, and keeps the hidden states that sampled; 'hf' (HFGenerator) is transformers' `generate` itself;
'vllm' is a factory that imports vLLM only when called (generation_vllm.py; optional, `make vllm`)."""


def get_generator(name: str):
    """GENERATORS[name], the backend class (or factory) built as cls(model, tokenizer); checked where it is looked
    up, so a backend added to GENERATORS after the config was built is found.

    Raises: ConfigError listing the registered names and how to add one."""
    if name not in GENERATORS:
        raise ConfigError(f"model.generator must be one of {sorted(GENERATORS)} (got {name!r}); register a new "
                          "backend in generation.GENERATORS")
    return GENERATORS[name]

