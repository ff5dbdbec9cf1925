"""Checkpoints of a run: save durably with a manifest, verify, load the newest complete one with fallback to an older
one, apply a resumed optimizer's state, prune a finished run's training state.

Layout (inside a run directory, rundir.py):

    RUN/checkpoints/step_NNNNNN/   policy/ (weights + tokenizer), optimizer.pt, value_head.pt (PPO), config.yaml
                                   (the config the checkpoint was trained with), state.json (written last):
                                   {"step", "format", "files": {relative path: {"size", "sha256" (files ≤ 16 MiB)}}}
    RUN/checkpoints/latest         name of the newest checkpoint (what `--model RUN` loads)

A checkpoint is written into a temp dir, every file and directory fsync'd, renamed into place, the parent fsync'd
(fsio.py); only then does `latest` move and older checkpoints go (the newest `train.keep_checkpoints` stay). A
checkpoint counts as complete when its state.json parses and every file in its manifest has the recorded size (and
hash); resuming takes the newest complete one that loads and says, in one warning line each, which newer ones it
skipped. What a resume may change, and when config.yaml is rewritten: rundir.py.

Errors that a user can act on are `CheckpointError` (a ValueError: the CLI prints its one-line message); the run
directory's errors (rundir.py) are CheckpointErrors too.

Introduced in notebooks/00_quickstart.md §5.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Iterator

import yaml

from .config import ModelConfig, RunConfig
from .fsio import atomic_write_text, fsync_dir, fsync_tree, is_disk_full

log = logging.getLogger(__name__)

FORMAT = 2
"""state.json format: 1 = {"step"} only (before manifests), 2 = with the file manifest."""
HASH_LIMIT = 16 * 2**20
"""Files up to this size (bytes) get a sha256 in the manifest (configs, tokenizer, value head, LoRA adapters)."""


class CheckpointError(ValueError):
    """A run directory or checkpoint cannot be used or written; the message says what happened and what to do."""


def checkpoint_name(step: int) -> str:
    """'step_000042': the directory name of the checkpoint after `step` steps (zero-padded: names sort by step)."""
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


def load_checkpoint(ckpt_root: str | Path, model: ModelConfig, need_value_head: bool = False
                    ) -> tuple[int, Path, Any, Any, dict[str, Any]]:
    """The newest complete checkpoint that loads (load_newest): its policy on model.device in model.dtype
    (models.load_policy) and its training state on the CPU (read_training_state).

    Returns:
        (step, checkpoint dir, policy, tokenizer, {'optimizer', 'value_head'} for apply_training_state).
    Raises:
        CheckpointError: as load_newest.
    """
    from .models import load_policy

    def load(ckpt: Path):
        return (*load_policy(str(ckpt / "policy"), model.device, model.dtype), read_training_state(ckpt))

    step, ckpt, (policy, tok, state) = load_newest(ckpt_root, load, need_value_head)
    return step, ckpt, policy, tok, state
