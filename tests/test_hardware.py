"""agentrl_lib/hardware.py: device checks, and CPU feature probing on sample /proc/cpuinfo files of the kinds of CPU
this project has run on (AVX2 only, AVX-512 with avx512_bf16, AMX) and one with AVX-512 but no bf16."""
from __future__ import annotations

import pytest
import torch

from agentrl_lib import hardware
from agentrl_lib.config_values import ModelLoadError

# ------------------------------------------------------------------------------------------------------ devices
NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")


def test_pick_device_resolves_names_this_machine_has(monkeypatch):
    assert hardware.pick_device("cpu") == torch.device("cpu")
    assert hardware.pick_device("auto") == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    monkeypatch.setenv("WORLD_SIZE", "2")  # a data-parallel launch without a GPU still computes on the CPU
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert hardware.pick_device("auto") == (torch.device("cuda", 1 % torch.cuda.device_count())
                                            if torch.cuda.is_available() else torch.device("cpu"))


@pytest.mark.parametrize("name", ["tpu0", "cuda:x", "", "CPU", "cpu:0:1", 3])
def test_pick_device_refuses_what_is_not_a_device_name(name):
    with pytest.raises(ModelLoadError):
        hardware.pick_device(name)


@NO_CUDA
@pytest.mark.parametrize("name", ["cuda", "cuda:0", "cuda:3"])
def test_pick_device_refuses_cuda_without_a_gpu(name):
    with pytest.raises(ModelLoadError):
        hardware.pick_device(name)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_pick_device_refuses_a_gpu_index_past_the_count():
    with pytest.raises(ModelLoadError):
        hardware.pick_device(f"cuda:{torch.cuda.device_count()}")
    assert hardware.pick_device("cuda:0") == torch.device("cuda", 0)


@pytest.mark.skipif(torch.backends.mps.is_available(), reason="this machine has MPS")
def test_pick_device_refuses_mps_off_a_mac():
    with pytest.raises(ModelLoadError):
        hardware.pick_device("mps")


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
    monkeypatch.setattr(hardware, "CPUINFO", str(cpuinfo(tmp_path, model, flags)))
    assert hardware.cpu_flags() == flags.split()
    assert hardware.cpu_model() == model
    assert (hardware.bf16_problem(torch.device("cpu")) is None) is bf16_hardware


def test_cpu_probing_without_cpuinfo_says_unknown(monkeypatch, tmp_path):
    monkeypatch.setattr(hardware, "CPUINFO", str(tmp_path / "absent"))
    assert hardware.cpu_flags() is None
    assert hardware.cpu_model() == ""
    assert hardware.bf16_problem(torch.device("cpu")) is not None  # unknown hardware: bf16 is not assumed


def test_cpu_probing_of_a_cpuinfo_without_the_fields(monkeypatch, tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text("processor\t: 0\nHardware\t: BCM2835\n")  # e.g. an ARM board: no model name, no flags line
    monkeypatch.setattr(hardware, "CPUINFO", str(path))
    assert hardware.cpu_flags() == []
    assert hardware.cpu_model() == ""
    assert hardware.bf16_problem(torch.device("cpu")) is not None


def test_bf16_problem_of_a_device_without_autocast_setup():
    assert hardware.bf16_problem(torch.device("meta")) is not None


def test_this_machines_cpu_probe_agrees_with_itself():
    flags = hardware.cpu_flags()
    if flags is None:
        pytest.skip("no /proc/cpuinfo here")
    assert all(isinstance(f, str) and f == f.strip() and f for f in flags)
    assert (hardware.bf16_problem(torch.device("cpu")) is None) == bool({"avx512_bf16", "amx_bf16"} & set(flags))
