"""Bad inputs give clear errors: config values, YAML files, CLI arguments, games dirs, model paths."""
import json

import pytest

from agentrl_lib.cli import main
from agentrl_lib.config import AlgoConfig, ConfigError, EnvConfig, RunConfig, TrainConfig
from agentrl_lib.envs.base import GameSetError, load_game_set
from agentrl_lib.models import resolve_model_path


@pytest.mark.parametrize("algo", ["grpo", "rloo"])
def test_group_baselines_need_two_episodes_per_group(algo):
    with pytest.raises(ConfigError, match="group_size >= 2"):
        RunConfig(algo=AlgoConfig.from_preset(algo, group_size=1))
    RunConfig(algo=AlgoConfig.from_preset("ppo", group_size=1))  # PPO's critic needs no group


def test_unknown_algorithm_and_reward_and_turns():
    with pytest.raises(ConfigError, match="algo.advantage must be one of"):
        RunConfig(algo=AlgoConfig(advantage="dpo"))
    with pytest.raises(ConfigError, match="reward.kind"):
        RunConfig.from_dict({"reward": {"kind": "shaped"}})
    with pytest.raises(ConfigError, match="max_turns must be >= 1"):
        RunConfig(env=EnvConfig(max_turns=0))
    with pytest.raises(ConfigError, match="train.steps"):
        RunConfig(train=TrainConfig(steps=0))


def test_yaml_round_trip(tmp_path):
    cfg = RunConfig(algo=AlgoConfig.from_preset("rloo", group_size=3), env=EnvConfig(games="g", max_turns=5))
    cfg.save(tmp_path / "c.yaml")
    assert RunConfig.load(tmp_path / "c.yaml") == cfg


@pytest.mark.parametrize("text,match", [
    ("algo: [1, 2", "not valid YAML"),
    ("algo:\n  nme: ppo\n", "unknown key"),
    ("optimizer:\n  lr: 1\n", "unknown config section"),
    ("train:\n  steps: many\n", "must be a number"),
    ("- a\n- b\n", "must be a mapping"),
])
def test_malformed_config_files(tmp_path, text, match):
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError, match=match):
        RunConfig.load(p)


def test_missing_empty_and_corrupt_games_dirs(tmp_path):
    with pytest.raises(GameSetError, match="does not exist"):
        load_game_set(tmp_path / "nope")
    with pytest.raises(GameSetError, match="no manifest.json"):
        load_game_set(tmp_path)
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(GameSetError, match="malformed"):
        load_game_set(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"family": "textworld", "games": []}))
    with pytest.raises(GameSetError, match="lists no games"):
        load_game_set(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"family": "textworld", "games": [
        {"path": "gone.z8", "name": "gone", "seed": 0, "max_score": 1, "walkthrough": []}]}))
    with pytest.raises(GameSetError, match="is missing"):
        load_game_set(tmp_path)


def test_model_path_that_does_not_exist(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        resolve_model_path(str(tmp_path / "no-such-model"))
    with pytest.raises(FileNotFoundError, match="holds no model"):
        resolve_model_path(str(tmp_path))
    assert resolve_model_path("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"


def test_cli_reports_errors_with_exit_code_2(tmp_path, capsys, cooking_games):
    assert main(["train", "--algo", "grpo", "--group-size", "1", "--games", str(cooking_games.root),
                 "--out", str(tmp_path / "r")]) == 2
    assert "group_size >= 2" in capsys.readouterr().err
    assert main(["eval", "--games", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["eval", "--games", str(cooking_games.root), "--model", str(tmp_path / "nomodel")]) == 2
    assert "does not exist" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("algo: {name: ppo\n")
    assert main(["train", "--config", str(bad), "--out", str(tmp_path / "r2")]) == 2
    assert "not valid YAML" in capsys.readouterr().err
    assert main(["train", "--out", str(tmp_path / "r3")]) == 2
    assert "no games" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["train", "--algo", "a2c", "--out", str(tmp_path / "r4")])
    assert e.value.code == 2
