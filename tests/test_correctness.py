"""Regression tests for the defects of the correctness review (issue "Trustworthy numbers"), one or more per item.

Each test failed on the code before the fix. Tiny random-weight models and scripted environments keep them fast.
"""
from __future__ import annotations

import json
import math

import pytest
import torch

from agentrl_lib.config import AlgoConfig, ConfigError, EnvConfig, ModelConfig, RewardConfig, RunConfig, TrainConfig
from agentrl_lib.envs.pool import EnvFailure, SerialPool
from agentrl_lib.generation import HFGenerator
from agentrl_lib.losses import policy_loss, truncated_is_weights
from agentrl_lib.rewards import dense_turn_rewards, turn_rewards
from agentrl_lib.trainer import Trainer
from helpers import CoinEnv, coin_games


def make_cfg(games, algo="grpo", group_size=4, games_per_step=2, **train):
    kw = dict(steps=1, games_per_step=games_per_step, minibatch_size=group_size * games_per_step, max_new_tokens=5,
              temperature=1.0, lr=1e-3, seed=1)
    kw.update(train)
    algo_kw = {k: kw.pop(k) for k in list(kw) if k in AlgoConfig.__dataclass_fields__}
    return RunConfig(env=EnvConfig(games=games, max_turns=2), reward=RewardConfig(kind="dense"),
                     algo=AlgoConfig.from_preset(algo, group_size=group_size, **algo_kw), model=ModelConfig(device="cpu"),
                     train=TrainConfig(**kw))


def trainer(cfg, tmp_path, init, pool=None, name="run"):
    n = cfg.train.games_per_step * cfg.algo.group_size
    return Trainer(cfg, tmp_path / name, init=init, pool=pool or SerialPool(n, factory=CoinEnv), progress=False)


# ------------------------------------------------------------------------------------ item 2: failed reset, GRPO
class ResetFailsInSlot(SerialPool):
    def __init__(self, size, bad_slots):
        super().__init__(size, factory=CoinEnv)
        self.bad = set(bad_slots)

    def reset(self, slots, games):
        out = super().reset(slots, games)
        return [EnvFailure("RuntimeError: engine exploded") if s in self.bad else r for s, r in zip(slots, out)]


@pytest.mark.parametrize("algo", ["grpo", "rloo"])
def test_one_env_failing_at_reset_ends_one_episode_not_the_run(algo, tiny_model_dir, tmp_path):
    cfg = make_cfg(coin_games(tmp_path / "g"), algo=algo, group_size=2, games_per_step=2)
    t = trainer(cfg, tmp_path, tiny_model_dir, pool=ResetFailsInSlot(4, bad_slots=[1]))  # group 0 keeps one episode
    row = t.step(0)
    assert row["env_errors"] == 1 and row["singleton_groups"] == 1 and row["episodes"] == 4
    assert all(math.isfinite(v) for k, v in row.items() if isinstance(v, float) and k != "explained_variance")


# ------------------------------------------------------------- item 5: π_old from the training forward, TIS
@pytest.mark.parametrize("algo", ["ppo", "grpo", "rloo"])
def test_pi_old_comes_from_the_training_forward_and_the_mismatch_is_logged(algo, tiny_model_dir, tmp_path,
                                                                           monkeypatch):
    """Plant a rollout engine whose log-probs are off by 0.5 (as a bf16 or vLLM sampler can be): with π_old taken
    from the trainer's forward the first (only) minibatch starts at ratio exactly 1 and nothing is clipped; the
    mismatch is logged for every algorithm."""
    real = HFGenerator.generate

    def shifted(*a, **k):
        out = real(*a, **k)
        out.logprobs = [[x - 0.5 for x in row] for row in out.logprobs]
        return out

    monkeypatch.setattr(HFGenerator, "generate", shifted)
    cfg = make_cfg(coin_games(tmp_path / "g"), algo=algo, epochs=1)
    row = trainer(cfg, tmp_path, tiny_model_dir).step(0)
    assert row["skipped_update"] == 0.0, "the scripted game gives reward spread at this seed"
    assert row["logprob_mismatch"] == pytest.approx(0.5, abs=1e-3)
    assert row["ratio_mean"] == pytest.approx(1.0, abs=1e-6) and row["clip_frac"] == 0.0
    assert "tis_weight_mean" not in row  # fp32 on CPU: TIS is off under tis='auto'
    # with TIS on, each token is weighted by min(π_old / π_behaviour, C) = e^{0.5} capped at C = 1.5
    cfg = make_cfg(coin_games(tmp_path / "g"), algo=algo, epochs=1, tis="on", tis_cap=1.5)
    row = trainer(cfg, tmp_path, tiny_model_dir, name="run_tis").step(0)
    assert row["tis_weight_mean"] == pytest.approx(1.5, abs=1e-4)


