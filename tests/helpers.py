"""Helpers that several test files share: scripted games (ParityEnv, CoinEnv, BrokenEnv and the game sets they play),
the run-directory tests' config and trainer, the sweep's base config, the CLI's error-line check and
console-script runner, a stand-in model directory (write_model), and the checks of what a report says (the numbers of
a sentence, a golden file). Fixtures live in
conftest.py; this module holds plain classes and functions, imported as `from helpers import ...`."""
from __future__ import annotations

import difflib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import agentrl_lib
from agentrl_lib.config import AlgoConfig, EnvConfig, ModelConfig, RunConfig, TrainConfig
from agentrl_lib.envs.base import GameRecord, StepInfo, StepResult, write_manifest

REPO = Path(agentrl_lib.__file__).resolve().parent.parent


# ------------------------------------------------------------------------------------------------ scripted games
class ParityEnv:
    """A scripted 2-turn game: the episode is won when the second action has an even number of characters.
    Gives reward variance inside groups even for a random model, so every estimator has a signal."""

    def reset(self, game):
        self.t = 0
        return StepResult("You stand in a room.", 0.0, False, StepInfo(max_score=1, objective="say a word",
                                                                         admissible=["look"]))

    def step(self, action):
        self.t += 1
        won = self.t == 2 and len(action) % 2 == 0
        return StepResult("ok", 1.0 if won else 0.0, self.t == 2,
                          StepInfo(won=won, score=1.0 if won else 0.0, max_score=1, valid=action == "look",
                                   admissible=["look"]))

    def close(self):
        pass


class BrokenEnv(ParityEnv):
    def reset(self, game):
        raise RuntimeError("engine exploded")


def scripted_games(root: Path):
    """Two placeholder game files with a manifest, for ParityEnv / BrokenEnv (which ignore the file). Returns root."""
    root.mkdir(parents=True, exist_ok=True)
    recs = []
    for i in range(2):
        (root / f"g{i}.txt").write_text("scripted")
        recs.append(GameRecord(path=str(root / f"g{i}.txt"), name=f"g{i}", seed=i, max_score=1, walkthrough=["look"]))
    write_manifest(root, "textworld", recs, {"scripted": True})
    return root


class CoinEnv:
    """A scripted 2-turn game whose outcome depends on the reply's length parity: random models get reward spread."""

    def reset(self, game):
        self.t = 0
        return StepResult("A room.", 0.0, False, StepInfo(max_score=1, objective="say a word", admissible=["look"]))

    def step(self, action):
        self.t += 1
        won = self.t == 2 and len(action) % 2 == 0
        return StepResult("ok " * self.t, 1.0 if won else 0.0, self.t == 2,
                          StepInfo(won=won, score=float(won), max_score=1, valid=action == "look", admissible=["look"]))

    def close(self):
        pass


def coin_games(root, n=2):
    """`n` placeholder game files with a manifest, for CoinEnv. Returns str(root)."""
    root.mkdir(parents=True, exist_ok=True)
    recs = []
    for i in range(n):
        (root / f"g{i}.txt").write_text("scripted")
        recs.append(GameRecord(path=str(root / f"g{i}.txt"), name=f"g{i}", seed=i, max_score=1, walkthrough=["look"]))
    write_manifest(root, "textworld", recs, {"scripted": True})
    return str(root)


# ------------------------------------------------------------------------------- run directories and checkpoints
def parity_config(games, algo="ppo", steps=3, **train) -> RunConfig:
    """test_checkpoint.py's and test_rundir.py's runs: one game per step, groups of 2, a checkpoint every step."""
    train = {"games_per_step": 1, "minibatch_size": 2, "max_new_tokens": 4, "checkpoint_every": 1, "lr": 1e-3,
             "temperature": 1.0, **train}
    return RunConfig(env=EnvConfig(games=str(games), max_turns=2), algo=AlgoConfig.from_preset(algo, group_size=2),
                     model=ModelConfig(device="cpu"), train=TrainConfig(steps=steps, **train))


def parity_trainer(cfg, run, init=None, resume=False):
    """A Trainer of `cfg` in `run` that plays ParityEnv (no progress lines)."""
    from agentrl_lib.envs.pool import SerialPool
    from agentrl_lib.trainer import Trainer

    return Trainer(cfg, run, init=init, resume=resume, pool=SerialPool(2, factory=ParityEnv), progress=False)


def strict_loads(line: str):
    """json.loads that refuses NaN / Infinity (not JSON: RFC 8259)."""
    def refuse(name):
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(line, parse_constant=refuse)


