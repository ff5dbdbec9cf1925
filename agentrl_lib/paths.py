"""Where agentrl keeps what it makes (converted models, generated games and notebook runs go under one cache root,
never into the source tree) and which source revision made it (`git_commit`, recorded in results). Imports nothing
heavy (envs and models both use it).

Introduced in notebooks/00_quickstart.md §1 (the games' cache).
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path


def cache_root() -> Path:
    """Root for converted models and generated games: `$AGENTRL_HOME`, else `~/.cache/agentrl` (created)."""
    root = os.environ.get("AGENTRL_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "agentrl")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def shown_path(path: str | os.PathLike) -> str:
    """`path` as a chapter prints it: under the cache root as `$AGENTRL_HOME/...` (the same on every machine), else
    under the home directory as `~/...`, else as given; so a stored notebook output never shows the executing
    machine's absolute paths."""
    p = Path(path).expanduser().absolute()
    for root, label in ((cache_root(), "$AGENTRL_HOME"), (Path.home(), "~")):
        try:
            return f"{label}/{p.relative_to(root.absolute()).as_posix()}"
        except ValueError:
            continue
    return str(path)


def git_commit() -> str:
    """`git rev-parse HEAD` of the source tree this module is in, with '+dirty' when tracked files differ from it;
    outside git, the environment variable AGENTRL_GIT_COMMIT (set it when running a copy of a checkout that has no
    .git, e.g. on a GPU machine) or 'unknown'."""
    here = Path(__file__).resolve().parent
    outside = os.environ.get("AGENTRL_GIT_COMMIT") or "unknown"
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return outside
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=10)
        return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return outside


def undecodable_name(path: str | os.PathLike) -> str | None:
    """The part of `path` that is not valid UTF-8 (Python keeps such bytes as lone surrogates, which the TextWorld
    engine, the tokenizer's writer and JSON-with-UTF-8 writers refuse with "surrogates not allowed"), shown with its
    bytes escaped; None when the whole path is valid UTF-8."""
    for part in Path(path).parts:
        try:
            part.encode("utf-8")
        except UnicodeEncodeError:
            return os.fsencode(part).decode("utf-8", "backslashreplace")
    return None
