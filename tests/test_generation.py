"""generation.HFGenerator's shared first prefill (`share_prefix`): each distinct starting context is encoded once and
its KV cache copied to the rows of its group. Compared with the plain per-row prefill on a tiny random Llama: the
same cache, the same log-probs of the same sampled tokens, over several turns, with left padding of unequal
contexts. Negative control: a planted row mapping (the copies go to the wrong rows) is caught by the same comparison."""

import pytest
import torch

from agentrl_lib import generation
from agentrl_lib.generation import HFGenerator, distinct_rows
from agentrl_lib.models import load_policy


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    return load_policy(tiny_model_dir, device="cpu")


def test_distinct_rows():
    assert distinct_rows([[1, 2], [3], [1, 2], [3], [4]]) == ([0, 1, 4], [0, 1, 0, 1, 2])
    assert distinct_rows([[5]]) == ([0], [0])


def _contexts():
    """Two groups of 3 rows with contexts of different lengths (left padding) and one row of its own."""
    a, b, c = list(range(10, 40)), list(range(50, 67)), list(range(70, 95))
    return [a, a, a, b, b, b, c]


def _play(model, tok, share: bool, turns: int = 3, seed: int = 0):
    """Start, then `turns` of (sample up to 6 tokens at T = 1, append a block of unequal lengths); returns the
    generator and each turn's TurnSample."""
    gen = HFGenerator(model, tok, share_prefix=share)
    gen.start(_contexts())
    torch.manual_seed(seed)
    samples = []
    for t in range(turns):
        samples.append(gen.generate(6, 1.0))
        gen.append([[100 + t] * (1 + r % 3) for r in range(gen.ids.shape[0])])
    return gen, samples


def _cache_after_start(model, tok, share: bool) -> list[torch.Tensor]:
    """Every layer's keys after the first generate call (the plain path encodes the whole context there)."""
    gen = HFGenerator(model, tok, share_prefix=share)
    gen.start(_contexts())
    torch.manual_seed(0)
    gen.generate(1, 0.0)
    width = gen.ids.shape[1] - 1  # the last sampled token is not encoded yet
    return [layer.keys[:, :, :width] for layer in gen.cache.layers]


def _assert_same(a, b):
    for sa, sb in zip(a, b, strict=True):
        assert sa.ids == sb.ids
        for la, lb in zip(sa.logprobs, sb.logprobs, strict=True):
            assert torch.allclose(torch.tensor(la), torch.tensor(lb), atol=1e-5)


def test_shared_prefill_equals_the_plain_one(tiny):
    model, tok = tiny
    shared, s_samples = _play(model, tok, share=True)
    plain, p_samples = _play(model, tok, share=False)
    _assert_same(s_samples, p_samples)
    assert torch.equal(shared.ids, plain.ids) and torch.equal(shared.attn, plain.attn)
    # 7 rows, 3 distinct contexts: the copies saved 2 * 29 + 2 * 16 context positions (each minus its last token)
    assert shared.shared_positions == 2 * 29 + 2 * 16 and plain.shared_positions == 0
    keys_s, keys_p = _cache_after_start(model, tok, True), _cache_after_start(model, tok, False)
    mask = shared.attn[:, :keys_s[0].shape[2]].bool()  # compare real tokens only (pad positions hold anything)
    for ks, kp in zip(keys_s, keys_p, strict=True):
        assert torch.allclose(ks.transpose(1, 2)[mask], kp.transpose(1, 2)[mask], atol=1e-5)


def test_without_repeats_nothing_is_shared(tiny):
    model, tok = tiny
    gen = HFGenerator(model, tok)
    gen.start([[1, 2, 3], [4, 5]])
    assert gen.cache.get_seq_length() == 0 and gen.shared_positions == 0


def test_negative_control_wrong_rows_are_caught(tiny, monkeypatch):
    """Plant the bug: every row gets the cache of the first distinct context. The comparison must fail."""
    model, tok = tiny
    real = generation.distinct_rows
    monkeypatch.setattr(generation, "distinct_rows", lambda ctx: (real(ctx)[0], [0] * len(ctx)))
    planted, s_samples = _play(model, tok, share=True)
    monkeypatch.setattr(generation, "distinct_rows", real)
    plain, p_samples = _play(model, tok, share=False)
    with pytest.raises(AssertionError):
        _assert_same(s_samples, p_samples)
