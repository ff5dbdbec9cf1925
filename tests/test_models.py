"""agentrl_lib/models.py's cheap functions: device checks, CPU feature probing on sample /proc/cpuinfo files of the
kinds of CPU this project has run on (AVX2 only, AVX-512 with avx512_bf16, AMX) and one with AVX-512 but no bf16,
model-path resolution and adapters, and the frozen reference policy. Loading real models is tested where it is used
(test_trainer.py, test_mixed_precision.py, test_cli.py, ...)."""
from __future__ import annotations

import json

import pytest
import torch

from agentrl_lib import models
from agentrl_lib.config import ConfigError, ModelConfig
from agentrl_lib.models import ModelLoadError

# ------------------------------------------------------------------------------------------------------ devices
NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")


def test_pick_device_resolves_names_this_machine_has(monkeypatch):
    assert models.pick_device("cpu") == torch.device("cpu")
    assert models.pick_device("auto") == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    monkeypatch.setenv("WORLD_SIZE", "2")  # a data-parallel launch without a GPU still computes on the CPU
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert models.pick_device("auto") == (torch.device("cuda", 1 % torch.cuda.device_count())
                                          if torch.cuda.is_available() else torch.device("cpu"))


@pytest.mark.parametrize("name", ["tpu0", "cuda:x", "", "CPU", "cpu:0:1", 3])
def test_pick_device_refuses_what_is_not_a_device_name(name):
    with pytest.raises(ModelLoadError):
        models.pick_device(name)


@NO_CUDA
@pytest.mark.parametrize("name", ["cuda", "cuda:0", "cuda:3"])
def test_pick_device_refuses_cuda_without_a_gpu(name):
    with pytest.raises(ModelLoadError):
        models.pick_device(name)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_pick_device_refuses_a_gpu_index_past_the_count():
    with pytest.raises(ModelLoadError):
        models.pick_device(f"cuda:{torch.cuda.device_count()}")
    assert models.pick_device("cuda:0") == torch.device("cuda", 0)


@pytest.mark.skipif(torch.backends.mps.is_available(), reason="this machine has MPS")
def test_pick_device_refuses_mps_off_a_mac():
    with pytest.raises(ModelLoadError):
        models.pick_device("mps")


# ---------------------------------------------------------------------------------------------- CPU features
ZEN3 = ("AMD EPYC 7B13", "fpu vme sse sse2 ssse3 sse4_1 sse4_2 avx f16c fma avx2 bmi2 sha_ni vaes")
ZEN4 = ("AMD EPYC 9B14", "fpu sse4_2 avx avx2 fma avx512f avx512dq avx512bw avx512vl avx512_bf16 avx512_vnni")
SAPPHIRE_RAPIDS = ("Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz",
                   "fpu avx avx2 avx512f avx512bw avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8")
SKYLAKE = ("Intel(R) Xeon(R) CPU @ 2.00GHz", "fpu avx avx2 avx512f avx512dq avx512bw avx512vl")
AMX_ONLY = ("a CPU with AMX and no avx512_bf16 (none known)", "fpu avx2 avx512f amx_bf16 amx_tile")


def cpuinfo(tmp_path, model: str, flags: str, cores: int = 2):
    """A /proc/cpuinfo of `cores` identical processors, as Linux writes it (tab before the colon)."""
    blocks = [f"processor\t: {i}\nvendor_id\t: x\nmodel name\t: {model}\nflags\t\t: {flags}\nbugs\t\t: none\n"
              for i in range(cores)]
    path = tmp_path / "cpuinfo"
    path.write_text("\n".join(blocks))
    return path


@pytest.mark.parametrize("cpu, bf16_hardware", [(ZEN3, False), (SKYLAKE, False), (ZEN4, True),
                                                (SAPPHIRE_RAPIDS, True), (AMX_ONLY, True)],
                         ids=["zen3", "skylake", "zen4", "sapphire-rapids", "amx-only"])
def test_cpu_probing_reads_the_flags_and_decides_bf16_by_them(monkeypatch, tmp_path, cpu, bf16_hardware):
    model, flags = cpu
    monkeypatch.setattr(models, "CPUINFO", str(cpuinfo(tmp_path, model, flags)))
    assert models.cpu_flags() == flags.split()
    assert models.cpu_model() == model
    assert (models.bf16_problem(torch.device("cpu")) is None) is bf16_hardware


