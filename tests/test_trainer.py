"""The Trainer (agentrl_lib/trainer.py): one update changes every trainable parameter for each estimator, a resumed
run continues, env failures end episodes and not the run, and the regression tests of the correctness review (issue
"Trustworthy numbers"), one or more per item: each failed on the code before its fix. Tiny random-weight models and
scripted environments keep them fast; the last test runs the embedded model end to end (slow)."""
from __future__ import annotations

import json
import math

import pytest
import torch

from agentrl_lib.config import AlgoConfig, EnvConfig, ModelConfig, RewardConfig, RunConfig, TrainConfig
from agentrl_lib.diagnostics import is_finite_row
from agentrl_lib.envs.pool import SerialPool
from agentrl_lib.envs.protocol import EnvFailure
from agentrl_lib.models import load_policy
from agentrl_lib.trainer import Trainer

from helpers import BrokenEnv, CoinEnv, ParityEnv, coin_games, scripted_games


def make_cfg(games, algo="grpo", group_size=4, games_per_step=2, **train):
    kw = dict(steps=1, games_per_step=games_per_step, minibatch_size=group_size * games_per_step, max_new_tokens=5,
              temperature=1.0, lr=1e-3, seed=1)
    kw.update(train)
    algo_kw = {k: kw.pop(k) for k in list(kw) if k in AlgoConfig.__dataclass_fields__}
    return RunConfig(env=EnvConfig(games=games, max_turns=2), reward=RewardConfig(kind="dense"),
                     algo=AlgoConfig.from_preset(algo, group_size=group_size, **algo_kw),
                     model=ModelConfig(device="cpu"),
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


@pytest.mark.trains
@pytest.mark.parametrize("algo", ["grpo", "rloo"])
def test_one_env_failing_at_reset_ends_one_episode_not_the_run(algo, tiny_model_dir, tmp_path):
    cfg = make_cfg(coin_games(tmp_path / "g"), algo=algo, group_size=2, games_per_step=2)
    t = trainer(cfg, tmp_path, tiny_model_dir, pool=ResetFailsInSlot(4, bad_slots=[1]))  # group 0 keeps one episode
    row = t.step(0)
    assert row["env_errors"] == 1 and row["singleton_groups"] == 1 and row["episodes"] == 4
    assert all(math.isfinite(v) for k, v in row.items() if isinstance(v, float) and k != "explained_variance")


# ------------------------------------------------------------- item 5: π_old from the training forward, TIS
@pytest.mark.trains
@pytest.mark.parametrize("algo", ["ppo", "grpo", "rloo"])
def test_pi_old_comes_from_the_training_forward_and_the_mismatch_is_logged(algo, tiny_model_dir, tmp_path,
                                                                           monkeypatch):
    """Plant a rollout engine whose log-probs are off by 0.5 (as a bf16 or vLLM sampler can be): with π_old taken
    from the trainer's forward the first (only) minibatch starts at ratio exactly 1 and nothing is clipped; the
    mismatch is logged for every algorithm."""
    from agentrl_lib.generation import GENERATORS

    backend = GENERATORS[ModelConfig().generator]  # the default rollout backend (LiveRowsGenerator)
    real = backend.generate

    def shifted(*a, **k):
        out = real(*a, **k)
        out.logprobs = [[x - 0.5 for x in row] for row in out.logprobs]
        return out

    monkeypatch.setattr(backend, "generate", shifted)
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


# ------------------------------------------------------------------ item 7: an env crash mid-episode
class CrashOnSecondStep(SerialPool):
    def step(self, slots, actions):
        self.calls = getattr(self, "calls", 0) + 1
        out = super().step(slots, actions)
        return [EnvFailure("worker crashed (test)") if (s == 1 and self.calls == 1) else r for s, r in zip(slots, out)]


@pytest.mark.trains
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
@pytest.mark.trains
def test_starpo_s_filter_selects_before_anything_is_forwarded(tiny_model_dir, tmp_path, monkeypatch):
    import agentrl_lib.policy as policy_mod
    import agentrl_lib.update as update_mod

    rows_forwarded = []
    real = update_mod.token_forward

    def spy(model, input_ids, *a, **k):
        rows_forwarded.append((torch.is_grad_enabled(), input_ids.shape[0]))
        return real(model, input_ids, *a, **k)

    monkeypatch.setattr(update_mod, "token_forward", spy)  # the no-grad passes (update.no_grad_forward)
    monkeypatch.setattr(policy_mod, "token_forward", spy)  # the update's forward (policy.TokenModel)
    cfg = make_cfg(coin_games(tmp_path / "g", n=4), algo="grpo", group_size=2, games_per_step=4,
                   keep_top_std=0.5, minibatch_size=2)
    row = trainer(cfg, tmp_path, tiny_model_dir).step(0)
    assert row["kept_fraction"] == 0.5 and row["skipped_update"] == 0.0
    no_grad = [n for grad, n in rows_forwarded if not grad]  # π_old of the 4 kept (in chunks of similar length)
    minibatches = [n for grad, n in rows_forwarded if grad]  # then 2 minibatches of 2
    assert sum(no_grad) == 4 and minibatches == [2, 2], rows_forwarded


@pytest.mark.trains
def test_policy_loss_is_logged_alone_and_both_grad_norms_are_logged(tiny_model_dir, tmp_path):
    cfg = make_cfg(coin_games(tmp_path / "g"), algo="ppo", entropy_coef=10.0, epochs=1)
    row = trainer(cfg, tmp_path, tiny_model_dir).step(0)
    # with π_old from the training forward the first minibatch's surrogate is −mean(A) over tokens; whitened A
    # has mean 0, so the surrogate alone is ≈ 0 while the total loss carries −10 · entropy (≈ −10 · 10.8)
    assert abs(row["policy_loss"]) < 1e-4, row["policy_loss"]
    assert row["grad_norm"] > 0 and row["value_grad_norm"] > 0 and row["nonfinite_updates"] == 0


@pytest.mark.trains
def test_end_of_training_eval_uses_eval_temperature_and_the_observation_options(tiny_model_dir, tmp_path,
                                                                                monkeypatch):
    import agentrl_lib.evaluate as evaluate_mod
    from agentrl_lib import cli

    seen = {}

    def fake_evaluate(model, tok, games, **kw):
        seen.update(kw)
        return {"success_rate": 0.0, "mean_turns": 0.0, "invalid_rate": 0.0, "n_games": 1, "per_game": []}

    monkeypatch.setattr(evaluate_mod, "evaluate", fake_evaluate)
    monkeypatch.setattr("agentrl_lib.trainer.open_pool", lambda env_cfg, n, *_: SerialPool(n, factory=CoinEnv))
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


# -------------------------------------------------------------------------- item 4: LoRA outputs by name, π_ref
@pytest.mark.trains
def test_lora_outputs_load_by_name_and_the_kl_reference_is_the_merged_sft_adapter(tiny_model_dir, tmp_path):
    from peft import LoraConfig, get_peft_model

    from agentrl_lib.model_paths import resolve_model_path
    from agentrl_lib.models import load_policy, save_policy

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


# ------------------------------------------------------- one update, resume, every env failing (ParityEnv games)
@pytest.mark.trains
@pytest.mark.parametrize("algo,checkpointing", [("ppo", False), ("grpo", False), ("rloo", False), ("ppo", True)])
def test_one_update_changes_every_parameter(algo, checkpointing, tiny_model_dir, tmp_path):
    games = scripted_games(tmp_path / "games")
    cfg = RunConfig(env=EnvConfig(games=str(games), max_turns=2), reward=RewardConfig(kind="dense"),
                    algo=AlgoConfig.from_preset(algo, group_size=4, kl_coef=0.01),
                    model=ModelCPU(),
                    train=TrainConfig(steps=1, games_per_step=2, minibatch_size=8, lr=1e-3, max_new_tokens=6,
                                      temperature=1.0, seed=1, gradient_checkpointing=checkpointing))
    trainer = Trainer(cfg, tmp_path / "run", init=tiny_model_dir, pool=SerialPool(8, factory=ParityEnv),
                      progress=False)
    assert trainer.policy.model.gradient_checkpointing == checkpointing
    before = {n: p.detach().clone() for n, p in trainer.policy.named_parameters() if p.requires_grad}
    vh_before = None if trainer.value_head is None else trainer.value_head.linear.weight.detach().clone()
    row = trainer.step(0)
    assert row["skipped_update"] == 0.0 and row["return_std"] > 0
    unchanged = [n for n, p in trainer.policy.named_parameters() if p.requires_grad and torch.equal(p, before[n])]
    assert not unchanged, f"parameters not updated: {unchanged}"
    if algo == "ppo":
        assert not torch.equal(trainer.value_head.linear.weight, vh_before)
        assert "value_loss" in row and "explained_variance" in row
    assert is_finite_row(row), row
    for key in ("success_rate", "return_mean", "kl_ref", "entropy", "clip_frac", "grad_norm", "gen_tokens_per_s",
                "step_seconds", "invalid_rate", "mean_turns"):
        assert key in row


def ModelCPU():
    from agentrl_lib.config import ModelConfig

    return ModelConfig(device="cpu")


@pytest.mark.slow
@pytest.mark.trains
def test_checkpoint_resume_continues_the_run(tiny_model_dir, tmp_path):
    games = scripted_games(tmp_path / "games")

    def cfg(steps):
        return RunConfig(env=EnvConfig(games=str(games), max_turns=2),
                         algo=AlgoConfig.from_preset("rloo", group_size=4, kl_coef=0.01), model=ModelCPU(),
                         train=TrainConfig(steps=steps, games_per_step=1, minibatch_size=4, max_new_tokens=4,
                                           checkpoint_every=1, lr=1e-3))

    run = tmp_path / "run"
    t1 = Trainer(cfg(1), run, init=tiny_model_dir, pool=SerialPool(4, factory=ParityEnv), progress=False)
    t1.train()
    assert (run / "checkpoints" / "latest").read_text() == "step_000001"
    assert json.loads((run / "metrics.jsonl").read_text().splitlines()[0])["skipped_update"] == 0.0, "step 1 must learn"
    assert not list((run / "checkpoints").glob(".tmp-*")), "no temp checkpoint left behind"
    with pytest.raises(FileExistsError, match="--resume"):
        Trainer(cfg(2), run, init=tiny_model_dir, pool=SerialPool(4, factory=ParityEnv), progress=False)
    # a row written after the checkpoint (an interrupted step) is dropped on resume
    with open(run / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": 2, "partial": True}) + "\n")
    t2 = Trainer(cfg(2), run, resume=True, pool=SerialPool(4, factory=ParityEnv), progress=False)
    assert t2.start_step == 1
    # the KL reference of the resumed run is the model the run started from, not the checkpoint
    init, _ = load_policy(tiny_model_dir, device="cpu")
    ref = dict(t2.ref.named_parameters())
    assert all(torch.equal(p, ref[n]) for n, p in init.named_parameters())
    assert any(not torch.equal(p, ref[n]) for n, p in t2.policy.named_parameters()), "step 1 moved the policy"
    rows = t2.train()
    assert [r["step"] for r in rows] == [1, 2] and "partial" not in rows[-1]
    assert [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    assert (run / "checkpoints" / "latest").read_text() == "step_000002"
    assert not (run / "learning_curve.png").exists(), "the trainer does not plot: run_rl draws the curves"


@pytest.mark.trains
def test_a_step_where_every_env_fails_is_logged_not_fatal(tiny_model_dir, tmp_path):
    games = scripted_games(tmp_path / "games")
    cfg = RunConfig(env=EnvConfig(games=str(games), max_turns=2, max_env_error_frac=1.0),  # 1: never stop
                    algo=AlgoConfig.from_preset("rloo", group_size=2),
                    model=ModelCPU(), train=TrainConfig(steps=2, games_per_step=1, max_new_tokens=4))
    trainer = Trainer(cfg, tmp_path / "run", init=tiny_model_dir, pool=SerialPool(2, factory=BrokenEnv),
                      progress=False)
    rows = trainer.train()
    assert [r["skipped_update"] for r in rows] == [1.0, 1.0] and rows[0]["env_errors"] == 2
    assert "engine exploded" in rows[0]["env_error_reasons"][0]


# -------------------- the embedded model end to end: load, a short rollout on a real game, one RL update (≈ 1 min)
@pytest.mark.trains
@pytest.mark.subprocess
@pytest.mark.slow
def test_embedded_model_rollout_and_one_ppo_update(cooking_games, tmp_path):
    model, tok = load_policy("embedded")
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(134.5e6, rel=0.01)
    cfg = RunConfig(env=EnvConfig(games=str(cooking_games.root), max_turns=2),
                    algo=AlgoConfig.from_preset("ppo", group_size=2),
                    train=TrainConfig(steps=1, games_per_step=1, minibatch_size=2, max_new_tokens=8, seed=0))
    trainer = Trainer(cfg, tmp_path / "run", init="embedded", progress=False)
    before = trainer.policy.model.layers[0].mlp.down_proj.weight.detach().clone()
    rows = trainer.train()
    trainer.close()
    row = rows[0]
    assert row["episodes"] == 2 and row["mean_turns"] == 2 and row["generated_tokens"] > 0
    assert row["logprob_mismatch"] < 1e-3, "rollout log-probs must match the training forward"
    assert is_finite_row(row)
    assert not torch.equal(before, trainer.policy.model.layers[0].mlp.down_proj.weight)
    # the checkpoint reloads as a model for `agentrl eval --model RUN_DIR`
    reloaded, _ = load_policy(str(tmp_path / "run"))
    assert torch.equal(reloaded.model.layers[0].mlp.down_proj.weight,
                       trainer.policy.model.layers[0].mlp.down_proj.weight)


# ------------------------------------------------------------ issue 51 item 2: π_old and V_old from the rollout
def _rollout_batch(t):
    trajs, _ = t._rollout(0)
    return t._collate(trajs, [[0.0] * tr.n_turns for tr in trajs], list(range(len(trajs))))


@pytest.mark.trains
def test_ppo_takes_pi_old_and_v_old_from_the_rollout(tiny_model_dir, tmp_path, monkeypatch):
    """PPO with `model.generator: hf-live` and algo.old_logprobs 'behaviour': the rollout keeps the hidden state that
    sampled each token, V_old is the value head on it and no no-grad forward runs. Against that forward (what
    'recompute' runs): V_old within 1e-4, π_old within 1e-4, on a value head with random weights. Negative control:
    the hidden states one position late (the state after the token, not the one that sampled it) are caught."""
    import dataclasses

    from agentrl_lib import trainer as trainer_mod
    from agentrl_lib.policy import values_at
    from agentrl_lib.update import no_grad_forward

    cfg = make_cfg(coin_games(tmp_path / "g"), algo="ppo", group_size=2, games_per_step=2, old_logprobs="behaviour",
                   max_new_tokens=6)
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, generator="hf-live"))
    t = trainer(cfg, tmp_path, tiny_model_dir)
    torch.manual_seed(0)
    torch.nn.init.normal_(t.value_head.linear.weight, std=0.5)  # zero at init: every V would be 0
    batch = _rollout_batch(t)
    assert "behaviour_hidden" in batch and batch["mask"].sum() > 10
    hidden = batch["behaviour_hidden"].clone()
    ref = no_grad_forward(t.policy, dict(batch), cfg.train, t.dp, t.value_head)

    def no_forward(*args, **kwargs):
        raise AssertionError("the no-grad forward ran")

    monkeypatch.setattr(trainer_mod, "no_grad_forward", no_forward)
    metrics = t._old_forward(batch)
    mask = batch["mask"].bool()
    assert "behaviour_hidden" not in batch and "logprob_mismatch" not in metrics
    assert ref["values"][mask].abs().max() > 0.1  # values far from 0: a wrong state shows
    v_gap = (batch["old_values"] - ref["values"])[mask].abs().max().item()
    lp_gap = (batch["old_logprobs"] - ref["logprobs"])[mask].abs().max().item()
    print(f"V_old gap {v_gap:.2e}, pi_old gap {lp_gap:.2e} over {int(mask.sum())} tokens")
    assert v_gap < 1e-4 and lp_gap < 1e-4
    late = torch.cat([hidden[:, 1:], hidden[:, -1:]], dim=1)  # control: the state after each token
    assert (values_at(t.value_head, late, batch["mask"]) - ref["values"])[mask].abs().max() > 1e-2
    row = t.step(1)  # the whole step on this path
    assert row["episodes"] == 4 and is_finite_row(row) and "value_loss" in row, row
