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


# ------------------------------------------------------------------ every config field is a documented flag
import argparse  # noqa: E402
import dataclasses  # noqa: E402
import re  # noqa: E402

from agentrl_lib import cli  # noqa: E402
from agentrl_lib.config import ALGO_PRESETS, SECTIONS  # noqa: E402


def _help_problems(flags) -> list[str]:
    """Flags whose help is empty or gives no range, unit or example: a digit, 'e.g.' or one of its choices."""
    bad = []
    for f in flags:
        if not f.help.strip():
            bad.append(f"{f.key}: no help (give the field a docstring in config.py)")
        elif not (re.search(r"\d", f.help) or "e.g." in f.help or
                  (f.choices and any(str(c) in f.help for c in f.choices))):
            bad.append(f"{f.key}: help gives no range, unit or example: {f.help!r}")
    return bad


def test_every_config_field_is_a_train_flag_with_help():
    flags = cli.config_flags()
    assert {f.key for f in flags} == {f"{s}.{g.name}" for s, cls in SECTIONS.items() for g in dataclasses.fields(cls)}
    assert _help_problems(flags) == []
    spellings = [x for f in flags for x in f.flags]
    assert len(spellings) == len(set(spellings)), "two fields share a flag"
    text = cli.build_parser()._subparsers._group_actions[0].choices["train"].format_help()
    for f in flags:
        assert f.flags[0] in text, f"{f.flags[0]} missing from agentrl train --help"


def test_control_a_field_without_docstring_fails(monkeypatch):
    @dataclasses.dataclass
    class Undocumented:
        documented: int = 3
        """A number of things (1-5)."""
        bare: int = 0

    monkeypatch.setitem(cli.SECTIONS, "extra", Undocumented)
    problems = _help_problems(cli.config_flags(("extra",)))
    assert len(problems) == 1 and problems[0].startswith("extra.bare: no help")


def test_golden_spellings_and_aliases_parse():
    """The flags scripts use (the golden regression script, README) keep working, and aliases reach the same field."""
    argv = ["train", "--out", "o", "--games", "g", "--init", "m", "--algo", "ppo", "--reward", "dense", "--steps", "2",
            "--games-per-step", "1", "--group-size", "4", "--max-turns", "4", "--epochs", "2", "--minibatch-size",
            "2", "--kl-coef", "0.05", "--keep-top-std", "0.5", "--lora-rank", "4", "--seed", "3", "--lr", "1e-5",
            "--step-timeout", "9", "--no-process-pool", "--gradient-checkpointing"]
    cfg = cli.build_config(cli.build_parser().parse_args(argv))
    assert (cfg.env.games, cfg.model.name, cfg.reward.kind, cfg.train.steps, cfg.algo.kl_coef, cfg.model.lora_rank,
            cfg.env.step_timeout_s, cfg.env.process_pool, cfg.train.gradient_checkpointing) == \
        ("g", "m", "dense", 2, 0.05, 4, 9.0, False, True)
    alias = cli.build_parser().parse_args(["train", "--out", "o", "--model", "m2", "--step-timeout-s", "7",
                                           "--backend", "vllm"])
    assert (getattr(alias, "model.name"), getattr(alias, "env.step_timeout_s"), getattr(alias, "model.generator")) \
        == ("m2", 7.0, "vllm")
    evals = [cli.build_parser().parse_args(["eval", "--games", "g", f, "vllm"]) for f in ("--generator", "--backend")]
    assert [getattr(e, "model.generator") for e in evals] == ["vllm", "vllm"]


@pytest.mark.parametrize("value", ["-1e-5", "-1E-05", "-0.5", "-3", "-.5e2", "-inf"])
def test_negative_numbers_are_values(value):
    argv = cli.join_negative_numbers(["train", "--out", "o", "--lr", value, "--kl-coef", value])
    a = cli.build_parser().parse_args(argv)
    assert getattr(a, "train.lr") == getattr(a, "algo.kl_coef") == float(value)
    assert cli.join_negative_numbers(["--lr", "-x"]) == ["--lr", "-x"]  # not a number: left to argparse


def test_control_argparse_alone_misreads_scientific_negatives():
    """Without join_negative_numbers argparse takes -1e-5 for a flag (the quirk the join fixes)."""
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["train", "--out", "o", "--lr", "-1e-5"])


def test_flags_override_config_file_and_presets_come_first(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("train: {steps: 7, lr: 2.0e-5}\nalgo: {advantage: rloo, group_size: 3}\nenv: {process_pool: false}\n")
    parse = cli.build_parser().parse_args
    cfg = cli.build_config(parse(["train", "--out", "o", "--config", str(p), "--lr", "3e-5"]))
    assert (cfg.train.steps, cfg.train.lr, cfg.algo.advantage, cfg.algo.group_size, cfg.env.process_pool) == \
        (7, 3e-5, "rloo", 3, False), "a flag not given keeps the file's value"
    cfg = cli.build_config(parse(["train", "--out", "o", "--config", str(p), "--algo", "ppo"]))
    assert dataclasses.asdict(cfg.algo).items() >= ALGO_PRESETS["ppo"].items() and cfg.algo.group_size == 3
    field, value = next(iter(ALGO_PRESETS["grpo"].items()))
    flag = next(f for f in cli.config_flags(("algo",)) if f.key == f"algo.{field}").flags[0]
    other = next(v for v in ALGO_PRESETS.values() if v != ALGO_PRESETS["grpo"])[field]
    cfg = cli.build_config(parse(["train", "--out", "o", "--algo", "grpo", flag, other]))
    assert getattr(cfg.algo, field) == other, "an explicit algo flag overrides the preset"


def test_unknown_config_key_is_refused_by_name(tmp_path, capsys):
    p = tmp_path / "c.yaml"
    p.write_text("train: {stpes: 3}\n")
    assert main(["train", "--config", str(p), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "stpes" in err and "valid keys" in err and len(err.strip().splitlines()) == 1


def test_eval_and_sft_share_the_env_flags():
    sub = cli.build_parser()._subparsers._group_actions[0].choices
    for cmd, flags in [("eval", ["--games", "--max-turns", "--show-admissible", "--no-show-inventory",
                                 "--step-timeout", "--no-process-pool", "--max-env-error-frac", "--no-check-games"]),
                       ("sft", ["--games", "--show-admissible", "--show-inventory"])]:
        text = sub[cmd].format_help()
        assert all(f in text for f in flags), cmd
    a = cli.build_parser().parse_args(["eval", "--games", "g", "--no-process-pool", "--step-timeout", "5"])
    env = EnvConfig(**cli.section_args(a, "env"))
    assert (env.games, env.process_pool, env.step_timeout_s, env.max_turns, env.check_games) == \
        ("g", False, 5.0, 8, True)
    assert isinstance(cli.build_parser(), argparse.ArgumentParser)
