"""ALFWorld's data, shared by the env (envs/alfworld.py), the generator (envs/alfworld_gen.py) and the index of the
official games (envs/alfworld_official.py): a game folder's two files (GAME_FILE, TRAJ_FILE), the six task types
(TASK_TYPES), and the `ALFWORLD_DATA` directory (`prepare_alfworld`, `user_alfworld_data`). Its own module, importing
nothing of agentrl_lib, so that the env's game maker can import the generator and the index, which import this: data
flows one way.

No notebook chapter yet: book/environments.md, section "ALFWorld offline", shows the commands.
"""
from __future__ import annotations

import os
import sys
import tempfile

GAME_FILE = "game.tw-pddl"
TRAJ_FILE = "traj_data.json"
TASK_TYPES = ("pick_and_place_simple", "look_at_obj_in_light", "pick_clean_then_place_in_recep",
              "pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep", "pick_two_obj_and_place")
"""The six ALFWorld task types (paper, Table 1), in alfworld's own numbering order 1..6."""

_OWN_DATA_DIR = os.path.join(tempfile.gettempdir(), "agentrl_alfworld_data")


def prepare_alfworld() -> None:
    """Make `import alfworld` side-effect free. Importing it (alfworld.info) creates the directory `ALFWORLD_DATA`
    names, `~/.cache/alfworld` when unset, so a typo in the variable would silently create that path. This imports
    alfworld once with `ALFWORLD_DATA` pointing at a temp dir, then puts the user's value back (left pointing at the
    temp dir when the user set none; `user_alfworld_data` ignores it). Call before importing alfworld."""
    user = os.environ.get("ALFWORLD_DATA")
    if "alfworld.info" not in sys.modules:
        os.makedirs(_OWN_DATA_DIR, exist_ok=True)
        os.environ["ALFWORLD_DATA"] = _OWN_DATA_DIR
        try:
            import alfworld.info  # noqa: F401 - creates (only) our temp dir
        except ImportError:  # pragma: no cover - AlfWorldEnv says what to install
            pass
    if user:
        os.environ["ALFWORLD_DATA"] = user
    else:
        os.makedirs(_OWN_DATA_DIR, exist_ok=True)
        os.environ["ALFWORLD_DATA"] = _OWN_DATA_DIR


def user_alfworld_data() -> str | None:
    """The `ALFWORLD_DATA` the user set (None when unset or when it is our own temp default)."""
    value = os.environ.get("ALFWORLD_DATA")
    if not value or os.path.abspath(value) == os.path.abspath(_OWN_DATA_DIR):
        return None
    return value
