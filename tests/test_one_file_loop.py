"""agentrl_lib/one_file_loop.py, the RL iteration in one file, against trainer.Trainer.step: from the same weights and
the same trajectories (both rollouts replaced by one recorded rollout, so both also draw the same minibatches), the
one-file step gives the Trainer's loss at every minibatch update and the Trainer's updated weights, up to float
rounding, for PPO (critic, GAE), GRPO and RLOO, and GRPO with the dual clip and Dr. GRPO's aggregation. Controls: a
planted bug (the value loss dropped, a narrower clip range, RLOO's baseline swapped for GRPO's, Dr. GRPO's L_max
left at the padded width, the dual clip dropped) is caught by the same comparison; a config the file leaves out is
refused."""
from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

import agentrl_lib.one_file_loop as one_file
import agentrl_lib.trainer as trainer_mod
from agentrl_lib.advantages import grpo_advantages
from agentrl_lib.config import AlgoConfig, EnvConfig, ModelConfig, RewardConfig, RunConfig, TrainConfig
from agentrl_lib.envs.pool import SerialPool
from agentrl_lib.generation import GENERATORS
from agentrl_lib.losses import policy_loss
from agentrl_lib.update import make_optimizer

from helpers import CoinEnv, coin_games

LOSS_TOL = 1e-5    # |Δ loss| of each minibatch update, nats
WEIGHT_TOL = 1e-6  # max |Δ w| over every weight after the step (the step itself moves weights by ~1e-3: lr 1e-3)


VARIANTS = {"grpo+dual_clip+dr_grpo_agg": ("grpo", {"dual_clip": 1.001, "loss_agg": "seq_mean_token_sum_norm"})}
"""A preset with settings that change the loss: the dual clip (Ye et al. 2020; 1.001 so that it binds on this small
step) and Dr. GRPO's aggregation (Σ m·J / (B · L_max), L_max = max_turns × max_new_tokens)."""


def make_cfg(games: str, algo: str) -> RunConfig:
    """Two games × groups of 4 = 8 episodes, minibatches of 3 (the last one short) over 2 epochs: 6 updates."""
    preset, extra = VARIANTS.get(algo, (algo, {}))
    return RunConfig(env=EnvConfig(games=games, max_turns=2), reward=RewardConfig(kind="dense"),
                     algo=AlgoConfig.from_preset(preset, group_size=4, **extra), model=ModelConfig(device="cpu"),
                     train=TrainConfig(steps=1, games_per_step=2, minibatch_size=3, epochs=2, max_new_tokens=5,
                                       temperature=1.0, lr=1e-3, seed=1))


def weights(policy, value_head) -> dict[str, torch.Tensor]:
    out = {k: v.detach().clone() for k, v in policy.named_parameters()}
    if value_head is not None:
        out.update({f"value_head.{k}": v.detach().clone() for k, v in value_head.named_parameters()})
    return out


@pytest.fixture
def run(tiny_model_dir, tmp_path, monkeypatch):
    """run(algo) → (the Trainer's result, one_step): the Trainer steps once on a recorded rollout; one_step() runs
    the one-file step from the Trainer's starting weights on the same rollout. Each result: (losses of each
    minibatch update, weights after the step, the step's mean metrics)."""
    def start(algo: str):
        cfg = make_cfg(coin_games(tmp_path / f"games_{algo}"), algo)
        t = trainer_mod.Trainer(cfg, tmp_path / f"run_{algo}", init=tiny_model_dir, progress=False,
                                pool=SerialPool(8, factory=CoinEnv))
        start_policy, start_vh = copy.deepcopy(t.policy), copy.deepcopy(t.value_head)
        recorded = t._rollout(0)  # one real rollout; both steps below get copies of it
        monkeypatch.setattr(trainer_mod, "rollout", lambda *a, **k: copy.deepcopy(recorded))
        monkeypatch.setattr(one_file, "rollout", lambda *a, **k: copy.deepcopy(recorded))
        losses, real = [], t._loss_and_backward

        def spy(batch, idx):
            loss, pm = real(batch, idx)
            losses.append(loss.item())
            return loss, pm

        t._loss_and_backward = spy
        row = t.step(0)
        assert row["skipped_update"] == 0.0, "the scripted games give reward spread at this seed"
        before = weights(start_policy, start_vh)
        after = weights(t.policy, t.value_head)
        assert all(not torch.equal(before[k], after[k]) for k in before), "every weight moves in the step"

        def one_step():
            policy, vh = copy.deepcopy(start_policy), copy.deepcopy(start_vh)
            opt = make_optimizer(policy, vh, cfg.train)
            out = one_file.rl_step(policy, vh, opt, GENERATORS[cfg.model.generator](policy, t.tok), t.tok, t.pool,
                                   t.games, cfg, step=0)
            return out["losses"], weights(policy, vh), out

        t.close()
        return (losses, after, row), one_step

    return start


