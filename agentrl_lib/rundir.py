"""A run directory: the lock that lets one trainer write it, its config.yaml, its metrics log (metrics.jsonl) and the
decision to resume it or start it fresh. Checkpoints: checkpoint.py; durable writes: fsio.py.

Layout of a run directory:

    RUN/.lock            locked (filelock: fcntl.flock) by the trainer writing the run; holds its pid
    RUN/config.yaml      the run's config; model.name is the model it started from (the KL reference)
    RUN/metrics.jsonl    one JSON object per step (metrics.METRICS); NaN / ±inf are written as null
    RUN/checkpoints/     step_NNNNNN/ and latest (checkpoint.py)

Resume rules (`--resume`): the run's config.yaml plus the flags given is the new config. What the checkpoint *is*
cannot change: `algo.advantage` (whether a critic's value head exists, and the optimizer's parameter groups),
`model.name` (the starting model, which is also the KL reference), `model.lora_rank` and `model.lora_alpha` (the
adapter's shape) — these are refused by name. Everything else may change: steps, lr / value_lr (applied over the
optimizer's saved ones), epochs, temperature, games (a moved games dir, a curriculum), device and dtype, and so on.
A missing or damaged config.yaml is restored from the newest checkpoint's copy, with a warning. config.yaml is
rewritten (atomically) only after the checkpoint has loaded, so a refused or failed resume leaves the run as it was.
A config.yaml of a run written before `algo.name` became `algo.advantage` loads as its preset (ALGO_PRESETS).
Without --resume a directory that holds checkpoints is refused (FileExistsError): a new run never overwrites one.

Errors that a user can act on are `checkpoint.CheckpointError` (a ValueError: the CLI prints its one-line message).

Introduced in notebooks/00_quickstart.md §5.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
from pathlib import Path
from typing import Any

import yaml
from filelock import FileLock, Timeout

from .checkpoint import CheckpointError, complete_checkpoints, list_checkpoints
from .config import ConfigError, RunConfig, fold_swe_reward, load_yaml, upgrade_legacy_keys
from .fsio import atomic_write_text, is_disk_full

log = logging.getLogger(__name__)

FIXED_ON_RESUME = (("algo", "advantage"), ("model", "name"), ("model", "lora_rank"), ("model", "lora_alpha"))
"""Config fields a resumed run cannot change (see the module docstring)."""


# ------------------------------------------------------------------------------------------------------ lock
class RunLockedError(CheckpointError):
    """Another live process holds the run directory's lock."""


_HELD: list = []  # one FileLock per acquisition not yet released: a dropped RunLock keeps the lock, as before filelock


