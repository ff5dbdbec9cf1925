"""run_rl (agentrl_lib/run.py): one function trains a configuration and evaluates it; `agentrl train` and the demo
call it with the config they built."""
import json

import pytest

from agentrl_lib import cli, demo, flags, run
from agentrl_lib import evaluate as evaluate_mod
from agentrl_lib import trainer as trainer_mod
from agentrl_lib.config import ALGO_PRESETS, AlgoConfig, EnvConfig, ModelConfig, RunConfig, TrainConfig
from agentrl_lib.envs.pool import SerialPool
from agentrl_lib.metrics import METRICS

from helpers import ParityEnv, scripted_games


@pytest.fixture
def scripted(monkeypatch):
    """Training and evaluation play the scripted ParityEnv instead of TextWorld."""
    pool = lambda env_cfg, size, games, *kind: SerialPool(size, factory=ParityEnv)  # noqa: E731
    monkeypatch.setattr(trainer_mod, "open_pool", pool)
    monkeypatch.setattr(evaluate_mod, "open_pool", pool)


@pytest.mark.trains
def test_run_rl_trains_evaluates_and_writes(tiny_model_dir, tmp_path, scripted):
    games = scripted_games(tmp_path / "games")
    cfg = RunConfig(env=EnvConfig(games=str(games), max_turns=2), algo=AlgoConfig.from_preset("grpo", group_size=2),
                    model=ModelConfig(device="cpu"),
                    train=TrainConfig(steps=2, games_per_step=1, max_new_tokens=4, temperature=1.0, seed=1))
    summary = run.run_rl(cfg, tmp_path / "run", init=tiny_model_dir, eval_games=games, progress=False)
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in summary["rows"]] == [r["step"] for r in lines] == [1, 2]
    assert all(set(r) == set(METRICS) for r in lines)
    saved = json.loads((tmp_path / "run" / "eval.json").read_text())
    assert summary["eval"]["n_games"] == saved["n_games"] == 2
    assert summary["eval_path"] == str(tmp_path / "run" / "eval.json")
    assert summary["last_checkpoint"].endswith("step_000002")
    for key in ("config", "metrics", "learning_curve"):
        assert (tmp_path / "run").joinpath(summary[key].rsplit("/", 1)[1]).is_file(), key
    # without eval_games, config.train.eval_games decides; '' means no evaluation
    again = run.run_rl(cfg, tmp_path / "run2", init=tiny_model_dir, progress=False)
    assert again["eval"] is None and not (tmp_path / "run2" / "eval.json").exists()


def test_run_rl_refuses_missing_eval_games_before_training(tmp_path, monkeypatch):
    from agentrl_lib.envs.base import GameSetError

    monkeypatch.setattr(trainer_mod, "Trainer", lambda *a, **k: pytest.fail("training started"))
    with pytest.raises(GameSetError, match="does not exist"):
        run.run_rl(RunConfig(), tmp_path / "run", eval_games=tmp_path / "nope")


def test_ctrl_c_closes_the_trainer_and_says_where(monkeypatch, tmp_path):
    closed = []

    class Interrupted:
        cfg, step_in_progress, last_step, last_checkpoint = RunConfig(), 3, 2, "step_000002"

        def __init__(self, *a, **k):
            pass

        def train(self):
            raise KeyboardInterrupt

        def close(self):
            closed.append(True)

    monkeypatch.setattr(trainer_mod, "Trainer", Interrupted)
    with pytest.raises(run.RunInterrupted) as e:
        run.run_rl(RunConfig(), tmp_path / "run")
    assert closed and "during step 3/10" in str(e.value) and "step_000002" in str(e.value)
    assert "--resume" in str(e.value)


