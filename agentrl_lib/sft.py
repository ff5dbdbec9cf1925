"""SFT warm-up on expert multi-turn trajectories (the games' walkthroughs), with TRL's SFTTrainer.

Each walkthrough is replayed in the environment to collect the observations the agent would see, and turned into
one token sequence with the same ChatFormat the rollouts use, so SFT and RL see the same layout. The loss covers
the assistant (action) tokens only, each turn's end token included: the examples carry an `assistant_masks`
column, from which TRL builds labels (-100 elsewhere). SmolLM2's chat template has no `{% generation %}` markers,
so TRL's `assistant_only_loss=True` cannot find the assistant tokens itself; building the mask here avoids that.

Practitioner's Guide §5: one epoch of SFT on expert trajectories before RL; actor and critic start from it.

Introduced in notebooks/00_quickstart.md §5.
"""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Sequence

import torch
from transformers import PrinterCallback, TrainerCallback

from .config_values import ConfigError
from .envs import get_family
from .envs.protocol import GameSet
from .hardware import bf16_problem, pick_device
from .models import load_policy, save_policy
from .precision import TRAINING_WEIGHTS, precision_label, training_precision
from .prompts import ChatFormat, feedback_message, first_user_message, format_reply, system_prompt_for
from .rundir import check_not_run_dir
from .update import adamw, adamw_impl

log = logging.getLogger(__name__)


def expert_examples(games: GameSet, chat: ChatFormat, system_prompt: str | None = None, max_turns: int | None = None,
                    show_admissible: bool = False, show_inventory: bool = False, action_format: str = "plain",
                    max_actions_per_turn: int = 1) -> list[dict]:
    """Replay each game's walkthrough and return tokenised examples, each the token sequence rollout() builds for the
    same env config (its first prompt: system prompt + first observation; then reply / feedback turns).

    Args:
        system_prompt: default `system_prompt_for(games.family, action_format, max_actions_per_turn)`, the prompt
            rollouts and evaluation use.
        max_turns: the episodes' turn limit, as the RL run's env.max_turns (>= 1): a walkthrough longer than it is
            skipped, and the env that replays the walkthroughs gets it (EnvFamily.env_kwargs, as the run's pool),
            so a family whose observation states the limit shows the run's (swe: "You have N turns"). Pass the RL
            run's env.max_turns, or the prompt differs from the one the policy sees in RL and evaluation. None: no
            cut, and the env's default limit (swe: 8, EnvConfig.max_turns's default).
        action_format: each expert turn is `prompts.format_reply(action, action_format)`: the action itself
            ("plain") or `<answer>action</answer>` ("ragen"; one action per turn, no think text).
        show_admissible, show_inventory: show the admissible commands / the inventory in each observation, as the
            RL run and the evaluation will (the observation layout must match between SFT and RL).
    Returns: list of {'input_ids': list[int], 'assistant_masks': list[int] (1 on action tokens + end token),
    'game': name}. Games whose walkthrough does not win, or is longer than max_turns, are skipped (logged).
    """
    system_prompt = system_prompt or system_prompt_for(games.family, action_format, max_actions_per_turn)
    family = get_family(games.family)
    # the env is built as the run's pool builds it (open_pool → env_kwargs): the observations, the first one with
    # the turn limit included, are those the policy sees in RL and evaluation
    env = family.make_env(**family.env_kwargs(show_inventory=show_inventory, max_turns=max_turns))
    examples = []
    try:
        for g in games.games:
            if max_turns is not None and len(g.walkthrough) > max_turns:
                log.warning("skip %s: walkthrough of %d steps exceeds max_turns=%d", g.name, len(g.walkthrough),
                            max_turns)
                continue
            res = env.reset(g.path)
            user = first_user_message(res.info.objective, res.obs, res.info.admissible if show_admissible else None,
                                      res.info.inventory if show_inventory else "")
            ids = chat.prompt_ids(system_prompt, user)
            mask = [0] * len(ids)
            for k, action in enumerate(g.walkthrough):
                a = chat.action_ids(format_reply(action, action_format))
                ids += a
                mask += [1] * len(a)
                res = env.step(action)
                if res.done:
                    break
                if k < len(g.walkthrough) - 1:
                    u = chat.user_turn_ids(feedback_message(res.obs, res.info.admissible if show_admissible else None,
                                                            res.info.inventory if show_inventory else ""))
                    ids += u
                    mask += [0] * len(u)
            if not res.info.won:
                log.warning("skip %s: its walkthrough does not win the game", g.name)
                continue
            examples.append({"input_ids": ids, "assistant_masks": mask, "game": g.name})
    finally:
        env.close()
    return examples


