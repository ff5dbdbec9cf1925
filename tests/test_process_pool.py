"""ProcessPool: same answers as SerialPool, parallel slots, crash/timeout isolation, no temp dir left by a pool
stopped with SIGTERM (envs/process_pool.py)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("textworld")

from agentrl_lib.envs.base import StepResult
from agentrl_lib.envs.pool import SerialPool
from agentrl_lib.envs.process_pool import ProcessPool
from agentrl_lib.envs.protocol import EnvFailure


@pytest.fixture(scope="module")
def tw_games(tmp_path_factory):
    from agentrl_lib.envs.textworld import make_textworld_games

    gs = make_textworld_games(tmp_path_factory.mktemp("tw_pool"), n=2, seed=7, world_size=2, nb_objects=3,
                              quest_length=2, progress=False)
    return [g.path for g in gs.games], [g.walkthrough for g in gs.games]


@pytest.mark.subprocess
def test_process_pool_matches_serial_pool(tw_games):
    games, walks = tw_games
    with ProcessPool(2, family="textworld", timeout_s=60) as pp, SerialPool(2, family="textworld") as sp:
        a, b = pp.reset([0, 1], games), sp.reset([0, 1], games)
        assert all(isinstance(r, StepResult) for r in a)
        assert [r.obs for r in a] == [r.obs for r in b]
        for t in range(max(map(len, walks))):
            slots = [i for i in range(2) if t < len(walks[i])]
            acts = [walks[i][t] for i in slots]
            ra, rb = pp.step(slots, acts), sp.step(slots, acts)
            assert [(r.obs, r.reward, r.done) for r in ra] == [(r.obs, r.reward, r.done) for r in rb]
        assert all(r.info.won for r in ra)


@pytest.mark.subprocess
def test_env_exception_becomes_failure_and_worker_survives(tw_games):
    games, _ = tw_games
    with ProcessPool(2, family="textworld", timeout_s=60) as pool:
        out = pool.step([0], ["look"])  # step before reset raises RuntimeError inside the env
        assert isinstance(out[0], EnvFailure) and "RuntimeError" in out[0].reason
        pid = pool.pid(0)
        out = pool.reset([0, 1], [games[0], "/nonexistent/game.z8"])
        assert isinstance(out[0], StepResult)
        assert isinstance(out[1], EnvFailure) and "GameLoadError" in out[1].reason
        assert pool.pid(0) == pid  # an env exception does not cost the worker


@pytest.mark.subprocess
def test_killed_worker_fails_only_its_slot_and_recovers(tw_games):
    games, walks = tw_games
    with ProcessPool(2, family="textworld", timeout_s=60) as pool:
        pool.reset([0, 1], games)
        assert all(isinstance(r, StepResult) for r in pool.step([0, 1], [walks[0][0], walks[1][0]]))
        old = pool.pid(0)
        os.kill(old, signal.SIGKILL)  # mid-episode crash of slot 0
        time.sleep(0.2)
        out = pool.step([0, 1], [walks[0][1], walks[1][1]])
        assert isinstance(out[0], EnvFailure) and out[0].reason.startswith("worker crashed"), out[0]
        assert "-9" in out[0].reason
        assert isinstance(out[1], StepResult)  # the other slot goes on
        again = pool.reset([0], [games[0]])  # a fresh worker serves the slot after a new reset
        assert isinstance(again[0], StepResult) and pool.pid(0) != old
        r = None
        for a in walks[0]:
            r = pool.step([0], [a])[0]
        assert isinstance(r, StepResult) and r.info.won


@pytest.mark.subprocess
def test_hung_worker_times_out(tw_games):
    games, _ = tw_games
    with ProcessPool(2, family="textworld", timeout_s=1.0) as pool:
        pool.reset([0, 1], games)
        os.kill(pool.pid(0), signal.SIGSTOP)  # a worker that never answers
        t0 = time.monotonic()
        out = pool.step([0, 1], ["look", "look"])
        assert time.monotonic() - t0 < 10
        assert isinstance(out[0], EnvFailure) and out[0].reason == "worker timed out after 1 s"
        assert isinstance(out[1], StepResult)
        assert isinstance(pool.reset([0], [games[0]])[0], StepResult)


@pytest.mark.subprocess
def test_one_worker_process_per_slot(tw_games):
    games, _ = tw_games
    with ProcessPool(2, family="textworld", timeout_s=60) as pool:
        pool.reset([0, 1], games)
        pids = [pool.pid(0), pool.pid(1)]
        assert None not in pids and pids[0] != pids[1]


def test_bad_arguments():
    with pytest.raises(ValueError):
        ProcessPool(0)
    with pytest.raises(ValueError):
        ProcessPool(1, timeout_s=0)
    with ProcessPool(1) as pool:
        with pytest.raises(IndexError):
            pool.step([3], ["look"])
        with pytest.raises(ValueError):
            pool.step([0], ["a", "b"])


SCRIPT = """
import sys
from agentrl_lib.envs.process_pool import ProcessPool
pool = ProcessPool(1, family="textworld", start_timeout_s=30)
(res,) = pool.reset([0], [{game!r}])
pool.close()
print("RESULT", type(res).__name__, getattr(res, "reason", ""))
"""


@pytest.mark.subprocess
@pytest.mark.parametrize("guarded", [False, True])
def test_a_script_without_main_guard_is_told_how_to_fix_it(tw_games, tmp_path, guarded):
    """Worker processes re-import the main script (spawn/forkserver): an unguarded script that opens a pool at top
    level kills its own workers. The failure names the fix; the same script under a __main__ guard runs (control)."""
    import subprocess
    import sys

    body = SCRIPT.format(game=tw_games[0][0])
    if guarded:
        body = 'if __name__ == "__main__":\n' + "\n".join("    " + line for line in body.strip().splitlines())
    script = tmp_path / "train_script.py"
    script.write_text(body)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env,
                         cwd=tmp_path).stdout
    result = next(line for line in out.splitlines() if line.startswith("RESULT"))
    if guarded:
        assert result.startswith("RESULT StepResult"), result
    else:
        assert "EnvFailure" in result and "re-import the script train_script.py" in result, result
        assert 'if __name__ == "__main__":' in result and "--no-process-pool" in result


# ------------------------------------------------------------------------------------------------ env pool temp dirs
_POOL_SCRIPT = """
import sys, time
from agentrl_lib import cli
from agentrl_lib.envs.process_pool import ProcessPool
if sys.argv[1] == "cli":
    cli._exit_on_sigterm()  # what `agentrl train / eval` does
