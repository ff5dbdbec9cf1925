"""agentrl_lib/precision.py's rules: the autocast dtype of a training run from model.dtype × train.mixed_precision,
its label in records, and when truncated IS weights the loss. The bf16 guard (bf16_logprob_gap) and the trainer's and
SFT's use of these rules are tested in test_mixed_precision.py, where they train."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from agentrl_lib import precision
from agentrl_lib.config import AlgoConfig, TrainConfig
from agentrl_lib.config_values import ModelLoadError


def test_training_precision_rules(monkeypatch):
    """model.dtype × train.mixed_precision → the autocast dtype (weights always float32): auto is bf16 on a bf16 GPU
    and fp32 on every CPU, avx512_bf16 or not (results stay comparable); bfloat16 or mixed_precision bf16 ask for it
    anywhere; float16 cannot train (no loss scaling). Controls: a GPU without bf16 stays fp32; float32 + no is fp32."""
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    monkeypatch.setattr(precision, "bf16_problem", lambda d: None)  # a CPU / GPU with bf16
    tp = precision.training_precision
    assert tp("auto", "no", cpu) is None and tp("float32", "no", cpu) is None and tp("float32", "no", gpu) is None
    assert tp("auto", "no", gpu) == torch.bfloat16
    assert tp("bfloat16", "no", cpu) == tp("float32", "bf16", cpu) == tp("auto", "bf16", gpu) == torch.bfloat16
    monkeypatch.setattr(precision, "bf16_problem", lambda d: "the GPU Test has no bf16")
    assert tp("auto", "no", gpu) is None
    with pytest.raises(ModelLoadError, match="float16 cannot train.*loss scaling"):
        tp("float16", "no", cpu)
    with pytest.raises(ModelLoadError, match="not supported"):
        tp("fp8", "no", cpu)
    assert precision.precision_label(None) == "fp32"
    assert precision.precision_label(torch.bfloat16) == "bf16-autocast"


def test_run_precision_names_what_a_record_ran(monkeypatch):
    """run_precision, from a record's model.dtype, train.mixed_precision and torch_device: fp32 on a CPU by
    default, bf16-autocast when asked or on a bf16 GPU; 'unknown (...)' for a configuration that cannot train."""
    monkeypatch.setattr(precision, "bf16_problem", lambda d: None)
    assert precision.run_precision("auto", "no", "cpu") == "fp32"
    assert precision.run_precision("auto", "bf16", "cpu") == "bf16-autocast"
    assert precision.run_precision("auto", "no", "cuda:0") == "bf16-autocast"
    assert precision.run_precision("float16", "no", "cpu").startswith("unknown (model.dtype float16 cannot train")


def test_tis_applies_when_on_or_when_low_precision_recomputes_pi_old():
    """algo.tis 'on' always; 'auto' only with low precision (a compute dtype other than float32, or
    train.mixed_precision bf16) and π_old recomputed. Controls: fp32 auto, π_old from the behaviour policy, 'off'."""
    def config(tis: str, mixed: str = "no", old: str = "recompute"):
        return SimpleNamespace(algo=AlgoConfig(tis=tis, old_logprobs=old), train=TrainConfig(mixed_precision=mixed))

    assert precision.tis_applies(config("on"), torch.float32)
    assert precision.tis_applies(config("auto"), torch.bfloat16)
    assert precision.tis_applies(config("auto", mixed="bf16"), torch.float32)
    assert not precision.tis_applies(config("auto"), torch.float32)
    assert not precision.tis_applies(config("auto", old="behaviour"), torch.bfloat16)
    assert not precision.tis_applies(config("off", mixed="bf16"), torch.bfloat16)
