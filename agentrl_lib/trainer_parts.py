"""The Trainer's parts built by one factory: the policy and its tokenizer, the critic, the KL reference, the rollout
backend, the optimizer and the run's precision, from a run config and (on resume) its newest complete checkpoint.

`build_trainer_parts` is what `trainer.Trainer.__init__` calls once the run directory is locked and its config
settled; the order of its steps is the order the seeded random draws need (a new LoRA adapter's init, then the value
head's), so a run built here samples and trains exactly as before this factory existed (`make demo` prints the
same table).

Introduced in notebooks/00_quickstart.md §5 (the Trainer).
"""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from . import checkpoint as ckpt_lib
from . import rundir
from .config import ConfigError, RunConfig, check_context_room
from .hardware import bf16_problem, pick_device
from .models import base_model, disable_dropout, enable_gradient_checkpointing, load_start_policy, reference_policy
from .parts import RunParts
from .policy import ValueHead
from .precision import TRAINING_WEIGHTS, precision_label, tis_applies, training_precision
from .update import adamw_impl, make_optimizer, set_adamw_impl

log = logging.getLogger(__name__)


@dataclass
class TrainerParts:
    """What one run trains and samples with (built by build_trainer_parts)."""

    policy: torch.nn.Module
    """The causal LM being trained, float32 master weights (precision.TRAINING_WEIGHTS), dropout off."""
    tok: Any
    """Its tokenizer."""
    value_head: torch.nn.Module | None
    """The critic (policy.ValueHead on the policy's last hidden state) iff the estimator needs one, else None."""
    ref: torch.nn.Module | None
    """The frozen KL reference (algo.kl_coef > 0), or None (no KL term, or a LoRA run: its adapter switched off)."""
    generator: Any
    """The rollout backend over the policy (generation.GENERATORS[model.generator])."""
    opt: torch.optim.Optimizer
    """AdamW over the policy's trainable weights (and the critic's, at train.value_lr): update.make_optimizer."""
    adamw_impl: str
    """The AdamW implementation in use ('fused', 'foreach' or 'for-loop': update.adamw_impl)."""
    autocast_dtype: torch.dtype | None
    """torch.bfloat16 when every forward runs under bf16 autocast, None for float32 (precision.training_precision)."""
    use_tis: bool
    """Whether truncated importance sampling weights the loss (precision.tis_applies)."""
    start_step: int
    """Steps already done: 0 for a new run, the checkpoint's step on resume."""
    last_checkpoint: str | None
    """The checkpoint a resume loaded (its directory name), else None."""


def build_trainer_parts(config: RunConfig, parts: RunParts, ckpt_root: Path, resume: bool,
                        run_dir: Path) -> TrainerParts:
    """Load or resume the policy and build everything around it, in this order: precision → policy (+ optimizer
    state from the newest complete checkpoint on resume; else the run's seed, then the starting model) → rollout
    backend (its context checked against the turn budget) → critic → dropout off → KL reference → the bf16 check →
    optimizer → gradient checkpointing → the checkpoint's optimizer and critic state.

    Args:
        config: the run's config in effect (validated; a resume's saved one with the flags it may change).
        parts: run_parts(config): the estimator (does it need a critic?) and the rollout backend.
        ckpt_root: RUN/checkpoints. resume: continue from its newest checkpoint that loads (step 0 when none).
        run_dir: the run directory (named in messages).
    Returns: TrainerParts.
    Raises: CheckpointError (no loadable checkpoint), ConfigError (a turn budget the model's context cannot hold:
        config.check_context_room; train.mixed_precision bf16 where the device has no bf16), FileNotFoundError (a
        model path), ValueError (rundir.check_steps_left: train.steps below the steps done).
    """
    mc = config.model
    # plumbing: the run's precision (precision.training_precision): float32 master weights whatever model.dtype
    # says, bf16 as autocast over them (an AdamW updating bf16 weights in place loses most small updates)
    autocast_dtype = training_precision(mc.dtype, config.train.mixed_precision, pick_device(mc.device))
    mc = dataclasses.replace(mc, dtype=TRAINING_WEIGHTS)  # every load below: policy, checkpoint, π_ref
    need_vh = parts.estimator.needs_critic  # a critic exists iff the estimator needs one
    start_step, last_checkpoint, state = 0, None, None  # state: a resumed run's optimizer and value-head state
    if resume and ckpt_lib.list_checkpoints(ckpt_root):  # newest complete checkpoint that loads, else older
        start_step, ckpt, policy, tok, state = ckpt_lib.load_checkpoint(ckpt_root, mc, need_vh)
        last_checkpoint = ckpt.name
        rundir.check_steps_left(config.train.steps, start_step, run_dir)
    else:
        if resume:
            log.warning("%s has no checkpoint yet: starting at step 1 with its saved config", run_dir)
        torch.manual_seed(config.train.seed)  # plumbing: a new LoRA adapter's random init follows the run's seed
        # a LoRA adapter as init: merged for lora_rank 0, trained on at its own rank, else refused
        policy, tok = load_start_policy(mc.name, mc.device, mc.dtype, lora_rank=mc.lora_rank,
                                        lora_alpha=mc.lora_alpha)
    device = next(policy.parameters()).device
    generator = parts.generator(policy, tok)  # the backend (generation.py)
    generator.share_prefix = config.train.share_prefix  # HF: each group's first context encoded once
    # before any rollout: a turn budget the model's context cannot hold
    check_context_room(config.train.max_new_tokens, config.env.max_turns, generator.context_limit)
    value_head = ValueHead(base_model(policy).config.hidden_size).to(device) if need_vh else None
    disable_dropout(policy)  # π_old is computed without dropout: the update must see the same function
    # ALGO: the frozen reference policy of the KL term (None: this run's LoRA adapter is switched off instead)
    ref = reference_policy(policy, mc, state is not None) if config.algo.kl_coef > 0 else None
    if config.train.mixed_precision == "bf16" and (why := bf16_problem(device)):
        raise ConfigError(f"train.mixed_precision bf16: {why}; use --mixed-precision no")
    log.info("precision: %s (model.dtype %s, train.mixed_precision %s, %s)", precision_label(autocast_dtype),
             config.model.dtype, config.train.mixed_precision, device)
    use_tis = tis_applies(config, autocast_dtype or next(policy.parameters()).dtype)
    opt = make_optimizer(policy, value_head, config.train)
    impl = adamw_impl(opt)  # the fastest torch offers (update.adamw): fused on CPU and CUDA
    if config.train.gradient_checkpointing:  # active in train() mode only: rollouts keep their KV cache
        enable_gradient_checkpointing(policy)
    if state is not None:  # optimizer + value head; then the config's lr / value_lr (a resume may change them)
        ckpt_lib.apply_training_state(state, opt, value_head, [config.train.lr, config.train.value_lr])
        set_adamw_impl(opt, impl)  # load_state_dict restored the saved implementation's flags
    return TrainerParts(policy=policy, tok=tok, value_head=value_head, ref=ref, generator=generator, opt=opt,
                        adamw_impl=impl, autocast_dtype=autocast_dtype, use_tis=use_tis, start_step=start_step,
                        last_checkpoint=last_checkpoint)

