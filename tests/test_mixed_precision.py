"""train.mixed_precision 'bf16': rollouts, no-grad passes and the update's forward run under bf16 autocast with fp32
weights, TIS on and logprob_mismatch logged; refused in one line where the hardware has no bf16 (detected from
/proc/cpuinfo, never assumed). Control: with 'no' nothing runs under autocast."""
import pytest
import torch

import agentrl_lib.models as models_mod
import agentrl_lib.policy as policy_mod
import agentrl_lib.trainer as trainer_mod
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
    assert models_mod.bf16_problem(torch.device("cpu")) is None
    cpuinfo("avx512f")
    why = models_mod.bf16_problem(torch.device("cpu"))
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
    monkeypatch.setattr(trainer_mod, "bf16_problem", lambda device: None)  # bf16 emulated is slow, not wrong
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
        if (why := models_mod.bf16_problem(torch.device("cpu"))) is not None:
            pytest.skip(f"logprob_mismatch > 0 not checked: {why} (every other assertion of this test passed)")
        assert row["logprob_mismatch"] > 0
    else:  # control: nothing under autocast, no TIS
        assert not any(amp for _, amp in seen) and not trainer.use_tis


@pytest.mark.trains
def test_bf16_without_hardware_is_refused_in_one_line(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(trainer_mod, "bf16_problem", lambda device: "this CPU (Test) has neither avx512_bf16 nor "
                                                                    "amx_bf16, so bf16 is emulated and slower")
    with pytest.raises(ConfigError, match=r"mixed_precision bf16: this CPU \(Test\).*--mixed-precision no"):
        _trainer(tiny_model_dir, tmp_path, "refused", "bf16")


@pytest.mark.trains
def test_bf16_guard_stops_before_the_first_update_when_bf16_changes_the_policy(tiny_model_dir, tmp_path, monkeypatch):
    """train.bf16_max_logprob_gap: the first batch's mean |log π_bf16 − log π_fp32| above the limit stops the run in
    one line before any weight moves; the gap is the one a direct bf16 / fp32 forward of the same batch gives (to 1e-3:
    bf16 rounds the shared-prefix chunks differently from one padded forward). Control:
    a limit above the gap lets the step train; 0 logs the gap only; a negative limit is refused."""
    monkeypatch.setattr(trainer_mod, "bf16_problem", lambda device: None)
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
