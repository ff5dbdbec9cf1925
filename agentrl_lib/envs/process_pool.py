"""ProcessPool: one worker process per env slot, so a crash, hang or flood in one game fails only that slot.

A worker that crashes (even a segfault in the game interpreter), does not answer within `timeout_s` or floods its
log (WORKER_FLOOD_BYTES) is killed and answers EnvFailure for its slot only; the call returns within the timeout.
Workers run in a private temp dir (a game's `save`/`script` cannot write into yours) and write their stdout/stderr
to a log there (never into the trainer's output), whose last lines the failure reason quotes; at most
pool_workers_max() of them. They fork from a forkserver that preloaded the family's modules (EnvFamily.preload) and
its first game's logic (envs/_forkserver_warm.py), and re-import the main module (Python's forkserver/spawn rule):
keep a script's heavy imports (torch) under `if __name__ == "__main__":` or inside functions. The pool protocol,
SerialPool, what each pool costs and open_pool (which builds this pool unless `env.process_pool` is off) are in
envs/pool.py.
"""
from __future__ import annotations

import atexit
import contextlib
import functools
import multiprocessing as mp
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from . import EnvFamily, get_family
from .protocol import Env, EnvFailure, StepResult

DEFAULT_TIMEOUT_S = 30.0
"""Default watchdog of one env reset/step in either pool (s): TextWorld steps 2-15 ms, ALFWorld resets up to 0.5 s."""

WORKER_LOG_BYTES = 1 << 20
"""A worker's stdout/stderr log is emptied before a call when it has grown past this size (bytes)."""

WORKER_FLOOD_BYTES = 16 << 20
"""A worker whose log passes this size (bytes) while the parent waits for its answer is killed: a runaway
interpreter (dumb-frotz printed 25-700 MB/s) ends as EnvFailure(kind='flood') within ~0.1 s, not at the timeout."""

WORKER_FILE_BYTES = 256 << 20
"""The most a worker may write into one file (RLIMIT_FSIZE, bytes; writes past it fail with EFBIG): the hard
bound on a log between two checks. Larger than any file an env writes (fast-downward copies its 33 MB library)."""

POOL_WORKERS_PER_CORE = 16
"""ProcessPool workers allowed per CPU core (pool_workers_max). Env workers mostly wait for the policy (a TextWorld
step is ~5-10 ms against ~1-3 s of generation per turn), so more workers than cores is normal; but each holds 61-77
MB (measured: envs/pool.py) and starts in ~0.2 s, so 16 a core (32 on the 2-core machine this was measured on:
~2.4 GB) is where a pool stops being a rollout and becomes a fork storm (issue 52: `--group-size 100000` started
workers for minutes with no output)."""
POOL_WORKERS_MIN_BOUND = 64
"""The bound of pool_workers_max is never below this: a 2-core machine still runs RAGEN's 8 x 8 episodes a step."""
POOL_TMP_PREFIX = "agentrl-envpool-"
"""Prefix of a ProcessPool's private temp dir, followed by the owning process's pid and '-': a pool removes the dirs
of dead owners when it starts (a run killed by SIGKILL leaves its dir behind; close() and atexit remove the rest)."""


def pool_workers_max() -> int:
    """Most workers one ProcessPool may start here: POOL_WORKERS_PER_CORE per CPU core, at least
    POOL_WORKERS_MIN_BOUND."""
    return max(POOL_WORKERS_MIN_BOUND, POOL_WORKERS_PER_CORE * (os.cpu_count() or 1))


def check_pool_size(size: int, process_pool: bool = True, what: str = "--games-per-step x --group-size") -> None:
    """Refuse a ProcessPool of more than pool_workers_max() workers before any starts, naming the flags `what`
    that set its size. Raises ConfigError (one line)."""
    from ..config import ConfigError

    if process_pool and size > pool_workers_max():
        raise ConfigError(f"{what} asks for {size} env worker processes, more than this machine's bound of "
                          f"{pool_workers_max()} ({POOL_WORKERS_PER_CORE} per CPU core, ~70 MB each: "
                          f"envs.process_pool.pool_workers_max); lower {what}, or pass --no-process-pool "
                          "(one process, no crash isolation)")