pool = ProcessPool(2, family="bandit")
print(pool._tmp, flush=True)
time.sleep(120)
"""


@pytest.mark.subprocess
@pytest.mark.parametrize("how", ["cli", "plain"])
def test_a_stopped_pool_leaves_no_temp_dir(tmp_path, how):
    """A process holding a ProcessPool stopped with SIGTERM (issue 52): under the CLI's handler (SystemExit, then
    atexit) its agentrl-envpool-<pid>-* dir is gone at exit. Negative control ('plain': Python's default SIGTERM,
    which runs no atexit): the dir stays, and the next ProcessPool that starts removes it (its owner is dead)."""
    from agentrl_lib.envs.process_pool import ProcessPool

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                        os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", _POOL_SCRIPT, how], stdout=subprocess.PIPE, text=True, env=env)
    tmp = Path(proc.stdout.readline().strip())
    assert tmp.is_dir() and tmp.name.startswith(f"agentrl-envpool-{proc.pid}-")
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(timeout=60)
    if how == "cli":
        assert rc == 128 + signal.SIGTERM and not tmp.exists()
        return
    assert rc == -signal.SIGTERM and tmp.exists(), "the control: a default SIGTERM runs no cleanup"
    ProcessPool(1, family="bandit").close()
    assert not tmp.exists(), "the next pool removes the dir of a dead owner"
