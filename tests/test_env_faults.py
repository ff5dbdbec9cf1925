"""Environment faults (issue 9): an agent's text that hangs or crashes the game interpreter, envs that hang or
segfault under each pool, worker output, broken games, and the env-error threshold. Each guard has a negative
control that removes it and shows the fault it stops."""
from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentrl_lib.envs.base import (
    CHECK_CACHE,
    GameSetError,
    StepInfo,
    StepResult,
    TooManyEnvErrors,
    check_env_errors,
    check_game_set,
    load_game_set,
    sanitize_action,
)
from agentrl_lib.envs.pool import SerialPool
from agentrl_lib.envs.process_pool import WORKER_FILE_BYTES, WORKER_LOG_BYTES, ProcessPool
from agentrl_lib.envs.protocol import EnvFailure

REPO = Path(__file__).resolve().parents[1]

# What a policy emitted or could emit, and what each did to dumb-frotz before the sanitiser (issue 9, item 1).
DANGEROUS = {
    "\\n go east": "endless 'unknown command' print loop",
    "\\boxed{go east}": "endless print loop",
    "\\help": "endless print loop (frotz's help)",
    "\\t": "hang",
    "\x00": "hang",
    "look\x00": "segfault (rc 139)",
    "save": "writes game_*.qzl into the working directory",
    "script": "writes a transcript file into the working directory",
    "quit": "asks to quit the interpreter",
    "restart": "asks to restart the game",
}


class FaultEnv:
    """A scripted env whose step does what its action says: 'hang' (a C call that never returns, like a hung
    interpreter), 'segv' (the process segfaults), 'shout' (3 MB on stdout, then answers), anything else answers."""

    def reset(self, game):
        return StepResult("A room.", 0.0, False, StepInfo(admissible=["look"], objective="look"))

    def step(self, action):
        if action == "hang":
            ctypes.CDLL(None).sleep(3600)
        if action == "segv":
            os.write(2, b"about to crash\n")
            os.kill(os.getpid(), signal.SIGSEGV)
        if action == "shout":
            for _ in range(3 * 1024):
                os.write(1, b"x" * 1023 + b"\n")
            print("last words", flush=True)
        return StepResult("ok", 0.0, False, StepInfo(admissible=["look"], valid=action == "look"))

    def close(self):
        pass


def unsanitized_textworld_env():
    """A TextWorldEnv with the sanitiser removed, built inside the worker process (negative control)."""
    import agentrl_lib.envs.textworld as tw

    tw.refusal_for = lambda action: (action, None)
    return tw.TextWorldEnv()


# ------------------------------------------------------------------------------------------------ agent's text
def test_sanitize_action_cases():
    assert sanitize_action("  go   east\n") == ("go east", None)
    assert sanitize_action("go\teast\r\n") == ("go east", None)
    assert sanitize_action("take café") == ("take café", None)
    for bad in ("\\help", "look \\", "\x00", "look\x00", "\x1b[A", "\u200bgo", "\ud800", "\x07"):
        command, refusal = sanitize_action(bad)
        assert command == "" and "cannot read" in refusal, bad
    assert "too long" in sanitize_action("é" * 100)[1]  # 200 bytes: jericho would cut a character in two


@pytest.mark.subprocess
@pytest.mark.parametrize("kind", ["serial", "process"])
def test_dangerous_actions_on_a_real_game_are_refused_fast(kind, cooking_games, tmp_path, monkeypatch):
    from agentrl_lib.envs.textworld import REFUSED_COMMAND, refusal_for

    for action in DANGEROUS:  # guard: never send one to an in-process interpreter if the sanitiser regressed
        assert refusal_for(action)[1] is not None, f"{action!r} would reach the interpreter: {DANGEROUS[action]}"
    monkeypatch.chdir(tmp_path)
    game = cooking_games.games[0]
    pool = SerialPool(1, timeout_s=20) if kind == "serial" else ProcessPool(1, timeout_s=20)
    with pool:
        first = pool.reset([0], [game.path])[0]
        t0 = time.monotonic()
        for action in DANGEROUS:
            r = pool.step([0], [action])[0]
            assert isinstance(r, StepResult), (action, r)
            assert not r.info.valid and not r.done and r.reward == 0, action
            assert r.obs == REFUSED_COMMAND or "cannot read" in r.obs, (action, r.obs)
            assert r.info.admissible == first.info.admissible, "a refused action changes nothing"
        assert time.monotonic() - t0 < 5
        for action in game.walkthrough:  # the game is still where it was: the walkthrough wins
            r = pool.step([0], [action])[0]
        assert r.info.won
    assert list(tmp_path.iterdir()) == [], "nothing written into the working directory"