def _remove_stale_pool_dirs() -> None:
    """Remove the temp dirs of ProcessPools whose owning process is gone (POOL_TMP_PREFIX<pid>-...)."""
    tmp = Path(tempfile.gettempdir())
    try:
        candidates = list(tmp.glob(POOL_TMP_PREFIX + "*-*"))
    except OSError:
        return
    for d in candidates:
        pid = d.name[len(POOL_TMP_PREFIX):].split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
            continue  # its owner still runs
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
        except OSError:  # another user's process: not ours to remove
            continue


_LIVE_POOL_DIRS: set[Path] = set()


@atexit.register
def _remove_live_pool_dirs() -> None:
    """At interpreter exit (also after SIGTERM, which cli.main turns into SystemExit), the dirs of pools never
    closed."""
    for d in list(_LIVE_POOL_DIRS):
        shutil.rmtree(d, ignore_errors=True)
        _LIVE_POOL_DIRS.discard(d)


_PRELOAD_WARM = "agentrl_lib.envs._forkserver_warm"
"""Module the forkserver imports last when the family has a `warm_up`: it parses the first game's logic there
(AGENTRL_ENVPOOL_WARM / AGENTRL_ENVPOOL_FAMILY, set while workers start). The family's own modules to preload are
its EnvFamily.preload (8 TextWorld workers: 12 s → 5 s)."""


@contextlib.contextmanager
def _forkserver_environment(warm: str | None, family: str):
    """Environment for a forkserver that this start may launch (it is a fresh interpreter that inherits os.environ):
    PYTHONPATH = this process's sys.path, so the preloaded modules are the ones this process runs (Python 3.11's
    forkserver ignores the sys_path it is given, and a notebook's sys.path.insert would otherwise be lost), and
    AGENTRL_ENVPOOL_WARM / AGENTRL_ENVPOOL_FAMILY = a game whose logic `_forkserver_warm` parses, and its family.
    Restored afterwards."""
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "AGENTRL_ENVPOOL_WARM", "AGENTRL_ENVPOOL_FAMILY")}
    os.environ["PYTHONPATH"] = os.pathsep.join(p or os.getcwd() for p in sys.path)
    if warm and saved["AGENTRL_ENVPOOL_WARM"] is None:
        os.environ["AGENTRL_ENVPOOL_WARM"] = warm
        os.environ["AGENTRL_ENVPOOL_FAMILY"] = family
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _worker_main(conn, factory: Callable[[], Env], workdir: str, log_path: str) -> None:
    """Worker loop: one env, requests (method, arg) → ("ok", StepResult) or ("err", reason).

    Sandbox first: cwd = `workdir` (files a game writes land there), stdout/stderr (Python's and C's) → `log_path`,
    files capped at WORKER_FILE_BYTES (RLIMIT_FSIZE; writes past it fail, SIGXFSZ ignored), SIGINT ignored (the
    parent handles Ctrl-C). Then it answers ("ready", None) and serves requests."""
    import resource

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.chdir(workdir)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        resource.setrlimit(resource.RLIMIT_FSIZE, (WORKER_FILE_BYTES, WORKER_FILE_BYTES))
    except (ValueError, OSError):  # a lower hard limit already applies
        pass
    env, env_error = None, None
    try:
        env = factory()
    except Exception as e:  # reported on every call of this slot
        env_error = f"{type(e).__name__}: {e}"
    conn.send(("ready", None))
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
                    raise RuntimeError(f"the env could not be created: {env_error}")
                conn.send(("ok", getattr(env, method)(arg)))
            except Exception as e:  # any env error ends only this episode
                conn.send(("err", f"{type(e).__name__}: {e}"))
    finally:
        if env is not None:
            try:
                env.close()
            except Exception:
                pass


