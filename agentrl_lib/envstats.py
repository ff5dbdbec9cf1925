"""How big is a text game? Rooms, objects, admissible commands per state and the optimal solution length of a game
set, measured by playing its games through the env protocol; and a small runner that runs one test of tests/ with
a bug planted, for the chapters' "plant a bug" exercises.

    stats = space_stats(load_game_set("games/w2-o3-q4-heldout").first(8), random_episodes=2, max_turns=10)
    summary = summarize_space(stats)        # means / maxima over the games, one dict

    run = run_test("tests/test_textworld.py::test_walkthrough_wins_and_observations_are_clean",
                   plant="import agentrl_lib.envs.textworld as m\\n...")   # -> TestRun(passed, rc, tail)

Introduced in notebooks/01_environment.md (and used by notebooks/04_sft_then_rl.md for its planted bug).
"""
from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .envs.protocol import GameRecord, GameSet

NOT_OBJECTS = frozenset({"P", "I", "r", "d"})
"""TextWorld entity types that are not objects: the player, the inventory, rooms, doors (counted apart)."""


def world_counts(game_path: str | Path) -> dict[str, int]:
    """Rooms, doors and objects of a TextWorld game, read from the game's JSON sidecar (`game_NNNNNN.json`, which
    TextWorld writes beside the story file). Objects are the entities placed somewhere in the initial state (facts
    `at`, `in`, `on`) other than the player and doors: for custom games their number equals `--nb-objects`.

    Raises: FileNotFoundError when the sidecar is missing (e.g. an ALFWorld game: not a TextWorld file).
    """
    import textworld

    sidecar = Path(game_path).with_suffix(".json")
    if not sidecar.is_file():
        raise FileNotFoundError(f"{sidecar} not found: world_counts reads a TextWorld game's JSON sidecar")
    game = textworld.Game.load(str(sidecar))
    types = {e.name: e.type for e in game.world.entities}
    placed = {f.arguments[0].name for f in game.world.facts if f.name in ("at", "in", "on")}
    return {"rooms": len(game.world.rooms),
            "doors": sum(1 for t in types.values() if t == "d"),
            "objects": sum(1 for n in placed if types.get(n) not in NOT_OBJECTS)}


def play_walkthrough(env, game: GameRecord) -> dict[str, Any]:
    """Play `game`'s walkthrough (its optimal solution) through the env protocol.

    Returns: {"admissible": [number of admissible commands in each state visited, the start included, the final
    state excluded], "won": bool, "length": walkthrough length, "reward": Σ step rewards}.
    """
    res = env.reset(game.path)
    counts, total = [], 0.0
    for action in game.walkthrough:
        counts.append(len(res.info.admissible))
        res = env.step(action)
        total += res.reward
        if res.done:
            break
    return {"admissible": counts, "won": bool(res.info.won), "length": len(game.walkthrough), "reward": total}


def play_random(env, game: GameRecord, max_turns: int, rng: random.Random) -> dict[str, Any]:
    """Play `game` with a uniformly random admissible command each turn, for at most `max_turns` turns (the agent
    that knows the list of valid actions, which the prompt does NOT give: a lower bound on what a blind agent needs).

    Returns: {"admissible": [count per state visited before the end], "won": bool, "turns": int}.
    """
    res = env.reset(game.path)
    counts, turns = [], 0
    while turns < max_turns and not res.done:
        counts.append(len(res.info.admissible))
        if not res.info.admissible:
            break
        res = env.step(rng.choice(sorted(res.info.admissible)))
        turns += 1
    return {"admissible": counts, "won": bool(res.info.won), "turns": turns}