@pytest.mark.subprocess
def test_without_the_sanitiser_the_process_pool_watchdog_ends_only_that_episode(cooking_games, capfd):
    """Negative control: the real flood ('\\boxed{go east}') and crash ('look\\x00') reach dumb-frotz; the watchdog and
    the worker's capped log contain them; the third slot plays on."""
    games = [g.path for g in cooking_games.games[:3]]
    with ProcessPool(3, timeout_s=3, factory=unsanitized_textworld_env) as pool:
        assert all(isinstance(r, StepResult) for r in pool.reset([0, 1, 2], games))
        t0 = time.monotonic()
        out = pool.step([0, 1, 2], ["\\boxed{go east}", "look\x00", "look"])
        elapsed = time.monotonic() - t0
        assert isinstance(out[0], EnvFailure) and out[0].kind in ("flood", "timeout"), out[0]
        reason = out[0].reason  # quotes the worker's last lines: "DUMB-FROTZ: unknown command ... Enter \help to ..."
        assert "last output: " in reason and ("DUMB-FROTZ" in reason or "help to see the list" in reason), reason
        assert isinstance(out[1], EnvFailure), out[1]  # segfault (rc 139) or hang, as dumb-frotz decides
        assert isinstance(out[2], StepResult) and out[2].info.valid
        assert elapsed < 3 + 5, elapsed
        assert pool.log_path(0).stat().st_size <= WORKER_FILE_BYTES, "the flood is capped"
        assert isinstance(pool.reset([0], [games[0]])[0], StepResult), "a fresh worker serves the slot"
    printed = capfd.readouterr()
    assert "DUMB-FROTZ" not in printed.out + printed.err, "worker output never reaches the trainer's stdout"


# ---------------------------------------------------------------------------------------- hanging / crashing envs
@pytest.mark.subprocess
def test_hang_and_segfault_under_the_process_pool_end_one_episode_each(capfd):
    with ProcessPool(3, timeout_s=2, factory=FaultEnv) as pool:
        pool.reset([0, 1, 2], ["g"] * 3)
        t0 = time.monotonic()
        out = pool.step([0, 1, 2], ["hang", "segv", "look"])
        assert time.monotonic() - t0 < 2 + 5
        assert out[0].kind == "timeout" and out[0].reason.startswith("worker timed out after 2 s"), out[0]
        assert out[1].kind == "crash" and "SIGSEGV" in out[1].reason and "about to crash" in out[1].reason, out[1]
        assert isinstance(out[2], StepResult) and out[2].info.valid
        assert all(isinstance(r, StepResult) for r in pool.reset([0, 1], ["g", "g"])), "slots recover"
        r = pool.step([2], ["shout"])[0]  # 3 MB of output: answered, captured, emptied before the next call
        assert isinstance(r, StepResult) and pool.log_path(2).stat().st_size > WORKER_LOG_BYTES
        assert isinstance(pool.step([2], ["look"])[0], StepResult)
        assert pool.log_path(2).stat().st_size <= WORKER_LOG_BYTES
    printed = capfd.readouterr()
    assert "xxxx" not in printed.out and "about to crash" not in printed.err