def _write_pid(fd: int) -> None:
    """Put this process's pid in the lock file once it is locked (filelock's on_acquired), for RunLockedError."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)


class RunLock:
    """An exclusive lock on RUN/.lock (`filelock.FileLock`: fcntl.flock), so that two trainers never write one run
    directory.

    The kernel drops the lock when its holder exits, however it dies (kill -9 included): a stale .lock file is
    harmless, and it stays in place (preserve_lock_file). Inside one process the lock is shared (a notebook that
    builds a second Trainer for the same directory, a test that resumes a run it just trained): filelock's singleton
    per path counts the acquisitions across threads; `release()` undoes one. A RunLock dropped without release()
    keeps its acquisition until the process ends (the Trainer releases its own in close() or a finalizer). POSIX only
    (Linux, macOS); network file systems may ignore flock (no soft-lock fallback: preserve_lock_file turns it off).

    Raises:
        RunLockedError: another process holds it; the message names its pid (written into RUN/.lock by the holder).
    """

    def __init__(self, run_dir: str | Path):
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        self.path = run_dir / ".lock"
        self._released = False
        self._lock = FileLock(self.path, blocking=False, is_singleton=True, thread_local=False,
                              preserve_lock_file=True, on_acquired=_write_pid)
        try:
            self._lock.acquire()
        except Timeout:
            try:
                pid = self.path.read_text().strip() or "unknown"
            except OSError:
                pid = "unknown"
            raise RunLockedError(f"{run_dir} is in use by another trainer (pid {pid}); wait for it to finish or stop "
                                 "it, or pass another --out") from None
        _HELD.append(self._lock)  # filelock releases a lock whose instances are all garbage; this one is held

    def release(self) -> None:
        """Give up this acquisition (idempotent); the flock goes when the last holder in this process releases."""
        if self._released:
            return
        self._released = True
        _HELD.remove(self._lock)
        self._lock.release()


# --------------------------------------------------------------------------------------------- metrics.jsonl
def json_line(row: dict[str, Any]) -> str:
    """One strict-JSON line (RFC 8259 has no NaN): non-finite floats become null. Ends with a newline."""
    clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
    return json.dumps(clean, allow_nan=False) + "\n"


def append_metrics(path: str | Path, row: dict[str, Any]) -> None:
    """Append one row to metrics.jsonl and fsync it. Raises CheckpointError (one line) when the write fails."""
    try:
        with open(path, "a") as f:
            f.write(json_line(row))
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        full = " (disk full)" if is_disk_full(e) else ""
        raise CheckpointError(f"could not append to {path}{full}: {e.strerror or e}; the last checkpoint is intact: "
                              f"free space, then resume with: agentrl train --out {Path(path).parent} --resume") from e


def read_metrics(path: str | Path, upto_step: int) -> list[dict]:
    """The rows of metrics.jsonl with step <= upto_step (later rows, from steps after the checkpoint being resumed,
    are dropped and the file is rewritten atomically without them). null is read back as NaN.

    A line that is not a JSON object (a row torn by a crash or a full disk) is skipped with a warning; it does not
    block the resume."""
    path = Path(path)
    if not path.is_file():
        return []
    lines = path.read_text(errors="replace").splitlines()
    rows, torn = [], []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not isinstance(row, dict) or not isinstance(row.get("step"), int):
                raise ValueError("not a metrics row")
        except ValueError:
            torn.append(i)
            continue
        rows.append({k: (math.nan if v is None else v) for k, v in row.items()})
    if torn:
        log.warning("%s: skipped %d unreadable line(s) (line %s; torn by an interrupted write?)", path, len(torn),
                    ", ".join(map(str, torn[:5])))
    kept = [r for r in rows if r["step"] <= upto_step]
    if torn or len(kept) != len(rows):
        atomic_write_text(path, "".join(json_line(r) for r in kept))
    return kept


def resume_metrics(path: str | Path, start_step: int) -> list[dict]:
    """The metrics rows a run resumed at `start_step` keeps (read_metrics: later rows, from an interrupted run, are
    dropped and the file rewritten). Steps done but without a row (metrics.jsonl deleted or cut) are named in one
    logged warning: the learning curve and the collapse detector go on without them."""
    rows = read_metrics(path, start_step)
    missing = sorted(set(range(1, start_step + 1)) - {r["step"] for r in rows})
    if missing:
        what = f"step {missing[0]}" if len(missing) == 1 else f"{len(missing)} steps ({missing[0]}-{missing[-1]})"
        line = (f"{path} has no row for {what} of the {start_step} this run has done "
                "(deleted or damaged): its curve and the collapse detector go on without them")
        log.warning(line)
    return rows


# ------------------------------------------------------------------------ config.yaml, resume or start fresh
def write_config(path: str | Path, config: RunConfig) -> None:
    """Write `config` as YAML, atomically. Raises CheckpointError (one line) when the disk refuses."""
    try:
        atomic_write_text(path, yaml.safe_dump(config.to_dict(), sort_keys=False))
    except OSError as e:
        raise CheckpointError(f"could not write {path}: {e.strerror or e}") from e


def run_exists(run_dir: str | Path) -> bool:
    """True if `run_dir` holds a run: a config.yaml or any checkpoint."""
    run_dir = Path(run_dir)
    ck = run_dir / "checkpoints"
    return (run_dir / "config.yaml").is_file() or bool(list_checkpoints(ck)) or (ck / "latest").is_file()


def _load_complete(path: Path, reference: dict | None) -> RunConfig:
    """Load a config.yaml and check it lost nothing: every section (and, given a reference dict, every key of it)
    is present. Raises CheckpointError when damaged, ConfigError (a bad value a user wrote) as RunConfig.load."""
    try:
        data = load_yaml(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError, ValueError) as e:  # ValueError: config.YAMLBoundError, duplicate keys
        raise CheckpointError(f"{path} is not valid YAML ({str(e).splitlines()[0]})") from e
    ref = reference or RunConfig().to_dict()
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} is empty or not a mapping")
    data = upgrade_legacy_keys(data)  # a run written before algo.name became algo.advantage
    data = fold_swe_reward(data)  # a run written while swe games had env.swe_reward beside reward.kind
    missing = [s for s in ref if not isinstance(data.get(s), dict)]
    if reference is not None:
        missing += [f"{s}.{k}" for s in ref if isinstance(data.get(s), dict) for k in ref[s] if k not in data[s]]
    if missing:
        raise CheckpointError(f"{path} is incomplete (no {', '.join(missing[:4])}; truncated?)")
    return RunConfig.from_dict(data)


def _checkpoint_config(run_dir: Path) -> tuple[RunConfig | None, str]:
    """The config saved inside the newest complete checkpoint (None for format-1 checkpoints) and its name."""
    for _, p in complete_checkpoints(run_dir / "checkpoints", warn=False):
        if (p / "config.yaml").is_file():
            try:
                return RunConfig.from_dict(load_yaml((p / "config.yaml").read_text())), p.name
            except (yaml.YAMLError, ValueError):  # ConfigError, config.YAMLBoundError
                continue
        return None, p.name
    return None, ""


def resume_config(run_dir: str | Path) -> RunConfig:
    """The saved config a `--resume` starts from (the CLI applies its flags over it).

    run_dir/config.yaml if it is whole; if it is missing, unparsable or truncated, the copy inside the newest
    complete checkpoint, with a warning (the file itself is rewritten once the resumed trainer has loaded).

    Raises:
        CheckpointError: "no run in DIR" (neither config.yaml nor a checkpoint), or config.yaml is damaged and no
            checkpoint holds a copy. ConfigError: config.yaml holds an invalid value (as written by hand).
    """
    run_dir = Path(run_dir)
    if not run_exists(run_dir):
        raise CheckpointError(f"no run in {run_dir} (no config.yaml, no checkpoints/); start one without --resume "
                              f"(agentrl train --games DIR --out {run_dir})")
    saved = run_dir / "config.yaml"
    copy, copy_name = _checkpoint_config(run_dir)
    try:
        if not saved.is_file():
            raise CheckpointError(f"{saved} is missing")
        return _load_complete(saved, copy.to_dict() if copy is not None else None)
    except CheckpointError as e:
        if copy is None:
            raise CheckpointError(f"{e}, and no checkpoint holds a copy: restore it (see the run's metrics/notes) or "
                                  "start a new run") from None
        log.warning("%s; using the copy saved with checkpoint %s", e, copy_name)
        return copy


def recorded_config(run_dir: str | Path) -> RunConfig | None:
    """The config the run's checkpoints were trained with (for the fields a resume cannot change): the newest
    complete checkpoint's copy, else run_dir/config.yaml, else None. Never warns."""
    run_dir = Path(run_dir)
    copy, _ = _checkpoint_config(run_dir)
    if copy is not None:
        return copy
    try:
        return RunConfig.load(run_dir / "config.yaml")
    except (OSError, ConfigError):
        return None


