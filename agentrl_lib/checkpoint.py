"""Run directories and checkpoints: atomic writes with fsync, save / verify / load with fallback to an older
checkpoint, the rules of `--resume`, metrics.jsonl as strict JSON, and a lock so that one trainer writes a run.

Layout of a run directory:

    RUN/.lock                      fcntl.flock-ed by the trainer writing the run; holds its pid
    RUN/config.yaml                the run's config; model.name is the model it started from (the KL reference)
    RUN/metrics.jsonl              one JSON object per step; NaN / ±inf are written as null
    RUN/checkpoints/step_NNNNNN/   policy/ (weights + tokenizer), optimizer.pt, value_head.pt (PPO), config.yaml
                                   (the config the checkpoint was trained with), state.json (written last):
                                   {"step", "format", "files": {relative path: {"size", "sha256" (files ≤ 16 MiB)}}}
    RUN/checkpoints/latest         name of the newest checkpoint (what `--model RUN` loads)

A checkpoint is written into a temp dir, every file and directory fsync'd, renamed into place, the parent fsync'd;
only then does `latest` move and older checkpoints go (the newest `train.keep_checkpoints` stay). A checkpoint
counts as complete when its state.json parses and every file in its manifest has the recorded size (and hash);
resuming takes the newest complete one that loads and says, in one warning line each, which newer ones it skipped.

Resume rules (`--resume`): the run's config.yaml plus the flags given is the new config. What the checkpoint *is*
cannot change: `algo.advantage` (whether a critic's value head exists, and the optimizer's parameter groups),
`model.name` (the starting model, which is also the KL reference), `model.lora_rank` and `model.lora_alpha` (the
adapter's shape) — these are refused by name. Everything else may change: steps, lr / value_lr (applied over the
optimizer's saved ones), epochs, temperature, games (a moved games dir, a curriculum), device and dtype, and so on.
A missing or damaged config.yaml is restored from the newest checkpoint's copy, with a warning. config.yaml is
rewritten (atomically) only after the checkpoint has loaded, so a refused or failed resume leaves the run as it was.
A config.yaml of a run written before `algo.name` became `algo.advantage` loads as its preset (ALGO_PRESETS).

Errors that a user can act on are `CheckpointError` (a ValueError: the CLI prints its one-line message).

Introduced in notebooks/00_quickstart.md §5.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import logging
import math
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Iterator

import yaml

from .config import ConfigError, RunConfig, upgrade_legacy_keys

log = logging.getLogger(__name__)

FORMAT = 2
"""state.json format: 1 = {"step"} only (before manifests), 2 = with the file manifest."""
HASH_LIMIT = 16 * 2**20
"""Files up to this size (bytes) get a sha256 in the manifest (configs, tokenizer, value head, LoRA adapters)."""
FIXED_ON_RESUME = (("algo", "advantage"), ("model", "name"), ("model", "lora_rank"), ("model", "lora_alpha"))
"""Config fields a resumed run cannot change (see the module docstring)."""


class CheckpointError(ValueError):
    """A run directory or checkpoint cannot be used or written; the message says what happened and what to do."""


class RunLockedError(CheckpointError):
    """Another live process holds the run directory's lock."""


# ----------------------------------------------------------------------------------------------- durable writes
def fsync_dir(path: str | Path) -> None:
    """fsync a directory, so that renames and new entries in it survive a power loss (no-op where unsupported)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write `text` to `path` atomically: a temp file in the same directory, fsync, rename over `path`, fsync the
    directory. A reader sees the old or the new content, never a mix. Raises OSError (the temp file is removed)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def fsync_tree(root: Path) -> None:
    """fsync every file under `root`, then every directory bottom-up (root included)."""
    dirs = []
    for dirpath, _, files in os.walk(root):
        dirs.append(dirpath)
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as f:
                os.fsync(f.fileno())
    for d in reversed(dirs):
        fsync_dir(d)


def is_disk_full(exc: BaseException) -> bool:
    """True if `exc` (or an exception it was raised from) is ENOSPC / EDQUOT; safetensors reports it as text."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if "No space left on device" in str(exc) or "StorageFull" in str(exc):
            return True
        if "inline_container" in str(exc) and "unexpected pos" in str(exc):  # torch.save's zip writer, disk full
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def write_config(path: str | Path, config: RunConfig) -> None:
    """Write `config` as YAML, atomically. Raises CheckpointError (one line) when the disk refuses."""
    try:
        atomic_write_text(path, yaml.safe_dump(config.to_dict(), sort_keys=False))
    except OSError as e:
        raise CheckpointError(f"could not write {path}: {e.strerror or e}") from e


