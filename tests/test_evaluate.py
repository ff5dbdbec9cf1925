"""evaluate(): a sampled evaluation is reproducible with its seed and leaves the caller's RNG as it was; without a
seed (the negative control) two evaluations sample differently."""

import pytest
import torch

from agentrl_lib.envs.pool import SerialPool
from agentrl_lib.evaluate import evaluate
from agentrl_lib.models import load_policy


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    return load_policy(tiny_model_dir, device="cpu")


def _actions(res):
    return [r["actions"] for r in res["per_game"]]


def test_a_sampled_evaluation_is_reproducible_with_its_seed(tiny, cooking_games):
    model, tok = tiny
    kw = dict(max_turns=2, temperature=1.0, max_new_tokens=6, progress=False)
    pool = SerialPool(4, family=cooking_games.family)
    torch.manual_seed(123)
    caller = torch.get_rng_state()
    a = evaluate(model, tok, cooking_games, seed=0, pool=pool, **kw)
    assert torch.equal(torch.get_rng_state(), caller)  # the caller's stream is untouched
    b = evaluate(model, tok, cooking_games, seed=0, pool=pool, **kw)
    c = evaluate(model, tok, cooking_games, seed=1, pool=pool, **kw)
    assert a["seed"] == 0 and _actions(a) == _actions(b) and _actions(a) != _actions(c)
    # negative control: unseeded evaluations draw from the caller's stream, which moves on between them
    d = evaluate(model, tok, cooking_games, pool=pool, **kw)
    e = evaluate(model, tok, cooking_games, pool=pool, **kw)
    assert d["seed"] is None and _actions(d) != _actions(e)
    greedy = evaluate(model, tok, cooking_games, seed=0, pool=pool, **{**kw, "temperature": 0.0})
    assert greedy["seed"] is None  # nothing is sampled, so no seed is recorded
