"""train.mixed_precision 'bf16': rollouts, no-grad passes and the update's forward run under bf16 autocast with fp32
weights, TIS on and logprob_mismatch logged; refused in one line where the hardware has no bf16 (detected from
/proc/cpuinfo, never assumed). Control: with 'no' nothing runs under autocast."""
import pytest
import torch

import agentrl_lib.hardware as hardware_mod
import agentrl_lib.models as models_mod
import agentrl_lib.policy as policy_mod
import agentrl_lib.precision as precision_mod
import agentrl_lib.trainer as trainer_mod
import agentrl_lib.trainer_parts as trainer_parts_mod
import agentrl_lib.update as update_mod
from agentrl_lib.config import AlgoConfig, ConfigError, EnvConfig, ModelConfig, RewardConfig, RunConfig, TrainConfig
from agentrl_lib.envs.pool import SerialPool
from agentrl_lib.trainer import Trainer

from helpers import ParityEnv, scripted_games


def test_bf16_hardware_is_read_from_the_cpu_flags(monkeypatch, tmp_path):
    import builtins

    real_open = builtins.open

    def cpuinfo(flags: str):
        path = tmp_path / "cpuinfo"
        path.write_text(f"model name\t: Test CPU\nflags\t\t: fpu sse2 avx2 {flags}\n")
        monkeypatch.setattr(builtins, "open",
                            lambda p, *a, **k: real_open(path if p == "/proc/cpuinfo" else p, *a, **k))

    cpuinfo("avx512f amx_bf16")
    assert hardware_mod.bf16_problem(torch.device("cpu")) is None
    cpuinfo("avx512f")
    why = hardware_mod.bf16_problem(torch.device("cpu"))
    assert "Test CPU" in why and "avx512_bf16" in why and "\n" not in why
    with pytest.raises(ConfigError, match="mixed_precision"):
        TrainConfig(mixed_precision="fp8").validate()


def _trainer(tiny_model_dir, tmp_path, name: str, mixed: str, gap_limit: float = 0.0) -> Trainer:
    cfg = RunConfig(env=EnvConfig(games=str(scripted_games(tmp_path / "games")), max_turns=2),
                    reward=RewardConfig(kind="dense"), algo=AlgoConfig.from_preset("ppo", group_size=4),
                    model=ModelConfig(device="cpu", dtype="float32"),
                    train=TrainConfig(steps=1, games_per_step=2, minibatch_size=8, lr=1e-3, max_new_tokens=6,
                                      temperature=1.0, seed=1, mixed_precision=mixed,
                                      bf16_max_logprob_gap=gap_limit))
    return Trainer(cfg, tmp_path / name, init=tiny_model_dir, pool=SerialPool(8, factory=ParityEnv), progress=False)


@pytest.mark.trains
@pytest.mark.parametrize("mixed", ["bf16", "no"])
def test_bf16_autocast_trains_with_fp32_weights_and_tis(tiny_model_dir, tmp_path, monkeypatch, mixed):
    monkeypatch.setattr(trainer_parts_mod, "bf16_problem", lambda device: None)  # bf16 emulated is slow, not wrong
    seen: list = []
    real = policy_mod.token_forward

    def spy(*a, **k):
        seen.append((torch.is_grad_enabled(), torch.is_autocast_enabled("cpu")))
        return real(*a, **k)

    monkeypatch.setattr(policy_mod, "token_forward", spy)
    monkeypatch.setattr(update_mod, "token_forward", spy)  # the no-grad passes (update.no_grad_forward)
    trainer = _trainer(tiny_model_dir, tmp_path, mixed, mixed)
    before = [p.detach().clone() for p in trainer.policy.parameters()]
    try:
        row = trainer.step(0)
    finally:
        trainer.close()
    assert row["skipped_update"] == 0.0 and all(p.dtype == torch.float32 for p in trainer.policy.parameters())
    assert any(not torch.equal(b, p) for b, p in zip(before, trainer.policy.parameters()))
    assert {grad for grad, _ in seen} == {True, False}  # the no-grad pass and the update both ran
    if mixed == "bf16":  # every pass under autocast but the bf16 guard's fp32 pass (no grad, once)
        assert [amp for grad, amp in seen].count(False) == 1 and all(amp for grad, amp in seen if grad)
        assert seen.count((False, True)) == 1  # the guard reuses π_old's bf16 pass: no second bf16 no-grad pass
        assert trainer.use_tis and "tis_weight_mean" in row and row["bf16_logprob_gap"] > 0
        assert row["logprob_mismatch"] >= 0
        # the rollout's and the update's bf16 log-probs differ only where the CPU computes in bf16: on an AVX2-only
        # CPU (AMD EPYC Zen 3) torch emulates it and the two passes agree exactly (logprob_mismatch 0), so this one
        # assertion is hardware-dependent: detected, never assumed
        if (why := hardware_mod.bf16_problem(torch.device("cpu"))) is not None:
            pytest.skip(f"logprob_mismatch > 0 not checked: {why} (every other assertion of this test passed)")
        assert row["logprob_mismatch"] > 0
    else:  # control: nothing under autocast, no TIS
        assert not any(amp for _, amp in seen) and not trainer.use_tis


