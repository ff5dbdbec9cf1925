"""Env pools: a fixed number of environment slots that rollouts reset and step as a batch.

Every pool answers `reset(slots, games)` and `step(slots, actions)` with one entry per slot: a StepResult, or an
EnvFailure when that slot's environment raised (or, for process pools, crashed or hung). A failure ends that one
episode; the run continues.

Every env call runs under a watchdog of `timeout_s` seconds (`env.step_timeout_s`, `--step-timeout`):
- ProcessPool (the default of `agentrl train` / `eval`, `env.process_pool`): one worker process per slot. A worker
  that crashes (even a segfault in the game interpreter) or does not answer in time is killed and answers
  EnvFailure for its slot only; the call returns within the timeout. Workers run in a private temporary directory
  (a game's `save`/`script` cannot write into yours), their stdout/stderr go to a log file there (never into the
  trainer's output; a worker that floods it is stopped, see WORKER_FLOOD_BYTES), and the last lines of that log are
  quoted in the failure reason.
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

import atexit
import contextlib
import functools
import multiprocessing as mp
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from . import EnvFamily, get_family
from .protocol import Env, StepResult

DEFAULT_TIMEOUT_S = 30.0
"""Default watchdog of one env reset/step (s): TextWorld steps take 2-15 ms, ALFWorld resets up to 0.5 s."""

SERIAL_TIMEOUT_EXIT_CODE = 124
"""Exit status of a process ended by the SerialPool watchdog (as coreutils `timeout`)."""

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
MB (measured above) and starts in ~0.2 s, so 16 a core (32 on the 2-core machine this was measured on: ~2.4 GB) is
where a pool stops being a rollout and becomes a fork storm (issue 52: `--group-size 100000` started workers for
minutes with no output)."""
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
                          f"envs.pool.pool_workers_max); lower {what}, or pass --no-process-pool (one process, "
                          "no crash isolation)")


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


@dataclass
class EnvFailure:
    """A slot's environment failed on this call; `reason` is shown in the trajectory's termination field.

    `kind`: 'error' (the env raised; "ExceptionType: message"), 'crash' (the worker process died), 'timeout' (no
    answer within the pool's timeout_s) or 'flood' (the worker printed more than WORKER_FLOOD_BYTES in one call).
    """

    reason: str
    kind: str = "error"


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


# ------------------------------------------------------------------------------------------------------ process pool
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
            preload = list(fam.preload or ("agentrl_lib.envs.pool",))
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


FAMILY_ONLY_OPTIONS = {"swe_reward": ("--swe-reward", "swe")}
"""EnvConfig fields that only some families take (EnvFamily.options) → (their flag, the families that take them): set
for a family that does not take them, they would be ignored in silence (issue 52: --swe-reward on TextWorld games)."""


def check_family_options(env_cfg, family: EnvFamily) -> None:
    """Refuse an EnvConfig option of FAMILY_ONLY_OPTIONS that is set while `family` does not take it. Raises
    config.ConfigError naming the flag and the family."""
    from ..config import ConfigError

    for name, (flag, takers) in FAMILY_ONLY_OPTIONS.items():
        if getattr(env_cfg, name, None) and name not in family.options:
            raise ConfigError(f"{flag} (env.{name}) does not apply to {family.name} games (only to {takers} games); "
                              "drop it")


def open_pool(env_cfg, size: int, games) -> EnvPool:
    """The env pool a run uses (trainer, evaluation, CLI), built from an EnvConfig (`process_pool`,
    `step_timeout_s` (raised to what the family's steps need: EnvFamily.watchdog_s), `check_games`, and the options
    the games' family takes, EnvFamily.options, e.g. TextWorld's `show_inventory`), with every game of `games` (a
    GameSet) checked through it first
    (`check_game_set`; cached).

    Raises: GameSetError when a game fails the check (the pool is closed then); UnknownFamilyError for a family
    that is not registered."""
    from .base import check_game_set

    family = get_family(games.family)
    check_family_options(env_cfg, family)
    check_pool_size(size, env_cfg.process_pool, "the env slots (train: --games-per-step x --group-size; eval: "
                                                "--batch-size)")
    kind = ProcessPool if env_cfg.process_pool else SerialPool
    timeout_s = family.watchdog_s(env_cfg.step_timeout_s)
    pool = kind(size, family=family, timeout_s=timeout_s, **family.env_kwargs(env_cfg))
    if env_cfg.check_games:
        try:
            check_game_set(games, pool, turn_limit=env_cfg.max_turns if "max_turns" in family.options else None)
        except BaseException:
            pool.close()
            raise
    return pool