_SERIAL_SCRIPT = """
from test_env_faults import FaultEnv
from agentrl_lib.envs.pool import SerialPool
pool = SerialPool(2, factory=FaultEnv, timeout_s={timeout})
pool.reset([0, 1], ["g0", "g1"])
print("reset ok", flush=True)
pool.step([0, 1], ["look", "hang"])
print("not reached", flush=True)
"""


def _run_serial(timeout, limit):
    script = _SERIAL_SCRIPT.format(timeout=timeout)
    # the child imports this file (test_env_faults.py) from tests/; agentrl_lib is the installed one
    path = os.pathsep.join(filter(None, [str(REPO / "tests"), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=limit, env=env)


@pytest.mark.subprocess
def test_a_hang_under_the_serial_pool_ends_the_process_with_one_line():
    t0 = time.monotonic()
    p = _run_serial(timeout=1, limit=60)
    assert p.returncode == 124, (p.returncode, p.stderr)
    assert p.stdout.strip() == "reset ok"
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert "env step exceeded 1 s in this process" in lines[0] and "g1" in lines[0]
    assert "--process-pool" in lines[0] and "--resume" in lines[0]
    assert time.monotonic() - t0 < 30
    with pytest.raises(subprocess.TimeoutExpired):  # negative control: without the watchdog it hangs
        _run_serial(timeout=None, limit=6)


# ------------------------------------------------------------------------------------------------ broken games
@pytest.fixture
def games_copy(cooking_games, tmp_path):
    dst = tmp_path / "games"
    shutil.copytree(cooking_games.root, dst)
    (dst / CHECK_CACHE).unlink(missing_ok=True)
    return dst


def test_game_check_plays_every_game_once_then_is_cached(games_copy):
    gs = load_game_set(games_copy)
    with SerialPool(2) as pool:
        first = check_game_set(gs, pool)
        assert first["played"] == 3 and first["cached"] == 0
        again = check_game_set(gs, pool)
        assert again["played"] == 0 and again["cached"] == 3
        json_file = Path(gs.games[1].path).with_suffix(".json")
        os.utime(json_file, ns=(time.time_ns(), time.time_ns() + 10**9))  # a changed file is checked again
        assert check_game_set(gs, pool)["played"] == 1


def _garbage_body(story: Path) -> None:
    """The story file's body replaced by fixed pseudo-random bytes (the header is intact, so the size check passes).
    Fixed, not os.urandom: the test loads the game in this process (SerialPool), and some random bodies make the
    interpreter divide by zero (SIGFPE), which kills the test process instead of raising; the process pool is what
    survives that (test_hang_and_segfault_under_the_process_pool_end_one_episode_each)."""
    import random

    data = bytearray(story.read_bytes())
    data[64:] = random.Random(0).randbytes(len(data) - 64)
    story.write_bytes(bytes(data))


@pytest.mark.parametrize("damage,message", [
    ("no_json", r"missing .*game_\d+\.json"),
    ("truncated_json", r"reset failed: GameLoadError"),
    ("garbage_body", r"interpreter halted"),
    ("wrong_walkthrough", r"replaying its walkthrough \(1 commands\) does not win"),
    ("family_lies", r"is a file, not an ALFWorld game folder"),
])
def test_each_broken_game_fails_the_check_with_one_line(games_copy, damage, message):
    gs = load_game_set(games_copy)
    story = Path(gs.games[0].path)
    if damage == "no_json":
        story.with_suffix(".json").unlink()
    elif damage == "truncated_json":
        j = story.with_suffix(".json")
        j.write_text(j.read_text()[:300])
    elif damage == "garbage_body":
        _garbage_body(story)
    elif damage == "wrong_walkthrough":
        gs.games[0].walkthrough = ["look"]
    elif damage == "family_lies":
        gs.family = "alfworld"
    with SerialPool(1) as pool:
        with pytest.raises(GameSetError, match=message) as e:
            check_game_set(gs, pool)
    assert "\n" not in str(e.value) and "game_" in str(e.value)


def test_cli_eval_names_a_broken_game_before_loading_the_model(games_copy, capsys):
    """One line, exit 2, no traceback, and the model is never loaded (the --model path does not exist)."""
    from agentrl_lib.cli import main

    Path(load_game_set(games_copy).games[0].path).with_suffix(".json").unlink()
    rc = main(["eval", "--model", str(games_copy / "no-such-model"), "--games", str(games_copy), "--device", "cpu",
               "--no-process-pool"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and err.startswith("agentrl eval: error: 1 of 3 games"), err
    manifest = json.loads((games_copy / "manifest.json").read_text())
    manifest["family"] = "minigrid"
    (games_copy / "manifest.json").write_text(json.dumps(manifest))
    assert main(["eval", "--games", str(games_copy)]) == 2
    assert "unknown game family 'minigrid'" in capsys.readouterr().err


def test_without_the_check_a_game_missing_its_json_fails_silently(games_copy, tiny_model_dir):
    """Negative control: the game plays (no error) but has no objective and can never be won."""
    from agentrl_lib.envs.textworld import TextWorldEnv

    gs = load_game_set(games_copy)
    game = gs.games[0]
    Path(game.path).with_suffix(".json").unlink()
    env = TextWorldEnv()
    r = env.reset(game.path)
    assert r.info.objective == "" and r.info.admissible == []
    for action in game.walkthrough:
        r = env.step(action)
    assert not r.info.won and r.reward == 0 and "*** The End ***" in r.obs
    env.close()


# ------------------------------------------------------------------------------------------------ env-error threshold
def test_env_error_threshold():
    check_env_errors(4, 8, 0.5, "x", "step 1")  # exactly half: goes on
    with pytest.raises(TooManyEnvErrors, match=r"step 2: 5 of 8 episodes .* \(first: env_error: boom\)"):
        check_env_errors(5, 8, 0.5, "env_error: boom", "step 2")
    check_env_errors(8, 8, 1.0, "x", "step 3")  # 1 never stops


class BrokenEnv(FaultEnv):
    def reset(self, game):
        raise RuntimeError("engine exploded")


@pytest.mark.trains
def test_training_stops_with_one_line_when_most_episodes_fail(tiny_model_dir, tmp_path, capsys):
    from agentrl_lib.config import AlgoConfig, EnvConfig, ModelConfig, RunConfig, TrainConfig
    from agentrl_lib.envs import EnvFamily, register_family
    from agentrl_lib.envs.base import GameRecord, write_manifest
    from agentrl_lib.trainer import Trainer

    register_family(EnvFamily(name="broken", make_env=BrokenEnv, make_games=None, system_prompt="Say look.",
                              game_id="seed"))  # a game id is a seed: no game file to fake
    root = tmp_path / "games"
    root.mkdir()
    write_manifest(root, "broken", [GameRecord("0", "g0", 0, 1, ["look"])], {})

    def run(frac):
        cfg = RunConfig(env=EnvConfig(games=str(root), max_turns=2, max_env_error_frac=frac),
                        algo=AlgoConfig.from_preset("rloo", group_size=2), model=ModelConfig(device="cpu"),
                        train=TrainConfig(steps=2, games_per_step=1, max_new_tokens=4))
        trainer = Trainer(cfg, tmp_path / f"run{frac}", init=tiny_model_dir, pool=SerialPool(2, factory=BrokenEnv),
                          progress=True)
        try:
            return trainer.train()
        finally:
            trainer.close()

    with pytest.raises(TooManyEnvErrors, match="step 1: 2 of 2 episodes .*engine exploded"):
        run(0.5)
    assert "env errors 2/2" in capsys.readouterr().out, "the progress line counts env errors"
    assert len((tmp_path / "run0.5" / "metrics.jsonl").read_text().splitlines()) == 1, "the step's row is kept"
    assert len(run(1.0)) == 2  # negative control: with the threshold off the run goes on


def test_eval_exits_non_zero_when_most_episodes_fail_and_keeps_the_result(games_copy, tiny_model_dir, tmp_path,
                                                                         monkeypatch, capsys):
    import agentrl_lib.evaluate as ev
    from agentrl_lib.cli import main

    real = ev.evaluate

    def failing(*args, **kwargs):
        res = real(*args, **kwargs)
        for row in res["per_game"][:2]:
            row["termination"] = "env_error: worker crashed (exit code -11, SIGSEGV)"
        res["env_errors"], res["env_error_reasons"] = 2, [res["per_game"][0]["termination"]]
        return res

    monkeypatch.setattr(ev, "evaluate", failing)
    out = tmp_path / "eval.json"
    rc = main(["eval", "--model", tiny_model_dir, "--games", str(games_copy), "--out", str(out), "--max-turns", "1",
               "--device", "cpu", "--no-process-pool"])
    captured = capsys.readouterr()
    assert rc == 2 and "env errors 2/3" in captured.out
    last = captured.err.strip().splitlines()[-1]  # (above it: transformers' weight-loading bar)
    # one line: how many of the episodes failed, and why (the env)
    assert last.startswith("agentrl eval: error: ") and re.search(r"\b2 of 3 episodes\b.*\benv error", last), last
    assert "Traceback" not in captured.err
    assert json.loads(out.read_text())["env_errors"] == 2, "the result is written before the exit"
    assert main(["eval", "--model", tiny_model_dir, "--games", str(games_copy), "--max-turns", "1", "--device", "cpu",
                 "--no-process-pool", "--max-env-error-frac", "1"]) == 0  # negative control


# ------------------------------------------------------------------------------------------------ make-games
@pytest.mark.parametrize("args,message", [
    (["--quest-length", "100"], "--quest-length must be in [1, 80] (got 100)"),
    (["--world-size", "500"], "--world-size must be in [1, 30] (got 500)"),
    (["--nb-objects", "0"], "--nb-objects must be in [1, 100] (got 0)"),
    (["--challenge", "tw-cooking", "--challenge-args", "--recipe 99"], "tw-cooking --recipe must be in [1, 5]"),
    (["--challenge", "tw-cooking", "--challenge-args", "--recipe 2 --take 3"], "--take (3) must be <= --recipe (2)"),
    (["--challenge", "tw-coin_collector"], "the following arguments are required: --level"),
    (["--challenge", "tw-treasure_hunter", "--challenge-args", "--level 31"], "--level must be in [1, 30]"),
])
def test_make_games_refuses_what_the_generator_cannot_make_at_once(args, message, tmp_path, capsys):
    from agentrl_lib.cli import main

    t0 = time.monotonic()
    assert main(["make-games", "textworld", "--out", str(tmp_path / "g"), "--n", "1"] + args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert time.monotonic() - t0 < 5 and not (tmp_path / "g").exists()


@pytest.mark.subprocess
def test_a_generator_failure_leaves_no_partial_files(tmp_path, monkeypatch, capsys):
    import textworld.generator

    from agentrl_lib.cli import main

    out = tmp_path / "g"
    args = ["make-games", "textworld", "--out", str(out), "--world-size", "1", "--nb-objects", "1", "--quest-length",
            "1", "--seed", "5"]
    assert main(args + ["--n", "1"]) == 0
    before = sorted(p.name for p in out.iterdir())
    real, calls = textworld.generator.compile_game, []

    def compile_twice(game, opts):  # the second game fails, as --quest-length 100 did after 41 s
        calls.append(opts.path)
        if len(calls) == 2:
            raise textworld.generator.inform7.CouldNotCompileGameError("planted")
        return real(game, opts)

    monkeypatch.setattr(textworld.generator, "compile_game", compile_twice)
    assert main(args + ["--n", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]  # (above it: the progress bar)
    # the family, the game that failed and its seed, and the generator's own reason
    assert err.startswith("agentrl make-games: error: textworld ") and "planted" in err, err
    assert re.search(r"\bgame 1 \(seed 6\)", err), err
    assert sorted(p.name for p in out.iterdir()) == before, "no partial files; the older set is intact"
    assert len(load_game_set(out)) == 1
