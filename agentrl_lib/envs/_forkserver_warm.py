"""Imported once by the env pools' forkserver (envs/process_pool.py, `_PRELOAD_WARM`) for a family that has a `warm_up`:
parse the game logic of the game named by $AGENTRL_ENVPOOL_WARM (family $AGENTRL_ENVPOOL_FAMILY), so every worker
forked afterwards finds it in the engine's parse cache (a worker's first TextWorld reset: 1.8 s → 0.04 s, measured on
2 CPU cores). Does nothing when the variables are unset or the game cannot be read."""
import os

_GAME = os.environ.get("AGENTRL_ENVPOOL_WARM")
if _GAME:
    try:
        from . import get_family

        get_family(os.environ.get("AGENTRL_ENVPOOL_FAMILY", "textworld")).warm_up(_GAME)
    except Exception:  # an optimisation only
        pass