# ------------------------------------------------------------------------------------------------------ lock
_HELD: dict[str, list] = {}  # realpath of a lock file -> [open file, holders in this process]


class RunLock:
    """An exclusive `fcntl.flock` on RUN/.lock, so that two trainers never write one run directory.

    The kernel drops the lock when its holder exits, however it dies (kill -9 included): a stale .lock file is
    harmless. Inside one process the lock is shared (a notebook that builds a second Trainer for the same directory,
    a test that resumes a run it just trained); `release()` undoes one acquisition. POSIX only (Linux, macOS);
    network file systems may ignore flock.

    Raises:
        RunLockedError: another process holds it; the message names its pid.
    """

    def __init__(self, run_dir: str | Path):
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        self.path = run_dir / ".lock"
        self._key = os.path.realpath(self.path)
        self._released = False
        held = _HELD.get(self._key)
        if held is not None:
            held[1] += 1
            return
        f = open(self.path, "a+")
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                f.close()
                raise
            f.seek(0)
            pid = f.read().strip() or "unknown"
            f.close()
            raise RunLockedError(f"{run_dir} is in use by another trainer (pid {pid}); wait for it to finish or stop "
                                 "it, or pass another --out") from None
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        _HELD[self._key] = [f, 1]

    def release(self) -> None:
        """Give up this acquisition (idempotent); the flock goes when the last holder in this process releases."""
        if self._released:
            return
        self._released = True
        held = _HELD.get(self._key)
        if held is None:
            return
        held[1] -= 1
        if held[1] == 0:
            del _HELD[self._key]
            try:
                fcntl.flock(held[0].fileno(), fcntl.LOCK_UN)
            finally:
                held[0].close()


# --------------------------------------------------------------------------------------------------- metrics
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


# ------------------------------------------------------------------------------------------------ checkpoints
def checkpoint_name(step: int) -> str:
    return f"step_{step:06d}"


def list_checkpoints(ckpt_root: str | Path) -> list[tuple[int, Path]]:
    """(step, dir) of every checkpoint directory (complete or not; temp dirs excluded), newest first."""
    out = []
    root = Path(ckpt_root)
    if root.is_dir():
        for p in root.glob("step_*"):
            tail = p.name[len("step_"):]
            if p.is_dir() and tail.isdigit():
                out.append((int(tail), p))
    return sorted(out, reverse=True)


def weights_finite(*modules) -> bool:
    """True if every parameter of the given torch modules (None entries ignored) is finite."""
    import torch

    return all(bool(torch.isfinite(p).all()) for m in modules if m is not None for p in m.parameters())


def _manifest(root: Path) -> dict[str, dict]:
    files = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            rel = p.relative_to(root).as_posix()
            entry: dict[str, Any] = {"size": p.stat().st_size}
            if entry["size"] <= HASH_LIMIT:
                entry["sha256"] = hashlib.sha256(p.read_bytes()).hexdigest()
            files[rel] = entry
    return files


def save_checkpoint(ckpt_root: str | Path, step: int, policy, tokenizer, optimizer, value_head=None,
                    config: RunConfig | None = None, keep: int = 2) -> Path:
    """Write ckpt_root/step_NNNNNN durably and atomically, point `latest` at it, keep the newest `keep`.

    Checkpoints of later steps (left by a run that was resumed from an older checkpoint) are removed too.

    Raises:
        CheckpointError: the weights are not finite (nothing is written: a NaN model never replaces a good one),
            or the disk refused a write (full, read-only, ...); the temp dir is removed, the previous checkpoint and
            `latest` are untouched, and the message says how to resume.
    """
    import torch

    from .models import save_policy

    root = Path(ckpt_root)
    name = checkpoint_name(step)
    if not weights_finite(policy, value_head):
        raise CheckpointError(f"not saving {name}: the model has non-finite (NaN/inf) weights; the previous "
                              f"checkpoint is kept. Lower the learning rate and resume from it")
    final, tmp = root / name, root / f".tmp-{name}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        for stale in root.glob(".tmp-step_*"):  # left by a process killed mid-save (the run lock excludes others)
            shutil.rmtree(stale)
        save_policy(policy, tokenizer, tmp / "policy")
        if value_head is not None:
            torch.save(value_head.state_dict(), tmp / "value_head.pt")
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        if config is not None:
            (tmp / "config.yaml").write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))
        state = {"step": step, "format": FORMAT, "files": _manifest(tmp)}
        (tmp / "state.json").write_text(json.dumps(state, indent=1))  # last: its presence marks a whole checkpoint
        fsync_tree(tmp)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        fsync_dir(root)
        atomic_write_text(root / "latest", name)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, OSError) or is_disk_full(e):
            prev = [p.name for s, p in list_checkpoints(root) if s != step]
            what = "the disk is full" if is_disk_full(e) else (getattr(e, "strerror", None) or str(e))
            raise CheckpointError(
                f"could not write checkpoint {name} ({what}); the previous checkpoint "
                f"({prev[0] if prev else 'none'}) is intact and the partial one was removed: free space, then resume "
                f"with: agentrl train --out {root.parent} --resume") from e
        raise
    for s, p in list_checkpoints(root):  # plumbing: drop checkpoints of a future a resume went back from
        if s > step:
            shutil.rmtree(p, ignore_errors=True)
    for _, p in list_checkpoints(root)[max(keep, 1):]:  # keep the newest `keep`
        shutil.rmtree(p, ignore_errors=True)
    return final


