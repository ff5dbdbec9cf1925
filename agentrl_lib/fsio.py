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


class NotARegularFile(OSError):
    """The path to write is a device node, a FIFO, a socket or a directory: an atomic write would replace it with a
    regular file (as root, `--out /dev/null` would break that device for the whole machine), so it is refused."""


def not_regular(path: str | Path) -> str | None:
    """What `path` is when it exists and is neither a regular file nor a symlink to one (nor to nothing yet), e.g.
    "a character device", "a FIFO"; None when a file may be written there."""
    import stat

    try:
        mode = os.stat(path).st_mode  # follows a symlink: its target is what gets written
    except (FileNotFoundError, NotADirectoryError):  # nothing there yet (a missing or non-folder ancestor: the
        return None                                   # writer's own error says which)
    except OSError as e:
        return f"unreadable ({e.strerror or e})"
    for test, what in ((stat.S_ISREG, None), (stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return what
    return "not a regular file"


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write `text` to `path` atomically: a temp file in the same directory, fsync, rename over `path`, fsync the
    directory. A reader sees the old or the new content, never a mix. A symlink is followed (its target is
    replaced, the link stays); a device node, FIFO, socket or directory is never replaced.
    Raises NotARegularFile (nothing written) for those; OSError otherwise (the temp file is removed)."""
    path = Path(path)
    if (what := not_regular(path)) is not None:
        raise NotARegularFile(f"{path} is {what}: refusing to replace it with a file; pass a regular file's path")
    if path.is_symlink():
        path = path.resolve()
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
