"""Env pools: a fixed number of environment slots that rollouts reset and step as a batch.

Every pool answers `reset(slots, games)` and `step(slots, actions)` with one entry per slot: a StepResult, or an
EnvFailure when that slot's environment raised (or, for process pools, crashed or hung). A failure ends that one
episode; the run continues.

Introduced in notebooks/00_quickstart.ipynb.
"""
from __future__ import annotations

import multiprocessing as mp
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

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


# ------------------------------------------------------------------------------------------------------ process pool
def _worker_main(conn, family: str, env_kwargs: dict[str, Any]) -> None:
    """Worker loop: one env, requests (method, arg) → ("ok", StepResult) or ("err", reason)."""
    env = None
    try:
        while True:
            try:
                msg = conn.recv()
            except EOFError:
                break
            if msg is None:
                break
            method, arg = msg
            try:
                if env is None:
                    env = make_env(family, **env_kwargs)
                conn.send(("ok", getattr(env, method)(arg)))
            except Exception as e:  # noqa: BLE001 - any env error ends only this episode
                conn.send(("err", f"{type(e).__name__}: {e}"))
    finally:
        if env is not None:
            try:
                env.close()
            except Exception:  # noqa: BLE001
                pass


class ProcessPool:
    """One worker process per slot, so slots step in parallel and a crash or hang in one game cannot take the
    run down (the TextWorld and ALFWorld engines are not thread-safe; AlfWorldEnv steps take ~1 ms, resets 0.02-0.5 s,
    but a planner replan or a broken game can take much longer).

    Requests are sent to every addressed slot first, then awaited. A slot whose worker dies answers
    `EnvFailure("worker crashed (exit code N)")`, one that does not answer within `timeout_s` answers
    `EnvFailure("worker timed out after T s")` and its worker is killed; either way a fresh worker is started for
    that slot on its next call (so the slot needs a new reset). Exceptions raised by the env come back as
    `EnvFailure("ExceptionType: message")` and keep the worker. Other slots are unaffected.

    Workers use the 'forkserver' start method where available ('spawn' otherwise): the parent has usually imported
    torch, which plain fork does not copy safely. As with any spawn-style start, the main module must be importable
    (a script file, a notebook or `python -m`; not code piped to `python -`).

    Args:
        size: number of slots/workers (>= 1).
        family: env family for make_env ('textworld', 'alfworld').
        timeout_s: seconds to wait for one reset/step answer (> 0).
        start_timeout_s: extra seconds allowed for the first answer of a fresh worker (process start, imports).
        **env_kwargs: passed to the env constructor in each worker (must be picklable).
    """

    def __init__(self, size: int, family: str = "textworld", timeout_s: float = 60.0, start_timeout_s: float = 60.0,
                 **env_kwargs):
        if size < 1:
            raise ValueError(f"pool size must be >= 1 (got {size})")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0 (got {timeout_s})")
        self.size = size
        self.family = family
        self.timeout_s = float(timeout_s)
        self.start_timeout_s = float(start_timeout_s)
        self._fresh: set[int] = set()
        self._env_kwargs = dict(env_kwargs)
        methods = mp.get_all_start_methods()
        self._ctx = mp.get_context("forkserver" if "forkserver" in methods else "spawn")
        self._workers: list[tuple[Any, Any] | None] = [None] * size  # (process, parent connection)

    def pid(self, slot: int) -> int | None:
        """Process id of a slot's worker (None before its first call)."""
        w = self._workers[slot]
        return w[0].pid if w is not None else None

    def _start(self, slot: int):
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(target=_worker_main, args=(child, self.family, self._env_kwargs), daemon=True,
                                 name=f"envpool-{self.family}-{slot}")
        proc.start()
        child.close()
        self._workers[slot] = (proc, parent)
        self._fresh.add(slot)
        return self._workers[slot]

    def _kill(self, slot: int) -> None:
        w = self._workers[slot]
        self._workers[slot] = None
        if w is None:
            return
        proc, conn = w
        try:
            conn.close()
        except OSError:
            pass
        if proc.is_alive():
            proc.kill()
        proc.join(timeout=5)

    def _call(self, method: str, slots: Sequence[int], args: Sequence[str]) -> list[StepResult | EnvFailure]:
        if len(slots) != len(args):
            raise ValueError(f"got {len(slots)} slots and {len(args)} {method} arguments")
        if len(set(slots)) != len(slots):
            raise ValueError(f"slots must be distinct (got {list(slots)})")
        results: dict[int, StepResult | EnvFailure] = {}
        pending: list[int] = []
        for slot, arg in zip(slots, args):  # plumbing: send every request first ...
            if not 0 <= slot < self.size:
                raise IndexError(f"slot {slot} out of range for a pool of size {self.size}")
            w = self._workers[slot]
            if w is not None and not w[0].is_alive():  # died since its last answer: report it, replace it later
                results[slot] = self._crashed(slot)
                continue
            if w is None:
                w = self._start(slot)
            try:
                w[1].send((method, arg))
                pending.append(slot)
            except (BrokenPipeError, EOFError, OSError):
                results[slot] = self._crashed(slot)
        start = time.monotonic()
        for slot in pending:  # ... then await them (they run in parallel)
            proc, conn = self._workers[slot]
            grace = self.start_timeout_s if slot in self._fresh else 0.0
            self._fresh.discard(slot)
            results[slot] = self._await(slot, proc, conn, start + self.timeout_s + grace)
        return [results[s] for s in slots]

    def _await(self, slot: int, proc, conn, deadline: float) -> StepResult | EnvFailure:
        while True:
            remaining = deadline - time.monotonic()
            try:
                ready = conn.poll(min(max(remaining, 0.0), 0.5))  # an answer already there counts even if late
            except (EOFError, OSError):
                return self._crashed(slot)
            if not ready and remaining <= 0:
                self._kill(slot)
                return EnvFailure(f"worker timed out after {self.timeout_s:g} s")
            if ready:
                try:
                    status, payload = conn.recv()
                except (EOFError, OSError):
                    return self._crashed(slot)
                return payload if status == "ok" else EnvFailure(payload)
            if not proc.is_alive():
                return self._crashed(slot)

    def _crashed(self, slot: int) -> EnvFailure:
        w = self._workers[slot]
        code = None
        if w is not None:
            w[0].join(timeout=1)
            code = w[0].exitcode
        self._kill(slot)
        return EnvFailure(f"worker crashed (exit code {code})")

    def reset(self, slots: Sequence[int], games: Sequence[str]) -> list[StepResult | EnvFailure]:
        return self._call("reset", slots, games)

    def step(self, slots: Sequence[int], actions: Sequence[str]) -> list[StepResult | EnvFailure]:
        return self._call("step", slots, actions)

    def close(self) -> None:
        for slot, w in enumerate(self._workers):
            if w is None:
                continue
            try:
                w[1].send(None)
            except (BrokenPipeError, OSError):
                pass
        for slot, w in enumerate(self._workers):
            if w is not None:
                w[0].join(timeout=5)
            self._kill(slot)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass
