"""tests/cost_guard.py's control: a test that builds a Trainer, runs SFT or starts a process without its cost mark
fails with one line naming the mark; the same test marked passes, and so does an unmarked one whose Trainer its own
checks refuse (it raises before it is built).

The inner test files run in this process (pytester, in-process: no process of ours starts). Their conftest puts cheap
stand-ins at the guarded places first (pytest_configure, undone in pytest_unconfigure), so the guard wraps the
stand-ins and a marked test goes through to one without training or starting anything; this file's own guard sits
underneath, never reached."""
from __future__ import annotations

import pytest

STAND_INS = """
import multiprocessing.process
import subprocess

import pytest

import agentrl_lib.sft
import agentrl_lib.trainer

pytest_plugins = ["cost_guard"]
_mp = pytest.MonkeyPatch()


def _init(self, config, *a, **k):
    if config == "refuse":
        raise ValueError("refused by its checks")


def pytest_configure(config):
    _mp.setattr(agentrl_lib.trainer.Trainer, "__init__", _init)
    _mp.setattr(agentrl_lib.sft, "sft", lambda *a, **k: {"examples": 0})
    _mp.setattr(subprocess.Popen, "__init__", lambda self, *a, **k: None)
    _mp.setattr(multiprocessing.process.BaseProcess, "start", lambda self: None)


def pytest_unconfigure(config):
    _mp.undo()


class Cell(pytest.Item):  # a notebook cell as nbval collects it: not a Python test function
    def runtest(self):
        subprocess.Popen(["python", "-m", "ipykernel_launcher"])


class Notebook(pytest.File):
    def collect(self):
        yield Cell.from_parent(self, name="cell_starting_a_kernel")


def pytest_collect_file(parent, file_path):
    if file_path.suffix == ".cells":
        return Notebook.from_parent(parent, path=file_path)
"""

TESTS = """
import multiprocessing
import subprocess

import pytest

import agentrl_lib.sft
from agentrl_lib.trainer import Trainer


def test_trainer_unmarked():
    Trainer(None, "run")


@pytest.mark.trains
def test_trainer_marked():
    Trainer(None, "run")


def test_trainer_refused_unmarked():
    with pytest.raises(ValueError, match="refused"):
        Trainer("refuse", "run")


def test_sft_unmarked():
    agentrl_lib.sft.sft("m", None, "out")


@pytest.mark.trains
def test_sft_marked():
    agentrl_lib.sft.sft("m", None, "out")


def test_popen_unmarked():
    subprocess.Popen(["python", "-c", "pass"])


@pytest.mark.subprocess
def test_popen_marked():
    subprocess.Popen(["python", "-c", "pass"])


def test_git_is_cheap():
    subprocess.Popen(["git", "rev-parse", "HEAD"])


def test_process_unmarked():
    multiprocessing.get_context("spawn").Process(target=print).start()


@pytest.mark.subprocess
def test_process_marked():
    multiprocessing.get_context("spawn").Process(target=print).start()


@pytest.mark.slow
def test_slow_does_not_excuse_training():
    Trainer(None, "run")


def test_caught_still_fails():
    try:
        Trainer(None, "run")
    except BaseException:
        pass
"""

FAILS = {"test_trainer_unmarked": "trains", "test_sft_unmarked": "trains", "test_popen_unmarked": "subprocess",
         "test_process_unmarked": "subprocess", "test_slow_does_not_excuse_training": "trains",
         "test_caught_still_fails": "trains"}
PASSES = {"test_trainer_marked", "test_trainer_refused_unmarked", "test_sft_marked", "test_popen_marked",
          "test_git_is_cheap", "test_process_marked", "cell_starting_a_kernel"}


@pytest.fixture
def inner(pytester):
    pytester.makeconftest(STAND_INS)
    pytester.makepyfile(test_inner=TESTS)
    pytester.makefile(".cells", notebook="")
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", "-rA")


def test_outcomes(inner):
    failed = {r.nodeid.split("::")[1] for r in inner.reprec.getreports("pytest_runtest_logreport") if r.failed}
    passed = {r.nodeid.split("::")[1] for r in inner.reprec.getreports("pytest_runtest_logreport")
              if r.passed and r.when == "call"}
    assert failed == set(FAILS)
    assert passed == PASSES


def test_each_failure_is_one_line_naming_its_mark(inner):
    for r in inner.reprec.getreports("pytest_runtest_logreport"):
        if r.failed:
            name = r.nodeid.split("::")[1]
            text = str(r.longrepr)
            assert text.count("\n") == 0
            assert text.startswith(r.nodeid)
            assert f"add @pytest.mark.{FAILS[name]}" in text


def test_guard_leaves_nothing_patched(inner):
    import multiprocessing.process
    import subprocess

    import agentrl_lib.trainer

    # this test runs unmarked, so its own guard wraps these; the inner session must have put back exactly those
    assert agentrl_lib.trainer.Trainer.__init__.__wrapped__.__qualname__ == "Trainer.__init__"
    assert subprocess.Popen.__init__.__wrapped__.__qualname__ == "Popen.__init__"
    assert multiprocessing.process.BaseProcess.start.__wrapped__.__qualname__ == "BaseProcess.start"