def test_cpu_probing_without_cpuinfo_says_unknown(monkeypatch, tmp_path):
    monkeypatch.setattr(models, "CPUINFO", str(tmp_path / "absent"))
    assert models.cpu_flags() is None
    assert models.cpu_model() == ""
    assert models.bf16_problem(torch.device("cpu")) is not None  # unknown hardware: bf16 is not assumed


def test_cpu_probing_of_a_cpuinfo_without_the_fields(monkeypatch, tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text("processor\t: 0\nHardware\t: BCM2835\n")  # e.g. an ARM board: no model name, no flags line
    monkeypatch.setattr(models, "CPUINFO", str(path))
    assert models.cpu_flags() == []
    assert models.cpu_model() == ""
    assert models.bf16_problem(torch.device("cpu")) is not None


def test_bf16_problem_of_a_device_without_autocast_setup():
    assert models.bf16_problem(torch.device("meta")) is not None


def test_this_machines_cpu_probe_agrees_with_itself():
    flags = models.cpu_flags()
    if flags is None:
        pytest.skip("no /proc/cpuinfo here")
    assert all(isinstance(f, str) and f == f.strip() and f for f in flags)
    assert (models.bf16_problem(torch.device("cpu")) is None) == bool({"avx512_bf16", "amx_bf16"} & set(flags))


# ---------------------------------------------------------------------------------------------- model paths
def write_model(path, adapter_rank: int | None = None):
    path.mkdir(parents=True)
    if adapter_rank is None:
        (path / "config.json").write_text("{}")
    else:
        (path / "adapter_config.json").write_text(json.dumps({"r": adapter_rank}))
    return path


def test_is_model_dir_knows_models_and_adapters(tmp_path):
    assert models.is_model_dir(write_model(tmp_path / "full")) is True
    assert models.is_model_dir(write_model(tmp_path / "lora", adapter_rank=8)) is True
    (tmp_path / "empty").mkdir()
    assert models.is_model_dir(tmp_path / "empty") is False
    assert models.is_model_dir(tmp_path / "absent") is False


def test_resolve_model_path_of_runs_checkpoints_dirs_and_hub_ids(tmp_path):
    run = tmp_path / "run"
    write_model(run / "checkpoints" / "step_000002" / "policy")
    (run / "checkpoints" / "latest").write_text("step_000002\n")
    sft = tmp_path / "sft"
    write_model(sft / "policy", adapter_rank=4)
    plain = write_model(tmp_path / "plain")
    assert models.resolve_model_path(str(run)) == str(run / "checkpoints" / "step_000002" / "policy")
    assert models.resolve_model_path(str(run / "checkpoints" / "step_000002")) == str(
        run / "checkpoints" / "step_000002" / "policy")
    assert models.resolve_model_path(str(sft)) == str(sft / "policy")
    assert models.resolve_model_path(str(plain)) == str(plain)
    assert models.resolve_model_path("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"
    assert models.resolve_model_path("gpt2") == "gpt2"


@pytest.mark.parametrize("name", ["./missing", "/no/such/dir", "~/no-such-model-dir", "a/b/c", "has space"])
def test_resolve_model_path_refuses_local_paths_that_do_not_exist(name):
    with pytest.raises(FileNotFoundError):
        models.resolve_model_path(name)


def test_resolve_model_path_refuses_a_dir_without_a_model(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError):
        models.resolve_model_path(str(tmp_path / "empty"))


def test_resolve_model_path_takes_a_typo_under_an_existing_dir_for_a_local_path(tmp_path, monkeypatch):
    (tmp_path / "runs" / "ppo1").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError):  # `runs/ppo2` has the Hub's org/name form, but runs/ is here
        models.resolve_model_path("runs/ppo2")


def test_adapters_and_their_rank(tmp_path):
    lora = write_model(tmp_path / "lora", adapter_rank=8)
    full = write_model(tmp_path / "full")
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "adapter_config.json").write_text("{not json")
    assert (models.is_adapter(str(lora)), models.adapter_rank(str(lora))) == (True, 8)
    assert (models.is_adapter(str(full)), models.adapter_rank(str(full))) == (False, None)
    assert (models.is_adapter(str(damaged)), models.adapter_rank(str(damaged))) == (True, None)
    assert models.is_adapter(str(tmp_path / "absent")) is False
    assert models.is_adapter(models.EMBEDDED) is False  # without converting the embedded model


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