def _tail(path: Path, n_bytes: int = 4096, n_lines: int = 2, width: int = 240) -> str:
    """The last `n_lines` non-empty lines of a worker log (at most `width` characters), '' if none."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - n_bytes))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return " | ".join(lines[-n_lines:])[-width:]


def _has_main_guard(path: str) -> bool:
    """Whether the script at `path` has a top-level `if __name__ == "__main__":` (True when it cannot be read)."""
    import ast

    try:
        tree = ast.parse(Path(path).read_text())
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return True
    return any(isinstance(node, ast.If) and "__name__" in ast.unparse(node.test) for node in tree.body)


def unguarded_script_hint() -> str:
    """The fix to name when a fresh worker dies or hangs while the main module is a script run by path: each worker
    process re-imports that script (Python's spawn/forkserver start), so top-level code that trains or opens a pool
    runs again in every worker. '' when the main module is not a script (a notebook, `python -m`, pytest) or the
    script has a `__main__` guard (as the `agentrl` command has)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if path and getattr(getattr(main, "__spec__", None), "name", None) is None and not _has_main_guard(path):
        return (f"; worker processes re-import the script {Path(main.__file__).name}: put its top-level code under "
                "`if __name__ == \"__main__\":`, or turn the process pool off (env.process_pool false, "
                "--no-process-pool)")
    return ""


class ProcessPool:
    """One worker process per slot, so slots step in parallel and a crash or hang in one game cannot take the
    run down (the TextWorld and ALFWorld engines are not thread-safe; AlfWorldEnv steps take ~1 ms, resets 0.02-0.5 s,
    but a planner replan or a broken game can take much longer).

    Requests are sent to every addressed slot first, then awaited. A slot whose worker dies answers
    `EnvFailure("worker crashed (exit code N)", kind="crash")`, one that does not answer within `timeout_s` answers
    `EnvFailure("worker timed out after T s", kind="timeout")` and one that prints more than WORKER_FLOOD_BYTES
    while it works answers kind="flood"; the last two workers are killed. In every case the reason ends
    with the last lines the worker printed (`; last output: ...`) when there are any, and a fresh worker is started
    for that slot on its next call (so the slot needs a new reset). Exceptions raised by the env come back as
    `EnvFailure("ExceptionType: message")` and keep the worker. Other slots are unaffected. A call returns within
    `timeout_s`, plus `start_timeout_s` when it is a fresh worker's first call (process start, imports, env
    construction and its first game load).

    Each worker runs in its own directory under a private temp dir (POOL_TMP_PREFIX<pid>-...; removed by close(),
    else at interpreter exit, else by the next pool that starts after this process died), writes its stdout/stderr
    to a log there (emptied before a call once past WORKER_LOG_BYTES), and ignores SIGINT.

    Workers use the 'forkserver' start method where available ('spawn' otherwise): the parent has usually imported
    torch, which plain fork does not copy safely. As with any spawn-style start, the main module must be importable
    (a script file, a notebook or `python -m`; not code piped to `python -`).

    Args:
        size: number of slots/workers (>= 1).
        family: the env family, by name ('textworld', 'alfworld', ...) or as its EnvFamily (agentrl_lib.envs);
            its `make_env` is pickled to the workers.
        timeout_s: seconds to wait for one reset/step answer (> 0).
        start_timeout_s: extra seconds allowed for a fresh worker's first call.
        factory: a picklable callable that builds one env in the worker (overrides family/env_kwargs).
        **env_kwargs: passed to the env constructor in each worker (must be picklable).
    Raises: ValueError for size < 1 or timeout_s <= 0; config.ConfigError for more than pool_workers_max() workers.
    """

    def __init__(self, size: int, family: str | EnvFamily = "textworld", timeout_s: float = DEFAULT_TIMEOUT_S,
                 start_timeout_s: float = 60.0, factory: Callable[[], Env] | None = None, **env_kwargs):
        if size < 1:
            raise ValueError(f"pool size must be >= 1 (got {size})")
        check_pool_size(size, what="the pool size")
        if timeout_s is None or timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0 (got {timeout_s})")
        fam = family if isinstance(family, EnvFamily) else get_family(family)
        self.size = size
        self.family = fam.name
        self.timeout_s = float(timeout_s)
        self.start_timeout_s = float(start_timeout_s)
        self._fresh: set[int] = set()
        self._factory = factory or functools.partial(fam.make_env, **env_kwargs)
        methods = mp.get_all_start_methods()
        self._ctx = mp.get_context("forkserver" if "forkserver" in methods else "spawn")
        if "forkserver" in methods:  # takes effect when this process's forkserver starts (once)
            preload = list(fam.preload or ("agentrl_lib.envs.process_pool",))
            self._ctx.set_forkserver_preload(preload + [_PRELOAD_WARM] if fam.warm_up is not None else preload)
        _remove_stale_pool_dirs()
        self._tmp = Path(tempfile.mkdtemp(prefix=f"{POOL_TMP_PREFIX}{os.getpid()}-"))
        _LIVE_POOL_DIRS.add(self._tmp)
        self._workers: list[tuple[Any, Any] | None] = [None] * size  # (process, parent connection)

    def pid(self, slot: int) -> int | None:
        """Process id of a slot's worker (None before its first call)."""
        w = self._workers[slot]
        return w[0].pid if w is not None else None

    def log_path(self, slot: int) -> Path:
        """The file a slot's worker writes its stdout/stderr to (see WORKER_LOG_BYTES, WORKER_FILE_BYTES)."""
        return self._tmp / f"slot{slot}.log"

    def _start(self, slot: int, warm: str | None = None):
        parent, child = self._ctx.Pipe()
        workdir = self._tmp / f"slot{slot}"
        shutil.rmtree(workdir, ignore_errors=True)
        workdir.mkdir(parents=True)
        self.log_path(slot).write_bytes(b"")  # the previous worker's log is not this one's
        proc = self._ctx.Process(target=_worker_main, args=(child, self._factory, str(workdir),
                                                            str(self.log_path(slot))), daemon=True,
                                 name=f"envpool-{self.family}-{slot}")
        with _forkserver_environment(warm, self.family):
            proc.start()
        child.close()
        self._workers[slot] = (proc, parent)
        self._fresh.add(slot)
        return self._workers[slot]

    def _kill(self, slot: int) -> None:
        w = self._workers[slot]
        self._workers[slot] = None
        self._fresh.discard(slot)
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
                w = self._start(slot, warm=arg if method == "reset" else None)
            else:
                self._trim_log(slot)
            try:
                w[1].send((method, arg))
                pending.append(slot)
            except (BrokenPipeError, EOFError, OSError):
                results[slot] = self._crashed(slot)
        start = time.monotonic()
        for slot in pending:  # ... then await them (they run in parallel)
            results[slot] = self._await(slot, start + self.timeout_s)
        return [results[s] for s in slots]

    def _await(self, slot: int, deadline: float) -> StepResult | EnvFailure:
        proc, conn = self._workers[slot]
        if slot in self._fresh:  # a fresh worker's first call also starts the process and loads its first game
            deadline += self.start_timeout_s
        while True:
            remaining = deadline - time.monotonic()
            try:
                ready = conn.poll(min(max(remaining, 0.0), 0.1))  # an answer already there counts even if late
            except (EOFError, OSError):
                return self._crashed(slot)
            if not ready and remaining <= 0:
                return self._timed_out(slot)
            if ready:
                try:
                    status, payload = conn.recv()
                except (EOFError, OSError):
                    return self._crashed(slot)
                if status == "ready":  # started: a timeout from now on is the call's, not the start's
                    self._fresh.discard(slot)
                    continue
                return payload if status == "ok" else EnvFailure(payload)
            if not proc.is_alive():
                return self._crashed(slot)
            if self._log_size(slot) > WORKER_FLOOD_BYTES:
                self._kill(slot)
                return EnvFailure(self._with_output(slot, f"worker printed more than {WORKER_FLOOD_BYTES >> 20} MB in "
                                                          "one call (a runaway interpreter) and was stopped"),
                                  kind="flood")

    def _log_size(self, slot: int) -> int:
        try:
            return self.log_path(slot).stat().st_size
        except OSError:
            return 0

    def _trim_log(self, slot: int) -> None:
        """Empty a slot's log once it is past WORKER_LOG_BYTES (the worker appends: it goes on at offset 0)."""
        if self._log_size(slot) > WORKER_LOG_BYTES:
            try:
                os.truncate(self.log_path(slot), 0)
            except OSError:
                pass

    def _with_output(self, slot: int, reason: str) -> str:
        tail = _tail(self.log_path(slot))
        return f"{reason}; last output: {tail}" if tail else reason

    def _timed_out(self, slot: int) -> EnvFailure:
        fresh = slot in self._fresh
        self._kill(slot)
        what = f"worker did not start within {self.start_timeout_s:g} s{unguarded_script_hint()}" if fresh else \
            f"worker timed out after {self.timeout_s:g} s"
        return EnvFailure(self._with_output(slot, what), kind="timeout")

    def _crashed(self, slot: int) -> EnvFailure:
        hint = unguarded_script_hint() if slot in self._fresh else ""  # a worker that never started
        w = self._workers[slot]
        code = None
        if w is not None:
            w[0].join(timeout=1)
            code = w[0].exitcode
        self._kill(slot)
        how = f"exit code {code}"
        if code is not None and code < 0:
            try:
                how += f", {signal.Signals(-code).name}"
            except ValueError:
                pass
        return EnvFailure(self._with_output(slot, f"worker crashed ({how}){hint}"), kind="crash")

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
        shutil.rmtree(self._tmp, ignore_errors=True)
        _LIVE_POOL_DIRS.discard(self._tmp)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

