"""The metrics schema (agentrl_lib/metrics.py): every key a training step logs is declared in METRICS, every key that
applies to the estimator is logged, every metrics.jsonl row has every key, and the book's glossary page is the
rendered one."""
import json
import re
import warnings
from pathlib import Path

import pytest

import agentrl_lib
from agentrl_lib import metrics
from agentrl_lib.config import AlgoConfig, EnvConfig, ModelConfig, RewardConfig, RunConfig, TrainConfig
from agentrl_lib.envs.pool import SerialPool
from agentrl_lib.metrics import METRICS, UndocumentedMetricWarning, applies, complete_row, glossary_markdown
from agentrl_lib.trainer import Trainer

from helpers import BrokenEnv, ParityEnv, scripted_games

BOOK = Path(agentrl_lib.__path__[0]).parent / "book"


def _config(games, algo, **train):
    # tis "on" and kl_coef > 0: every conditional key is computed, so "applies" can be checked on every key
    return RunConfig(env=EnvConfig(games=str(games), max_turns=2), reward=RewardConfig(kind="dense"),
                     algo=AlgoConfig.from_preset(algo, group_size=4, kl_coef=0.01, tis="on"),
                     model=ModelConfig(device="cpu"),
                     train=TrainConfig(**{"steps": 1, "games_per_step": 2, "minibatch_size": 8, "lr": 1e-3,
                                          "max_new_tokens": 6, "temperature": 1.0, "seed": 1, **train}))


@pytest.mark.trains
@pytest.mark.parametrize("algo", ["ppo", "grpo", "rloo"])
def test_a_step_logs_exactly_the_declared_keys(algo, tiny_model_dir, tmp_path):
    cfg = _config(scripted_games(tmp_path / "games"), algo)
    trainer = Trainer(cfg, tmp_path / "run", init=tiny_model_dir, pool=SerialPool(8, factory=ParityEnv),
                      progress=False)
    try:
        row = trainer.step(0)
    finally:
        trainer.close()
    needs_critic = trainer.value_head is not None
    assert needs_critic == (algo == "ppo")
    assert row["skipped_update"] == 0.0, "the step must update, or the update's keys are not logged"
    assert metrics.undocumented(row) == [], "logged but not declared in METRICS"
    bf16_only = {k for k, m in METRICS.items() if m.only_when.startswith("train.mixed_precision bf16")}  # fp32 here
    missing = [k for k in METRICS if applies(k, needs_critic) and k not in row and k not in metrics.TRAIN_LOOP_KEYS
               and k not in bf16_only]
    assert bf16_only == {"bf16_logprob_gap"}
    assert missing == [], f"declared for {algo} but not logged"
    if not needs_critic:
        assert not any(k in row for k in METRICS if METRICS[k].logged_by == metrics.CRITIC)
    full = complete_row(row, needs_critic, strict=True)
    assert list(full) == list(row) + [k for k in METRICS if k not in row] and set(full) == set(METRICS)
    assert all(full[k] == row[k] or full[k] is row[k] for k in row), "complete_row changed a value"


@pytest.mark.trains
def test_every_row_of_metrics_jsonl_has_every_key(tiny_model_dir, tmp_path):
    """Also the row of a step where every episode failed (no update): the keys not computed are null."""
    games = scripted_games(tmp_path / "games")
    cfg = RunConfig(env=EnvConfig(games=str(games), max_turns=2, max_env_error_frac=1.0),
                    algo=AlgoConfig.from_preset("rloo", group_size=2), model=ModelConfig(device="cpu"),
                    train=TrainConfig(steps=2, games_per_step=1, max_new_tokens=4))
    trainer = Trainer(cfg, tmp_path / "run", init=tiny_model_dir, pool=SerialPool(2, factory=BrokenEnv),
                      progress=False)
    try:
        rows = trainer.train()
    finally:
        trainer.close()
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == 2 and all(set(r) == set(METRICS) for r in lines + rows)
    assert lines[0]["skipped_update"] == 1.0 and lines[0]["grad_norm"] is None and lines[0]["value_loss"] is None
    assert lines[0]["env_errors"] == 2


@pytest.mark.trains
def test_control_an_undocumented_key_is_caught(tiny_model_dir, tmp_path, monkeypatch):
    """Plant a key the schema does not declare: complete_row refuses it, and a training run fails in the tests."""
    with pytest.raises(ValueError, match="mystery_metric"):
        complete_row({"step": 1, "mystery_metric": 0.5}, needs_critic=False, strict=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert complete_row({"mystery_metric": 0.5}, needs_critic=False)["mystery_metric"] == 0.5  # run time: warn
    assert any(issubclass(w.category, UndocumentedMetricWarning) for w in caught)

    step = Trainer.step
    monkeypatch.setattr(Trainer, "step", lambda self, i: {**step(self, i), "mystery_metric": 1.0})
    cfg = _config(scripted_games(tmp_path / "games"), "grpo")
    trainer = Trainer(cfg, tmp_path / "run", init=tiny_model_dir, pool=SerialPool(8, factory=ParityEnv),
                      progress=False)
    try:
        with pytest.raises(UndocumentedMetricWarning, match="mystery_metric"):  # pyproject: warning → error
            trainer.train()
    finally:
        trainer.close()


def test_every_metric_is_documented():
    for m in METRICS.values():
        assert m.formula and m.healthy and m.failure, m.name
        assert m.logged_by in (metrics.ALL, metrics.CRITIC), m.name
    assert {"value_loss", "explained_variance", "value_grad_norm", "value_clip_frac"} == \
        {k for k, m in METRICS.items() if m.logged_by == metrics.CRITIC}


def test_glossary_renders_one_row_per_key():
    table = glossary_markdown()
    rows = table.splitlines()[2:]
    assert [re.match(r"\| `([a-z0-9_]+)`", r).group(1) for r in rows] == list(METRICS)
    assert all(r.count(" | ") == 5 for r in rows), "a cell holds an unescaped |"
    assert glossary_markdown(["entropy"]).count("\n") == 2
    with pytest.raises(KeyError):
        glossary_markdown(["no_such_key"])


def test_book_glossary_page_is_the_rendered_glossary():
    """The glossary is rendered when the book is built (book/build.py), never pasted: the page holds
    glossary_markdown(), and the command-line page, where README's copy of the table was, links to it."""
    from experiments import book_build as build

    assert glossary_markdown() in build.generated_pages(set())["glossary"]
    assert "glossary" in build.BACK_MATTER
    assert "](glossary.md)" in (BOOK / "command_line.md").read_text()
