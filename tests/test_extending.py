"""The book's "Extending" page (book/extending.md): the five examples there (an advantage estimator, a policy loss, an
env family, a reward kind, a generation backend) are executed from the page itself, registered, and train one RL step
together through run_rl with a tiny model."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

import agentrl_lib.run
from agentrl_lib.advantages import ESTIMATORS
from agentrl_lib.envs import FAMILIES
from agentrl_lib.generation import GENERATORS
from agentrl_lib.losses import POLICY_LOSSES
from agentrl_lib.rewards import REWARD_KINDS

pytestmark = pytest.mark.trains

PAGE = Path(__file__).resolve().parents[1] / "book" / "extending.md"


def page_examples() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)


@pytest.fixture
def registries():
    saved = dict(ESTIMATORS), dict(FAMILIES), dict(GENERATORS), dict(REWARD_KINDS), dict(POLICY_LOSSES)
    yield
    for reg, old in zip((ESTIMATORS, FAMILIES, GENERATORS, REWARD_KINDS, POLICY_LOSSES), saved):
        reg.clear()
        reg.update(old)


def run_examples(tiny_model_dir, tmp_path, monkeypatch, patch=None) -> tuple[dict, dict]:
    """Execute the page's blocks in one namespace; the last one trains (with the tiny model, in tmp_path)."""
    blocks = page_examples()
    assert len(blocks) == 6, "book/extending.md: estimator, policy loss, env family, reward kind, backend, a run"
    ns: dict = {"__name__": "readme_extending"}
    for block in blocks[:5]:
        exec(compile(block, str(PAGE), "exec"), ns)
    calls = {"estimator": 0, "generate": 0, "reward": 0, "loss": 0}
    loss = POLICY_LOSSES["cispo"]

    def counted_loss(*a):
        calls["loss"] += 1
        return loss(*a)

    POLICY_LOSSES["cispo"] = counted_loss
    reward = REWARD_KINDS["sparse_step_cost"]

    def counted_reward(*a):
        calls["reward"] += 1
        return reward(*a)

    REWARD_KINDS["sparse_step_cost"] = counted_reward
    est_call, gen_call = ns["BatchMeanReinforce"].__call__, ns["LoopGenerator"].generate

    def counted_est(self, *a):
        calls["estimator"] += 1
        return est_call(self, *a)

    def counted_gen(self, *a):
        calls["generate"] += 1
        return gen_call(self, *a)

    ns["BatchMeanReinforce"].__call__, ns["LoopGenerator"].generate = counted_est, counted_gen
    if patch:
        patch(ns)
    real_run_rl = agentrl_lib.run.run_rl
    monkeypatch.setattr(agentrl_lib.run, "run_rl",
                        lambda config, run_dir, **kw: real_run_rl(config, run_dir, init=tiny_model_dir,
                                                                  progress=False, **kw))
    monkeypatch.chdir(tmp_path)
    exec(compile(blocks[5], str(PAGE), "exec"), ns)
    return ns, calls


def test_page_extensions_train_one_step_together(registries, tiny_model_dir, tmp_path, monkeypatch):
    ns, calls = run_examples(tiny_model_dir, tmp_path, monkeypatch)
    (row,) = ns["summary"]["rows"]
    assert calls["estimator"] == 1 and calls["generate"] >= 1 and calls["reward"] == 4, calls  # one per episode
    # one minibatch of the 4 episodes, unless every return was equal (the tiny model loses alike: no signal)
    assert calls["loss"] == (0 if row["skipped_update"] else 1), (calls, row["skipped_update"])
    saved = yaml.safe_load((tmp_path / "runs/guess/config.yaml").read_text())
    assert saved["algo"]["advantage"] == "reinforce_batch" and saved["model"]["generator"] == "loop"
    assert saved["reward"]["kind"] == "sparse_step_cost" and saved["algo"]["loss_mode"] == "cispo"
    # the registered kind's returns: a win's 1, minus 0.05 a turn (the kind) and 0.1 an invalid turn (format_penalty)
    per_turn = 0.05 + 0.1 * row["invalid_rate"]  # invalid_rate: invalid turns / turns, so the means compose exactly
    assert row["return_mean"] == pytest.approx(row["success_rate"] - per_turn * row["mean_turns"], abs=1e-6), row
    assert row["episodes"] == 4 and row["env_errors"] == 0 and row["policy_tokens"] > 0
    assert row["explained_variance"] is None  # no critic: the critic's keys are null (metrics.complete_row)
    # the backend's log-probs are those of the distribution it sampled: the training forward agrees to float error
    assert row["logprob_mismatch"] < 1e-4, row["logprob_mismatch"]
    assert (tmp_path / "runs/guess/checkpoints").is_dir()


def test_a_backend_with_wrong_logprobs_is_caught(registries, tiny_model_dir, tmp_path, monkeypatch):
    """Negative control: the same backend ignoring the temperature (it samples and scores at T = 1 while the run
    samples at T = 0.7): the log-probs it reports are not those of the policy the trainer computes."""
    def at_t1(ns):
        gen = ns["LoopGenerator"].generate
        ns["LoopGenerator"].generate = lambda self, n, temperature: gen(self, n, 1.0)

    ns, _ = run_examples(tiny_model_dir, tmp_path, monkeypatch, patch=at_t1)
    assert ns["summary"]["rows"][0]["logprob_mismatch"] > 1e-3


def test_page_policy_loss_has_cispo_gradient(registries):
    """The page's CISPO: at a token whose ratio passed 1 + ε_high the gradient w.r.t. log π_θ is −min(ρ, 1 + ε_high)·A
    (per token of the mean), where ppo_clip's is 0 (the negative control: a clipped token that keeps no gradient)."""
    import math

    import torch

    from agentrl_lib.config import AlgoConfig
    from agentrl_lib.losses import policy_loss

    ns: dict = {"__name__": "readme_extending"}
    exec(compile(page_examples()[1], str(PAGE), "exec"), ns)

    def grad(mode):
        logp = torch.tensor([[0.5, 0.0]], requires_grad=True)  # ratios e^0.5 ≈ 1.65 (clipped) and 1
        adv = torch.tensor([[1.0, -2.0]])
        loss, m = policy_loss(logp, torch.zeros(1, 2), adv, torch.ones(1, 2), AlgoConfig(loss_mode=mode))
        loss.backward()
        return logp.grad[0].tolist(), m

    cispo, m = grad("cispo")
    assert cispo == pytest.approx([-(1 + 0.28) * 1.0 / 2, 2.0 / 2]) and m["clip_frac"] == 0.5
    clipped, _ = grad("ppo_clip")
    assert clipped == pytest.approx([0.0, 2.0 / 2]) and math.exp(0.5) > 1.28
