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


def _trainer(tiny_model_dir, tmp_path, name: str, mixed: str) -> Trainer:
    cfg = RunConfig(env=EnvConfig(games=str(scripted_games(tmp_path / "games")), max_turns=2),
                    reward=RewardConfig(kind="dense"), algo=AlgoConfig.from_preset("ppo", group_size=4),
                    model=ModelConfig(device="cpu", dtype="float32"),
                    train=TrainConfig(steps=1, games_per_step=2, minibatch_size=8, lr=1e-3, max_new_tokens=6,
                                      temperature=1.0, seed=1, mixed_precision=mixed))
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
    if mixed == "bf16":
        assert all(amp for _, amp in seen) and trainer.use_tis and "tis_weight_mean" in row
        assert row["logprob_mismatch"] > 0  # the rollout's and the update's bf16 log-probs differ
    else:  # control: nothing under autocast, no TIS
        assert not any(amp for _, amp in seen) and not trainer.use_tis


@pytest.mark.trains
def test_bf16_without_hardware_is_refused_in_one_line(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(trainer_mod, "bf16_problem", lambda device: "this CPU (Test) has neither avx512_bf16 nor "
                                                                    "amx_bf16, so bf16 is emulated and slower")
    with pytest.raises(ConfigError, match=r"mixed_precision bf16: this CPU \(Test\).*--mixed-precision no"):
        _trainer(tiny_model_dir, tmp_path, "refused", "bf16")
