"""Where agentrl keeps what it makes: converted models, generated games and notebook runs go under one cache root,
never into the source tree. Imports nothing heavy (envs and models both use it).

Introduced in notebooks/00_quickstart.md §1 (the games' cache).
"""
from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """Root for converted models and generated games: `$AGENTRL_HOME`, else `~/.cache/agentrl` (created)."""
    root = os.environ.get("AGENTRL_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "agentrl")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path
