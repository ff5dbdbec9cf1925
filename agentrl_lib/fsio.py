"""Durable writes: a file replaced atomically (temp file in the same directory, fsync, rename, fsync of the
directory), a directory tree fsync'd before it is renamed into place, and the test for a full disk.

A reader sees the old content or the new one, never a mix, and what was written survives a power loss. Used by the
run directory (rundir.py: config.yaml, metrics.jsonl), checkpoints (checkpoint.py), game-set manifests
(envs/base.py), evaluation results (evaluate.py) and the sweeps' records (sweep.py). POSIX semantics (rename over an
existing file); network file systems may weaken them.

Introduced in notebooks/00_quickstart.md §5.
"""
from __future__ import annotations

import errno
import os
from pathlib import Path


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
