"""Cost marks, checked rather than trusted: a test that trains or starts a process without the mark that says so fails.

`make test-fast` leaves out the tests marked `trains`, `subprocess` or `slow` (pyproject.toml's markers). A mark
forgotten puts a training or a process start into the quick run, and nothing would say so. This plugin (loaded by
tests/conftest.py) patches the places where this project trains or starts processes, for each test's setup, call and
teardown, and fails a test that reaches one without its mark, with one line naming the mark to add:

    trains      agentrl_lib.trainer.Trainer.__init__ (every RL run builds one), agentrl_lib.sft.sft (SFT; it builds
                TRL's SFTTrainer), agentrl_lib.one_file_loop.rl_step (the one-file RL step), and
                transformers' Trainer.__init__ (SFTTrainer, GRPOTrainer, ...) once transformers.trainer is imported
                (importing it costs ~7 s, too much to force on a quick run that never trains).
    subprocess  subprocess.Popen (subprocess.run, check_output, asyncio's subprocesses), multiprocessing's
                Process.start (pools, the forkserver, ProcessPool's env workers), os.fork / forkpty / posix_spawn[p] /
                system. Exempt: CHEAP_COMMANDS, the tools the code under test runs in-line (`git rev-parse` for a
                record's commit, TextWorld's game compiler, ...): marking them would push every test that writes a
                record or plays a generated game out of the quick run.

A training entry point fails the test when it returns: a call that its own checks refuse (it raises first) neither
trained nor built anything, so the probes of those refusals stay in the quick run (test_sft.py's run-directory check,
test_swe_sweep.py's reward check; their tripwires keep them from training). A process is refused before it starts.
Unmarked is decided per cost: `slow` does not excuse training. A test that catches the guard's failure (a bare
`except BaseException`) still fails: the guard keeps what it saw and fails the phase after it. Processes a test's
own child starts are not seen (no plugin runs there): a test that trains in a child is marked by hand. Only Python
test functions are guarded: nbval's notebook cells (`make test`'s notebooks/) run in a kernel process by design.

tests/test_conftest_guard.py is its control (an unmarked test fails, a marked one passes).
"""
from __future__ import annotations

import importlib
import os
import sys

import pytest

CHEAP_COMMANDS = frozenset({"git", "uname", "lscpu", "chmod", "rm", "ni", "inform6"})
"""Programs a test may start without the `subprocess` mark, run in-line by the code under test: git (paths.git_commit,
milliseconds), uname (platform.processor in records.machine_info), lscpu (vLLM's CPU platform reads the cores with it;
tests/test_vllm.py runs in .venv-vllm, not checked here), chmod and rm (fsio.remove_tree's fallback), and
TextWorld's Inform 7 compilers ni and inform6, which its in-process game generator runs for each game it makes
(1-3 s a game: conftest's session fixtures compile 5 once; a test that makes many games is `slow`)."""


def _argv0(args: tuple, kwargs: dict) -> str:
    """The base name of the program a subprocess.Popen(self, args, ...) call starts ('' when there is none)."""
    cmd = args[1] if len(args) > 1 else kwargs.get("args")
    words = os.fsdecode(cmd).split() if isinstance(cmd, (str, bytes, os.PathLike)) else list(cmd or [])
    return os.path.basename(os.fsdecode(words[0])) if words else ""


def _popen_what(args: tuple, kwargs: dict) -> str | None:
    prog = _argv0(args, kwargs)
    return None if prog in CHEAP_COMMANDS else f"starts a process (subprocess.Popen of {prog or '?'})"


# (module, class or None, attribute, mark, what it does: a string, or a function of the call's (args, kwargs) giving
# the string, or None to let this call through)
CHOKE_POINTS = (
    ("agentrl_lib.trainer", "Trainer", "__init__", "trains", "builds a Trainer (agentrl_lib.trainer)"),
    ("agentrl_lib.sft", None, "sft", "trains", "runs SFT (agentrl_lib.sft.sft)"),
    ("agentrl_lib.one_file_loop", None, "rl_step", "trains", "runs an RL step (one_file_loop.rl_step)"),
    ("transformers.trainer", "Trainer", "__init__", "trains", "builds a transformers / TRL Trainer"),
    ("subprocess", "Popen", "__init__", "subprocess", _popen_what),
    ("multiprocessing.process", "BaseProcess", "start", "subprocess",
     "starts a process (multiprocessing Process.start)"),
    ("os", None, "fork", "subprocess", "starts a process (os.fork)"),
    ("os", None, "forkpty", "subprocess", "starts a process (os.forkpty)"),
    ("os", None, "posix_spawn", "subprocess", "starts a process (os.posix_spawn)"),
    ("os", None, "posix_spawnp", "subprocess", "starts a process (os.posix_spawnp)"),
    ("os", None, "system", "subprocess", "starts a process (os.system)"),
)
IMPORTED_ONLY = frozenset({"transformers.trainer"})
"""Modules patched only when some test has already imported them (see the module docstring)."""


class CostGuard:
    """While entered, every choke point whose mark is not in `marks` fails the test on use (pytest.fail, a
    BaseException, so `except Exception` in the code under test does not swallow it); `violations` keeps each line."""

    def __init__(self, test: str, marks: set[str], choke_points=CHOKE_POINTS):
        self.test, self.marks, self.choke_points = test, set(marks), choke_points
        self.violations: list[str] = []
        self._undo: list[tuple[object, str, object]] = []

    def __enter__(self) -> "CostGuard":
        for module_name, cls, attr, mark, what in self.choke_points:
            if mark in self.marks:
                continue
            if module_name in IMPORTED_ONLY and module_name not in sys.modules:
                continue
            owner = importlib.import_module(module_name)
            if cls is not None:
                owner = getattr(owner, cls)
            original = owner.__dict__.get(attr) if isinstance(owner, type) else getattr(owner, attr, None)
            if original is None:  # e.g. os.forkpty off Linux
                continue
            setattr(owner, attr, self._wrap(original, mark, what))
            self._undo.append((owner, attr, original))
        return self

    def __exit__(self, *exc) -> None:
        while self._undo:
            owner, attr, original = self._undo.pop()
            setattr(owner, attr, original)

    def _wrap(self, original, mark: str, what):
        guard = self

        def fail(said: str):
            line = (f"{guard.test} {said} but is not marked {mark}: add @pytest.mark.{mark} "
                    f"(make test-fast must leave it out; pyproject.toml's markers)")
            guard.violations.append(line)
            pytest.fail(line, pytrace=False)

        def guarded(*args, **kwargs):
            said = what(args, kwargs) if callable(what) else what
            if said is None:
                return original(*args, **kwargs)
            if mark == "subprocess":  # before the process starts
                fail(said)
            out = original(*args, **kwargs)  # trains: a call its own checks refuse (it raises) did not train
            fail(said)
            return out

        guarded.__wrapped__ = original
        return guarded

    def check(self) -> None:
        """Fail with the first violation, for code that caught the failure raised at the call."""
        if self.violations:
            pytest.fail(self.violations[0], pytrace=False)


def _guarded(item):
    if not isinstance(item, pytest.Function):  # nbval's notebook cells: their kernel is a process by design
        return (yield)
    if item.get_closest_marker("vllm"):  # run only in .venv-vllm (make test's last line; they skip in test-fast's
        return (yield)                   # .venv), where vLLM's engine starts its own processes by design
    guard = CostGuard(item.nodeid, {m.name for m in item.iter_markers()})
    with guard:
        result = yield
    guard.check()
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from _guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from _guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    return (yield from _guarded(item))