@pytest.mark.trains
def test_bf16_without_hardware_is_refused_in_one_line(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(trainer_parts_mod, "bf16_problem", lambda device: "this CPU (Test) has neither avx512_bf16 nor "
                                                                    "amx_bf16, so bf16 is emulated and slower")
    with pytest.raises(ConfigError, match=r"mixed_precision bf16: this CPU \(Test\).*--mixed-precision no"):
        _trainer(tiny_model_dir, tmp_path, "refused", "bf16")


@pytest.mark.trains
def test_bf16_guard_stops_before_the_first_update_when_bf16_changes_the_policy(tiny_model_dir, tmp_path, monkeypatch):
    """train.bf16_max_logprob_gap: the first batch's mean |log π_bf16 − log π_fp32| above the limit stops the run in
    one line before any weight moves; the gap is the one a direct bf16 / fp32 forward of the same batch gives (to 1e-3:
    bf16 rounds the shared-prefix chunks differently from one padded forward). Control:
    a limit above the gap lets the step train; 0 logs the gap only; a negative limit is refused."""
    monkeypatch.setattr(trainer_parts_mod, "bf16_problem", lambda device: None)
    seen: list[float] = []
    real = trainer_mod.bf16_logprob_gap
    monkeypatch.setattr(trainer_mod, "bf16_logprob_gap", lambda model, batch, train, dp, low: seen.append(
        _direct_gap(model, batch, train.temperature)) or real(model, batch, train, dp, low))
    trainer = _trainer(tiny_model_dir, tmp_path, "stopped", "bf16", gap_limit=1e-9)
    before = [p.detach().clone() for p in trainer.policy.parameters()]
    try:
        with pytest.raises(ConfigError, match=r"mixed_precision bf16 changes this policy: .* nats per token on the "
                                              r"first batch \(limit train.bf16_max_logprob_gap 1e-09\).*"
                                              r"--mixed-precision no"):
            trainer.step(0)
        assert all(torch.equal(b, p) for b, p in zip(before, trainer.policy.parameters()))
    finally:
        trainer.close()
    trainer = _trainer(tiny_model_dir, tmp_path, "trains", "bf16", gap_limit=10.0)
    try:
        row = trainer.step(0)
        assert row["skipped_update"] == 0.0 and row["bf16_logprob_gap"] == pytest.approx(seen[-1], rel=1e-3)
        assert "bf16_logprob_gap" not in trainer.step(1)  # once per process
    finally:
        trainer.close()
    with pytest.raises(ConfigError, match="bf16_max_logprob_gap must be >= 0"):
        TrainConfig(bf16_max_logprob_gap=-1.0).validate()


def _direct_gap(model, batch, T: float) -> float:
    """The guard's number computed independently: one plain forward of the padded batch in fp32 and one under bf16
    autocast, log-softmax at the training temperature T, mean |difference| over the policy tokens."""
    ids, attn, mask = batch["input_ids"], batch["attention_mask"], batch["mask"].float()
    with torch.no_grad():
        out = []
        for amp in (True, False):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):  # the caller's autocast is on
                logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float() / T
            lp = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None])[..., 0]
            out.append(torch.cat([torch.zeros_like(lp[:, :1]), lp], 1))
    return (((out[0] - out[1]).abs() * mask).sum() / mask.sum()).item()


# ------------------------------------------------------------------------------------------------ bf16 keeps updates
def _flat(model) -> torch.Tensor:
    return torch.cat([p.detach().float().flatten() for p in model.parameters()])