def test_truncated_is_weights_and_dual_clip():
    old = torch.tensor([[0.0, -1.0, -2.0, -3.0]])
    beh = torch.tensor([[-1.0, -1.0, 0.0, -3.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    w = truncated_is_weights(old, beh, mask, cap=2.0)
    assert torch.allclose(w, torch.tensor([[2.0, 1.0, math.exp(-2.0), 0.0]]))
    # dual clip (Ye et al. 2020): for A < 0 the objective is bounded below by c·A
    logp, old_lp = torch.tensor([[2.0, 2.0]]), torch.zeros(1, 2)  # ratio e² ≈ 7.39
    adv = torch.tensor([[-1.0, 1.0]])
    m = torch.ones(1, 2)
    plain, _ = policy_loss(logp, old_lp, adv, m, 0.2, 0.2)
    dual, met = policy_loss(logp, old_lp, adv, m, 0.2, 0.2, dual_clip=3.0)
    # token 0: min(7.39·(−1), 1.2·(−1)) = −7.39 → max(−7.39, −3) = −3; token 1: min(7.39, 1.2) = 1.2
    assert plain.item() == pytest.approx(-(-math.exp(2) + 1.2) / 2)
    assert dual.item() == pytest.approx(-(-3.0 + 1.2) / 2) and met["dual_clip_frac"] == 0.5
    with pytest.raises(ValueError, match="dual_clip"):
        policy_loss(logp, old_lp, adv, m, dual_clip=0.5)


# ---------------------------------------------------------------------------- item 6: temperature 0 in training
def test_training_temperature_zero_is_refused_but_greedy_eval_is_fine():
    with pytest.raises(ConfigError, match="train.temperature must be > 0"):
        TrainConfig(temperature=0.0).validate()
    TrainConfig(eval_temperature=0.0).validate()


# ------------------------------------------------------------------ item 7: an env crash mid-episode
class CrashOnSecondStep(SerialPool):
    def step(self, slots, actions):
        self.calls = getattr(self, "calls", 0) + 1
        out = super().step(slots, actions)
        return [EnvFailure("worker crashed (test)") if (s == 1 and self.calls == 1) else r for s, r in zip(slots, out)]


def test_an_env_crash_mid_episode_leaves_the_loss_and_the_statistics(tiny_model_dir, tmp_path, monkeypatch):
    import agentrl_lib.trainer as trainer_mod

    seen = {}
    real_collate = trainer_mod.collate

    def spy(trajs, *a, **k):
        seen["games"] = [t.termination for t in trajs]
        return real_collate(trajs, *a, **k)

    monkeypatch.setattr(trainer_mod, "collate", spy)
    cfg = make_cfg(coin_games(tmp_path / "g"), algo="rloo", group_size=4, games_per_step=1)
    row = trainer(cfg, tmp_path, tiny_model_dir, pool=CrashOnSecondStep(4, factory=CoinEnv)).step(0)
    assert row["env_errors"] == 1 and len(seen["games"]) == 3
    assert not any(term.startswith("env_error") for term in seen["games"])
    # invalid_rate counts the policy's invalid actions only: 3 episodes × 2 turns, all invalid ("look" never said)
    assert row["invalid_rate"] == 1.0 and row["mean_turns"] == 2.0


# -------------------------------------------------------------------------------------------- item 8: dropout
def test_dropout_is_off_during_updates(tokenizer, tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    from agentrl_lib.models import disable_dropout

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, attention_dropout=0.5)
    model = LlamaForCausalLM(cfg).train()
    ids = torch.randint(0, 1000, (2, 16))

    def two_forwards_differ():
        with torch.no_grad():
            return not torch.equal(model(ids).logits, model(ids).logits)

    # negative control: TRL's disable_dropout_in_model alone leaves Llama's attention dropout on
    from trl.trainer.utils import disable_dropout_in_model

    disable_dropout_in_model(model)
    assert two_forwards_differ()
    assert disable_dropout(model) == 2  # the attention_dropout of both layers
    assert not two_forwards_differ()


# ---------------------------------------------------------------- item 9: StarPO-S filter before minibatching
def test_starpo_s_filter_selects_before_anything_is_forwarded(tiny_model_dir, tmp_path, monkeypatch):
    import agentrl_lib.policy as policy_mod
    import agentrl_lib.trainer as trainer_mod

    rows_forwarded = []
    real = trainer_mod.token_forward

    def spy(model, input_ids, *a, **k):
        rows_forwarded.append((torch.is_grad_enabled(), input_ids.shape[0]))
        return real(model, input_ids, *a, **k)

    monkeypatch.setattr(trainer_mod, "token_forward", spy)  # the no-grad passes
    monkeypatch.setattr(policy_mod, "token_forward", spy)  # the update's forward (policy.TokenModel)
    cfg = make_cfg(coin_games(tmp_path / "g", n=4), algo="grpo", group_size=2, games_per_step=4,
                   keep_top_std=0.5, minibatch_size=2)
    row = trainer(cfg, tmp_path, tiny_model_dir).step(0)
    assert row["kept_fraction"] == 0.5 and row["skipped_update"] == 0.0
    no_grad = [n for grad, n in rows_forwarded if not grad]  # π_old of the 4 kept (in chunks of similar length)
    minibatches = [n for grad, n in rows_forwarded if grad]  # then 2 minibatches of 2
    assert sum(no_grad) == 4 and minibatches == [2, 2], rows_forwarded


# ------------------------------------------------------------------- item 10: dense rewards for any score unit
def test_dense_rewards_are_scale_free():
    # max_score 0.25: the old cap 1 − 1/(2·0.25) = −1 turned progress negative and divided by zero without progress
    assert dense_turn_rewards([0.0, 0.0], 0.25, won=False) == [0.0, 0.0]
    assert sum(dense_turn_rewards([0.125, 0.0], 0.25, won=False)) == pytest.approx(0.5)
    for incs, ms, won in [([1, 0, 2], 3, False), ([1, 1, 1], 3, False), ([2, -1, 2], 3, False), ([1, 2], 3, True)]:
        for k in (0.01, 0.25, 7.0):  # the same game in another score unit gets the same rewards
            assert dense_turn_rewards([x * k for x in incs], ms * k, won) == pytest.approx(
                dense_turn_rewards(incs, ms, won))
    # a non-won game that collected every point stays half a step below a win (integer points: 1 − 1/(2·max))
    assert sum(dense_turn_rewards([1, 1, 1], 3, won=False)) == pytest.approx(1 - 1 / 6)
    with pytest.raises(ValueError, match="max_score"):
        dense_turn_rewards([1], float("nan"), won=False)


def test_format_penalty_can_put_a_win_below_a_non_win_as_documented():
    """README / notebook used to claim any win totals more than any other game; with the default penalty it doesn't."""
    won = sum(turn_rewards("dense", [0, 0, 0, 0, 1, 1, 1], 3, True, [False] * 4 + [True] * 3, 0.1))
    partial = sum(turn_rewards("dense", [1, 1, 0], 3, False, [True] * 3, 0.1))
    assert won == pytest.approx(0.6) and partial == pytest.approx(2 / 3) and won < partial
    assert sum(turn_rewards("dense", [0, 0, 0, 0, 1, 1, 1], 3, True, [False] * 4 + [True] * 3, 0.0)) == 1.0


# ------------------------------------------------------------------------------------------- item 11: smaller ones
def test_approx_kl_is_k3_of_pi_old_to_pi_theta():
    logp, old = torch.tensor([[-1.0, -2.0, -0.5]]), torch.tensor([[-1.5, -1.0, -0.5]])
    _, met = policy_loss(logp, old, torch.ones(1, 3), torch.ones(1, 3))
    r = torch.exp(logp - old)
    assert met["approx_kl"] == pytest.approx(((r - 1) - torch.log(r)).mean().item())
    assert met["approx_kl"] != pytest.approx((1 / r - 1 + torch.log(r)).mean().item())  # the old formula


def test_policy_loss_is_logged_alone_and_both_grad_norms_are_logged(tiny_model_dir, tmp_path):
    cfg = make_cfg(coin_games(tmp_path / "g"), algo="ppo", entropy_coef=10.0, epochs=1)
    row = trainer(cfg, tmp_path, tiny_model_dir).step(0)
    # with π_old from the training forward the first minibatch's surrogate is −mean(A) over tokens; whitened A
    # has mean 0, so the surrogate alone is ≈ 0 while the total loss carries −10 · entropy (≈ −10 · 10.8)
    assert abs(row["policy_loss"]) < 1e-4, row["policy_loss"]
    assert row["grad_norm"] > 0 and row["value_grad_norm"] > 0 and row["nonfinite_updates"] == 0


def test_end_of_training_eval_uses_eval_temperature_and_the_observation_options(tiny_model_dir, tmp_path,
                                                                                monkeypatch):
    import agentrl_lib.evaluate as evaluate_mod
    from agentrl_lib import cli

    seen = {}

    def fake_evaluate(model, tok, games, **kw):
        seen.update(kw)
        return {"success_rate": 0.0, "mean_turns": 0.0, "invalid_rate": 0.0, "n_games": 1, "per_game": []}

    monkeypatch.setattr(evaluate_mod, "evaluate", fake_evaluate)
    monkeypatch.setattr("agentrl_lib.trainer.open_pool", lambda env_cfg, n, games: SerialPool(n, factory=CoinEnv))
    games = coin_games(tmp_path / "g")
    cfg = make_cfg(games, algo="rloo", group_size=2, games_per_step=1)
    cfg.train.eval_temperature, cfg.train.eval_games = 0.3, games
    cfg.env.show_admissible = cfg.env.show_inventory = True
    cfg.env.step_timeout_s = 12.5
    cfg.save(tmp_path / "c.yaml")
    assert cli.main(["train", "--config", str(tmp_path / "c.yaml"), "--init", tiny_model_dir,
                     "--out", str(tmp_path / "run")]) == 0
    env = seen["env"]  # the run's env settings reach the end-of-training eval (observations, pool, timeout)
    assert seen["temperature"] == 0.3 and env.show_admissible and env.show_inventory
    assert env.step_timeout_s == 12.5
    assert json.loads((tmp_path / "run" / "eval.json").read_text())["n_games"] == 1


def test_sft_examples_show_the_inventory_and_admissible_commands_when_asked(tokenizer, cooking_games):
    from agentrl_lib.prompts import ChatFormat
    from agentrl_lib.sft import expert_examples

    chat = ChatFormat(tokenizer)
    plain = expert_examples(cooking_games, chat)
    shown = expert_examples(cooking_games, chat, show_admissible=True, show_inventory=True)
    text = tokenizer.decode(shown[0]["input_ids"])
    assert "Inventory:" in text and "Admissible commands:" in text
    assert "Inventory:" not in tokenizer.decode(plain[0]["input_ids"])
    # the loss mask still covers exactly the walkthrough's actions
    assert sum(shown[0]["assistant_masks"]) == sum(plain[0]["assistant_masks"])


# -------------------------------------------------------------------------- item 4: LoRA outputs by name, π_ref
def test_lora_outputs_load_by_name_and_the_kl_reference_is_the_merged_sft_adapter(tiny_model_dir, tmp_path):
    from peft import LoraConfig, get_peft_model

    from agentrl_lib.models import load_policy, resolve_model_path, save_policy

    base, tok = load_policy(tiny_model_dir, device="cpu")
    peft_model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM"))
    torch.manual_seed(0)
    for n, p in peft_model.named_parameters():
        if "lora_B" in n:
            p.data.normal_(0, 0.5)  # an adapter that changes the model (a trained SFT adapter would)
    sft_dir = tmp_path / "sft"
    save_policy(peft_model, tok, sft_dir / "policy")  # the layout `agentrl sft --lora-rank` writes
    assert resolve_model_path(str(sft_dir)) == str(sft_dir / "policy")

    cfg = make_cfg(coin_games(tmp_path / "g"), algo="rloo", group_size=2, games_per_step=1, kl_coef=0.1)
    cfg.model = ModelConfig(device="cpu", lora_rank=4)  # the adapter's rank: it keeps training (check_init_lora)
    t = trainer(cfg, tmp_path, str(sft_dir))
    ids = torch.randint(0, 1000, (1, 12))
    with torch.no_grad():
        pol = t.policy(input_ids=ids).logits
        ref = t.ref(input_ids=ids).logits
        with t.policy.disable_adapter():
            bare = t.policy(input_ids=ids).logits
    assert torch.allclose(pol, ref, atol=1e-5), "π_ref must be the starting model (the SFT adapter merged)"
    assert not torch.allclose(bare, ref, atol=1e-3), "the bare base model is not the starting model"
    t.train()
    t.close()
    # a LoRA run directory is loadable by name (eval --model RUN)
    assert resolve_model_path(str(tmp_path / "run")).endswith("policy")
    model, _ = load_policy(str(tmp_path / "run"), device="cpu")
    assert hasattr(model, "peft_config")


# ------------------------------------------------------------------------------------- item 11: an empty reply
def test_an_empty_reply_sends_no_command_and_is_invalid(cooking_games):
    from agentrl_lib.envs.textworld import EMPTY_REPLY, TextWorldEnv

    env = TextWorldEnv()
    try:
        first = env.reset(cooking_games.games[0].path)
        res = env.step("")
        assert res.obs == EMPTY_REPLY and not res.info.valid and res.reward == 0.0 and not res.done
        look = env.step("look")  # the old code sent `look` for an empty reply: a free observation
        assert look.obs != res.obs and look.info.valid
        assert first.info.score == look.info.score
    finally:
        env.close()