class LossLine(TrainerCallback):
    """Prints one line per logging step of the SFT run ("sft step 2/4: loss 1.492, grad norm 15.1") in place of
    transformers' PrinterCallback, which prints each log as a raw dict of strings."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            grad = f", grad norm {float(logs['grad_norm']):.3g}" if "grad_norm" in logs else ""
            print(f"sft step {state.global_step}/{state.max_steps}: loss {float(logs['loss']):.3f}{grad}")


def sft(model_name: str, games: GameSet | Sequence[GameSet], out: str | Path, epochs: float = 1.0, lr: float = 5e-5,
        batch_size: int = 4, micro_batch_size: int | None = None,
        max_turns: int | None = None, seed: int = 0, device: str = "auto", dtype: str = "auto",
        lora_rank: int = 0, show_admissible: bool = False, show_inventory: bool = False,
        action_format: str = "plain", max_actions_per_turn: int = 1, mixed_precision: str = "no") -> dict:
    """Fine-tune `model_name` on the walkthroughs of `games` (one GameSet, or several whose examples are pooled, each
    with its own family's system prompt); save to `out/policy`.

    Several sets serve e.g. a *format-only* warm-up on the bandit: `bandit` walkthroughs pull the Dragon, those of
    `bandit-reversed` (the same prompts, the labels swapped) the Phoenix, so the pooled demonstrations teach the reply
    format and no arm preference (notebooks/05_stability.md).

    `batch_size` walkthroughs make one gradient step, passed `micro_batch_size` at a time (config.SFTConfig: the
    same step up to float rounding, less memory; default: all at once).

    `max_turns`: the episodes' turn limit, as the RL run's env.max_turns (expert_examples: longer walkthroughs are
    skipped and the observations state this limit where the family shows one, swe; `agentrl sft --max-turns`).

    Precision as in RL (precision.training_precision of `dtype` and `mixed_precision`, the RL run's model.dtype and
    train.mixed_precision): the weights load and train in float32 whatever `dtype` says, and bf16 ('auto' on a bf16
    GPU, 'bfloat16', or mixed_precision 'bf16') runs as autocast over them (TRL's bf16=True: accelerate's autocast,
    fp32 master weights), never as bf16 weights updated in place, which lose most small updates. fp32 on a CPU unless
    asked. The optimizer is TRL's AdamW in the implementation RL uses (update.adamw: fused where torch has it,
    optim 'adamw_torch_fused'; 'adamw_torch' otherwise).

    Returns a summary dict (examples, tokens, epochs, train_loss per logging step, seconds, precision: 'fp32' or
    'bf16-autocast', adamw: the AdamW implementation), also written to out/sft_summary.json.
    Raises: ValueError if no walkthrough could be replayed, or if micro_batch_size is < 1 or does not divide
    batch_size; config_values.ModelLoadError for dtype 'float16' (training_precision); config.ConfigError if `out`
    is an RL run directory (rundir.check_not_run_dir), or for mixed_precision 'bf16' on a device without bf16
    hardware (hardware.bf16_problem, as the RL Trainer), before anything loads.
    """
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    micro = batch_size if micro_batch_size is None else micro_batch_size
    if micro < 1 or batch_size % micro:
        raise ValueError(f"micro_batch_size must be >= 1 and divide batch_size {batch_size} (got {micro})")
    t0 = time.perf_counter()
    check_not_run_dir(out)  # an SFT model written into an RL run directory would mix with its checkpoints
    out = Path(out)
    amp = training_precision(dtype, mixed_precision, pick_device(device))
    if mixed_precision == "bf16" and (why := bf16_problem(pick_device(device))):   # as the RL Trainer refuses it
        raise ConfigError(f"sft mixed_precision bf16: {why}; use --mixed-precision no")
    model, tok = load_policy(model_name, device, TRAINING_WEIGHTS, lora_rank=lora_rank)
    tok.padding_side = "right"
    sets = [games] if isinstance(games, GameSet) else list(games)
    examples = [e for g in sets for e in expert_examples(g, ChatFormat(tok), max_turns=max_turns,
                                                          show_admissible=show_admissible,
                                                          show_inventory=show_inventory, action_format=action_format,
                                                          max_actions_per_turn=max_actions_per_turn)]
    if not examples:
        raise ValueError(f"no usable walkthroughs in {', '.join(str(g.root) for g in sets)}: every game was skipped "
                         "(see the log)")
    ds = Dataset.from_list([{k: e[k] for k in ("input_ids", "assistant_masks")} for e in examples])
    on_gpu = pick_device(device).type == "cuda"
    fused = adamw_impl(adamw([{"params": [next(model.parameters())]}], lr=lr)) == "fused"
    # transformers >= 5.23 names it activation_checkpointing; 5.19 (the vLLM env, `make vllm`) knows only
    # gradient_checkpointing
    no_checkpointing = {k: False for k in ("activation_checkpointing", "gradient_checkpointing")
                        if k in SFTConfig.__dataclass_fields__}
    args = SFTConfig(output_dir=str(out / "trl"), num_train_epochs=epochs, per_device_train_batch_size=micro,
                     gradient_accumulation_steps=batch_size // micro,
                     learning_rate=lr, lr_scheduler_type="constant", warmup_steps=0, logging_steps=1,
                     save_strategy="no", report_to=[], seed=seed, use_cpu=not on_gpu,
                     bf16=amp == torch.bfloat16, optim="adamw_torch_fused" if fused else "adamw_torch",
                     **no_checkpointing, max_length=None,
                     disable_tqdm=True, dataloader_num_workers=0)
    model.train()
    trainer = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tok)
    trainer.remove_callback(PrinterCallback)   # its raw log dicts ({'loss': '3.301', ...}), replaced by one line a step
    trainer.add_callback(LossLine())
    trainer.train()
    model.eval()
    tok.padding_side = "left"
    save_policy(model, tok, out / "policy")
    losses = [r["loss"] for r in trainer.state.log_history if "loss" in r]
    summary = {"examples": len(examples), "skipped": sum(map(len, sets)) - len(examples),
               "tokens": sum(len(e["input_ids"]) for e in examples),
               "assistant_tokens": sum(sum(e["assistant_masks"]) for e in examples),
               "epochs": epochs, "lr": lr, "batch_size": batch_size, "micro_batch_size": micro, "train_loss": losses,
               "seconds": round(time.perf_counter() - t0, 1), "model": model_name,
               "precision": precision_label(amp),
               "adamw": adamw_impl(getattr(trainer.optimizer, "optimizer", trainer.optimizer)),  # accelerate wraps it
               "games": str(sets[0].root) if len(sets) == 1 else [str(g.root) for g in sets]}
    (out / "sft_summary.json").write_text(json.dumps(summary, indent=1))
    return summary
