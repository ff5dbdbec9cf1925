"""The swe sweep around chapter 06: configs/swe.yaml trains on the submission's reward as given (reward.kind env;
dense's win cap inverts pass ratios above 2/3, the negative control), and a run or sweep with reward.kind dense on swe
games is refused in one line before any model loads (Python API, the CLI in-process and as a console script, the
sweep); `results/regenerate.py swe --dry-run` plans the part within its budget with train and held-out sets apart,
SFT and evaluations with the sweep's turns and tokens; and results/findings.py's SWE row follows the interval."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from agentrl_lib import rewards
from agentrl_lib.config import ConfigError, EnvConfig, RewardConfig, RunConfig

from helpers import assert_one_clear_error, console

ROOT = Path(__file__).resolve().parent.parent


def _return(kind: str, p: float, won: bool = False) -> float:
    """The return of a 5-turn swe episode whose submission (the last turn) earned p."""
    return sum(rewards.turn_rewards(kind, [0.0] * 4 + [p], 1.0, won, [True] * 5))


def test_the_swe_config_trains_on_the_reward_as_given():
    cfg = RunConfig.load(ROOT / "configs" / "swe.yaml")
    cfg.validate()
    assert cfg.reward.kind == "env" and cfg.algo.advantage == "grpo" and cfg.algo.group_size >= 2
    ratios = [0.3, 0.6, 0.7, 0.9, 0.98]
    env = [_return(cfg.reward.kind, p) for p in ratios]
    assert env == pytest.approx(ratios) and env == sorted(env)  # the order of pass ratios is kept
    # negative control: dense caps a non-won total at 1 - p/2 (its one positive step), an order that falls above 2/3
    dense = [_return("dense", p) for p in ratios]
    assert dense[3] == pytest.approx(1 - 0.9 / 2) and dense[4] < dense[3] < dense[2]
    assert _return("dense", 0.98) < _return("dense", 0.6)


class WorkStarted(AssertionError):
    """A tripwire fired: the run got past the reward check into its env pool or its model."""


@pytest.fixture
def swe_games(tmp_path):
    """A swe game set as `agentrl make-games swe` lays it out (manifest.json, tasks/<id>/{task.json, repo/}), without
    the sandbox: the reward check reads the manifest's family only."""
    from agentrl_lib.envs.base import GameRecord, write_manifest

    root = tmp_path / "swe-games"
    task = root / "tasks" / "toolz__planted-0"
    (task / "repo").mkdir(parents=True)
    (task / "task.json").write_text("{}")
    write_manifest(root, "swe", [GameRecord(str(task), task.name, 0, 1.0, ["```bash\nsubmit\n```"])],
                   {"reward": "pass_ratio", "level": 1})
    return root


@pytest.fixture
def tripwires(monkeypatch):
    """Env pools and model loading fail the test if reached (the refusal must come first)."""
    import agentrl_lib.trainer as trainer
    import agentrl_lib.trainer_parts as trainer_parts

    def fire(what):
        def f(*args, **kwargs):
            raise WorkStarted(f"{what} started before reward.kind was checked")
        return f

    monkeypatch.setattr(trainer, "open_pool", fire("the env pool"))
    monkeypatch.setattr(trainer_parts, "load_start_policy", fire("loading the model"))


def test_dense_on_swe_games_is_refused_before_anything_loads_python_api(swe_games, tripwires, tmp_path):
    """run_rl with reward.kind dense on swe games: one ConfigError line naming the kinds to use instead, raised before
    the env pool, the model or the run dir lock. Control: reward.kind env on the same games passes the check and
    reaches the env pool (the tripwire)."""
    from agentrl_lib.run import run_rl

    cfg = RunConfig(env=EnvConfig(games=str(swe_games), max_turns=5), reward=RewardConfig(kind="dense"))
    with pytest.raises(ConfigError) as e:
        run_rl(cfg, tmp_path / "run", progress=False)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("reward.kind dense (--reward dense) ") and "swe games" in msg
    assert "no-op scores above a partial fix" in msg and "--reward env" in msg and "pass_ratio" in msg
    assert not (tmp_path / "run").exists()  # no lock, no config.yaml
    for kind in ("env", "sparse"):  # the kinds it names instead pass the check and go on to the envs
        with pytest.raises(WorkStarted, match="env pool"):
            run_rl(RunConfig(env=cfg.env, reward=RewardConfig(kind=kind)), tmp_path / f"run-{kind}", progress=False)


def test_dense_on_swe_games_is_refused_in_one_line_by_the_cli(swe_games, tripwires, tmp_path, capsys):
    from agentrl_lib.cli import main

    argv = ["train", "--algo", "grpo", "--games", str(swe_games), "--reward", "dense", "--out", str(tmp_path / "r")]
    rc = main(argv)
    out, err = capsys.readouterr()
    assert_one_clear_error(rc, out, err, "train", ["reward.kind dense", "swe games", "--reward env", "resolved"])
    assert rc == 2 and not (tmp_path / "r").exists()
    # the base config of the swe sweep with its reward overridden: refused the same way
    rc = main(["train", "--config", str(ROOT / "configs" / "swe.yaml"), "--games", str(swe_games), "--eval-games",
               str(swe_games), "--reward", "dense", "--out", str(tmp_path / "r2")])
    out, err = capsys.readouterr()
    assert_one_clear_error(rc, out, err, "train", ["reward.kind dense", "--reward env"])