def differences(a, b) -> dict[str, float]:
    """The largest |difference| of the minibatch losses and of the weights between two results."""
    (la, wa, _), (lb, wb, _) = a, b
    assert len(la) == len(lb) == 6, "2 epochs × 3 minibatches of 8 episodes (3, 3, 2)"
    return {"loss": max(abs(x - y) for x, y in zip(la, lb)),
            "weights": max((wa[k] - wb[k]).abs().max().item() for k in wa)}


@pytest.mark.trains
@pytest.mark.parametrize("algo", ["ppo", "grpo", "rloo", *VARIANTS])
def test_one_file_step_matches_trainer_step(algo, run, capsys):
    trainer_result, one_step = run(algo)
    mine = one_step()
    diff = differences(trainer_result, mine)
    row, logs = trainer_result[2], mine[2]
    with capsys.disabled():
        print(f"\n{algo}: largest |Δ loss| {diff['loss']:.2e}, largest |Δ weight| {diff['weights']:.2e}, "
              f"dual_clip_frac {row['dual_clip_frac']:.3f}")
    assert diff["loss"] < LOSS_TOL and diff["weights"] < WEIGHT_TOL, diff
    if algo in VARIANTS:
        assert row["dual_clip_frac"] > 0, "the dual clip binds on some token, so the comparison covers it"
    for k in ("policy_loss", "entropy", "clip_frac", "approx_kl", "grad_norm") + (("value_loss",) * (algo == "ppo")):
        assert logs[k] == pytest.approx(row[k], rel=1e-4, abs=1e-6), k


@pytest.mark.trains
def test_control_planted_bugs_are_caught(run, monkeypatch, capsys):
    """Each planted bug in the one-file step moves the losses or the weights far beyond the tolerances."""
    caught = {}
    ppo, ppo_step = run("ppo")
    monkeypatch.setattr(one_file, "value_loss", lambda v, *a, **k: (v.sum() * 0, {"value_loss": 0.0}))
    caught["value loss dropped (ppo)"] = differences(ppo, ppo_step())
    monkeypatch.undo()

    grpo, grpo_step = run("grpo")
    monkeypatch.setattr(one_file, "policy_loss", lambda lp, old, adv, mask, algo, **k: policy_loss(
        lp, old, adv, mask, dataclasses.replace(algo, clip_low=algo.clip_low / 10, clip_high=algo.clip_high / 10), **k))
    caught["clip range 10x narrower (grpo)"] = differences(grpo, grpo_step())
    monkeypatch.undo()

    variant, variant_step = run("grpo+dual_clip+dr_grpo_agg")
    monkeypatch.setattr(one_file, "policy_loss", lambda *a, **k: policy_loss(*a))
    caught["Dr. GRPO's L_max left at the padded width"] = differences(variant, variant_step())
    monkeypatch.setattr(one_file, "policy_loss", lambda lp, old, adv, mask, algo, **k: policy_loss(
        lp, old, adv, mask, dataclasses.replace(algo, dual_clip=0.0), **k))
    caught["the dual clip dropped"] = differences(variant, variant_step())
    monkeypatch.undo()

    rloo, rloo_step = run("rloo")
    monkeypatch.setattr(one_file, "rloo_advantages", lambda r, g: grpo_advantages(r, g))
    caught["GRPO's baseline in RLOO's place"] = differences(rloo, rloo_step())
    with capsys.disabled():
        print("".join(f"\n{k}: |Δ loss| {d['loss']:.2e}, |Δ weight| {d['weights']:.2e}" for k, d in caught.items()))
    for bug, d in caught.items():
        assert d["loss"] > 100 * LOSS_TOL or d["weights"] > 100 * WEIGHT_TOL, (bug, d)


def test_a_config_the_file_leaves_out_is_refused():
    cfg = RunConfig(algo=AlgoConfig(kl_coef=0.01, keep_top_std=0.5), train=TrainConfig(max_tokens_per_microbatch=64))
    with pytest.raises(ValueError, match="kl_coef > 0, algo.keep_top_std < 1, train.max_tokens_per_microbatch"):
        one_file.check_default_path(cfg)
    one_file.check_default_path(RunConfig())  # control: the default config passes
    one_file.check_default_path(RunConfig(algo=AlgoConfig.from_preset("rloo")))
    with pytest.raises(ValueError, match="algo.advantage other than gae/grpo/rloo"):
        one_file.check_default_path(RunConfig(algo=AlgoConfig.from_preset("gigpo")))
