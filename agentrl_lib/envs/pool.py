"""Env pools: a fixed number of environment slots that rollouts reset and step as a batch.

Every pool answers `reset(slots, games)` and `step(slots, actions)` with one entry per slot: a StepResult, or an
EnvFailure when that slot's environment raised (or, for process pools, crashed or hung). A failure ends that one
episode; the run continues.

Introduced in notebooks/00_quickstart.ipynb.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

from .base import Env, StepResult, make_env


@dataclass
class EnvFailure:
    """A slot's environment failed on this call; `reason` is shown in the trajectory's termination field."""

    reason: str


class EnvPool(Protocol):
    """What rollouts need: batched reset/step over numbered slots."""

    size: int

    def reset(self, slots: Sequence[int], games: Sequence[str]) -> list[StepResult | EnvFailure]: ...

    def step(self, slots: Sequence[int], actions: Sequence[str]) -> list[StepResult | EnvFailure]: ...

    def close(self) -> None: ...


class SerialPool:
    """All slots in this process, stepped one after another (TextWorld steps take 2-15 ms, so this is rarely the
    bottleneck next to generation). An exception in one slot becomes an EnvFailure for that slot only."""

    def __init__(self, size: int, family: str = "textworld", factory: Callable[[], Env] | None = None, **env_kwargs):
        if size < 1:
            raise ValueError(f"pool size must be >= 1 (got {size})")
        self.size = size
        self._factory = factory or (lambda: make_env(family, **env_kwargs))
        self._envs: list[Env | None] = [None] * size

    def _call(self, slot: int, method: str, arg: str) -> StepResult | EnvFailure:
        try:
            if self._envs[slot] is None:
                self._envs[slot] = self._factory()
            return getattr(self._envs[slot], method)(arg)
        except Exception as e:  # noqa: BLE001 - any env error ends only this episode
            return EnvFailure(f"{type(e).__name__}: {e}")

    def reset(self, slots: Sequence[int], games: Sequence[str]) -> list[StepResult | EnvFailure]:
        return [self._call(s, "reset", g) for s, g in zip(slots, games)]

    def step(self, slots: Sequence[int], actions: Sequence[str]) -> list[StepResult | EnvFailure]:
        return [self._call(s, "step", a) for s, a in zip(slots, actions)]

    def close(self) -> None:
        for env in self._envs:
            if env is not None:
                env.close()
        self._envs = [None] * self.size

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