def verify_checkpoint(ckpt: str | Path, need_value_head: bool = False) -> int:
    """Check that a checkpoint directory is complete; return its step.

    Format 2: every manifest file exists with its recorded size (and sha256 where recorded). Format 1 (older runs,
    no manifest): the policy, optimizer.pt and, when `need_value_head`, value_head.pt exist.

    Raises:
        CheckpointError: naming the first missing or damaged file.
    """
    ckpt = Path(ckpt)
    try:
        state = json.loads((ckpt / "state.json").read_text())
        step = state["step"]
        if not isinstance(step, int):
            raise ValueError
    except FileNotFoundError:
        raise CheckpointError(f"{ckpt.name}: state.json missing (an unfinished checkpoint)") from None
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise CheckpointError(f"{ckpt.name}: state.json is damaged") from None
    files = state.get("files")
    if files is not None and not isinstance(files, dict):
        raise CheckpointError(f"{ckpt.name}: state.json is damaged")
    required = ([] if state.get("pruned") else ["optimizer.pt"]) + (["value_head.pt"] if need_value_head else [])
    if files is None:  # format 1
        if not ((ckpt / "policy" / "config.json").is_file() or (ckpt / "policy" / "adapter_config.json").is_file()):
            raise CheckpointError(f"{ckpt.name}: policy/ holds no model")
    else:
        for rel, meta in files.items():
            p = ckpt / rel
            if not p.is_file():
                raise CheckpointError(f"{ckpt.name}: {rel} missing")
            if p.stat().st_size != meta.get("size"):
                raise CheckpointError(f"{ckpt.name}: {rel} has {p.stat().st_size} bytes, the manifest says "
                                      f"{meta.get('size')} (truncated or overwritten)")
            if "sha256" in meta and hashlib.sha256(p.read_bytes()).hexdigest() != meta["sha256"]:
                raise CheckpointError(f"{ckpt.name}: {rel} does not match its sha256 (damaged)")
    for rel in required:
        if not (ckpt / rel).is_file():
            raise CheckpointError(f"{ckpt.name}: {rel} missing")
    return step


def complete_checkpoints(ckpt_root: str | Path, need_value_head: bool = False,
                         warn: bool = True) -> Iterator[tuple[int, Path]]:
    """Yield (step, dir) of the complete checkpoints, newest first; log one warning per incomplete one skipped."""
    for _, p in list_checkpoints(ckpt_root):
        try:
            step = verify_checkpoint(p, need_value_head)
        except CheckpointError as e:
            if warn:
                log.warning("skipping checkpoint %s; falling back to an older one", e)
            continue
        yield step, p


def prune_training_state(run_dir: str | Path) -> int:
    """Free the disk of a finished run: delete every checkpoint but the newest, and the newest's optimizer state
    (about 2/3 of a full fine-tune's checkpoint: AdamW keeps two moments per weight). The newest policy (and value
    head) stay, so the run can still be evaluated or used as `--init`; it can no longer be resumed
    (read_training_state says so). `agentrl sweep` calls this once a run is recorded. Returns the bytes freed."""
    root = Path(run_dir) / "checkpoints"
    ckpts = [p for _, p in list_checkpoints(root)]  # newest first
    freed = 0
    for i, p in enumerate(ckpts):
        if i > 0:
            freed += sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
            shutil.rmtree(p, ignore_errors=True)
            continue
        opt, state_path = p / "optimizer.pt", p / "state.json"
        if opt.is_file():
            freed += opt.stat().st_size
            state = json.loads(state_path.read_text())
            state.get("files", {}).pop("optimizer.pt", None)
            state["pruned"] = True
            atomic_write_text(state_path, json.dumps(state, indent=1))
            opt.unlink()
    return freed