@pytest.mark.parametrize("ending", ["finished", "collapse", "diverged", "no rows"])
def test_run_rl_draws_the_learning_curves_after_training(monkeypatch, tmp_path, ending):
    """The trainer does not plot: run_rl draws run_dir/learning_curve.png from the trainer's rows once training
    returned, or stopped on a collapse (train.stop_on_collapse), before closing the trainer; a run that failed
    otherwise (negative control: divergence) or trained no step gets no figure, as before."""
    from agentrl_lib.diagnostics import CollapseError, DivergenceError

    events = []

    class Stub:
        cfg, is_main, last_checkpoint, metrics_path = RunConfig(), True, None, "metrics.jsonl"
        precision, adamw_impl, generator = "fp32", "fused", None  # what run_rl's summary names

        def __init__(self, config, run_dir, **k):
            self.run_dir, self.rows = tmp_path / "run", []
            self.run_dir.mkdir()

        def train(self):
            if ending != "no rows":
                self.rows = [{"step": s, "success_rate": 0.5, "return_mean": 0.1} for s in (1, 2)]
            if ending == "collapse":
                raise CollapseError("stopped at step 2")
            if ending == "diverged":
                raise DivergenceError("training diverged")
            return self.rows

        def close(self):
            events.append(("close", (self.run_dir / "learning_curve.png").exists()))

    monkeypatch.setattr(trainer_mod, "Trainer", Stub)
    drawn = ending in ("finished", "collapse")
    if ending in ("collapse", "diverged"):
        with pytest.raises((CollapseError, DivergenceError)):
            run.run_rl(RunConfig(), tmp_path / "run")
    else:
        run.run_rl(RunConfig(), tmp_path / "run")
    assert events == [("close", drawn)], "drawn before the trainer is closed (under the run lock), as before"
    if drawn:
        assert (tmp_path / "run" / "learning_curve.png").stat().st_size > 1000


def test_cli_train_calls_run_rl_with_the_built_config(monkeypatch, tmp_path, cooking_games, capsys):
    calls = []

    def fake_run_rl(config, run_dir, init=None, eval_games=None, resume=False, progress=True):
        calls.append((config, run_dir, init, eval_games, resume))
        return {"rows": [{"success_rate": 0.5, "return_mean": 0.25}], "eval": None}

    monkeypatch.setattr(run, "run_rl", fake_run_rl)
    argv = ["train", "--games", str(cooking_games.root), "--out", str(tmp_path / "r"), "--algo", "rloo",
            "--lr", "-1e-5"]
    assert cli.main(argv) == 2 and "train.lr" in capsys.readouterr().err  # a negative lr reaches the config check
    argv[-1] = "2e-5"
    assert cli.main(argv + ["--init", "some/hf-id", "--max-new-tokens", "16", "--no-check-games"]) == 0
    (config, run_dir, init, eval_games, resume), = calls
    expected = flags.build_config(cli.build_parser().parse_args(argv + ["--max-new-tokens", "16", "--no-check-games"]))
    assert config.algo == expected.algo and config.train == expected.train
    assert (config.algo.advantage, config.train.lr, config.train.max_new_tokens, config.env.check_games) == \
        ("rloo", 2e-5, 16, False)
    assert run_dir == tmp_path / "r" and init == "some/hf-id" and eval_games is None and resume is False
    assert "done: 1 steps" in capsys.readouterr().out


def test_demo_rl_config_is_built_in_one_place():
    budget = demo.DemoBudget.full()
    cfg = budget.rl_config("/games/train", "grpo", "sparse", seed=7)
    assert cfg == RunConfig(env=EnvConfig(games="/games/train", max_turns=8), reward=cfg.reward,
                            algo=AlgoConfig(**ALGO_PRESETS["grpo"], group_size=4),
                            train=TrainConfig(steps=12, games_per_step=2, minibatch_size=4, lr=3e-5, seed=7,
                                              checkpoint_every=12))
    assert cfg.reward.kind == "sparse"
    assert demo.DemoBudget.fast().rl_config("g").train.checkpoint_every == 1
