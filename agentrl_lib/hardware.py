"""Device and CPU-feature probing: which torch device a device name means on this machine (pick_device), and whether
that device computes bf16 in hardware (bf16_problem, from /proc/cpuinfo's flags on a CPU: cpu_flags, cpu_model).

Imports nothing of agentrl_lib but config_values, so every module that needs the device (loading, precision, the
records' machine description, data parallelism) can import it.
"""
from __future__ import annotations

import os
import re

import torch

from .config_values import DEVICE_PATTERN, ModelLoadError


def pick_device(device: str = "auto") -> torch.device:
    """'auto' → CUDA when available, else CPU; 'cpu', 'cuda', 'cuda:N', 'mps' are checked against this machine.
    In a process of a data-parallel launch (`accelerate launch`, torchrun: WORLD_SIZE > 1), 'auto' and 'cuda' mean
    the process's own GPU, cuda:LOCAL_RANK (agentrl_lib/distributed.py).

    Raises:
        ModelLoadError: not a device name (e.g. 'tpu0'), or a device this machine does not have (CUDA without a GPU
            or a CUDA build of torch, an index past the GPU count, MPS off a Mac).
    """
    if device in ("auto", "cuda") and torch.cuda.is_available() and int(os.environ.get("WORLD_SIZE", "1") or 1) > 1:
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0") or 0) % torch.cuda.device_count())
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if not isinstance(device, str) or not re.fullmatch(DEVICE_PATTERN, device):
        raise ModelLoadError(f"device {device!r} is not a device name; use auto, cpu, cuda, cuda:N or mps")
    dev = torch.device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            why = "this torch build has no CUDA" if torch.version.cuda is None else "no GPU is visible"
            raise ModelLoadError(f"device {device!r}: CUDA is not available ({why}; torch {torch.__version__}); "
                                 "use --device cpu or auto")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ModelLoadError(f"device {device!r}: this machine has {torch.cuda.device_count()} GPU(s) "
                                 f"(cuda:0 to cuda:{torch.cuda.device_count() - 1}); pick one of those or auto")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ModelLoadError(f"device {device!r}: MPS (Apple GPU) is not available here; use --device cpu or auto")
    return dev


def bf16_problem(device: torch.device) -> str | None:
    """Why bf16 compute would be slow on `device`, or None when it has bf16 hardware: a CUDA GPU that supports
    bf16, or a CPU whose /proc/cpuinfo flags include avx512_bf16 or amx_bf16 (elsewhere torch emulates bf16 matmuls,
    slower than fp32). Detected, never assumed: this project's machines change CPU between sessions."""
    if device.type == "cuda":
        return None if torch.cuda.is_bf16_supported() else f"the GPU {torch.cuda.get_device_name(device)} has no bf16"
    if device.type != "cpu":
        return f"bf16 autocast is not set up for {device.type}"
    flags = cpu_flags()
    if flags is None:
        return "cannot read /proc/cpuinfo to find bf16 instructions (avx512_bf16 / amx_bf16)"
    if {"avx512_bf16", "amx_bf16"} & set(flags):
        return None
    return (f"this CPU ({cpu_model() or 'unknown model'}) has neither avx512_bf16 nor amx_bf16, so bf16 is emulated "
            "and slower")

CPUINFO = "/proc/cpuinfo"
"""Where cpu_flags and cpu_model read the CPU's description (Linux); tests point it at a sample of another CPU."""


def _cpuinfo_field(name: str) -> str | None:
    """The first `name : value` line's value in CPUINFO ('' where absent), or None where it cannot be read."""
    try:
        with open(CPUINFO) as f:
            text = f.read()
    except OSError:
        return None
    return next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.split(":", 1)[0].strip() == name),
                "")


def cpu_flags() -> list[str] | None:
    """The CPU's feature flags from /proc/cpuinfo (e.g. 'avx512_bf16', 'amx_bf16'), or None where it cannot be read."""
    flags = _cpuinfo_field("flags")
    return None if flags is None else flags.split()


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo ('' where it cannot be read), e.g. 'Intel(R) Xeon(R) Platinum ...'."""
    return _cpuinfo_field("model name") or ""
