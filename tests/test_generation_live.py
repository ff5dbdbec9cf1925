"""generation.LiveRowsGenerator ('hf-live'): a decode loop over the rows still writing their reply, on a tiny
random Llama made peaky (its final norm scaled) so that replies end at different steps.

- Greedy, it picks the same tokens as HFGenerator (transformers `generate`) over several turns, with rows ending
  early, kept rows and appended blocks; log-probs within 1e-4.
- Sampling, every returned log-prob equals log softmax(logits / T) of a plain forward of that row's whole
  conversation (no cache, no padding): the rebuilt cache holds every row's keys and values at the right positions.
  Negative control: the same check on a cache with one real column zeroed fails.
- Sampling, it draws `generate`'s very tokens (the same (B, V) exponential noise each step, the live rows' slices)
  over seeds, temperatures, reply lengths and compaction settings. Negative control: the first version's draw
  (torch.multinomial over the live rows only) samples other tokens.
- The growing KV cache (generation.GrowingKVCache) gives the same tokens and log-probs as DynamicCache, for both
  generators. Negative control: a growing cache that forgets its past on re-allocation fails the plain-forward check.
"""
import dataclasses
import functools

import pytest
import torch

from agentrl_lib.generation import GENERATORS, GrowingLayer, HFGenerator, LiveRowsGenerator
from agentrl_lib.models import load_policy


@pytest.fixture(scope="module")
def peaky(tiny_model_dir):
    model, tok = load_policy(tiny_model_dir, device="cpu")
    with torch.no_grad():
        model.model.norm.weight.mul_(30.0)  # sharp next-token distributions: replies repeat, ends vary by row
    return model, tok


def _contexts():
    a, b, c = list(range(10, 40)), list(range(50, 67)), list(range(70, 95))
    return [a, a, b, b, c, list(range(200, 230))]


def _eos_that_ends_some_rows(model, tok, temperature: float = 0.0, seed: int = 0) -> int:
    """A token the first turn's replies (greedy, or sampled with `seed` as _play samples) write at different steps in
    different rows: made the end-of-reply token, it ends some rows early and others late."""
    gen = LiveRowsGenerator(model, tok)
    gen.eos_id = -1  # no reply ends: see every row's 8 tokens
    gen.start(_contexts())
    torch.manual_seed(seed)
    sample = gen.generate(8, temperature)
    counts = {}
    for row in sample.ids:
        for step, t in enumerate(row[1:6], 1):
            counts.setdefault(t, set()).add(step)
    return max(counts, key=lambda t: len(counts[t]))


def _play(cls, model, tok, eos: int, temperature: float, turns: int = 3, seed: int = 0, max_new: int = 7):
    """Start; then `turns` of (generate ≤ 7 tokens, row 1 leaves after the first turn, append blocks of unequal
    lengths). Returns the turns' TurnSamples, each row's whole conversation, and per turn the (row, start of its
    reply in the conversation) of each sample row."""
    gen = cls(model, tok)
    gen.eos_id = eos
    gen.start(_contexts())
    torch.manual_seed(seed)
    convs = [list(c) for c in _contexts()]
    rows = list(range(len(convs)))
    samples, spans = [], []
    for t in range(turns):
        s = gen.generate(max_new, temperature)
        samples.append(s)
        spans.append([(r, len(convs[r])) for r in rows])
        for r, ids in zip(rows, s.ids):
            convs[r] += ids
        keep = [i for i in range(len(rows)) if i != 1] if t == 0 else list(range(len(rows)))
        gen.keep(keep)
        rows = [rows[i] for i in keep]
        blocks = [[300 + t] * (1 + i % 3) for i in range(len(rows))]
        gen.append(blocks)
        for r, b in zip(rows, blocks):
            convs[r] += b
    return samples, convs, spans


T = 2.5  # the sampled tests' temperature: log-probs far from 0, so a wrong cache shows


def test_hf_live_is_registered():
    assert "hf-live" in GENERATORS


def test_greedy_picks_generates_tokens(peaky):
    model, tok = peaky
    eos = _eos_that_ends_some_rows(model, tok)
    ref, _, _ = _play(HFGenerator, model, tok, eos, 0.0)
    live, _, _ = _play(LiveRowsGenerator, model, tok, eos, 0.0)
    ended_early = sum(len(ids) < max(map(len, s.ids)) for s in ref for ids in s.ids)
    assert ended_early > 0  # the loop dropped rows in some turn: what this test is about
    for a, b in zip(ref, live, strict=True):
        assert a.ids == b.ids and a.truncated == b.truncated
        for la, lb in zip(a.logprobs, b.logprobs, strict=True):
            assert torch.allclose(torch.tensor(la), torch.tensor(lb), atol=1e-4)