# ------------------------------------------------------------------------------------------------ the sweep
def sweep_base(games, steps=1) -> RunConfig:
    """The sweep tests' base config: GRPO, groups of 2, one game per step, a checkpoint every step, eval on `games`."""
    return RunConfig(env=EnvConfig(games=str(games), max_turns=2), algo=AlgoConfig.from_preset("grpo", group_size=2),
                     model=ModelConfig(device="cpu"),
                     train=TrainConfig(steps=steps, games_per_step=1, max_new_tokens=4, temperature=1.0,
                                       checkpoint_every=1, eval_games=str(games)))


# ------------------------------------------------------------------------------------------------ the CLI's errors
def assert_one_clear_error(rc, out, err, cmd, must_contain):
    assert rc not in (0, None), f"exit code {rc}"
    assert "Traceback" not in out + err
    lines = [x for x in err.splitlines() if "error" in x.lower()]
    assert len(lines) == 1, f"expected one error line, got: {err!r}"
    assert lines[0].startswith(f"agentrl {cmd}: error: ") and lines[0] == err.strip().splitlines()[-1]
    for s in must_contain:
        assert s in lines[0], f"{s!r} not in {lines[0]!r}"


def console(tmp_path, *args):
    """Run the installed `agentrl` script (or `python -m agentrl_lib.cli`) on this checkout's code."""
    script = Path(sys.executable).parent / "agentrl"
    cmd = [str(script)] if script.is_file() else [sys.executable, "-m", "agentrl_lib.cli"]
    path = [str(REPO)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    return subprocess.run(cmd + list(args), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def fake_record(cell, seed, value, base_hash="b0"):
    """A minimal sweep record: held-out success `value`, one step whose return_mean is value / 2."""
    return {"cell": cell, "seed": seed, "base_hash": base_hash, "eval": {"success_rate": value},
            "steps": [{"step": 1, "return_mean": value / 2}]}


def fake_records(samples: dict[tuple, list[float]]):
    """fake_record per (algo.advantage, reward.kind) → its values over seeds 0, 1, ..."""
    return [fake_record({"algo.advantage": algo, "reward.kind": kind}, s, v)
            for (algo, kind), values in samples.items() for s, v in enumerate(values)]


def write_model(path, adapter_rank: int | None = None):
    """A stand-in model directory at `path`: config.json '{}' (a transformers model), or with `adapter_rank` an
    adapter_config.json of that LoRA rank (a peft adapter). Nothing loadable: for path and adapter checks only."""
    path.mkdir(parents=True)
    if adapter_rank is None:
        (path / "config.json").write_text("{}")
    else:
        (path / "adapter_config.json").write_text(json.dumps({"r": adapter_rank}))
    return path


# ------------------------------------------------------------------------------------- what a report or message says
NUMBER = re.compile(r"(?<![\w.])[-+−]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![xX]\w)")
"""A number as a report writes it: 34.9, -6, +31, −0.5 (a minus sign), 3e-05; not the digits of a name (w2,
step_000002, 0x1f)."""


def numbers(text: str) -> list[float]:
    """The numbers `text` states, in order: a report's sentence or table row checked by what it says, its wording left
    free (`numbers("took 0.95 CPU hours (16 runs)") == [0.95, 16]`)."""
    return [float(m.replace("−", "-")) for m in NUMBER.findall(text)]


GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE_GOLDEN = "AGENTRL_UPDATE_GOLDEN"


def assert_golden(name: str, text: str) -> None:
    """`text` (a rendered report or table) equals tests/golden/`name`. A deliberate change of wording or layout is one
    command, not an edit of the test: `AGENTRL_UPDATE_GOLDEN=1 python -m pytest tests/<file>.py` writes each golden file
    from what the code now renders (the test passes), and `git diff tests/golden` shows what changed, to read before
    committing it. The text is compared and stored with one final newline."""
    text = text.rstrip("\n") + "\n"
    path = GOLDEN / name
    if os.environ.get(UPDATE_GOLDEN) == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return
    assert path.is_file(), f"no golden file tests/golden/{name}: run the test with {UPDATE_GOLDEN}=1 to write it"
    want = path.read_text()
    diff = "".join(difflib.unified_diff(want.splitlines(keepends=True), text.splitlines(keepends=True),
                                        f"tests/golden/{name}", "rendered now"))
    assert text == want, (f"the rendered text differs from tests/golden/{name} ({UPDATE_GOLDEN}=1 rewrites it after a "
                          f"deliberate change):\n{diff}")