def _update(tiny_model_dir, weights: str, autocast: torch.dtype | None, steps: int = 3, lr: float = 1e-5):
    """The change of every weight (flat, float32) after `steps` AdamW steps of the trainer's optimizer
    (update.make_optimizer) on one fixed next-token batch, the model loaded in `weights`, each forward under
    `autocast` (None: off), as the Trainer runs them."""
    torch.manual_seed(0)
    model, _ = models_mod.load_policy(tiny_model_dir, device="cpu", dtype=weights)
    ids = torch.randint(0, model.config.vocab_size, (4, 32), generator=torch.Generator().manual_seed(0))
    if weights == "float32":
        opt = update_mod.make_optimizer(model, None, TrainConfig(lr=lr))
    else:  # the planted bug: AdamW over bf16 weights (make_optimizer refuses them)
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.0)
    start = _flat(model)
    model.train()
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=autocast or torch.bfloat16, enabled=autocast is not None):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
    return _flat(model) - start


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return torch.nn.functional.cosine_similarity(a, b, 0).item()


def test_bf16_as_autocast_over_fp32_weights_keeps_a_small_update(tiny_model_dir):
    """Every bf16 training path (precision.training_precision) loads the weights in TRAINING_WEIGHTS (float32) and runs
    the forward under bf16 autocast: 3 AdamW steps at lr 1e-5 then move the weights as fp32 does (cosine of the update
    against fp32's >= 0.99, its norm within 5%). Control: the same steps with the weights loaded in bf16 and AdamW
    updating them in place (what model.dtype auto did on a GPU) lose the update (cosine well below: ~0.4 here, 0.10
    on SmolLM2 at lr 7e-6)."""
    amp = precision_mod.training_precision("bfloat16", "no", torch.device("cpu"))
    assert amp == torch.bfloat16 and precision_mod.TRAINING_WEIGHTS == "float32"
    ref = _update(tiny_model_dir, "float32", None)
    kept = _update(tiny_model_dir, precision_mod.TRAINING_WEIGHTS, amp)
    lost = _update(tiny_model_dir, "bfloat16", None)  # control: bf16 weights updated in place
    assert ref.norm() > 0 and not torch.equal(kept, ref)  # autocast did change the computation
    assert _cosine(kept, ref) >= 0.99 and abs(kept.norm() / ref.norm() - 1) < 0.05
    assert _cosine(lost, ref) < 0.8


def test_the_optimizer_refuses_weights_that_are_not_float32(tiny_model_dir):
    """update.make_optimizer refuses bf16 weights in one message (the planted control of the test above, made
    through the library, fails loudly); float32 ones build."""
    model, _ = models_mod.load_policy(tiny_model_dir, device="cpu", dtype="bfloat16")
    with pytest.raises(ValueError, match="torch.bfloat16, not float32: AdamW would update them in place"):
        update_mod.make_optimizer(model, None, TrainConfig())
    update_mod.make_optimizer(model.float(), None, TrainConfig())


@pytest.mark.trains
@pytest.mark.parametrize("dtype", ["bfloat16", "auto"])
def test_trainer_loads_fp32_master_weights_whatever_model_dtype_says(tiny_model_dir, tmp_path, monkeypatch, dtype):
    """model.dtype bfloat16 (and auto where it means bf16: a CUDA GPU, stood in for here by patching
    training_precision's device rule) trains float32 weights with the update's forward under bf16 autocast, TIS on,
    the precision named (Trainer.precision 'bf16-autocast'). model.dtype auto on a CPU stays fp32 with no autocast
    (control: the CPU default does not change numbers)."""
    monkeypatch.setattr(trainer_parts_mod, "bf16_problem", lambda device: None)
    if dtype == "auto":  # auto on a bf16 GPU: what training_precision returns there
        real = precision_mod.training_precision
        assert real("auto", "no", torch.device("cpu")) is None
        monkeypatch.setattr(trainer_parts_mod, "training_precision", lambda d, m, dev: torch.bfloat16)
    seen: list = []
    real_forward = policy_mod.token_forward

    def spy(*a, **k):
        seen.append((torch.is_grad_enabled(), torch.is_autocast_enabled("cpu")))
        return real_forward(*a, **k)

    monkeypatch.setattr(policy_mod, "token_forward", spy)
    cfg = RunConfig(env=EnvConfig(games=str(scripted_games(tmp_path / "games")), max_turns=2),
                    reward=RewardConfig(kind="dense"), algo=AlgoConfig.from_preset("ppo", group_size=4),
                    model=ModelConfig(device="cpu", dtype=dtype),
                    train=TrainConfig(steps=1, games_per_step=2, minibatch_size=8, lr=1e-3, max_new_tokens=6,
                                      temperature=1.0, seed=1, bf16_max_logprob_gap=0.0))
    trainer = Trainer(cfg, tmp_path / "run", init=tiny_model_dir, pool=SerialPool(8, factory=ParityEnv),
                      progress=False)
    try:
        assert trainer.precision == "bf16-autocast" and trainer.use_tis
        assert all(p.dtype == torch.float32 for p in trainer.policy.parameters())
        row = trainer.step(0)
    finally:
        trainer.close()
    assert row["skipped_update"] == 0.0 and all(p.dtype == torch.float32 for p in trainer.policy.parameters())
    assert any(amp for grad, amp in seen if grad) and all(amp for grad, amp in seen if grad)
    assert trainer.cfg.model.dtype == dtype  # the config keeps what was asked; the loads used float32