def space_stats(games: GameSet, random_episodes: int = 2, max_turns: int = 10, seed: int = 0,
                counts: bool = True) -> list[dict[str, Any]]:
    """Per game of `games`: world counts (TextWorld only; `counts=False` skips them), the walkthrough's length and
    win, and the admissible commands per state along the walkthrough and along `random_episodes` random-play
    episodes of `max_turns` turns (seeded by `seed`).

    Returns: one dict per game: name, rooms, doors, objects (absent without counts), walkthrough_len,
    walkthrough_won, walkthrough_reward, adm_walk (list), adm_random (list), random_wins (int), random_episodes.
    """
    from .envs import get_family

    family = get_family(games.family)
    env = family.make_env(**family.env_kwargs())
    rng = random.Random(seed)
    rows = []
    try:
        for game in games.games:
            row: dict[str, Any] = {"name": game.name}
            if counts:
                row.update(world_counts(game.path))
            walk = play_walkthrough(env, game)
            row.update(walkthrough_len=walk["length"], walkthrough_won=walk["won"], walkthrough_reward=walk["reward"],
                       adm_walk=walk["admissible"], adm_random=[], random_wins=0, random_episodes=random_episodes)
            for _ in range(random_episodes):
                r = play_random(env, game, max_turns, rng)
                row["adm_random"] += r["admissible"]
                row["random_wins"] += int(r["won"])
            rows.append(row)
    finally:
        env.close()
    return rows


def summarize_space(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Means and maxima of `space_stats` rows over the games: rooms, objects, doors (means), walkthrough length (mean,
    max), admissible commands per state (mean and max over every state visited, walkthrough and random play
    together), the random agent's success rate. Raises ValueError on no rows."""
    if not rows:
        raise ValueError("no games to summarize")
    mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")  # noqa: E731
    states = [c for r in rows for c in r["adm_walk"] + r["adm_random"]]
    out: dict[str, Any] = {"games": len(rows)}
    for key in ("rooms", "doors", "objects"):
        if key in rows[0]:
            out[key] = mean([r[key] for r in rows])
    lengths = [r["walkthrough_len"] for r in rows]
    out.update(walkthrough_mean=mean(lengths), walkthrough_max=max(lengths),
               walkthrough_wins=sum(r["walkthrough_won"] for r in rows),
               admissible_mean=mean(states), admissible_max=max(states) if states else 0, states=len(states),
               random_success=sum(r["random_wins"] for r in rows) / max(1, sum(r["random_episodes"] for r in rows)))
    return out


# ------------------------------------------------------------------------------------------- plant-a-bug runner
@dataclass
class TestRun:
    """The outcome of one `run_test`: passed (exit code 0), rc, and the last lines of pytest's output."""

    __test__ = False  # not a pytest test class
    passed: bool
    rc: int
    tail: str

    def __str__(self) -> str:
        return f"{'PASSED' if self.passed else 'FAILED'} (exit {self.rc})\n{self.tail}"


def repo_root() -> Path:
    """The source tree this package is in (where tests/ lives)."""
    return Path(__file__).resolve().parent.parent


def run_test(nodeid: str, plant: str | None = None, timeout: float = 600, tail_lines: int = 12,
             extra_args: tuple[str, ...] = ()) -> TestRun:
    """Run one pytest node id (relative to the repository root) in a fresh Python process, optionally with a bug
    planted: `plant` is Python code executed before the tests are collected (a pytest plugin module loaded with
    `-p`), typically a monkeypatch of a library function. A fresh process keeps the planted bug out of the caller.

    Returns: TestRun. Raises subprocess.TimeoutExpired after `timeout` seconds.
    """
    root = repo_root()
    with tempfile.TemporaryDirectory(prefix="agentrl-plant-") as tmp:
        args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", "--show-capture=no", "--color=no",
                *extra_args]
        if plant is not None:
            (Path(tmp) / "_agentrl_planted_bug.py").write_text(textwrap.dedent(plant))
            args += ["-p", "_agentrl_planted_bug"]
        # pytest prints whole assertion diffs instead of a one-line summary when CI / BUILD_NUMBER is set: drop them
        # so the tail reads the same on a CI machine as on a laptop
        env = {k: v for k, v in os.environ.items() if k not in ("CI", "BUILD_NUMBER")}
        env["AGENTRL_NESTED_TEST"] = "1"   # tests/conftest.py prints no session timing line after the failure
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [tmp, str(root), os.environ.get("PYTHONPATH")]))
        proc = subprocess.run([*args, nodeid], cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
    lines = (proc.stdout + proc.stderr).rstrip().splitlines()
    return TestRun(proc.returncode == 0, proc.returncode, "\n".join(lines[-tail_lines:]))