def _same_draws(model, tok, live_cls, seeds, temperatures, lengths) -> tuple[int, int]:
    """Play HFGenerator and `live_cls` on the same seeds; assert equal tokens and log-probs within 1e-4. Returns (rows
    that ended before the longest of their turn, tokens compared)."""
    ended_early = compared = 0
    for seed in seeds:
        for temperature in temperatures:
            eos = _eos_that_ends_some_rows(model, tok, temperature, seed)
            for max_new in lengths:
                ref, _, _ = _play(HFGenerator, model, tok, eos, temperature, seed=seed, max_new=max_new)
                live, _, _ = _play(live_cls, model, tok, eos, temperature, seed=seed, max_new=max_new)
                for a, b in zip(ref, live, strict=True):
                    assert a.ids == b.ids, (seed, temperature, max_new)
                    assert a.truncated == b.truncated
                    for la, lb in zip(a.logprobs, b.logprobs, strict=True):
                        assert torch.allclose(torch.tensor(la), torch.tensor(lb), atol=1e-4)
                    ended_early += sum(len(ids) < max(map(len, a.ids)) for ids in a.ids)
                    compared += sum(map(len, a.ids))
    return ended_early, compared


def test_sampling_draws_generates_tokens_on_one_seed(peaky):
    """The quick run's share of the next test: one seed, the sampled temperature, the default compaction."""
    model, tok = peaky
    ended_early, compared = _same_draws(model, tok, LiveRowsGenerator, [0], [T], [9])
    assert ended_early > 0 and compared > 50


@pytest.mark.slow  # ~60 s of CPU per compaction setting on the 2-core AMD EPYC (tests/conftest.py's session line)
@pytest.mark.parametrize("compact_at", [0.0, 0.5, 1.0])
def test_sampling_draws_generates_tokens(peaky, compact_at):
    """Token for token equal to HFGenerator (transformers `generate`) over 4 seeds × 2 temperatures × 2 reply lengths,
    rows ending early in some turns; log-probs within 1e-4; the working cache compacted at once (0), lazily (0.5,
    the default) or never (1)."""
    model, tok = peaky
    live_cls = functools.partial(LiveRowsGenerator, compact_at=compact_at)
    ended_early, compared = _same_draws(model, tok, live_cls, range(4), (0.7, T), (3, 9))
    assert ended_early > 15 and compared > 1000  # rows ended early often: the draws over other rows were exercised


def test_drawing_over_the_live_rows_only_is_caught(peaky, monkeypatch):
    """Negative control: the first version's draw, torch.multinomial over the live rows only (the same distribution,
    other random numbers), no longer samples generate's tokens once rows have ended."""
    model, tok = peaky
    eos = _eos_that_ends_some_rows(model, tok, T)
    refs = [_play(HFGenerator, model, tok, eos, T, seed=seed)[0] for seed in range(4)]
    monkeypatch.setattr(LiveRowsGenerator, "draw", staticmethod(lambda probs, rows, batch: torch.multinomial(probs, 1)
                                                                .squeeze(1)))
    lives = [_play(LiveRowsGenerator, model, tok, eos, T, seed=seed)[0] for seed in range(4)]
    assert any(a.ids != b.ids for ref, live in zip(refs, lives) for a, b in zip(ref, live, strict=True))


def _teacher_forced_gap(model, samples, convs, spans, temperature) -> float:
    """Largest |returned log-prob − log softmax(logits / T) of a plain forward of the row's whole conversation| over
    every sampled token of every turn."""
    worst = 0.0
    for s, span in zip(samples, spans, strict=True):
        for (r, start), ids, lps in zip(span, s.ids, s.logprobs, strict=True):
            conv = torch.tensor([convs[r]])
            assert conv[0, start:start + len(ids)].tolist() == ids
            with torch.no_grad():
                logits = model(input_ids=conv).logits[0, start - 1:start - 1 + len(ids)].float() / temperature
            ref = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids).unsqueeze(-1)).squeeze(-1)
            worst = max(worst, (ref - torch.tensor(lps)).abs().max().item())
    return worst


