"""One function runs a configuration: train it, then evaluate it on held-out games. `agentrl train`, `agentrl demo`
(its RL stage) and the notebooks call `run_rl`; so will the sweep runner.

    summary = run_rl(RunConfig(...), "runs/ppo", init="runs/sft", eval_games="games/heldout")
    summary["rows"][-1]["success_rate"], summary["eval"]["success_rate"]

Introduced in notebooks/00_quickstart.md §5.
"""
from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

from .config import RunConfig
from .diagnostics import CollapseError
from .envs.base import load_game_set
from .envs.protocol import GameSet


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C (KeyboardInterrupt) during run_rl, after the trainer was closed; str(e) is one line saying where
    training stopped and how to resume."""


def run_rl(config: RunConfig, run_dir: str | Path, init: str | None = None,
           eval_games: GameSet | str | Path | None = None, resume: bool = False,
           progress: bool = True) -> dict[str, Any]:
    """Train `config` into `run_dir` (trainer.Trainer), then evaluate the trained policy on `eval_games`.

    Args:
        config: the run's RunConfig (config.env.games names the training games).
        run_dir: the run directory (config.yaml, metrics.jsonl, checkpoints/, learning_curve.png, eval.json); the
            trainer writes the first three, run_rl draws the learning curves after training (also when
            train.stop_on_collapse stopped it) and writes the evaluation.
        init: the model to start from (default config.model.name); see Trainer.
        eval_games: held-out games (a GameSet or a games dir); default config.train.eval_games ('' = no evaluation).
            Played once each with the run's EnvConfig (shown and run as in training), max_turns = env.max_turns,
            temperature = train.eval_temperature, max_new_tokens = train.max_new_tokens; written to run_dir/eval.json.
            In a data-parallel job (agentrl_lib/distributed.py) rank 0 alone evaluates; the others return eval None.
        resume: continue run_dir's run from its newest checkpoint (the resume rules: agentrl_lib/rundir.py).
        progress: print one line per step (and the evaluation's progress bar).
    Returns:
        {"rows": the metrics rows of every step (metrics.METRICS keys), "eval": the evaluate() result or None,
         "run_dir", "config", "metrics", "learning_curve", "eval_path" (or None), "last_checkpoint": paths as str}.
    Raises:
        RunInterrupted: on Ctrl-C (the trainer is closed first, its last checkpoint intact).
        Whatever Trainer and Trainer.train raise (ConfigError, GameSetError, FileExistsError, CheckpointError,
        DivergenceError, TooManyEnvErrors, CollapseError, ...), after closing the trainer.
    """
    from .evaluate import evaluate, save_eval
    from .trainer import Trainer

    run_dir = Path(run_dir)
    if eval_games is None and config.train.eval_games:
        eval_games = config.train.eval_games
    if eval_games is not None and not isinstance(eval_games, GameSet):
        eval_games = load_game_set(eval_games)  # before training: a missing held-out set fails at once
    trainer = None
    try:
        trainer = Trainer(config, run_dir, init=init, resume=resume, progress=progress)
        rows = trainer.train()
        draw_learning_curves(trainer)
    except KeyboardInterrupt:
        _close_ignoring_sigint(trainer)
        raise RunInterrupted(interrupted_message(trainer, run_dir)) from None
    except CollapseError:  # train.stop_on_collapse stopped it: the curves up to the stop, as after a whole run
        draw_learning_curves(trainer)
        raise
    finally:
        if trainer is not None:
            trainer.close()
    res, eval_path = None, None
    if eval_games is not None and trainer.is_main:  # data parallelism: rank 0 evaluates (distributed.py)
        cfg = trainer.cfg
        res = evaluate(trainer.policy, trainer.tok, eval_games, max_turns=cfg.env.max_turns,
                       temperature=cfg.train.eval_temperature, max_new_tokens=cfg.train.max_new_tokens, env=cfg.env,
                       reward_kind=cfg.reward.kind, generator=cfg.model.generator, progress=progress)
        eval_path = run_dir / "eval.json"
        save_eval(res, eval_path)
    return {"rows": rows, "eval": res, "run_dir": str(run_dir), "config": str(run_dir / "config.yaml"),
            "precision": trainer.precision, "adamw": trainer.adamw_impl, "generator": type(trainer.generator).__name__,
            "metrics": str(trainer.metrics_path), "learning_curve": str(run_dir / "learning_curve.png"),
            "eval_path": None if eval_path is None else str(eval_path),
            "last_checkpoint": None if trainer.last_checkpoint is None else
            str(trainer.ckpt_root / trainer.last_checkpoint)}


def draw_learning_curves(trainer) -> None:
    """run_dir/learning_curve.png (plots.plot_learning_curves) from the metrics rows of a trainer that trained
    (Trainer.rows); rank 0 alone in a data-parallel job, nothing without rows."""
    from .plots import plot_learning_curves, save_and_close

    rows = getattr(trainer, "rows", None)
    if rows and trainer.is_main:
        fig = plot_learning_curves(rows, title=f"{trainer.cfg.algo.label} / {trainer.cfg.reward.kind}")
        save_and_close(fig, trainer.run_dir / "learning_curve.png")


def _close_ignoring_sigint(trainer) -> None:
    """Close the trainer with Ctrl-C ignored (a second one must not break the cleanup); the handler is restored
    afterwards (a notebook kernel keeps its interrupt)."""
    if trainer is None:
        return
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
    try:
        trainer.close()
    finally:
        if main:
            signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)


def interrupted_message(trainer, run_dir: Path) -> str:
    """The one line for a Ctrl-C: where training stopped and how to go on (`trainer` None: before it started)."""
    resume = f"resume with: agentrl train --out {run_dir} --resume"
    if trainer is None:
        return "interrupted before training started; nothing was trained: run the same command again"
    where = (f"during step {trainer.step_in_progress}/{trainer.cfg.train.steps} (that step is not saved)"
             if trainer.step_in_progress else f"after step {trainer.last_step}")
    if trainer.last_checkpoint:
        return f"interrupted {where}; the last checkpoint is {trainer.last_checkpoint}; {resume}"
    return f"interrupted {where}; no checkpoint yet, so --resume starts over at step 1; {resume}"