def check_resume_overrides(recorded: RunConfig, new: RunConfig, init: str | None = None) -> None:
    """Refuse, by name, changes of the fields in FIXED_ON_RESUME. model.name is the recorded one unless `init` (an
    explicit `--init`, resolved to an absolute path when local) names another model.

    Raises:
        CheckpointError: one line listing each changed field as `section.key (old → new)`.
    """
    old_d, new_d = recorded.to_dict(), new.to_dict()
    new_d["model"]["name"] = old_d["model"]["name"] if init is None else init  # the model comes from the run
    changed = [f"{s}.{k} ({old_d[s][k]!r} → {new_d[s][k]!r})" for s, k in FIXED_ON_RESUME if old_d[s][k] != new_d[s][k]]
    if changed:
        raise CheckpointError(
            f"--resume cannot change {', '.join(changed)}: the checkpoint was trained with the recorded values. Drop "
            "those flags, or start a new run from this one: agentrl train --init RUN_DIR --out NEW_DIR ...")


# ------------------------------------------------------------------------------------------------ SFT and RL apart
SFT_OUTPUTS = ("policy", "sft_summary.json")
"""What `agentrl sft --out DIR` writes (sft.sft): the model in DIR/policy and its summary. An RL run directory holds
config.yaml, metrics.jsonl and checkpoints/<step>/policy; model_paths.resolve_model_path takes a directory's
checkpoints/latest before its policy/, so a directory holding both silently evaluated the RL checkpoint (issue 52).
The two are kept apart: neither command writes into the other's directory, and a model flag refuses a directory that
holds both."""


def _holds_model(path: Path) -> bool:
    """model_paths.is_model_dir without importing torch: a transformers model or a peft adapter."""
    return (path / "config.json").is_file() or (path / "adapter_config.json").is_file()


