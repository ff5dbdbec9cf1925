"""The precision a run trains in: float32 master weights (TRAINING_WEIGHTS) with bf16 as autocast over them
(training_precision), how a record names it (precision_label, run_precision), whether the loss is weighted by
truncated importance sampling (tis_applies), and train.mixed_precision bf16's guard on the first batch
(bf16_logprob_gap). The dtype a model is loaded in to generate or evaluate is models.pick_dtype; whether the hardware
has bf16, hardware.bf16_problem.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from .config_values import DTYPES, ConfigError, ModelLoadError
from .hardware import bf16_problem
from .losses import masked_mean

if TYPE_CHECKING:
    from .config import RunConfig, TrainConfig
    from .distributed import DataParallel, SingleProcess


TRAINING_WEIGHTS = "float32"
"""The dtype every trained model is loaded in (model.dtype for models.load_policy), whatever model.dtype asks: the
master weights AdamW updates. bf16 runs as autocast over them (training_precision)."""


def training_precision(dtype: str, mixed_precision: str, device: torch.device) -> torch.dtype | None:
    """The dtype a TRAINING run's forwards compute in under torch.autocast (rollouts, no-grad passes, the update's
    forward; SFT's forward), or None for plain fp32. The weights and AdamW's state are float32 either way
    (TRAINING_WEIGHTS): bf16 runs as fp32 master weights + bf16 autocast, on every device.

    Why never bf16 weights: AdamW updating bf16 weights in place rounds each step's change to bf16's 8 significant
    bits; at lr 7e-6 ~96% of the update was lost (cosine 0.10 against fp32), while bf16 autocast over fp32 weights
    kept it (cosine >= 0.99) (../shared/NOTES.md, 2026-11-28; tests/test_mixed_precision.py checks both).

    Rules (model.dtype, train.mixed_precision):
        mixed_precision 'bf16'          → bfloat16 on any device (the trainer refuses it where bf16_problem says the
                                          hardware has no bf16).
        dtype 'auto'                    → bfloat16 on a CUDA GPU with bf16 (what 'auto' loaded before, now as
                                          autocast); None (fp32) on a CPU, even one with avx512_bf16 / amx_bf16:
                                          bf16 changes every result's numbers (the findings' sweeps are fp32), was
                                          not faster on the AVX-512 EPYC, and its forward erases fine-tuning changes
                                          below ~2e-3 of a weight (train.bf16_max_logprob_gap). Ask for it with
                                          mixed_precision 'bf16' or dtype 'bfloat16'.
        dtype 'bfloat16'                → bfloat16 (explicit; emulated, slowly, on a CPU without bf16 instructions).
        dtype 'float32'                 → None (fp32).
        dtype 'float16'                 → refused: fp16 training needs loss scaling (GradScaler), which this library
                                          does not do; float16 stays usable to evaluate (models.pick_dtype).
    Args:
        dtype: model.dtype, one of DTYPES. mixed_precision: train.mixed_precision, 'no' or 'bf16' ('no' for SFT unless
            asked). device: the resolved training device (hardware.pick_device).
    Returns: torch.bfloat16 or None.
    Raises: ModelLoadError for 'float16' or a dtype not in DTYPES.
    """
    if dtype not in DTYPES:
        raise ModelLoadError(f"dtype {dtype!r} is not supported; use one of {', '.join(DTYPES)}")
    if dtype == "float16":
        raise ModelLoadError("model.dtype float16 cannot train here: fp16 gradients need loss scaling, which this "
                             "library does not do; use --dtype bfloat16 (bf16 autocast over fp32 weights) or float32")
    if mixed_precision == "bf16" or dtype == "bfloat16":
        return torch.bfloat16
    if dtype == "auto" and device.type == "cuda" and bf16_problem(device) is None:
        return torch.bfloat16
    return None


def precision_label(autocast_dtype: torch.dtype | None) -> str:
    """How a run computed, for records and summaries: 'fp32' (weights, AdamW and every forward in float32) or
    'bf16-autocast' (float32 weights and AdamW; forwards under torch.autocast in bfloat16)."""
    if autocast_dtype is None:
        return "fp32"
    return f"{str(autocast_dtype).removeprefix('torch.').replace('bfloat16', 'bf16')}-autocast"


def run_precision(dtype: str, mixed_precision: str, device: str) -> str:
    """precision_label of a training run from what its record keeps: model.dtype, train.mixed_precision and the
    resolved device (records.machine_info's torch_device, e.g. 'cpu', 'cuda:0'). 'fp32' or 'bf16-autocast'; for a
    configuration that cannot train (dtype float16) or a device this machine cannot resolve, 'unknown (<why>)'. Reads
    this machine's bf16 support for a CUDA device: call it where the run ran (the trainer does: Trainer.precision).
    Runs before commit c3a77b9 with model.dtype auto on a GPU trained bf16 weights in place, not autocast."""
    try:
        return precision_label(training_precision(dtype, mixed_precision, torch.device(device)))
    except (ModelLoadError, RuntimeError, ValueError) as e:
        return f"unknown ({e})"


def tis_applies(config: RunConfig, compute_dtype: torch.dtype) -> bool:
    """Whether the loss is weighted by truncated importance sampling: algo.tis 'on', or 'auto' with low precision
    and π_old recomputed (algo.old_logprobs 'recompute'). `compute_dtype`: the dtype the training forward computes
    in: the autocast dtype (training_precision: bf16 under train.mixed_precision bf16 or model.dtype
    auto on a bf16 GPU), else the weights' (float32); low precision = not float32, or train.mixed_precision bf16."""
    low_precision = compute_dtype != torch.float32 or config.train.mixed_precision == "bf16"
    return config.algo.tis == "on" or (config.algo.tis == "auto" and low_precision
                                       and config.algo.old_logprobs == "recompute")


@torch.no_grad()
def bf16_logprob_gap(model, batch: dict[str, torch.Tensor], train: TrainConfig, dp: DataParallel | SingleProcess,
                     bf16_logprobs: torch.Tensor | None = None) -> float:
    """train.mixed_precision bf16's guard (Trainer._old_forward, on the first batch a process trains): the mean over
    the batch's policy tokens of |log π_bf16 − log π_fp32|, the same weights forwarded under bf16 autocast and with
    autocast off (no-grad passes). Autocast rounds every weight to bf16 (8 significant bits), so fine-tuning
    changes below ~2e-3 of a weight vanish from the forward: at the findings' SFT start 82% did and the bf16 policy
    won ~40 points less often than the fp32 one (results/bf16_rollout.jsonl).

    Args:
        bf16_logprobs: (B, T) float32, the batch's log-probs already forwarded under bf16 autocast (the trainer's
            π_old pass), so only the fp32 pass runs; None: both passes run here.
    Returns: the gap in nats per action token (logged as bf16_logprob_gap).
    Raises: ConfigError when it exceeds train.bf16_max_logprob_gap (> 0), before any update.
    """
    from .update import no_grad_forward  # update imports transformers (through policy); run_precision needs none of it

    device = batch["input_ids"].device.type
    low = bf16_logprobs
    if low is None:
        with torch.autocast(device, dtype=torch.bfloat16):
            low = no_grad_forward(model, batch, train, dp)["logprobs"]
    with torch.autocast(device, enabled=False):
        full = no_grad_forward(model, batch, train, dp)["logprobs"]
    gap = masked_mean((low - full).abs(), batch["mask"]).item()
    limit = train.bf16_max_logprob_gap
    if limit > 0 and gap > limit:
        source = ("train.mixed_precision bf16" if train.mixed_precision == "bf16"
                  else "bf16 autocast (model.dtype bfloat16)")
        raise ConfigError(
            f"{source} changes this policy: its action log-probs differ from fp32's by {gap:.3g} "
            f"nats per token on the first batch (limit train.bf16_max_logprob_gap {limit:g}); the weights' "
            "fine-tuning changes are below bf16's resolution (book/benchmarks.md); use --mixed-precision no "
            "--dtype float32")
    return gap