@pytest.mark.subprocess
def test_dense_on_swe_games_console_script_prints_one_line(swe_games, tmp_path):
    """The installed console script: exit 2, one `agentrl train: error:` line on stderr, no traceback."""
    r = console(tmp_path, "train", "--games", str(swe_games), "--reward", "dense", "--out", str(tmp_path / "r"))
    assert_one_clear_error(r.returncode, r.stdout, r.stderr, "train",
                           ["reward.kind dense", "swe games", "--reward env"])
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1


def test_a_sweep_with_dense_on_swe_games_is_refused_before_its_first_run(swe_games, tmp_path):
    from agentrl_lib.sweep import run_sweep

    ran = []
    base = RunConfig(env=EnvConfig(games=str(swe_games), max_turns=5), reward=RewardConfig(kind="env"))
    with pytest.raises(ConfigError, match=r"cell .*dense.*: reward.kind dense \(--reward dense\) does not suit"):
        run_sweep(base, ["reward.kind=env,dense"], "0", tmp_path / "r.jsonl", eval_games=str(swe_games),
                  run=lambda *a, **k: ran.append(a), progress=False, warn=lambda m: None)
    assert ran == [] and not (tmp_path / "r.jsonl").exists()


def cfg_turns_tokens() -> tuple[int, int]:
    cfg = RunConfig.load(ROOT / "configs" / "swe.yaml")
    return cfg.env.max_turns, cfg.train.max_new_tokens


@pytest.mark.subprocess
def test_regenerate_swe_dry_run_plans_the_part_within_budget():
    out = subprocess.run([sys.executable, str(ROOT / "results" / "regenerate.py"), "swe", "--dry-run"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout
    hours = float(re.search(r"swe part: about ([\d.]+) hours", text).group(1))
    assert 0 < hours <= 4.2 or "recorded" in text
    sweeps = [ln for ln in text.splitlines() if " sweep --base configs/swe.yaml" in ln]
    kinds = {re.search(r"env\.swe_reward=(\w+)", ln).group(1) for ln in sweeps}
    seeds = {int(re.search(r"--seeds (\d+)", ln).group(1)) for ln in sweeps}
    if sweeps:
        assert kinds == {"pass_ratio", "resolved"} and seeds == {0, 1, 2}
    # SFT and the stage evaluations run with the sweep's turn limit (stated in every swe prompt) and reply length
    turns, tokens = cfg_turns_tokens()
    sfts = [ln for ln in text.splitlines() if " sft --games games/swe-train" in ln]
    assert all(f"--max-turns {turns}" in ln for ln in sfts)
    evals = [ln for ln in text.splitlines() if " eval --model " in ln and "swe-heldout" in ln]
    assert all(f"--max-turns {turns} --max-new-tokens {tokens}" in ln for ln in evals)
    assert sfts or evals or "recorded" in text
    held = [ln for ln in text.splitlines() if "make-games swe" in ln and "heldout" in ln]
    assert all("--split valid_unseen" in ln for ln in held)
    assert all("--split" not in ln for ln in text.splitlines() if "make-games swe" in ln and "swe-train" in ln)


def _records(pass_ratio, resolved):
    return [{"cell": {"env.swe_reward": kind}, "seed": s, "base_hash": "b", "eval": {"success_rate": v}, "steps": []}
            for kind, vals in (("pass_ratio", pass_ratio), ("resolved", resolved)) for s, v in enumerate(vals)]


@pytest.mark.parametrize("pass_ratio,resolved,verdict", [
    ([0.25, 0.375, 0.25, 0.3], [0.0, 0.0, 0.125, 0.05], "agrees"),
    ([0.0, 0.0, 0.125, 0.05], [0.25, 0.375, 0.25, 0.3], "disagrees"),
    ([0.25, 0.375, 0.25], [0.0, 0.0, 0.125], "cannot tell at this scale"),  # 3 seeds: t(2) = 4.3 keeps 0 inside
    ([0.0, 0.0, 0.0], [0.0, 0.0, 0.0], "a floor"),
    ([0.25], [0.0], "cannot tell yet"),
])
def test_findings_swe_row_follows_the_interval(pass_ratio, resolved, verdict):
    from agentrl_lib import findings as lib
    from experiments import findings_page as findings

    row = lib.verdicts("06_swe", results={"swe": _records(pass_ratio, resolved)})[0]
    assert row.verdict.startswith(verdict)
    line = next(ln for ln in findings.findings_table().splitlines() if ln.startswith("| SWE:"))
    assert "22%" in line and "4.2%" in line and "06_swe" in line