def sft_output_in(directory: str | Path) -> str | None:
    """'DIR/policy' or 'DIR/sft_summary.json' when `directory` holds an SFT output, else None."""
    d = Path(directory).expanduser()
    if _holds_model(d / "policy"):
        return str(d / "policy")
    return str(d / "sft_summary.json") if (d / "sft_summary.json").is_file() else None


def check_not_sft_output(run_dir: str | Path, flag: str = "--out") -> None:
    """Refuse to start an RL run in a directory that holds an SFT output. Raises ConfigError naming `flag`."""
    if (found := sft_output_in(run_dir)) is not None:
        raise ConfigError(f"{flag} {run_dir} holds an SFT output ({found}): an RL run there would mix with it, and "
                          f"`eval --model {run_dir}` would take one of them silently; pass a new run directory (and "
                          f"{run_dir} as --init to start from the SFT model)")


def check_not_run_dir(out: str | Path, flag: str = "--out") -> None:
    """Refuse to write an SFT output into an RL run directory (run_exists). Raises ConfigError naming `flag`."""
    if run_exists(Path(out).expanduser()):
        raise ConfigError(f"{flag} {out} is an RL run directory (config.yaml or checkpoints/): an SFT model there "
                          "would mix with the run's checkpoints; pass a new directory")


def check_unambiguous_model(name: str, flag: str = "--model") -> None:
    """Refuse a model directory that holds both an RL run (checkpoints/latest) and another model (DIR/policy from an
    SFT, or DIR/config.json), naming the path to pass for each. Raises ConfigError naming `flag`."""
    d = Path(name).expanduser()
    latest = d / "checkpoints" / "latest"
    if not (d.is_dir() and latest.is_file()):
        return
    other = d / "policy" if _holds_model(d / "policy") else d if _holds_model(d) else None
    if other is not None:
        step = latest.read_text().strip()
        raise ConfigError(f"{flag} {name} is ambiguous: it holds an RL run (checkpoints/latest: {step}) and another "
                          f"model ({other}); pass {d / 'checkpoints' / step} for the RL policy or {other} for the "
                          "other")


def start_or_resume(run_dir: Path, config: RunConfig, init: str | None, resume: bool) -> RunConfig:
    """The resume-or-fresh decision of a trainer about to write `run_dir`, taken before any model loads.

    Args:
        config: the run's config (on resume: resume_config's with the CLI's flags applied).
        init: the model to start from (an explicit `--init`; a local path is made absolute), or None.
        resume: continue the run in `run_dir` (FIXED_ON_RESUME fields are checked against the recorded config,
            and the starting model is the recorded one), else start a new run there.
    Returns: `config` with model.name the model the run starts from (the KL reference), as config.yaml records it.
    Raises:
        CheckpointError: resume and run_dir holds no run, or a FIXED_ON_RESUME field changed (named).
        FileExistsError: not resume and run_dir already holds checkpoints. ConfigError: not resume and run_dir
            holds an SFT output (check_not_sft_output).
    """
    if init:
        local = Path(init).expanduser()
        init = str(local.resolve()) if local.exists() else init  # a resume may start from another directory
    if resume:
        if not run_exists(run_dir):
            raise CheckpointError(f"no run in {run_dir} (no config.yaml, no checkpoints/); start one without --resume")
        recorded = recorded_config(run_dir) or config
        check_resume_overrides(recorded, config, init)
        init = recorded.model.name  # the model a run started from is a fact of the run (the KL reference)
    elif list_checkpoints(run_dir / "checkpoints") or (run_dir / "checkpoints" / "latest").is_file():
        raise FileExistsError(f"{run_dir} already holds a run; pass --resume to continue it or pick a new --out")
    else:
        check_not_sft_output(run_dir)
    if init:  # the run's config names the model it starts from (the KL reference)
        config = dataclasses.replace(config, model=dataclasses.replace(config.model, name=init))
    return config


def check_steps_left(steps: int, done: int, run_dir: Path) -> None:
    """Refuse a resume whose train.steps is below the `done` steps the checkpoint holds (ConfigError, before
    config.yaml is rewritten: nothing changes)."""
    if steps < done:
        raise ConfigError(f"--resume with train.steps (--steps) {steps}: {run_dir} has already trained {done} steps; "
                          f"pass --steps > {done} to train on, or evaluate it as it is: agentrl eval --model {run_dir}")
