"""Env pools, the environment slots a rollout resets and steps as a batch: their protocol, SerialPool and open_pool.

Every pool (EnvPool) answers `reset(slots, games)` and `step(slots, actions)` with one entry per slot: a StepResult, or
an EnvFailure (envs/protocol.py) when that slot's environment raised (or, for process pools, crashed or hung). A
failure ends that one episode; the run continues. `open_pool`, the one factory, builds a run's pool from its config.

Every env call runs under a watchdog of `timeout_s` seconds (`env.step_timeout_s`, `--step-timeout`):
- ProcessPool (envs/process_pool.py; the default of `agentrl train` / `eval`, `env.process_pool`): one worker process
  per slot. A worker that crashes (even a segfault in the game interpreter) or does not answer in time is killed and
  answers EnvFailure for its slot only; the call returns within the timeout. Workers run in a private temporary
  directory, their stdout/stderr go to a log file there (never into the trainer's output), and the last lines of that
  log are quoted in the failure reason.
- SerialPool: all slots in this process. A hung C call cannot be interrupted from Python, so its watchdog ends the
  process with ONE line ("env step exceeded N s in this process; rerun with --process-pool; resume with
  --resume", exit code 124); checkpoints make the run resumable. A segfault in the interpreter ends the process.

Measured (`python benchmarks/bench_env_pool.py --games <16 tw-cooking games>`: 8 slots, 5 rounds of resets and 8
batched steps; 2 CPU cores shared with other jobs, load 3-4; 2026-11-23; 4 runs): a step costs 5.1-7.4 ms per
episode in a SerialPool and 6.3-9.7 ms in a ProcessPool (the difference, -0.6 to +4.1 ms, is noise-sized next to
~1-3 s of generation per turn); a batched reset of 8 games 0.20-0.29 s vs 0.19-0.31 s; the first call of a fresh
8-worker pool 1.8-2.7 s (0.4 s once this process's forkserver runs; 24 s before the forkserver preloaded textworld
and the game logic); 61-77 MB RSS per worker. Hence the process pool is the default and the serial pool the opt-out
(`--no-process-pool`) for tests and quick experiments. Workers re-import the main module (Python's forkserver/spawn
rule): keep a script's heavy imports (torch) under `if __name__ == "__main__":` or inside functions.

Introduced in notebooks/00_quickstart.md §2 (the pool of a rollout).
"""
from __future__ import annotations

import functools
import os
import threading
import time
from typing import Callable, Protocol, Sequence

from . import EnvFamily, get_family
from .process_pool import DEFAULT_TIMEOUT_S, ProcessPool, check_pool_size
from .protocol import Env, EnvFailure, StepResult

SERIAL_TIMEOUT_EXIT_CODE = 124
"""Exit status of a process ended by the SerialPool watchdog (as coreutils `timeout`)."""


class EnvPool(Protocol):
    """What rollouts need: batched reset/step over numbered slots."""

    size: int

    def reset(self, slots: Sequence[int], games: Sequence[str]) -> list[StepResult | EnvFailure]: ...

    def step(self, slots: Sequence[int], actions: Sequence[str]) -> list[StepResult | EnvFailure]: ...

    def close(self) -> None: ...


class _Watchdog:
    """A daemon thread that ends this process if an armed deadline passes (one line on stderr, os._exit)."""

    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s
        self._cond = threading.Condition()
        self._deadline: float | None = None
        self._what = ""
        self._thread: threading.Thread | None = None

    def arm(self, what: str) -> None:
        with self._cond:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="envpool-watchdog", daemon=True)
                self._thread.start()
            self._deadline, self._what = time.monotonic() + self.timeout_s, what
            self._cond.notify()

    def disarm(self) -> None:
        with self._cond:
            self._deadline = None

    def _run(self) -> None:
        with self._cond:
            while True:
                if self._deadline is None:
                    self._cond.wait()
                    continue
                left = self._deadline - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                msg = (f"agentrl: error: env step exceeded {self.timeout_s:g} s in this process ({self._what}); "
                       "rerun with --process-pool; resume with --resume\n")
                os.write(2, msg.encode("utf-8", "replace"))  # no Python buffers: the main thread is stuck
                os._exit(SERIAL_TIMEOUT_EXIT_CODE)


