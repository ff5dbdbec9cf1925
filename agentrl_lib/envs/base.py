"""The one small protocol every environment family implements, and the on-disk game set (manifest.json).

An environment plays one game at a time:

    env.reset(game) -> StepResult   # reward 0, done False; obs is the first observation
    env.step(action) -> StepResult  # obs, reward (score increment of this step), done, info

Introduced in notebooks/00_quickstart.ipynb.
"""
from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol


def normalize_action(text: str) -> str:
    """Lower-case, strip, collapse whitespace, drop trailing punctuation: the form compared with admissible commands."""
    return re.sub(r"\s+", " ", text.strip().lower()).rstrip(".!?;:")


MAX_ACTION_BYTES = 190
"""Longest action (UTF-8 bytes) sent to a game: jericho's input buffer holds 198 bytes and truncates the rest
(mid-character truncation raises UnicodeDecodeError inside jericho)."""

UNREADABLE_ACTION = ("That command contains characters the game cannot read (a backslash or a control character); "
                     "use plain words.")
TOO_LONG_ACTION = "That command is too long; a command is a few words."


def sanitize_action(action: str, max_bytes: int = MAX_ACTION_BYTES) -> tuple[str, str | None]:
    """Make an agent's text safe to send to a text-game interpreter.

    Whitespace of any kind (newline, tab, carriage return, Unicode line separators) becomes one space and the ends
    are stripped. Text the interpreter cannot take safely is refused rather than repaired, so the agent's turn is
    an invalid action and nothing reaches the interpreter: a backslash anywhere (dumb-frotz reads `\\x` as one of
    its own escape commands: `\\help`, a literal `\\n` or `\\boxed{...}` send it into an endless print loop), a
    control or format character (NUL crashed jericho with SIGSEGV; Unicode categories Cc, Cf, Cs, Co, Cn), or more
    than `max_bytes` bytes of UTF-8.

    Args:
        action: the parsed action text (any str).
        max_bytes: longest command accepted, in UTF-8 bytes.
    Returns:
        (command, refusal): `command` is the cleaned text and `refusal` None when it is safe to send; else
        `command` is "" and `refusal` the observation to show the agent instead (UNREADABLE_ACTION or
        TOO_LONG_ACTION).
    """
    chars = []
    for ch in action:
        if ch.isspace():
            chars.append(" ")
        elif ch == "\\" or unicodedata.category(ch).startswith("C"):
            return "", UNREADABLE_ACTION
        else:
            chars.append(ch)
    command = re.sub(r" +", " ", "".join(chars)).strip()
    if len(command.encode("utf-8")) > max_bytes:
        return "", TOO_LONG_ACTION
    return command, None


class GameSetError(ValueError):
    """A games directory is missing, empty or malformed; the message says how to make one."""


class GameLoadError(RuntimeError):
    """A game file could not be loaded by its engine (corrupted or from another engine version)."""


@dataclass
class StepInfo:
    """What the environment reports besides the observation text."""

    won: bool = False
    lost: bool = False
    score: float = 0.0
    """Running game score after this step."""
    max_score: float = 1.0
    """Maximum score of the game (a won game reaches it)."""
    admissible: list[str] = field(default_factory=list)
    """Admissible commands in the new state (what the game's grammar accepts and that change something)."""
    valid: bool = True
    """Whether the action just taken was among the admissible commands of the previous state."""
    expert_action: str | None = None
    """Next command of a shortest winning sequence from the new state (None when the game is over)."""
    objective: str = ""
    """The task, in words."""
    inventory: str = ""
    """What the player carries (empty unless the family reports it)."""


@dataclass
class StepResult:
    """One environment transition. `reward` is this step's score increment (game units, not normalised)."""

    obs: str
    reward: float
    done: bool
    info: StepInfo

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Env(Protocol):
    """What rollouts need from an environment family."""

    def reset(self, game: str) -> StepResult: ...

    def step(self, action: str) -> StepResult: ...

    def close(self) -> None: ...


@dataclass
class GameRecord:
    """One game in a game set (a row of manifest.json)."""

    path: str
    """Absolute path of the game file/folder."""
    name: str
    seed: int
    max_score: float
    walkthrough: list[str]
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class GameSet:
    """A directory of generated games with its manifest.json."""

    root: Path
    family: str
    games: list[GameRecord]
    params: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.games)


MANIFEST = "manifest.json"


def write_manifest(root: Path, family: str, games: list[GameRecord], params: dict[str, Any]) -> Path:
    """Write manifest.json atomically; game paths are stored relative to `root`."""
    rows = []
    for g in games:
        row = asdict(g)
        row["path"] = str(Path(g.path).resolve().relative_to(root.resolve()))
        rows.append(row)
    data = {"family": family, "params": params, "n_games": len(rows), "games": rows}
    tmp = root / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(root / MANIFEST)
    return root / MANIFEST


def load_game_set(root: str | Path) -> GameSet:
    """Read a games directory made by `agentrl make-games`.

    Raises:
        GameSetError: the directory does not exist, has no manifest.json, the manifest is malformed, lists no games,
            or names game files that are missing.
    """
    root = Path(root).expanduser()
    hint = "make one with e.g. `agentrl make-games textworld --challenge tw-cooking --n 8 --seed 0 --out DIR`"
    if not root.is_dir():
        raise GameSetError(f"games directory {root} does not exist; {hint}")
    mf = root / MANIFEST
    if not mf.is_file():
        raise GameSetError(f"{root} has no {MANIFEST} (is it an empty or foreign directory?); {hint}")
    try:
        data = json.loads(mf.read_text())
        family = data["family"]
        rows = data["games"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise GameSetError(f"{mf} is malformed ({e}); delete the directory and regenerate it; {hint}") from e
    if not rows:
        raise GameSetError(f"{mf} lists no games; {hint}")
    games = []
    for row in rows:
        path = root / row["path"]
        if not path.exists():
            raise GameSetError(f"game file {path} listed in {mf} is missing; regenerate the directory")
        games.append(GameRecord(path=str(path), name=row["name"], seed=row["seed"], max_score=row["max_score"],
                                walkthrough=list(row["walkthrough"]), params=row.get("params", {})))
    return GameSet(root=root, family=family, games=games, params=data.get("params", {}))


def make_env(family: str, **kwargs) -> Env:
    """Instantiate the environment of a game family ('textworld', ...). Raises ValueError for an unknown family."""
    if family == "textworld":
        from .textworld import TextWorldEnv

        return TextWorldEnv(**kwargs)
    if family == "alfworld":
        from .alfworld import AlfWorldEnv  # type: ignore[import-not-found]

        return AlfWorldEnv(**kwargs)
    raise ValueError(f"unknown environment family {family!r}; known: textworld, alfworld")