def test_sampled_logprobs_match_a_plain_forward(peaky):
    model, tok = peaky
    eos = _eos_that_ends_some_rows(model, tok, T)
    samples, convs, spans = _play(LiveRowsGenerator, model, tok, eos, T)
    assert any(len(ids) < max(map(len, s.ids)) for s in samples for ids in s.ids)  # rows ended early
    assert min(lp for s in samples for row in s.logprobs for lp in row) < -1.0  # not a near-greedy draw
    assert _teacher_forced_gap(model, samples, convs, spans, T) < 1e-4


def test_a_corrupted_cache_is_caught(peaky, monkeypatch):
    """Negative control: zero the keys and values of row 0's first real column in the rebuilt cache after the first
    turn; the next turns' log-probs then disagree with the plain forward."""
    model, tok = peaky
    eos = _eos_that_ends_some_rows(model, tok, T)
    real = LiveRowsGenerator.generate
    calls = []

    def corrupting(self, n, temperature):
        if calls:  # before the second turn: row 0's first real column loses its keys and values
            col = int((self.attn[0] == 1).nonzero()[0])
            for layer in self.cache.layers:
                layer.keys[0, :, col] = 0.0
                layer.values[0, :, col] = 0.0
        calls.append(1)
        return real(self, n, temperature)

    monkeypatch.setattr(LiveRowsGenerator, "generate", corrupting)
    samples, convs, spans = _play(LiveRowsGenerator, model, tok, eos, T)
    assert _teacher_forced_gap(model, samples, convs, spans, T) > 1e-3


@pytest.mark.parametrize("cls", [HFGenerator, LiveRowsGenerator])
def test_the_growing_cache_equals_dynamic_cache(peaky, cls):
    """GrowingKVCache (the default) against transformers' DynamicCache, sampling over three turns with a row leaving
    (its buffer re-allocated) and rows ending early: the same tokens, the same log-probs, and those equal a plain
    forward of each conversation."""
    model, tok = peaky
    eos = _eos_that_ends_some_rows(model, tok, T)
    grown, convs, spans = _play(functools.partial(cls, grow_cache=True), model, tok, eos, T)
    plain, _, _ = _play(functools.partial(cls, grow_cache=False), model, tok, eos, T)
    for a, b in zip(grown, plain, strict=True):
        assert a.ids == b.ids
        for la, lb in zip(a.logprobs, b.logprobs, strict=True):
            assert torch.allclose(torch.tensor(la), torch.tensor(lb), atol=1e-6)
    assert _teacher_forced_gap(model, grown, convs, spans, T) < 1e-4


def test_a_growing_cache_that_loses_its_past_is_caught(peaky, monkeypatch):
    """Negative control: a GrowingLayer that re-allocates without copying what it held (zeros instead) fails the
    plain-forward check after the first row leaves."""
    model, tok = peaky
    eos = _eos_that_ends_some_rows(model, tok, T)
    real = GrowingLayer.update

    def forgetful(self, key_states, value_states, *args, **kwargs):
        if self.is_initialized and self.get_seq_length() and self.keys.data_ptr() != self.buf_k.data_ptr():
            self.keys, self.values = torch.zeros_like(self.keys), torch.zeros_like(self.values)
        return real(self, key_states, value_states, *args, **kwargs)

    monkeypatch.setattr(GrowingLayer, "update", forgetful)
    samples, convs, spans = _play(HFGenerator, model, tok, eos, T)
    assert _teacher_forced_gap(model, samples, convs, spans, T) > 1e-3


@pytest.mark.trains
def test_a_training_step_with_hf_live(tiny_model_dir, tmp_path):
    """`model.generator: hf-live` through the Trainer: one GRPO step on scripted coin games; the log-probs the loop
    reported are those the training forward recomputes (logprob_mismatch, nats)."""
    from test_trainer import make_cfg, trainer

    from helpers import coin_games

    cfg = make_cfg(coin_games(tmp_path / "g"), algo="grpo", group_size=2, games_per_step=2)
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, generator="hf-live"))
    t = trainer(cfg, tmp_path, tiny_model_dir)
    assert isinstance(t.generator, LiveRowsGenerator)
    row = t.step(0)
    assert row["episodes"] == 4 and row["logprob_mismatch"] < 1e-4, row["logprob_mismatch"]