class SerialPool:
    """All slots in this process, stepped one after another. An exception in one slot becomes an EnvFailure for that
    slot only. A reset/step that runs longer than `timeout_s` ends the process (see the module docstring): use a
    ProcessPool where an env may hang or crash.

    Args:
        size: number of slots (>= 1).
        family: the env family, by name ('textworld', 'alfworld', ...) or as its EnvFamily (agentrl_lib.envs).
        factory: builds one env (overrides family/env_kwargs; tests pass scripted envs).
        timeout_s: watchdog per env call in seconds (> 0), or None for none.
        **env_kwargs: passed to the env constructor.
    Raises: ValueError for size < 1 or timeout_s <= 0.
    """

    def __init__(self, size: int, family: str | EnvFamily = "textworld", factory: Callable[[], Env] | None = None,
                 timeout_s: float | None = DEFAULT_TIMEOUT_S, **env_kwargs):
        if size < 1:
            raise ValueError(f"pool size must be >= 1 (got {size})")
        if timeout_s is not None and timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0 or None (got {timeout_s})")
        self.size = size
        self.timeout_s = timeout_s
        self.family = None  # the family's name when built from one (rollout reads EnvFamily.reply_as_action)
        if factory is None:
            fam = family if isinstance(family, EnvFamily) else get_family(family)
            factory = functools.partial(fam.make_env, **env_kwargs)
            self.family = fam.name
        self._factory = factory
        self._envs: list[Env | None] = [None] * size
        self._games: list[str] = [""] * size
        self._watchdog = _Watchdog(timeout_s) if timeout_s is not None else None

    def _call(self, slot: int, method: str, arg: str) -> StepResult | EnvFailure:
        try:
            if self._envs[slot] is None:
                self._envs[slot] = self._factory()
            if method == "reset":
                self._games[slot] = str(arg)
            if self._watchdog is not None:
                self._watchdog.arm(f"slot {slot}, {method} {arg!r:.80}, game {self._games[slot]}")
            try:
                return getattr(self._envs[slot], method)(arg)
            finally:
                if self._watchdog is not None:
                    self._watchdog.disarm()
        except Exception as e:  # any env error ends only this episode
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


def open_pool(env_cfg, size: int, games, reward_kind: str = "") -> EnvPool:
    """The env pool a run uses (trainer, evaluation, CLI), built from an EnvConfig (`process_pool`,
    `step_timeout_s` (raised to what the family's steps need: EnvFamily.watchdog_s), `check_games`, and the options
    the games' family takes, EnvFamily.options, e.g. TextWorld's `show_inventory`) and the run's reward.kind
    `reward_kind` (passed to envs whose family computes that kind itself: swe, EnvFamily.env_kwargs), with every game
    of `games` (a GameSet) checked through it first (`check_game_set`; cached).

    Raises: GameSetError when a game fails the check (the pool is closed then); UnknownFamilyError for a family
    that is not registered."""
    from .base import check_game_set

    family = get_family(games.family)
    check_pool_size(size, env_cfg.process_pool, "the env slots (train: --games-per-step x --group-size; eval: "
                                                "--batch-size)")
    kind = ProcessPool if env_cfg.process_pool else SerialPool
    timeout_s = family.watchdog_s(env_cfg.step_timeout_s)
    pool = kind(size, family=family, timeout_s=timeout_s, **family.env_kwargs(env_cfg, reward_kind))
    if env_cfg.check_games:
        try:
            check_game_set(games, pool, turn_limit=env_cfg.max_turns if "max_turns" in family.options else None)
        except BaseException:
            pool.close()
            raise
    return pool
