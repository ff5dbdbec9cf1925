"""Index the official ALFWorld data (Shridhar et al. 2021, arXiv 2010.03768), when `alfworld-download` has put it on
disk, as a GameSet for the same env and CLI (`agentrl make-games alfworld --official`).

No notebook chapter yet: book/environments.md, section "ALFWorld offline", shows the commands.
"""
from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path
from typing import Iterable

from ..paths import cache_root
from .alfworld_data import GAME_FILE, TRAJ_FILE, user_alfworld_data
from .alfworld_gen import SPLITS, check_task_types
from .base import GameSetError, load_game_set, write_manifest
from .protocol import GameRecord, GameSet

log = logging.getLogger(__name__)


def load_official_games(split: str, task_types: Iterable[str] | None = None, n: int | None = None,
                        data_dir: str | Path | None = None, cache_dir: str | Path | None = None) -> GameSet:
    """Index the official ALFWorld games of a split (`$ALFWORLD_DATA/json_2.1.1/<split>/<task>/<trial>/` with
    traj_data.json + game.tw-pddl, as `alfworld-download` leaves them) as a GameSet for the same env and CLI.

    Games marked unsolvable, without a game file, or of "movable"/"Sliced" trajectories are left out, as
    AlfredTWEnv does. A manifest (`write_manifest`) is written to `cache_dir` (default
    `agentrl_lib.paths.cache_root()/alfworld_official/<split>`); the games stay where they are (absolute paths).

    Args:
        split: train, valid_seen or valid_unseen.
        task_types: subset of TASK_TYPES (None = all six).
        n: keep the first n games (sorted by path); None = all.
        data_dir: overrides `$ALFWORLD_DATA`.
    Raises: GameSetError when ALFWORLD_DATA is unset or does not hold json_2.1.1/<split> with games; ValueError for
        an unknown split or task type.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown ALFWorld split {split!r}; valid: {', '.join(SPLITS)}")
    types = check_task_types(task_types)
    hint = ("set ALFWORLD_DATA to the folder `alfworld-download` filled (it holds json_2.1.1/), or generate games "
            "with make_alfworld_games")
    root = data_dir or user_alfworld_data()
    if not root:
        raise GameSetError(f"ALFWORLD_DATA is not set; {hint}")
    split_dir = Path(root).expanduser() / "json_2.1.1" / split
    if not split_dir.is_dir():
        raise GameSetError(f"ALFWORLD_DATA={root}: {split_dir} does not exist; {hint}")
    games: list[Path] = []
    for traj_path in sorted(split_dir.glob("*/*/" + TRAJ_FILE)):
        folder = traj_path.parent
        if "movable" in str(folder) or "Sliced" in str(folder) or not (folder / GAME_FILE).is_file():
            continue
        try:
            traj = json.loads(traj_path.read_text())
            game = json.loads((folder / GAME_FILE).read_text())
        except (OSError, json.JSONDecodeError) as e:
            log.warning("skip official game %s: %s", folder, e)
            continue
        if traj.get("task_type") not in types or not game.get("solvable"):
            continue
        games.append(folder)
        if n is not None and len(games) >= n:
            break
    if not games:
        raise GameSetError(f"no solvable games of types {types} under {split_dir}; {hint}")
    if cache_dir is None:
        cache_dir = cache_root() / "alfworld_official" / split
    cache = Path(cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    records = []
    for folder in games:
        name = f"{folder.parent.name}/{folder.name}"
        game = json.loads((folder / GAME_FILE).read_text())
        traj = json.loads((folder / TRAJ_FILE).read_text())
        scene = traj.get("scene", {})
        records.append(GameRecord(path=str(folder.resolve()), name=name, seed=int(scene.get("random_seed") or 0),
                                  max_score=1.0,
                                  walkthrough=list(game.get("walkthrough") or []),
                                  params={"task_type": traj.get("task_type"), "split": split,
                                          "floor_plan": scene.get("floor_plan"), "official": True}))
    params = {"source": "official", "data_dir": str(Path(root).resolve()), "split": split, "task_types": types,
              "n": n, "games_per_task_type": dict(Counter(r.params["task_type"] for r in records))}
    write_manifest(cache, "alfworld", records, params)  # games outside the cache dir: stored as absolute paths
    return load_game_set(cache)
