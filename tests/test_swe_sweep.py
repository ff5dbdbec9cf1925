"""The swe sweep around chapter 06: configs/swe.yaml trains on the submission's reward as the env computes it
(reward.kind pass_ratio, one of the family's own kinds; dense's win cap inverts pass ratios above 2/3, the negative
control), and a run or sweep with reward.kind dense (or sparse, env) on swe games is refused in one line before any
model loads (Python API, the CLI in-process and as a console script, the sweep); the second selector it replaced
(env.swe_reward, --swe-reward) is answered with one line, and the records made with it read as reward.kind cells;
`results/regenerate.py swe --dry-run` plans the part within its budget with train and held-out sets apart, SFT and
evaluations with the sweep's turns and tokens; and results/findings.py's SWE row follows the interval."""
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
    """The return of a 5-turn swe episode whose submission (the last turn) earned p (in the run's kind)."""
    from agentrl_lib.envs.swe import REWARD_KINDS

    return sum(rewards.turn_rewards(kind, [0.0] * 4 + [p], 1.0, won, [True] * 5, env_kinds=REWARD_KINDS))


def test_the_swe_config_trains_on_the_reward_as_given():
    cfg = RunConfig.load(ROOT / "configs" / "swe.yaml")
    cfg.validate()
    assert cfg.reward.kind == "pass_ratio" and cfg.algo.advantage == "grpo" and cfg.algo.group_size >= 2
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
    the env pool, the model or the run dir lock; so are sparse and env, which swe's own kinds name. Control: each of
    swe's kinds on the same games passes the check and reaches the env pool (the tripwire)."""
    from agentrl_lib.run import run_rl

    cfg = RunConfig(env=EnvConfig(games=str(swe_games), max_turns=5), reward=RewardConfig(kind="dense"))
    with pytest.raises(ConfigError) as e:
        run_rl(cfg, tmp_path / "run", progress=False)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("reward.kind dense (--reward dense) ") and "swe games" in msg
    assert "no-op scores above a partial fix" in msg and "--reward pass_ratio, resolved or relative" in msg
    assert not (tmp_path / "run").exists()  # no lock, no config.yaml
    for kind, why in (("sparse", "exactly resolved"), ("env", "the kind the run names"), ("binary", "computes")):
        with pytest.raises(ConfigError, match=why) as e:
            run_rl(RunConfig(env=cfg.env, reward=RewardConfig(kind=kind)), tmp_path / "run", progress=False)
        assert "\n" not in str(e.value) and "--reward pass_ratio, resolved or relative" in str(e.value)
    for kind in ("pass_ratio", "resolved", "relative"):  # the kinds it names instead pass and go on to the envs
        with pytest.raises(WorkStarted, match="env pool"):
            run_rl(RunConfig(env=cfg.env, reward=RewardConfig(kind=kind)), tmp_path / f"run-{kind}", progress=False)


def test_dense_on_swe_games_is_refused_in_one_line_by_the_cli(swe_games, tripwires, tmp_path, capsys):
    from agentrl_lib.cli import main

    argv = ["train", "--algo", "grpo", "--games", str(swe_games), "--reward", "dense", "--out", str(tmp_path / "r")]
    rc = main(argv)
    out, err = capsys.readouterr()
    assert_one_clear_error(rc, out, err, "train", ["reward.kind dense", "swe games", "--reward pass_ratio", "resolved"])
    assert rc == 2 and not (tmp_path / "r").exists()
    # the base config of the swe sweep with its reward overridden: refused the same way
    rc = main(["train", "--config", str(ROOT / "configs" / "swe.yaml"), "--games", str(swe_games), "--eval-games",
               str(swe_games), "--reward", "dense", "--out", str(tmp_path / "r2")])
    out, err = capsys.readouterr()
    assert_one_clear_error(rc, out, err, "train", ["reward.kind dense", "--reward pass_ratio"])


@pytest.mark.subprocess
def test_dense_on_swe_games_console_script_prints_one_line(swe_games, tmp_path):
    """The installed console script: exit 2, one `agentrl train: error:` line on stderr, no traceback."""
    r = console(tmp_path, "train", "--games", str(swe_games), "--reward", "dense", "--out", str(tmp_path / "r"))
    assert_one_clear_error(r.returncode, r.stdout, r.stderr, "train",
                           ["reward.kind dense", "swe games", "--reward pass_ratio"])
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1


