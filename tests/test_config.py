"""The run config (agentrl_lib/config.py) refuses bad values with errors that say what to fix: config values, YAML
files, games dirs, model paths; legacy `algo.name` configs load as their preset. The same refusals through the
command line are in test_cli.py."""
import json

import pytest
import yaml

from agentrl_lib import rundir
from agentrl_lib.checkpoint import CheckpointError
from agentrl_lib.config import AlgoConfig, ConfigError, EnvConfig, ModelConfig, RunConfig, TrainConfig
from agentrl_lib.envs.base import GameSetError, load_game_set
from agentrl_lib.model_paths import resolve_model_path
from agentrl_lib.parts import run_parts


@pytest.mark.parametrize("algo", ["grpo", "rloo"])
def test_group_baselines_need_two_episodes_per_group(algo):
    with pytest.raises(ConfigError, match="group_size >= 2"):
        run_parts(RunConfig(algo=AlgoConfig.from_preset(algo, group_size=1)))
    run_parts(RunConfig(algo=AlgoConfig.from_preset("ppo", group_size=1)))  # PPO's critic needs no group


def test_unknown_algorithm_and_reward_and_turns():
    with pytest.raises(ConfigError, match="algo.advantage must be one of"):
        run_parts(RunConfig(algo=AlgoConfig(advantage="dpo")))
    with pytest.raises(ConfigError, match=r"model.generator must be one of \['hf', 'hf-live', 'vllm'\]"):
        run_parts(RunConfig(model=ModelConfig(generator="hf_live")))
    with pytest.raises(ConfigError, match=r"reward.kind must be one of \['dense', 'env', 'sparse'\]"):
        run_parts(RunConfig.from_dict({"reward": {"kind": "shaped"}}))
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


# ---------------------------------------------------------------------------- item 6: temperature 0 in training
def test_training_temperature_zero_is_refused_but_greedy_eval_is_fine():
    with pytest.raises(ConfigError, match="train.temperature must be > 0"):
        TrainConfig(temperature=0.0).validate()
    TrainConfig(eval_temperature=0.0).validate()


def test_legacy_algo_name_loads_as_its_preset(tmp_path):
    """Run dirs written before the rename hold `algo: {name: ppo}`: they load, resume, and keep their meaning."""
    assert RunConfig.from_dict({"algo": {"name": "grpo", "group_size": 2}}).algo == AlgoConfig(advantage="grpo",
                                                                                              group_size=2)
    with pytest.raises(ConfigError, match="algo.name .* must be one of"):
        RunConfig.from_dict({"algo": {"name": "dpo"}})
    with pytest.raises(ConfigError, match="contradicts algo.advantage"):
        RunConfig.from_dict({"algo": {"name": "ppo", "advantage": "rloo"}})
    old = RunConfig(env=EnvConfig(games="g")).to_dict()
    old["algo"] = {"name": "ppo", **{k: v for k, v in old["algo"].items() if k != "advantage"}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(old, sort_keys=False))
    cfg = rundir.resume_config(tmp_path)
    assert cfg.algo.advantage == "gae" and cfg.algo.label == "ppo"
    # the completeness check against a checkpoint's copy (every key present) reads the upgraded keys
    assert rundir._load_complete(tmp_path / "config.yaml", cfg.to_dict()) == cfg
    # negative control: a new-format file that lost algo.advantage is still incomplete
    del old["algo"]["name"]
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(old, sort_keys=False))
    with pytest.raises(CheckpointError, match="algo.advantage"):
        rundir._load_complete(tmp_path / "config.yaml", cfg.to_dict())


def test_each_closed_set_the_config_checks_is_the_registry_it_names():
    """config_values keeps the closed sets torch-free; the modules that act on a value keep their own registry or
    tuple. They must name the same values, or a config that validates fails at lookup (or the reverse)."""
    from agentrl_lib import config_values, losses, prompts, tracking
    from agentrl_lib.envs import swe

    assert tuple(tracking.TRACKERS) == config_values.REPORT_TO
    assert losses.LOSS_AGGS == config_values.LOSS_AGGS
    assert prompts.ACTION_FORMATS == config_values.ACTION_FORMATS
    from agentrl_lib.config import SWE_KINDS_TEXT  # the swe kinds the env.swe_reward message names: swe's own
    assert [k for k in swe.REWARD_KINDS if k in SWE_KINDS_TEXT] == list(swe.REWARD_KINDS)
    with pytest.raises(ConfigError, match=r"algo.tis must be one of \('auto', 'on', 'off'\)"):
        AlgoConfig(tis="sometimes").validate()


def test_closed_sets_are_typed_once_and_everything_else_derives_from_the_annotation():
    """Each closed field is annotated with a Literal of config_values; its values tuple, its check (check_closed),
    config.CHOICES and the CLI's choices are all read from that annotation."""
    import dataclasses
    from typing import Literal, get_args, get_origin

    from agentrl_lib import config, config_values, flags

    aliases = {n for n in dir(config_values) if get_origin(getattr(config_values, n)) is Literal}
    typed = {f"{s}.{f.name}" for s, cls in {**config.SECTIONS, "sft": config.SFTConfig}.items()
             for f in dataclasses.fields(cls) if f.type in aliases}  # annotations are strings (PEP 563)
    assert set(config.CHOICES) == {"env.action_format", "algo.tis", "algo.old_logprobs",
                                   "algo.loss_agg", "model.dtype", "train.mixed_precision", "train.report_to",
                                   "sft.mixed_precision"}
    assert typed == set(config.CHOICES)
    assert config.CHOICES["algo.tis"] == config_values.TIS_MODES == get_args(config_values.TisMode)
    for key, values in config.CHOICES.items():
        assert flags.choices_for(key) == values, key  # the CLI and sweep grids offer exactly these
        section, _, name = key.partition(".")
        cls = {**config.SECTIONS, "sft": config.SFTConfig}[section]
        for value in values:  # every value passes the derived check ...
            config_values.check_closed(section, dataclasses.replace(cls(), **{name: value}))
        with pytest.raises(ConfigError, match=rf"^{key} must be one of"):  # ... and one outside fails it
            config_values.check_closed(section, dataclasses.replace(cls(), **{name: "typo"}))
    # negative control: a field typed str, not Literal, has no closed set, so nothing checks it
    @dataclasses.dataclass
    class Loose:
        kind: str = "dense"
    assert config_values.closed_fields(Loose) == {}
    config_values.check_closed("loose", Loose(kind="typo"))