@pytest.mark.trains
def test_trainer_auto_dtype_on_cpu_is_fp32(tiny_model_dir, tmp_path):
    """Control of the test above: model.dtype auto on a CPU (with or without avx512_bf16) trains in fp32, no TIS."""
    cfg = RunConfig(env=EnvConfig(games=str(scripted_games(tmp_path / "games")), max_turns=2),
                    reward=RewardConfig(kind="dense"), algo=AlgoConfig.from_preset("ppo", group_size=4),
                    model=ModelConfig(device="cpu", dtype="auto"), train=TrainConfig(steps=1, games_per_step=2))
    trainer = Trainer(cfg, tmp_path / "run", init=tiny_model_dir, pool=SerialPool(8, factory=ParityEnv),
                      progress=False)
    try:
        assert trainer.precision == "fp32" and not trainer.use_tis and trainer.autocast_dtype is None
        assert all(p.dtype == torch.float32 for p in trainer.policy.parameters())
    finally:
        trainer.close()


@pytest.mark.trains
def test_sft_in_bf16_keeps_the_update_that_bf16_weights_lose(tiny_model_dir, cooking_games, tmp_path, monkeypatch):
    """SFT (TRL's SFTTrainer, its own AdamW) under the RL run's precision rules: dtype bfloat16 loads float32 weights
    and runs TRL with bf16=True (autocast, seen on by a hook): 3 walkthroughs, 3 steps at lr 1e-5 move the weights
    as fp32 SFT does (cosine >= 0.99; measured 1.0000), the saved weights are float32 and the summary names the
    precision. Control: the weights loaded in bf16 (TRAINING_WEIGHTS planted as bfloat16, what dtype auto did on a
    GPU) lose the update (cosine 0.15)."""
    from transformers import AutoModelForCausalLM

    import agentrl_lib.sft as sft_mod

    start = _flat(AutoModelForCausalLM.from_pretrained(tiny_model_dir))
    amp: list[bool] = []  # autocast on during the training forward (a hook on one projection)
    real_load = sft_mod.load_policy

    def load(*a, **k):
        model, tok = real_load(*a, **k)
        model.model.layers[0].mlp.down_proj.register_forward_hook(
            lambda mod, i, o: amp.append(torch.is_autocast_enabled("cpu") and o.dtype == torch.bfloat16))
        return model, tok

    monkeypatch.setattr(sft_mod, "load_policy", load)

    def moved(name: str, dtype: str):
        amp.clear()
        s = sft_mod.sft(tiny_model_dir, cooking_games, tmp_path / name, lr=1e-5, batch_size=1, epochs=1.0,
                        device="cpu", dtype=dtype)
        model = AutoModelForCausalLM.from_pretrained(tmp_path / name / "policy", dtype="auto")
        return s, model, _flat(model) - start

    s32, _, ref = moved("fp32", "float32")
    assert amp and not any(amp)
    s16, m16, kept = moved("bf16", "bfloat16")
    assert amp and all(amp)
    assert s32["precision"] == "fp32" and s16["precision"] == "bf16-autocast"
    assert len(s16["train_loss"]) == 3 and next(m16.parameters()).dtype == torch.float32
    assert s16["adamw"] == update_mod.adamw_impl(update_mod.adamw([{"params": [torch.zeros(1)]}]))
    assert not torch.equal(kept, ref) and _cosine(kept, ref) >= 0.99
    monkeypatch.setattr(sft_mod, "TRAINING_WEIGHTS", "bfloat16")  # the planted bug: bf16 weights in place
    _, _, lost = moved("lost", "bfloat16")
    assert _cosine(lost, ref) < 0.8
