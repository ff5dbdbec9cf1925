"""agentrl_lib/models.py's cheap functions: the LoRA check of a starting model, the frozen reference policy, peft
unwrapping and gradient checkpointing. Loading real models is tested where it is used (test_trainer.py,
test_mixed_precision.py, test_cli.py, ...); devices are test_hardware.py's, model paths test_model_paths.py's."""
from __future__ import annotations

import pytest
import torch

from agentrl_lib import models
from agentrl_lib.config import ConfigError, ModelConfig

from helpers import write_model


def test_check_init_lora_keeps_or_merges_an_adapter_and_refuses_another_rank(tmp_path):
    lora = str(write_model(tmp_path / "lora", adapter_rank=8))
    full = str(write_model(tmp_path / "full"))
    assert models.check_init_lora(lora, 8) == 8
    assert models.check_init_lora(lora, 0) == 8
    assert models.check_init_lora(full, 4) is None
    with pytest.raises(ConfigError):
        models.check_init_lora(lora, 4)


# ------------------------------------------------------------------------------------------ reference policy
def test_frozen_reference_is_a_frozen_copy(tmp_path):
    torch.manual_seed(0)
    policy = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Dropout(0.1)).train()
    ref = models.frozen_reference(policy)
    assert ref is not policy and ref.training is False
    assert [p.requires_grad for p in ref.parameters()] == [False, False]
    assert [p.requires_grad for p in policy.parameters()] == [True, True] and policy.training is True
    assert all(torch.equal(a, b) for a, b in zip(ref.parameters(), policy.parameters()))
    with torch.no_grad():
        policy[0].weight.add_(1.0)
    assert not torch.equal(ref[0].weight, policy[0].weight)  # a copy, not a view


def test_reference_policy_copies_a_full_policy_and_leaves_a_created_adapter_to_switch_off(tmp_path):
    name = str(write_model(tmp_path / "full"))
    policy = torch.nn.Linear(2, 2)
    ref = models.reference_policy(policy, ModelConfig(name=name), resumed=False)
    assert isinstance(ref, torch.nn.Linear) and ref is not policy and not ref.weight.requires_grad

    class WithAdapter(torch.nn.Linear):  # a peft model the run created: its adapter switched off is π_ref
        def disable_adapter(self):
            raise AssertionError("not called here")

    assert models.reference_policy(WithAdapter(2, 2), ModelConfig(name=name), resumed=False) is None


def test_base_model_unwraps_a_peft_model_only():
    inner = torch.nn.Linear(2, 2)

    class Wrapped(torch.nn.Module):
        def get_base_model(self):
            return inner

    assert models.base_model(Wrapped()) is inner
    assert models.base_model(inner) is inner


def test_gradient_checkpointing_is_switched_on():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1)
    model = LlamaForCausalLM(cfg)
    name = "is_activation_checkpointing" if hasattr(type(model), "is_activation_checkpointing") else \
        "is_gradient_checkpointing"  # transformers >= 5.23 / older 5.x (the vLLM environment's 5.19)
    assert getattr(model, name) is False
    models.enable_gradient_checkpointing(model)
    assert getattr(model, name) is True
