"""The env protocol: `Env`, what every environment family implements, and the records it exchanges: `StepResult`
and `StepInfo` (one transition), `EnvFailure` (what an env pool answers instead for a slot whose env failed),
`GameRecord` and `GameSet` (a set of games, as envs/base.py loads it from manifest.json). Its own module, importing
nothing of agentrl_lib, so that the family registry (agentrl_lib.envs) can name these types while envs/base.py's
game-set loader looks families up in the registry, and both pools (envs/pool.py, envs/process_pool.py) answer
EnvFailure: data flows one way.

An environment plays one game at a time:

    env.reset(game) -> StepResult   # reward 0, done False; obs is the first observation
    env.step(action) -> StepResult  # obs, reward (score increment of this step), done, info

Introduced in notebooks/00_quickstart.md §1.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol


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


@dataclass
class EnvFailure:
    """A slot's environment failed on this call; `reason` is shown in the trajectory's termination field.

    `kind`: 'error' (the env raised; "ExceptionType: message"), 'crash' (the worker process died), 'timeout' (no
    answer within the pool's timeout_s) or 'flood' (the worker printed more than WORKER_FLOOD_BYTES in one call:
    envs/process_pool.py).
    """

    reason: str
    kind: str = "error"


class Env(Protocol):
    """What rollouts need from an environment family."""

    def reset(self, game: str) -> StepResult: ...

    def step(self, action: str) -> StepResult: ...

    def close(self) -> None: ...


@dataclass
class GameRecord:
    """One game in a game set (a row of manifest.json)."""

    path: str
    """The game id passed to `env.reset`: the absolute path of the game file/folder for "file" families, the id
    as stored (e.g. a seed, "17") for "seed" families (EnvFamily.game_id)."""
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

    def first(self, n: int) -> "GameSet":
        """The first `n` games (game i has seed `seed + i`, so the first n of a set are the set made with n); raises
        ValueError when n < 1 or the set has fewer."""
        if not 1 <= n <= len(self.games):
            raise ValueError(f"asked for {n} games but {self.root} holds {len(self.games)}: pass 1 to "
                             f"{len(self.games)}, or make a larger set with agentrl make-games --n {n}")
        return GameSet(root=self.root, family=self.family, games=self.games[:n], params=self.params)

