"""The metrics schema: every key a training step logs to metrics.jsonl, declared once with its formula, unit, healthy
range, what failure looks like and which estimators log it. `complete_row` gives every row every key (JSON null where
a key does not apply or was not computed that step); `step_row` builds a training step's row, the one place that
does; `glossary_markdown` renders the table that the book's glossary
page and the notebooks' glossaries show.

Ranges are rules of thumb for this workbook's small models and text games, not guarantees: read a value outside its
range as a reason to look, not as a bug. "demo:" quotes what `make demo`'s RL run measured (embedded 135M model,
PPO, dense rewards, fp32 on 2 CPU cores, 12 steps that took held-out success from 68.8% to 87.5%).

Introduced in notebooks/00_quickstart.md §5 and its glossary.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from .advantages import singleton_groups
from .diagnostics import input_dependence, repetition_rate
from .losses import explained_variance

if TYPE_CHECKING:
    from .rollout import RolloutStats, Trajectory

ALL = "all"
CRITIC = "critic"
"""Values of Metric.logged_by: every estimator, or only estimators that need a critic (`needs_critic`, GAE)."""


@dataclass(frozen=True)
class Metric:
    """One key of a metrics.jsonl row."""

    name: str
    unit: str
    """What the number counts or measures in (e.g. 'fraction', 'nats/token', 's'); '' for a pure number."""
    formula: str
    """How it is computed, in one short line."""
    healthy: str
    """The range a working run shows."""
    failure: str
    """What a broken run looks like in this metric."""
    logged_by: str = ALL
    """ALL (every estimator) or CRITIC (only estimators with a value function)."""
    only_when: str = ""
    """A condition besides the estimator (e.g. 'algo.tis on'); the key is null when it does not hold."""


_M = Metric
METRICS: dict[str, Metric] = {m.name: m for m in [
    # --- the step and its episodes
    _M("step", "", "RL iteration, 1-based", "1 … train.steps", "a gap or a repeat: a resume rewrote the log"),
    _M("episodes", "episodes", "games_per_step × group_size episodes rolled out", "constant over a run",
       "—"),
    _M("success_rate", "fraction", "won episodes / episodes that ran (env errors excluded)", "rises over the run",
       "flat at 0: no reward signal (SFT first, or show_admissible); falls: the update hurts"),
    _M("return_mean", "reward", "mean over episodes of Σ_turns r_turn (format penalty included)",
       "rises; sparse ∈ [0, 1] minus penalties", "falls while success_rate falls: the policy degrades"),
    _M("return_std", "reward", "std over episodes of the return", "> 0", "0: every episode alike, nothing to learn"),
    _M("reward_mean", "reward/turn", "Σ r_turn / Σ turns", "rises with return_mean", "—"),
    _M("group_return_std", "reward", "mean over groups of the within-group return std",
       "> 0 for GRPO/RLOO (their learning signal)", "0: every group's episodes tie, GRPO/RLOO advantages are 0"),
    _M("zero_std_group_frac", "fraction", "groups whose within-group return std is 0 (|std| <= 1e-6; one-episode "
       "groups count) / groups", "< 1 and falling as the groups' outcomes spread",
       "→ 1 while success_rate is not near 1: the Echo Trap's reward-variance collapse (diagnostics.CollapseDetector)"),
    _M("singleton_groups", "groups", "groups with one episode left (after env errors)", "0",
       "> 0: those episodes get no group baseline (advantage 0)"),
    _M("kept_fraction", "fraction", "episodes kept by the StarPO-S filter / episodes that ran",
       "≈ algo.keep_top_std", "—"),
    _M("mean_turns", "turns", "Σ turns / episodes", "falls as the policy wins sooner", "stuck at env.max_turns: "
       "no episode ends"),
    _M("invalid_rate", "fraction", "turns whose action was not admissible / turns",
       "falls; demo: 0.2-0.6 (median 0.43) while winning",
       "rises towards 1: the policy drifts away from game commands"),
    _M("repetition_rate", "fraction", "turns repeating an earlier action or reply of the same episode / turns "
       "(diagnostics.repetition_rate)", "low, ≈ the game's need to repeat a command (0 for one-turn episodes)",
       "rises towards 1: repetitive, templated replies (RAGEN's Echo Trap)"),
    _M("response_length", "tokens/turn", "policy tokens sampled per turn (each turn's end token included), mean over "
       "the turns of every episode that ran", "stable; ≤ train.max_new_tokens + 1",
       "collapses to 1-2 (empty replies) or pins at max_new_tokens (rambling, see truncated_rate)"),
    _M("input_dependence", "", "mean Jaccard(token sets) of same-turn replies of episodes of the same game − that of "
       "different games (diagnostics.input_dependence); null with one game or one episode per game",
       "> 0: replies depend on the game",
       "≈ 0 with templated replies: the replies no longer depend on the input (RAGEN-2's signal)"),
    _M("truncated_rate", "fraction", "turns whose reply hit train.max_new_tokens / turns", "≈ 0",
       "> 0.1: raise max_new_tokens or the policy rambles"),
    _M("env_errors", "episodes", "episodes ended by an env fault (crash, hang, load error)", "0",
       "> env.max_env_error_frac × episodes stops the run"),
    _M("env_error_reasons", "list", "distinct terminations of the env-error episodes", "[]",
       "the first names the failing game and error"),
    # --- rollout and batch sizes
    _M("generated_tokens", "tokens", "tokens sampled in the rollout", "—", "—"),
    _M("gen_tokens_per_s", "tokens/s", "generated_tokens / generation time",
       "demo: 10-22 (median 15) on 2 CPU cores, 8 episodes",
       "a drop: memory pressure or a slow backend"),
    _M("policy_tokens", "tokens", "Σ mask: the sampled tokens that train", "—", "0: nothing to train on"),
    _M("seq_len_max", "tokens", "longest trajectory of the batch (prompt, turns, observations)", "< model context",
       "near the context limit: long episodes are cut"),
    _M("sampler_gap", "nats", "max over sampled tokens of |log-prob of the scores sampled − log softmax(logits / T)|",
       "0 (demo: 0 on every step)", "> 1e-3: a hidden warper (top-k, top-p) changed the distribution sampled"),
    _M("logprob_mismatch", "nats", "max over policy tokens of |log π_old − log π_behaviour|",
       "< 1e-3; demo (fp32 CPU): median 1.6e-5, max 3.8e-5",
       "> 0.1: the rollout and the trainer disagree (kernels, dtype, tokenisation)"),
    _M("logprob_mismatch_mean", "nats", "mean over policy tokens of |log π_old − log π_behaviour|", "< 1e-4",
       "grows with bf16 or a second engine: turn on algo.tis"),
    _M("bf16_logprob_gap", "nats", "mean over the first batch's policy tokens of |log π (bf16 autocast) − log π "
       "(fp32)|, the same weights (precision.bf16_logprob_gap)",
       "cooking, first batch: base model 0.015, the demo's SFT 0.008 (results/bf16_guard.jsonl)",
       "> 0.03 (train.bf16_max_logprob_gap): bf16 rounds away the fine-tuning (the findings' SFT start: 0.039); "
       "the run stops", only_when="train.mixed_precision bf16, the first step a process trains"),
    _M("tis_weight_mean", "", "mean of w = min(π_old / π_behaviour, C) over policy tokens", "≈ 1",
       "far from 1: rollout and trainer policies differ", only_when="algo.tis on"),
    # --- the update
    _M("policy_loss", "", "−mean_t min(ρ_t A_t, clip(ρ_t, 1−ε_low, 1+ε_high) A_t) (the surrogate alone)",
       "near 0, either sign", "large and growing in magnitude: advantages unnormalised or the step too big"),
    _M("entropy", "nats/token", "mean over policy tokens of H(π_θ(·|s_t))", "falls slowly; demo (after SFT): 0.02-0.12",
       "collapses to ~0: the policy stops exploring; null when no update ran"),
    _M("clip_frac", "fraction", "policy tokens where the clipped term is the smaller one",
       "0-0.2; demo: median 0.008, max 0.04",
       "> 0.3: the update moves the policy too far (lower lr or epochs)"),
    _M("dual_clip_frac", "fraction", "tokens with A < 0 bounded by the dual clip c·A", "≈ 0 (0 when off)",
       "large: very large ratios on negative advantages"),
    _M("approx_kl", "nats", "k3 estimate of KL(π_old ‖ π_θ): mean (ρ − 1) − log ρ", "demo: median 0.005, one step 0.14",
       "> 0.1 for several steps: the update left the trust region"),
    _M("ratio_mean", "", "mean of ρ = π_θ / π_old over policy tokens", "≈ 1", "far from 1: off-policy drift"),
    _M("kl_ref", "nats", "k3 estimate of KL(π_θ ‖ π_ref), 0 when algo.kl_coef = 0", "grows slowly (< 0.1)",
       "grows fast: the policy runs away from the reference (raise kl_coef)"),
    _M("grad_norm", "", "global L2 norm of the policy gradient before clipping (mean over minibatches)",
       "demo: median 3, max 10 (before clipping to 1)",
       "spikes (> 5 × running median: a grad_norm_spike alert) or inf: divergence (nonfinite_updates counts them)"),
    _M("skipped_update", "flag", "1 when the step made no update (no policy tokens, all advantages 0, all episodes "
       "failed), else 0", "0", "1 often: groups tie (raise group_size) or envs fail"),
    _M("nonfinite_updates", "minibatches", "minibatches whose loss or gradient was NaN/inf (skipped)", "0",
       "train.max_nonfinite_steps steps in a row stop the run"),
    # --- the critic
    _M("value_loss", "reward²", "½ mean max((V − R)², (V_old + clip(V − V_old, ±c) − R)²)", "falls",
       "grows: the critic cannot fit the returns (value_lr, vf_coef)", logged_by=CRITIC),
    _M("value_clip_frac", "fraction", "policy tokens where the clipped value error is the larger", "0-0.3",
       "≈ 1: algo.vf_clip is too tight", logged_by=CRITIC),
    _M("value_grad_norm", "", "L2 norm of the value head's gradient before clipping", "—",
       "spikes or inf: divergence", logged_by=CRITIC),
    _M("explained_variance", "", "1 − Var[R − V] / Var[R] over policy tokens (null when Var[R] = 0)",
       "rises above 0; demo: −0.01 to 0.12 in 12 steps", "≤ 0 for long: the critic is no better than a constant",
       logged_by=CRITIC),
    # --- diagnostics (Trainer.train, after the step)
    _M("alerts", "list", "alerts the collapse detector raised at this step (diagnostics.CollapseDetector; each "
       "{step, kind, message, evidence})", "[]", "reward_std_collapse, grad_norm_spike, invalid_rising, "
       "repetition_rising: see diagnostics.KINDS; train.stop_on_collapse stops the run"),
    # --- timings
    _M("rollout_seconds", "s", "wall time of the rollout", "—", "grows: longer episodes or slow envs"),
    _M("update_seconds", "s", "wall time of the minibatch updates", "—", "—"),
    _M("step_seconds", "s", "wall time of the whole step", "—", "—"),
]}
"""Every key of a metrics.jsonl row (training), in the order the glossary lists them."""


TRAIN_LOOP_KEYS = ("alerts",)
"""Keys Trainer.train adds to a row after Trainer.step returned it (step() alone does not log them)."""


class UndocumentedMetricWarning(UserWarning):
    """A metrics row holds a key that METRICS does not declare (declare it in agentrl_lib/metrics.py)."""


def applies(name: str, needs_critic: bool) -> bool:
    """Whether METRICS[name] is logged by an estimator with (`needs_critic`) or without a critic."""
    return METRICS[name].logged_by == ALL or needs_critic


def undocumented(row: dict) -> list[str]:
    """The keys of `row` that METRICS does not declare, sorted."""
    return sorted(k for k in row if k not in METRICS)


def complete_row(row: dict, needs_critic: bool, strict: bool = False) -> dict:
    """`row` with every METRICS key: its keys in their order, then each missing key as None (JSON null: not
    applicable to this estimator, e.g. value_loss without a critic, or not computed this step, e.g. the row of a
    step where every episode failed). The values are not changed.

    Raises:
        ValueError: `strict` and `row` holds a key METRICS does not declare (without `strict`: an
            UndocumentedMetricWarning; the test suite turns it into an error, see pyproject.toml).
    """
    extra = undocumented(row)
    if extra:
        message = f"metrics row keys not declared in agentrl_lib/metrics.py METRICS: {extra}"
        if strict:
            raise ValueError(message)
        warnings.warn(message, UndocumentedMetricWarning, stacklevel=2)
    full = dict(row)
    for name in METRICS:
        if name not in full:
            full[name] = None
    return full


def step_row(step: int, trajs: list[Trajectory], rollout: RolloutStats | None = None,
             rewards: list[list[float]] | None = None, batch: dict[str, torch.Tensor] | None = None,
             passes: dict[str, float] | None = None, update: dict[str, float] | None = None,
             seconds: dict[str, float] | None = None) -> dict:
    """The metrics row of one training step, built here alone from what each stage of Trainer.step returned. Episode
    statistics are over every episode that ran, kept by the StarPO-S filter or not (env errors aside).

    Args:
        step: the step's 0-based index (the row's "step" is 1-based).
        trajs: every episode of the step (rollout.Trajectory), env errors included.
        rollout: the rollout's RolloutStats (sampler_gap, generated tokens and their rate).
        rewards: the turn rewards of each usable episode (Trajectory.usable), in order. When no episode is usable
            (every one failed in the environment) the row says so (zeros, entropy NaN, skipped_update 1) and
            holds nothing of the rollout, the batch, the passes or an update (all may be None).
        batch: the step's batch dict (update.py): one row per kept episode; with a critic old_values and returns
            (the value targets), from which explained_variance comes.
        passes: the no-grad passes' metrics (Trainer._old_forward: logprob_mismatch[_mean], tis_weight_mean).
        update: the update's minibatch means (update.minibatch_loss's metrics, grad_norm[, value_grad_norm]) and
            nonfinite_updates (Trainer._update); None: no update ran (no learning signal), logged as
            skipped_update 1 with zero losses and entropy NaN.
        seconds: wall times: step_seconds [, rollout_seconds, update_seconds].
    Returns: a dict of METRICS keys (complete_row adds the missing ones as null; Trainer.train adds `alerts`).
    """
    seconds = seconds or {}
    ran = [t for t in trajs if t.usable]
    env_errors = sum(t.termination.startswith("env_error") for t in trajs)
    if not ran:  # every episode failed in the environment: no update
        return {"step": step + 1, "episodes": len(trajs), "env_errors": env_errors, "success_rate": 0.0,
                "return_mean": 0.0, "invalid_rate": 0.0, "mean_turns": 0.0, "entropy": float("nan"),
                "skipped_update": 1.0, **seconds, "env_error_reasons": sorted({t.termination for t in trajs})}
    row: dict = {"sampler_gap": rollout.sampler_gap, **(passes or {})}
    if "returns" in batch:  # a critic: how well V_old explains its targets
        row["explained_variance"] = explained_variance(batch["old_values"], batch["returns"], batch["mask"])
    if update is None:
        row.update(skipped_update=1.0, entropy=float("nan"), clip_frac=0.0, approx_kl=0.0, grad_norm=0.0,
                   policy_loss=0.0, kl_ref=0.0, nonfinite_updates=0)
    else:
        row.update({k: v for k, v in update.items() if k != "nonfinite_updates"})
        row.setdefault("kl_ref", 0.0)  # algo.kl_coef 0: no KL term
        row.update(skipped_update=0.0, nonfinite_updates=update["nonfinite_updates"])
    returns = torch.tensor([sum(r) for r in rewards], dtype=torch.float32)
    gids = torch.tensor([t.group for t in ran])
    grp_std = [returns[gids == g].std(unbiased=False).item() for g in gids.unique()]
    n_turns = sum(t.n_turns for t in ran)
    row.update({
        "step": step + 1,
        "episodes": len(trajs),
        "success_rate": sum(t.won for t in ran) / len(ran),
        "return_mean": returns.mean().item(),
        "return_std": returns.std(unbiased=False).item(),
        "reward_mean": (sum(sum(r) for r in rewards) / max(n_turns, 1)),
        "group_return_std": sum(grp_std) / len(grp_std),
        "zero_std_group_frac": sum(x <= 1e-6 for x in grp_std) / len(grp_std),
        "singleton_groups": singleton_groups(gids),
        "kept_fraction": batch["input_ids"].shape[0] / len(ran),
        "mean_turns": n_turns / len(ran),
        "invalid_rate": sum(not v for t in ran for v in t.valid) / max(n_turns, 1),
        "repetition_rate": repetition_rate((t.actions, t.replies) for t in ran),
        "response_length": sum(sum(t.mask) for t in ran) / max(n_turns, 1),
        "input_dependence": input_dependence([t.replies for t in ran], [t.game for t in ran]),
        "truncated_rate": sum(x for t in ran for x in t.truncated) / max(n_turns, 1),
        "env_errors": env_errors,
        "env_error_reasons": sorted({t.termination for t in trajs if t.termination.startswith("env_error")}),
        "generated_tokens": rollout.generated_tokens,
        "gen_tokens_per_s": rollout.tokens_per_second,
        "policy_tokens": int(batch["mask"].sum().item()),
        "seq_len_max": batch["input_ids"].shape[1],
    })
    return {**row, **seconds}


def glossary_markdown(keys: list[str] | None = None) -> str:
    """A Markdown table of `keys` (default: all of METRICS, in its order): key, unit, formula, healthy range, what
    failure looks like, and which estimators log it. Raises KeyError on a key not in METRICS."""
    lines = ["| key | unit | formula | healthy | failure looks like | logged by |", "|---|---|---|---|---|---|"]
    for name in keys or list(METRICS):
        m = METRICS[name]
        who = "estimators with a critic (GAE)" if m.logged_by == CRITIC else "all"
        if m.only_when:
            who += f", when {m.only_when}"
        cells = [f"`{m.name}`", m.unit or "—", m.formula, m.healthy, m.failure, who]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)