def read_training_state(ckpt: str | Path) -> dict[str, Any]:
    """Load optimizer.pt and value_head.pt (if present) of a checkpoint on the CPU:
    {'optimizer': state dict, 'value_head': state dict or None}. Raises what torch.load raises on damage."""
    import torch

    ckpt = Path(ckpt)
    vh = ckpt / "value_head.pt"
    try:
        pruned = json.loads((ckpt / "state.json").read_text()).get("pruned")
    except (OSError, ValueError):
        pruned = False
    if pruned:
        raise CheckpointError(f"{ckpt} has no optimizer state: `agentrl sweep` removed it once the run was recorded "
                              f"(prune_training_state); start a new run from its policy with --init "
                              f"{ckpt.parent.parent}")
    return {"optimizer": torch.load(ckpt / "optimizer.pt", map_location="cpu"),
            "value_head": torch.load(vh, map_location="cpu") if vh.is_file() else None}


def apply_training_state(state: dict[str, Any], optimizer, value_head=None, lrs: list[float] | None = None) -> None:
    """Load a checkpoint's optimizer (and value head) state, then set each parameter group's lr to `lrs` (the
    config's lr and value_lr): the optimizer's state dict carries the lr it was saved with, and a resumed run with
    a new `--lr` must train with the new one."""
    if value_head is not None:
        if state.get("value_head") is None:
            raise CheckpointError("the checkpoint has no value_head.pt (was it a GRPO/RLOO run?)")
        value_head.load_state_dict(state["value_head"])
    optimizer.load_state_dict(state["optimizer"])
    for group, lr in zip(optimizer.param_groups, lrs or []):
        group["lr"] = lr


def load_newest(ckpt_root: str | Path, load: Callable[[Path], Any],
                need_value_head: bool = False) -> tuple[int, Path, Any]:
    """Call `load(dir)` on the newest complete checkpoint; if it raises, warn and try the next older one.

    Returns:
        (step, checkpoint dir, what `load` returned).
    Raises:
        CheckpointError: no checkpoint is complete and loadable (the message lists why each failed).
    """
    reasons = []
    for _, p in list_checkpoints(ckpt_root):
        try:
            step = verify_checkpoint(p, need_value_head)
            loaded = load(p)
            if reasons:  # fell back: `latest` (what `--model RUN` loads) must not name a damaged checkpoint
                atomic_write_text(Path(ckpt_root) / "latest", p.name)
            return step, p, loaded
        except Exception as e:  # any damage: report it and fall back
            reason = str(e) if isinstance(e, CheckpointError) else f"{p.name}: {type(e).__name__}: {e}"
            reasons.append(reason.splitlines()[0])  # whole: a cut reason cut the path it names
            log.warning("skipping checkpoint %s; falling back to an older one", reasons[-1])
    run = Path(ckpt_root).parent
    if not reasons:
        raise CheckpointError(f"{run} has no checkpoint")
    raise CheckpointError(f"no usable checkpoint in {run} ({'; '.join(reasons)}); start a new run, e.g. with "
                          f"--init {Path(ckpt_root) / list_checkpoints(ckpt_root)[0][1].name} if its policy/ is intact")


# ----------------------------------------------------------------------------------------------- resume rules
def run_exists(run_dir: str | Path) -> bool:
    """True if `run_dir` holds a run: a config.yaml or any checkpoint."""
    run_dir = Path(run_dir)
    ck = run_dir / "checkpoints"
    return (run_dir / "config.yaml").is_file() or bool(list_checkpoints(ck)) or (ck / "latest").is_file()


def _load_complete(path: Path, reference: dict | None) -> RunConfig:
    """Load a config.yaml and check it lost nothing: every section (and, given a reference dict, every key of it)
    is present. Raises CheckpointError when damaged, ConfigError (a bad value a user wrote) as RunConfig.load."""
    try:
        data = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path} is not valid YAML ({str(e).splitlines()[0]})") from e
    ref = reference or RunConfig().to_dict()
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} is empty or not a mapping")
    data = upgrade_legacy_keys(data)  # a run written before algo.name became algo.advantage
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
                return RunConfig.from_dict(yaml.safe_load((p / "config.yaml").read_text())), p.name
            except (yaml.YAMLError, ConfigError):
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