def test_a_sweep_with_dense_on_swe_games_is_refused_before_its_first_run(swe_games, tmp_path):
    from agentrl_lib.sweep import run_sweep

    ran = []
    base = RunConfig(env=EnvConfig(games=str(swe_games), max_turns=5), reward=RewardConfig(kind="pass_ratio"))
    with pytest.raises(ConfigError, match=r"cell .*dense.*: reward.kind dense \(--reward dense\) does not suit"):
        run_sweep(base, ["reward.kind=pass_ratio,dense"], "0", tmp_path / "r.jsonl", eval_games=str(swe_games),
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
    kinds = {re.search(r"reward\.kind=(\w+)", ln).group(1) for ln in sweeps}
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
    return [{"cell": {"reward.kind": kind}, "seed": s, "base_hash": "b", "eval": {"success_rate": v}, "steps": []}
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


# ---------------------------------------------------------------------------------------------------- one selector

def test_the_old_swe_records_read_as_reward_kind_cells_with_the_same_numbers(monkeypatch):
    """results/swe.jsonl was written with the second selector (cells env.swe_reward, configs with reward.kind env):
    read through the library (records.upgrade_record) its records are the cells reward.kind = pass_ratio / resolved,
    with the numbers the raw lines hold per old cell, and the base config a run planned now from configs/swe.yaml
    has (so the sweep counts them done). Negative control: without the upgrade the old configs are refused by
    RunConfig.from_dict and no record answers the new cell."""
    import json

    from agentrl_lib import records
    from agentrl_lib.report import cell

    raw = [json.loads(line) for line in (ROOT / "results" / "swe.jsonl").read_text().splitlines()]
    assert raw and all(set(r["cell"]) == {"env.swe_reward"} for r in raw)  # the file as committed: the old key
    swe = records.load_results("swe")
    assert [r["cell"] for r in swe] == [{"reward.kind": r["cell"]["env.swe_reward"]} for r in raw]
    base = RunConfig.load(ROOT / "configs" / "swe.yaml")
    base.model.name = raw[0]["config"]["model"]["name"]  # the sweep's SFT start
    for rec, old in zip(swe, raw):
        assert rec["config"]["reward"]["kind"] == old["cell"]["env.swe_reward"]
        assert "swe_reward" not in rec["config"]["env"]
        assert rec["eval"] == old["eval"] and rec["steps"] == old["steps"] and rec["evals"] == old["evals"]
        planned = RunConfig.from_dict(base.to_dict())
        planned.reward.kind, planned.train.seed = rec["cell"]["reward.kind"], rec["seed"]
        assert records.record_base(rec) == records.base_key(planned, rec["cell"])
    for kind in ("pass_ratio", "resolved"):
        for metric in ("eval.success_rate", "eval.mean_score_frac"):
            c = cell(swe, metric=metric, **{"reward.kind": kind})
            key = metric.split(".")[1]
            want = {r["seed"]: r["eval"][key] for r in raw if r["cell"]["env.swe_reward"] == kind}
            assert c.n == 3 and c.outcomes == pytest.approx(want)
    # negative control: the upgrade left out
    monkeypatch.setattr(records, "upgrade_record", lambda r: r)
    stale = records.load_results("swe")
    with pytest.raises(ConfigError, match="env.swe_reward"):
        records.record_base(stale[0])
    assert not [r for r in stale if r["cell"].get("reward.kind") == "pass_ratio"]


def test_fold_swe_reward_maps_each_old_setting_to_the_kind_it_trained_on():
    """config.fold_swe_reward (records, run dirs): env + K → K; sparse + K → resolved (the same rewards:
    tests/test_swe.py); unset, or another kind → dropped, kind kept. Control: a config without the key is returned
    as is."""
    from agentrl_lib.config import fold_swe_reward

    def fold(kind, swe_reward):
        out = fold_swe_reward({"env": {"max_turns": 5, "swe_reward": swe_reward}, "reward": {"kind": kind}})
        assert out["env"] == {"max_turns": 5}
        return out["reward"]["kind"]

    assert [fold("env", k) for k in ("pass_ratio", "resolved", "relative")] == ["pass_ratio", "resolved", "relative"]
    assert {fold("sparse", k) for k in ("pass_ratio", "resolved", "relative")} == {"resolved"}
    assert fold("env", "") == "env" and fold("dense", "") == "dense" and fold("dense", "resolved") == "dense"
    assert fold_swe_reward({"env": {"swe_reward": "resolved"}})["reward"] == {}  # the default kind, dense, stays
    new = {"env": {"max_turns": 5}, "reward": {"kind": "resolved"}}
    assert fold_swe_reward(new) is new


def test_a_run_dir_written_with_env_swe_reward_resumes_on_the_folded_kind(tmp_path):
    """A run's config.yaml written before the fold reads as reward.kind K (rundir), the config a resume continues."""
    import yaml

    from agentrl_lib import rundir

    data = RunConfig().to_dict()
    data["env"]["swe_reward"], data["reward"]["kind"] = "resolved", "env"
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(data))
    cfg = rundir._load_complete(tmp_path / "config.yaml", None)
    assert cfg.reward.kind == "resolved" and not hasattr(cfg.env, "swe_reward")


@pytest.mark.parametrize("argv,words", [
    (["train", "--games", "g", "--out", "o", "--swe-reward", "resolved"], ["--reward resolved", "reward.kind"]),
    (["eval", "--games", "g", "--swe-reward=pass_ratio"], ["--reward pass_ratio"]),
    (["make-games", "swe", "--out", "g", "--swe-reward", "relative"], ["--reward relative", "no reward kind"]),
])
def test_the_swe_reward_flag_is_answered_with_what_to_use_instead(argv, words, capsys, monkeypatch):
    """--swe-reward is gone: one `agentrl CMD: error:` line naming --reward, exit 2, before anything runs.
    Negative control: without cli.retired_flag argparse answers with its usage and 'unrecognized arguments' (two
    lines that do not say what to use)."""
    from agentrl_lib import cli

    rc = cli.main(argv)
    out, err = capsys.readouterr()
    assert_one_clear_error(rc, out, err, argv[0], ["env.swe_reward (--swe-reward) is gone", *words])
    monkeypatch.setattr(cli, "retired_flag", lambda argv: "")
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and "unrecognized arguments" in err and "--reward" not in err.splitlines()[-1]


def test_a_config_naming_env_swe_reward_is_answered_in_one_line(swe_games, tmp_path, capsys):
    """An old config file (env.swe_reward with reward.kind env, as configs/swe.yaml was): `agentrl train --config`
    answers with one line naming the reward.kind to write; RunConfig.from_dict raises the same ConfigError."""
    from agentrl_lib.cli import main

    old = tmp_path / "old.yaml"
    old.write_text(f"env:\n  games: {swe_games}\n  swe_reward: resolved\nreward:\n  kind: env\n")
    rc = main(["train", "--config", str(old), "--out", str(tmp_path / "r")])
    out, err = capsys.readouterr()
    assert_one_clear_error(rc, out, err, "train", ["env.swe_reward", "reward.kind: resolved (--reward resolved)"])
    assert not (tmp_path / "r").exists()
    with pytest.raises(ConfigError, match=r"write reward.kind \(--reward\) pass_ratio"):
        RunConfig.from_dict({"env": {"swe_reward": ""}})


def test_swe_kinds_are_refused_on_other_families_games(tmp_path):
    """reward.kind pass_ratio names a reward only swe's env computes: on bandit games (or with no games to ask) the
    lookup refuses it in one line; the generic kinds still work there. Control: on swe games it resolves to the
    env's reward as given."""
    from agentrl_lib import rewards as rw
    from agentrl_lib.envs import get_family
    from agentrl_lib.parts import run_parts

    for family in (get_family("bandit"), None):
        with pytest.raises(ConfigError, match=r"reward.kind must be one of \['dense', 'env', 'sparse'\].*swe's"):
            run_parts(RunConfig(reward=RewardConfig(kind="pass_ratio")), family)
        assert run_parts(RunConfig(reward=RewardConfig(kind="sparse")), family).reward is rw.REWARD_KINDS["sparse"]
    assert run_parts(RunConfig(reward=RewardConfig(kind="pass_ratio")), get_family("swe")).reward is \
        rw.env_turn_rewards
