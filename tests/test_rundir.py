"""The run directory (rundir.py; issue 9 items 4, 8, 10): config.yaml restored from a checkpoint's copy when it is
missing or cut, resume overrides refused by name and changing nothing, `--resume` on a directory without a run, a torn
metrics.jsonl line, strict JSON, and the lock that lets one trainer write a run. Checkpoints themselves:
test_checkpoint.py. Tiny random model + the scripted ParityEnv; each check has a negative control where it checks
correctness."""
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agentrl_lib import rundir
from agentrl_lib.checkpoint import CheckpointError
from agentrl_lib.cli import main
from agentrl_lib.config import RunConfig

from helpers import parity_trainer, strict_loads

ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------------------- config.yaml and resume
@pytest.mark.trains
def test_missing_or_truncated_config_is_restored_from_the_checkpoint(run, tmp_path, caplog):
    original = RunConfig.load(run / "config.yaml")
    lines = (run / "config.yaml").read_text().splitlines(keepends=True)
    (run / "config.yaml").write_text("".join(lines[: len(lines) // 2]))  # cut in the middle of the algo section
    # negative control: the plain loader is fooled by the truncated file (defaults fill the lost keys)
    assert RunConfig.load(run / "config.yaml") != original
    with caplog.at_level(logging.WARNING):
        assert rundir.resume_config(run) == original
    assert "is incomplete" in caplog.text and re.search(r"\bcopy\b.*\bstep_000003\b", caplog.text), caplog.text
    (run / "config.yaml").unlink()
    assert rundir.resume_config(run) == original
    # no copy to fall back on: a clear error, no defaults
    old = tmp_path / "old"
    old.mkdir()
    (old / "config.yaml").write_text("")
    with pytest.raises(CheckpointError, match="empty or not a mapping, and no checkpoint holds a copy"):
        rundir.resume_config(old)


def test_resume_on_a_directory_without_a_run(tmp_path, capsys):
    assert main(["train", "--out", str(tmp_path / "nothing"), "--resume"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("agentrl train: error: no run in") and "\n" not in err


@pytest.mark.trains
def test_incompatible_resume_overrides_are_refused_and_change_nothing(run, scripted, capsys):
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".lock"}
    for flags, field in [(["--algo", "grpo"], "algo.advantage ('gae' → 'grpo')"),
                         (["--lora-rank", "4"], "model.lora_rank (0 → 4)"),
                         (["--init", str(run)], "model.name")]:
        assert main(["train", "--out", str(run), "--resume", "--steps", "4", *flags]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("agentrl train: error: --resume cannot change") and field in err and "\n" not in err
    assert before == {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".lock"}
    # allowed changes resume, and the config is rewritten with them
    assert main(["train", "--out", str(run), "--resume", "--steps", "4", "--lr", "2e-4"]) == 0
    assert RunConfig.load(run / "config.yaml").train.lr == 2e-4
    assert [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3, 4]


# ----------------------------------------------------------------------------------------------- metrics.jsonl
@pytest.mark.trains
def test_a_torn_metrics_line_does_not_block_resume(run, caplog):
    path = run / "metrics.jsonl"
    with open(path, "a") as f:
        f.write('{"step": 4, "return_mean": 0.3, "grad_')  # a crash in the middle of a row
    torn = path.read_text().splitlines()[-1]
    with pytest.raises(json.JSONDecodeError):  # negative control: what the old reader did with it
        json.loads(torn)
    with caplog.at_level(logging.WARNING):
        rows = rundir.read_metrics(path, upto_step=3)
    assert [r["step"] for r in rows] == [1, 2, 3] and "skipped 1 unreadable line(s) (line 4" in caplog.text
    assert [strict_loads(x)["step"] for x in path.read_text().splitlines()] == [1, 2, 3]


def test_metrics_are_strict_json():
    row = {"step": 1, "entropy": float("nan"), "grad_norm": float("inf"), "return_mean": 0.5, "reasons": ["x"]}
    line = rundir.json_line(row)
    assert strict_loads(line) == {"step": 1, "entropy": None, "grad_norm": None, "return_mean": 0.5,
                                   "reasons": ["x"]}
    with pytest.raises(ValueError, match="NaN"):  # negative control: json.dumps writes bare NaN
        strict_loads(json.dumps(row))


# -------------------------------------------------------------------------------------------------------- lock
def _outside_holder_can_lock(path) -> bool:
    """Whether another open file of `path` (what another process would hold) can flock it now; releases at once."""
    import fcntl

    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # closing drops a flock it took


def test_run_lock_excludes_a_second_holder_and_is_shared_inside_the_process(tmp_path):
    """RunLock (filelock) holds RUN/.lock against any other open file of it, as another process would open it; two
    RunLocks of one process share it until both release. Control: released, the outside holder gets it."""
    first = rundir.RunLock(tmp_path)
    lock_file = tmp_path / ".lock"
    assert lock_file.read_text() == f"{os.getpid()}\n"
    assert _outside_holder_can_lock(lock_file) is False
    second = rundir.RunLock(tmp_path)  # a notebook's second Trainer of the same run dir
    first.release()
    first.release()  # idempotent: does not undo the second's acquisition
    assert _outside_holder_can_lock(lock_file) is False
    second.release()
    assert _outside_holder_can_lock(lock_file) is True
    assert lock_file.exists()  # kept: a waiter and a later trainer lock the same file


def test_a_dropped_run_lock_still_holds_until_the_process_ends(tmp_path):
    """`RunLock(run)` kept in no variable (as tests' holder processes write it) holds like a flock on an open file.
    Control: released, it does not."""
    import gc

    rundir.RunLock(tmp_path)
    gc.collect()
    assert _outside_holder_can_lock(tmp_path / ".lock") is False
    rundir._HELD.pop().release()  # what release() would have done
    assert _outside_holder_can_lock(tmp_path / ".lock") is True


def test_run_lock_refuses_while_another_holds_it_naming_its_pid(tmp_path):
    import fcntl

    lock_file = tmp_path / ".lock"
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, b"4242\n")
        with pytest.raises(rundir.RunLockedError) as e:
            rundir.RunLock(tmp_path)
        assert e.value.args[0].split("(pid ")[1].split(")")[0] == "4242"
        assert lock_file.read_text() == "4242\n"  # the refused contender leaves the holder's pid
    finally:
        os.close(fd)
    lock = rundir.RunLock(tmp_path)  # control: the holder gone, the lock is taken
    assert lock_file.read_text() == f"{os.getpid()}\n"
    lock.release()


@pytest.mark.trains
@pytest.mark.subprocess
def test_a_second_trainer_is_refused_while_the_first_holds_the_lock(run, scripted, capsys):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from agentrl_lib.rundir import RunLock; RunLock(sys.argv[1]); "
                               "print('locked', flush=True); sys.stdin.read()", str(run)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert main(["train", "--out", str(run), "--resume", "--steps", "4"]) == 2
        err = capsys.readouterr().err.strip()
        # one line: the run dir, the pid that holds it, and the other way out (another --out)
        assert err.startswith(f"agentrl train: error: {run} ") and "\n" not in err, err
        assert f"(pid {holder.pid})" in err and err.endswith(" --out"), err
        # negative control: without the lock the second trainer would start writing the same directory
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(rundir, "RunLock", lambda d: type("NoLock", (), {"release": lambda self: None})())
            parity_trainer(RunConfig.load(run / "config.yaml"), run, resume=True).close()
    finally:
        holder.kill()  # kill -9: the kernel releases the lock of a dead holder
        holder.wait()
    t = parity_trainer(RunConfig.load(run / "config.yaml"), run, resume=True)
    t.close()
