"""TensorBoard logging (agentrl_lib/tracking.py, `train.report_to`): the event files a run writes, read back with
TensorBoard's own reader, hold every numeric scalar of every metrics.jsonl row at the row's step; with the default
'none' no event file exists; a resumed run continues the same curves."""
import json
import math
import shutil

import pytest

from agentrl_lib import run
from agentrl_lib import trainer as trainer_mod
from agentrl_lib.config import AlgoConfig, ConfigError, EnvConfig, ModelConfig, RunConfig, TrainConfig
from agentrl_lib.envs.pool import SerialPool
from agentrl_lib.tracking import NoTracker, open_tracker, scalars

from helpers import ParityEnv, scripted_games

event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")


@pytest.fixture
def scripted(monkeypatch):
    monkeypatch.setattr(trainer_mod, "open_pool", lambda env_cfg, size, *_: SerialPool(size, factory=ParityEnv))


def _config(games, report_to: str, steps: int = 2) -> RunConfig:
    return RunConfig(env=EnvConfig(games=str(games), max_turns=2), algo=AlgoConfig.from_preset("ppo"),
                     model=ModelConfig(device="cpu"),
                     train=TrainConfig(steps=steps, games_per_step=1, max_new_tokens=4, temperature=1.0, seed=1,
                                       checkpoint_every=1, report_to=report_to))


def _jsonl(run_dir) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _events(run_dir) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value), ...]} as TensorBoard reads run_dir/tensorboard (every event file of the folder)."""
    acc = event_accumulator.EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _expected(rows: list[dict]) -> dict[str, list[tuple[int, float]]]:
    """metrics.jsonl's numeric values per key (null, lists and `step` itself left out)."""
    out: dict[str, list[tuple[int, float]]] = {}
    for row in rows:
        for key, value in row.items():
            if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                out.setdefault(key, []).append((row["step"], float(value)))
    return out


def _assert_same(events: dict, expected: dict) -> None:
    assert set(events) == set(expected), (set(events) ^ set(expected))
    for tag, want in expected.items():
        got = events[tag]
        assert [s for s, _ in got] == [s for s, _ in want], tag
        for (_, g), (_, w) in zip(got, want):  # TensorBoard stores float32
            assert math.isclose(g, w, rel_tol=1e-6, abs_tol=1e-30), (tag, g, w)


@pytest.mark.trains
def test_tensorboard_scalars_are_the_metrics_rows(tiny_model_dir, tmp_path, scripted):
    games = scripted_games(tmp_path / "games")
    run.run_rl(_config(games, "tensorboard"), tmp_path / "run", init=tiny_model_dir, progress=False)
    rows = _jsonl(tmp_path / "run")
    assert [r["step"] for r in rows] == [1, 2]
    assert len(list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*"))) == 1
    events, expected = _events(tmp_path / "run"), _expected(rows)
    assert {"success_rate", "return_mean", "entropy", "policy_loss", "value_loss", "step_seconds"} <= set(events)
    _assert_same(events, expected)


@pytest.mark.trains
def test_report_to_none_writes_no_event_file(tiny_model_dir, tmp_path, scripted):
    """Negative control: the default writes metrics.jsonl only, no tensorboard folder."""
    games = scripted_games(tmp_path / "games")
    run.run_rl(_config(games, "none"), tmp_path / "run", init=tiny_model_dir, progress=False)
    assert len(_jsonl(tmp_path / "run")) == 2
    assert not (tmp_path / "run" / "tensorboard").exists()
    assert not list((tmp_path / "run").rglob("events.out.tfevents.*"))


@pytest.mark.trains
def test_a_resumed_run_continues_the_curves(tiny_model_dir, tmp_path, scripted):
    """Steps 1-3, the last checkpoint removed (as if the run died after writing step 3's row), then resumed from
    step 2 up to step 4: TensorBoard shows one value per step, metrics.jsonl's (the redone step 3's, not the first
    one's, which the first event file still holds)."""
    games = scripted_games(tmp_path / "games")
    run_dir = tmp_path / "run"
    run.run_rl(_config(games, "tensorboard", steps=3), run_dir, init=tiny_model_dir, progress=False)
    first_step3 = _jsonl(run_dir)[2]
    (first_file,) = (run_dir / "tensorboard").glob("events.out.tfevents.*")
    shutil.rmtree(run_dir / "checkpoints" / "step_000003")
    run.run_rl(_config(games, "tensorboard", steps=4), run_dir, init=tiny_model_dir, resume=True, progress=False)
    rows = _jsonl(run_dir)
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert rows[2]["step_seconds"] != first_step3["step_seconds"]  # step 3 was redone
    assert len(list((run_dir / "tensorboard").glob("events.out.tfevents.*"))) == 2  # appended, not replaced
    _assert_same(_events(run_dir), _expected(rows))
    # control: the first file alone still holds the first step 3, which the folder's view no longer shows
    acc = event_accumulator.EventAccumulator(str(first_file))
    acc.Reload()
    assert [e.value for e in acc.Scalars("step_seconds")][2] == pytest.approx(first_step3["step_seconds"], rel=1e-6)


def test_scalars_keep_numbers_only():
    row = {"step": 3, "success_rate": 0.5, "episodes": 8, "entropy": float("nan"), "explained_variance": None,
           "alerts": [], "env_error_reasons": ["x"], "approx_kl": float("inf")}
    assert scalars(row) == {"success_rate": 0.5, "episodes": 8.0}


def test_report_to_is_not_part_of_a_sweep_identity():
    """Turning TensorBoard on in a sweep's base config does not make it redo recorded runs
    (records.EXECUTION_FIELDS)."""
    from agentrl_lib.records import base_key

    on = RunConfig(train=TrainConfig(report_to="tensorboard"))
    assert base_key(on, {}) == base_key(RunConfig(), {})
    assert base_key(RunConfig(train=TrainConfig(lr=3e-5)), {}) != base_key(RunConfig(), {})  # control


def test_only_the_main_process_writes_and_bad_values_are_refused(tmp_path):
    assert isinstance(open_tracker("tensorboard", tmp_path, is_main=False), NoTracker)
    with pytest.raises(ConfigError, match="report_to"):
        TrainConfig(report_to="wandb").validate()
