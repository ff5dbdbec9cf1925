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


def _reference_probability(model, tok, env, game: str, reply: str) -> float:
    """The same probability another way: the conversation tokenised by the chat template itself, then scored one
    token at a time with the KV cache (the chain rule as generation applies it)."""
    from agentrl_lib.prompts import first_user_message, system_prompt_for

    first = env.reset(game)
    msgs = [{"role": "system", "content": system_prompt_for("bandit")},
            {"role": "user", "content": first_user_message(first.info.objective, first.obs)}]
    prompt = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    ids = tok(prompt, add_special_tokens=False)["input_ids"]
    reply_ids = tok(reply, add_special_tokens=False)["input_ids"] + [tok.convert_tokens_to_ids(tok.eos_token)]
    with torch.no_grad():
        out = model(torch.tensor([ids]), use_cache=True)
        logp, past = 0.0, out.past_key_values
        for t in reply_ids:
            logp += torch.log_softmax(out.logits[0, -1].float(), -1)[t].item()
            out = model(torch.tensor([[t]]), past_key_values=past, use_cache=True)
            past = out.past_key_values
    return float(torch.tensor(logp).exp())


def test_first_reply_probabilities_are_the_chain_rule_of_the_reply_and_its_end_token(tiny, monkeypatch):
    """Chapter 05 §2's numbers: each reply's probability equals an independent token-by-token computation; a reply
    scored without its end-of-turn token (a planted bug: "Dragon" would then also count "Dragons ...") is caught."""
    from agentrl_lib.envs import make_env
    from agentrl_lib.evaluate import first_reply_probabilities
    from agentrl_lib.prompts import ChatFormat

    model, tok = tiny
    env = make_env("bandit")
    got = first_reply_probabilities(model, tok, env, "7", ["Dragon", "Phoenix"], "bandit")
    for reply in ("Dragon", "Phoenix"):
        assert got[reply] == pytest.approx(_reference_probability(model, tok, env, "7", reply), rel=1e-4)
    assert 0 < sum(got.values()) <= 1
    monkeypatch.setattr(ChatFormat, "action_ids", lambda self, action: self._ids(action))  # the planted bug
    bad = first_reply_probabilities(model, tok, env, "7", ["Dragon"], "bandit")
    assert bad["Dragon"] != pytest.approx(_reference_probability(model, tok, env, "7", "Dragon"), rel=1e-4)
