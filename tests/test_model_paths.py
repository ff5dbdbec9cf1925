"""agentrl_lib/model_paths.py's cheap functions: model-path resolution (run dirs, checkpoints, local dirs, Hub ids,
typos) and adapters. The Hub checks are tested in test_cli.py (its probes of an unreachable or offline Hub)."""
from __future__ import annotations

import pytest

from agentrl_lib import model_paths

from helpers import write_model


# ---------------------------------------------------------------------------------------------- model paths
def test_is_model_dir_knows_models_and_adapters(tmp_path):
    assert model_paths.is_model_dir(write_model(tmp_path / "full")) is True
    assert model_paths.is_model_dir(write_model(tmp_path / "lora", adapter_rank=8)) is True
    (tmp_path / "empty").mkdir()
    assert model_paths.is_model_dir(tmp_path / "empty") is False
    assert model_paths.is_model_dir(tmp_path / "absent") is False


def test_resolve_model_path_of_runs_checkpoints_dirs_and_hub_ids(tmp_path):
    run = tmp_path / "run"
    write_model(run / "checkpoints" / "step_000002" / "policy")
    (run / "checkpoints" / "latest").write_text("step_000002\n")
    sft = tmp_path / "sft"
    write_model(sft / "policy", adapter_rank=4)
    plain = write_model(tmp_path / "plain")
    assert model_paths.resolve_model_path(str(run)) == str(run / "checkpoints" / "step_000002" / "policy")
    assert model_paths.resolve_model_path(str(run / "checkpoints" / "step_000002")) == str(
        run / "checkpoints" / "step_000002" / "policy")
    assert model_paths.resolve_model_path(str(sft)) == str(sft / "policy")
    assert model_paths.resolve_model_path(str(plain)) == str(plain)
    assert model_paths.resolve_model_path("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"
    assert model_paths.resolve_model_path("gpt2") == "gpt2"


@pytest.mark.parametrize("name", ["./missing", "/no/such/dir", "~/no-such-model-dir", "a/b/c", "has space"])
def test_resolve_model_path_refuses_local_paths_that_do_not_exist(name):
    with pytest.raises(FileNotFoundError):
        model_paths.resolve_model_path(name)


def test_resolve_model_path_refuses_a_dir_without_a_model(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError):
        model_paths.resolve_model_path(str(tmp_path / "empty"))


def test_resolve_model_path_takes_a_typo_under_an_existing_dir_for_a_local_path(tmp_path, monkeypatch):
    (tmp_path / "runs" / "ppo1").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError):  # `runs/ppo2` has the Hub's org/name form, but runs/ is here
        model_paths.resolve_model_path("runs/ppo2")


def test_adapters_and_their_rank(tmp_path):
    lora = write_model(tmp_path / "lora", adapter_rank=8)
    full = write_model(tmp_path / "full")
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "adapter_config.json").write_text("{not json")
    assert (model_paths.is_adapter(str(lora)), model_paths.adapter_rank(str(lora))) == (True, 8)
    assert (model_paths.is_adapter(str(full)), model_paths.adapter_rank(str(full))) == (False, None)
    assert (model_paths.is_adapter(str(damaged)), model_paths.adapter_rank(str(damaged))) == (True, None)
    assert model_paths.is_adapter(str(tmp_path / "absent")) is False
    assert model_paths.is_adapter(model_paths.EMBEDDED) is False  # without converting the embedded model
