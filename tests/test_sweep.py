"""`agentrl sweep` (agentrl_lib/sweep.py): grid parsing and its one-line errors, records written by the real run_rl with
a tiny model on scripted games, skipping recorded runs, resuming after Ctrl-C, tags and extra evaluations, a record cut
short or unwritable (recorded later, from the run dir), and `agentrl report` on what a sweep wrote. The results file:
tests/test_records.py, the numbers: tests/test_report.py."""
import errno
import json
import re
from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from agentrl_lib import cli, records, report, sweep
from agentrl_lib import run as run_mod
from agentrl_lib import trainer as trainer_mod
from agentrl_lib.config import ConfigError, RunConfig

from helpers import numbers, scripted_games, sweep_base


def _fake_summary(config):
    return {"rows": [{"step": 1, "success_rate": 0.5, "return_mean": 0.25, "entropy": 1.0, "approx_kl": 0.001}],
            "eval": {"success_rate": 0.5, "mean_turns": 2.0, "invalid_rate": 0.1, "mean_score_frac": 0.5,
                     "n_games": 2, "env_errors": 0,
                     "per_game": [{"game": "g0", "won": True, "turns": 2}, {"game": "g1", "won": False, "turns": 2}]}}


# ------------------------------------------------------------------------------------------------ the grid
def test_grid_values_take_the_fields_types():
    grid = sweep.parse_grid(["algo.advantage=gae,grpo,rloo", "train.lr=1e-5,3e-5", "algo.group_size=2,4",
                             "env.show_admissible=true,off", "reward.kind=sparse"])
    assert grid == {"algo.advantage": ["gae", "grpo", "rloo"], "train.lr": [1e-5, 3e-5], "algo.group_size": [2, 4],
                    "env.show_admissible": [True, False], "reward.kind": ["sparse"]}
    assert isinstance(grid["train.lr"][0], float) and isinstance(grid["algo.group_size"][0], int)
    assert len(sweep.grid_cells(grid)) == 3 * 2 * 2 * 2 and sweep.grid_cells({}) == [{}]
    presets = sweep.parse_grid(["algo=ppo,grpo"])
    cfg = sweep.cell_config(RunConfig(), {"algo": "grpo", "train.lr": 2e-5}, seed=3)
    assert presets == {"algo": ["ppo", "grpo"]}
    assert (cfg.algo.advantage, cfg.train.lr, cfg.train.seed) == ("grpo", 2e-5, 3)
    assert sweep.cell_slug({"algo.advantage": "gae", "env.games": "games/a b"}) == \
        "algo.advantage=gae_env.games=games-a-b"


@pytest.mark.parametrize("specs,named", [
    (["algo.advantge=gae"], "did you mean algo.advantage"),
    (["reward.kind=sparse,dnse"], "reward.kind: 'dnse'"),
    (["algo.group_size=2.5"], "algo.group_size must be an integer"),
    (["train.lr=fast"], "train.lr must be a number"),
    (["env.show_admissible=maybe"], "env.show_admissible must be true/false, got 'maybe'"),
    (["reward.kind"], "'reward.kind' has no values"),
    (["reward.kind=sparse,"], "reward.kind: empty value"),
    (["reward.kind=sparse,sparse"], "reward.kind: a value is repeated"),
    (["train.seed=0,1"], "--seeds"),
    (["reward.kind=sparse", "reward.kind=dense"], "reward.kind is given twice"),
    (["algo=ppo,dqn"], "'dqn' is not a preset"),
    (["algo=ppo,grpo", "algo.advantage=rloo"], "algo.advantage"),
])
def test_bad_grid_is_one_line_naming_the_axis(specs, named):
    with pytest.raises(ConfigError) as e:
        sweep.parse_grid(specs)
    assert named in str(e.value) and "\n" not in str(e.value)


def test_bad_combination_or_seed_fails_before_any_run(tmp_path, scripted):
    games = scripted_games(tmp_path / "games")
    never = lambda *a, **k: pytest.fail("a run started")  # noqa: E731
    with pytest.raises(ConfigError, match=r"grid cell algo.advantage=grpo algo.group_size=1 \(seed 0\): .*group_size"):
        sweep.run_sweep(sweep_base(games), ["algo.advantage=gae,grpo", "algo.group_size=1"], [0], tmp_path / "r.jsonl",
                        runs_dir=tmp_path / "runs", run=never, progress=False)
    for seeds, named in (("0,x", "'x' is not an integer"), ("0,0", "distinct"), ("-1", "outside")):
        with pytest.raises(ConfigError, match=named):
            sweep.run_sweep(sweep_base(games), [], seeds, tmp_path / "r.jsonl", run=never, progress=False)
    no_eval = sweep_base(games)
    no_eval.train.eval_games = ""
    with pytest.raises(ConfigError, match="held-out games"):
        sweep.run_sweep(no_eval, [], [0], tmp_path / "r.jsonl", run=never, progress=False)
    assert not (tmp_path / "r.jsonl").exists()


def test_cli_sweep_bad_value_is_one_error_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(run_mod, "run_rl", lambda *a, **k: pytest.fail("a run started"))
    games = scripted_games(tmp_path / "games")
    sweep_base(games).save(tmp_path / "base.yaml")
    argv = ["sweep", "--base", str(tmp_path / "base.yaml"), "--grid", "reward.kind=sparse,dnse", "--seeds", "0,1",
            "--out", str(tmp_path / "r.jsonl")]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("agentrl sweep: error: ")
    assert re.search(r"\breward\.kind\b.*'dnse'", err), err  # the axis and the value it cannot take


# ------------------------------------------------------------------------------------------------ the sweep
@pytest.mark.slow
def records_adamw() -> tuple[str, ...]:
    from agentrl_lib.update import ADAMW_IMPLS

    return tuple(ADAMW_IMPLS)


@pytest.mark.trains
def test_sweep_writes_one_record_per_run_and_skips_recorded_runs(tiny_model_dir, tmp_path, scripted):
    games = scripted_games(tmp_path / "games")
    out, runs = tmp_path / "results" / "s.jsonl", tmp_path / "runs"
    grid = ["algo.advantage=grpo,rloo", "reward.kind=sparse"]
    figures = plt.get_fignums()
    written = sweep.run_sweep(sweep_base(games), grid, "0,1", out, runs_dir=runs, init=tiny_model_dir, progress=True)
    assert plt.get_fignums() == figures, "each run's learning-curve figure is closed once saved (no leak per run)"
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert lines == written and len(lines) == 4  # 2 × 1 cells × 2 seeds
    assert [(r["cell"]["algo.advantage"], r["seed"]) for r in lines] == [("grpo", 0), ("grpo", 1), ("rloo", 0),
                                                                         ("rloo", 1)]
    for r in lines:
        assert tuple(r) == records.RECORD_KEYS
        assert (r["precision"], r["generator"]) == ("fp32", "LiveRowsGenerator") and r["adamw"] in records_adamw()
        assert r["cell"] == {"algo.advantage": r["config"]["algo"]["advantage"], "reward.kind": "sparse"}
        assert r["config"]["train"]["seed"] == r["seed"] and r["config"]["model"]["name"] == tiny_model_dir
        assert [tuple(s) for s in r["steps"]] == [records.STEP_KEYS] and r["steps"][0]["step"] == 1
        assert set(r["eval"]) == set(records.EVAL_KEYS) | {"per_game"} and r["eval"]["n_games"] == 2
        assert all(isinstance(g, str) and isinstance(w, bool) and isinstance(t, int)
                   for g, w, t in r["eval"]["per_game"])
        assert 0.0 <= r["eval"]["success_rate"] <= 1.0 and r["wall_seconds"] > 0 and r["train_seconds"] > 0
        assert r["resumed"] is False
        assert r["device"] == "cpu" and r["machine"]["cpu_count"] >= 1 and r["commit"]
        assert r["machine"]["torch_threads"] >= 1 and r["machine"]["cpu"]
        # where it ran: the CPU's features and the packages' versions (issue: records that say where they ran)
        assert isinstance(r["machine"]["cpu_features"], list) and r["machine"]["versions"]["transformers"]
        assert r["machine"]["versions"]["trl"] and r["machine"]["torch"]
        assert r["started"] <= r["finished"]
        assert r["run_dir"] == str(runs / f"{sweep.cell_slug(r['cell'])}-s{r['seed']}")
        assert (runs / r["run_dir"].rsplit("/", 1)[1] / "eval.json").is_file()
    assert len({r["base_hash"] for r in lines}) == 1

    # the same sweep again: every run is recorded, nothing runs
    again = sweep.run_sweep(sweep_base(games), grid, [0, 1], out, runs_dir=runs, init=tiny_model_dir, progress=False,
                            run=lambda *a, **k: pytest.fail("a recorded run ran again"))
    assert again == written and len(out.read_text().splitlines()) == 4
    # another base config is another experiment: its runs are not the recorded ones
    changed = sweep_base(games)
    changed.train.lr = 1e-4
    calls = []
    sweep.run_sweep(changed, ["reward.kind=sparse"], [0], out, runs_dir=tmp_path / "runs2", progress=False,
                    run=lambda config, run_dir, **k: calls.append(run_dir) or _fake_summary(config))
    assert len(calls) == 1 and len(out.read_text().splitlines()) == 5


@pytest.mark.slow
@pytest.mark.trains
def test_interrupted_sweep_resumes_the_half_finished_run(tiny_model_dir, tmp_path, scripted, monkeypatch):
    """Ctrl-C after the first step of the 2nd run (its checkpoint step_000001 written): the sweep stops with one line;
    the same call then resumes that run from step 1 (resume=True) and finishes the sweep."""
    games = scripted_games(tmp_path / "games")
    out, runs = tmp_path / "s.jsonl", tmp_path / "runs"
    stop, calls = {"on": False}, []
    save = trainer_mod.Trainer.save_checkpoint

    def save_then_stop(self, step):
        path = save(self, step)
        if stop["on"] and step == 1:
            stop["on"] = False
            raise KeyboardInterrupt
        return path

    def run(config, run_dir, **kw):
        calls.append((run_dir.name, kw["resume"]))
        stop["on"] = len(calls) == 2
        return run_mod.run_rl(config, run_dir, **kw)

    monkeypatch.setattr(trainer_mod.Trainer, "save_checkpoint", save_then_stop)
    args = (sweep_base(games, steps=2), ["reward.kind=sparse,dense"], [0], out)
    with pytest.raises(sweep.SweepInterrupted) as e:
        sweep.run_sweep(*args, runs_dir=runs, init=tiny_model_dir, run=run, progress=False)
    assert "1 of 2 runs are recorded" in str(e.value) and "same command" in str(e.value) and "\n" not in str(e.value)
    assert len(out.read_text().splitlines()) == 1
    assert (runs / "reward.kind=dense-s0" / "checkpoints" / "latest").read_text() == "step_000001"

    written = sweep.run_sweep(*args, runs_dir=runs, init=tiny_model_dir, run=run, progress=False)
    assert calls == [("reward.kind=sparse-s0", False), ("reward.kind=dense-s0", False),
                     ("reward.kind=dense-s0", True)]
    assert [r["cell"]["reward.kind"] for r in written] == ["sparse", "dense"]
    assert [s["step"] for s in written[1]["steps"]] == [1, 2] and written[1]["resumed"] is True
    assert len(out.read_text().splitlines()) == 2


def test_stub_interrupt_on_second_call_then_complete(tmp_path):
    """The run function is injectable: a stub that raises KeyboardInterrupt on its 2nd call (after the run dir was
    started) stops the sweep; the next call passes resume=True for that dir and completes all 4 runs."""
    games = scripted_games(tmp_path / "games")
    out, runs, calls = tmp_path / "s.jsonl", tmp_path / "runs", []

    def run(config, run_dir, init=None, resume=False, progress=True):
        calls.append((run_dir.name, resume))
        run_dir.mkdir(parents=True, exist_ok=True)
        config.save(run_dir / "config.yaml")
        if len(calls) == 2:
            raise KeyboardInterrupt
        return _fake_summary(config)

    args = (sweep_base(games), ["algo.advantage=grpo,rloo"], [0, 1], out)
    with pytest.raises(sweep.SweepInterrupted, match="1 of 4 runs are recorded"):
        sweep.run_sweep(*args, runs_dir=runs, run=run, progress=False)
    listed = []
    sweep.run_sweep(*args, runs_dir=runs, run=run, progress=False, dry_run=True, warn=listed.append)
    assert [x.split()[0] for x in listed[1:]] == ["recorded", "resume", "new", "new"] and len(calls) == 2
    written = sweep.run_sweep(*args, runs_dir=runs, run=run, progress=False)
    assert calls[2] == ("algo.advantage=grpo-s1", True) and len(calls) == 5 and len(written) == 4
    assert len(out.read_text().splitlines()) == 4
    # a run dir holding a run of another config is refused by name, not resumed
    other = sweep_base(games)
    other.train.lr = 1e-4
    stale = tmp_path / "stale"
    (stale / "base-s0").mkdir(parents=True)
    other.save(stale / "base-s0" / "config.yaml")
    with pytest.raises(ConfigError, match=r"another config \(train.lr"):
        sweep.run_sweep(sweep_base(games), [], [0], tmp_path / "t.jsonl", runs_dir=stale, run=run, progress=False)


def test_a_record_written_before_a_config_field_existed_still_counts(tmp_path):
    """Records match on (cell, seed, base_key): a field the library gained after a record was written is absent
    from the record's config and counts as its default, so the run is not redone (a hash of the whole config changed
    with every new field and made a sweep rerun all its recorded runs). Negative control: a record whose base
    differs in one field (train.lr) does not count."""
    games = scripted_games(tmp_path / "games")
    out, calls = tmp_path / "s.jsonl", []

    def run(config, run_dir, init=None, resume=False, progress=True):
        calls.append(run_dir.name)
        return _fake_summary(config)

    args = (sweep_base(games), ["algo.advantage=grpo,rloo"], [0], out)
    sweep.run_sweep(*args, runs_dir=tmp_path / "runs", run=run, progress=False)
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    for r in recs:  # as an older library wrote them: without a newer field, with its own whole-config hash
        del r["config"]["train"]["max_tokens_per_microbatch"]
        r["base_hash"] = "0123456789ab"
    recs[0]["config"]["train"]["gradient_checkpointing"] = True   # how, not what, it computed (EXECUTION_FIELDS)
    recs[1]["config"]["train"]["lr"] = 1e-4
    out.write_text("".join(json.dumps(r) + "\n" for r in recs))
    listed = []
    sweep.run_sweep(*args, runs_dir=tmp_path / "runs", run=run, progress=False, dry_run=True, warn=listed.append)
    assert [x.split()[0] for x in listed[1:]] == ["recorded", "new"]
    assert len({records.record_base(r) for r in recs}) == 2   # the report tells the two bases apart


def test_committed_stability_records_are_the_runs_regenerate_plans():
    """results/stability*.jsonl were written before several config fields existed: the plan `regenerate.py
    stability` makes today finds every one of them recorded (none would be rerun)."""
    import dataclasses

    from experiments import regenerate as regen

    root = Path(__file__).resolve().parent.parent
    init = regen.sft_dir("bandit-train+bandit-reversed-train", regen.STABILITY_SFT["demos"], 1.0,
                         regen.STABILITY_SFT["seed"])
    base = RunConfig.load(root / "configs" / "bandit.yaml")
    base = dataclasses.replace(base, model=dataclasses.replace(base.model, name=init))
    for name, grids in [("stability.jsonl", [*regen.STABILITY_SWEEPS, regen.STABILITY_LAST, regen.STABILITY_MORE]),
                        ("stability_long.jsonl", [regen.STABILITY_LONG])]:
        planned = {(records.cell_key(p.cell), p.seed, records.base_key(p.config, p.cell))
                   for g in grids for p in sweep.plan_sweep(base, sweep.parse_grid(g), [0, 1, 2], "runs")}
        recorded = {records.record_key(r) for r in records.load_records(root / "results" / name)}
        assert recorded and recorded <= planned, f"{name}: records the plan would not find: {recorded - planned}"


def test_cli_sweep_then_report_and_ctrl_c_says_how_to_resume(tmp_path, monkeypatch, capsys):
    games = scripted_games(tmp_path / "games")
    sweep_base(games).save(tmp_path / "base.yaml")
    state = {"interrupt": True}

    def fake_run_rl(config, run_dir, init=None, eval_games=None, resume=False, progress=True):
        if state["interrupt"]:
            raise run_mod.RunInterrupted("interrupted after step 1")
        return _fake_summary(config)

    monkeypatch.setattr(run_mod, "run_rl", fake_run_rl)
    out = tmp_path / "r.jsonl"
    argv = ["sweep", "--base", str(tmp_path / "base.yaml"), "--grid", "algo=grpo,rloo", "--seeds", "0,1",
            "--out", str(out), "--runs-dir", str(tmp_path / "runs")]
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert e.value.code == 130 and "run the same command again" in err and err.endswith(" ".join(["agentrl", *argv]))
    state["interrupt"] = False
    assert cli.main(argv) == 0 and len(out.read_text().splitlines()) == 4
    assert cli.main(["report", str(out), "--compare", "algo"]) == 0
    table = capsys.readouterr().out
    assert "| algo | eval.success_rate (mean ± std) |" in table and "| grpo − rloo |" in table
    # every run of the stub scores 0.5: two seeds with equal differences give no interval (no spread to judge by)
    [row] = [r for r in table.splitlines() if r.startswith("| grpo − rloo |")]
    _, diff, interval, verdict = [c.strip() for c in row.strip(" |").split(" | ")]
    assert numbers(diff) == [0] and interval == "n/a" and verdict.startswith("n/a")  # Δ 0, no interval, no verdict


# ------------------------------------------------------------------------------------------------ tags, extra evals
@pytest.mark.trains
def test_tags_label_cells_and_extra_evals_are_recorded(tiny_model_dir, tmp_path, scripted):
    """--tag joins every cell (and its run dir); --also-eval evaluates the trained policy on another set, kept in
    the record's evals (a split sweep's harder games)."""
    games = scripted_games(tmp_path / "games")
    out = tmp_path / "s.jsonl"
    tags = sweep.parse_tags(["sft.demos=12", "level=w2"])
    assert tags == {"sft.demos": 12, "level": "w2"}
    extra = sweep.parse_extra_evals([f"hard={games}@3"])
    assert extra == {"hard": (str(games), 3)}
    [rec] = sweep.run_sweep(sweep_base(games), ["reward.kind=sparse"], [0], out, runs_dir=tmp_path / "runs",
                            init=tiny_model_dir, progress=False, tags=tags, extra_evals=extra)
    assert rec["cell"] == {"sft.demos": 12, "level": "w2", "reward.kind": "sparse"}
    assert rec["run_dir"].endswith("sft.demos=12_level=w2_reward.kind=sparse-s0")
    assert set(rec["evals"]) == {"hard"} and rec["evals"]["hard"]["n_games"] == 2
    assert report.metric_value(rec, "evals.hard.success_rate") is not None
    # another tag value is another run, not the recorded one
    calls = []
    sweep.run_sweep(sweep_base(games), ["reward.kind=sparse"], [0], out, runs_dir=tmp_path / "runs", progress=False,
                    tags={"sft.demos": 24}, run=lambda config, run_dir, **k: calls.append(1) or _fake_summary(config))
    assert calls == [1]


@pytest.mark.parametrize("specs,named", [(["sft.demos"], "NAME=VALUE"), (["a=1", "a=2"], "given twice")])
def test_bad_tags_are_one_line(specs, named):
    with pytest.raises(ConfigError, match=named):
        sweep.parse_tags(specs)


def test_tag_named_like_a_config_field_or_bad_extra_eval_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="is a config field"):
        sweep.plan_sweep(RunConfig(), {}, [0], tmp_path, tags={"train.lr": 1})
    for spec, named in [("hard", "NAME=DIR"), ("hard=g@0", "positive integer"), ("a b=g", "NAME=DIR")]:
        with pytest.raises(ConfigError, match=named):
            sweep.parse_extra_evals([spec])


@pytest.mark.trains
def test_recorded_runs_keep_only_their_newest_policy(tiny_model_dir, tmp_path, scripted):
    """A sweep prunes a recorded run's training state (optimizer, older checkpoints): the policy still loads for
    evaluation, a resume says why it cannot; --keep-training-state keeps everything (the control)."""
    from agentrl_lib import checkpoint
    from agentrl_lib.models import load_policy

    games = scripted_games(tmp_path / "games")
    for keep in (False, True):
        runs = tmp_path / f"runs-{keep}"
        [rec] = sweep.run_sweep(sweep_base(games, steps=2), ["reward.kind=sparse"], [0], tmp_path / f"{keep}.jsonl",
                                runs_dir=runs, init=tiny_model_dir, progress=False, keep_training_state=keep)
        ckpts = [p for _, p in checkpoint.list_checkpoints(Path(rec["run_dir"]) / "checkpoints")]
        assert len(ckpts) == (2 if keep else 1)
        assert (ckpts[0] / "optimizer.pt").is_file() is keep
        assert checkpoint.verify_checkpoint(ckpts[0]) == 2
        load_policy(rec["run_dir"], "cpu")  # the newest policy still loads
        if keep:
            checkpoint.read_training_state(ckpts[0])
        else:
            with pytest.raises(checkpoint.CheckpointError, match="start a new run from its policy with --init"):
                checkpoint.read_training_state(ckpts[0])


@pytest.mark.parametrize("text, value", [("true", True), (" Yes ", True), ("ON", True), ("1", True),
                                         ("false", False), ("no", False), ("Off", False), ("0", False)])
def test_a_boolean_word_reads_the_same_in_a_config_and_a_grid(text, value):
    """config.parse_bool is the one reader of boolean text: a config field and a sweep grid's value agree."""
    from agentrl_lib.config import parse_bool, parse_field

    assert parse_bool(text) is value
    assert parse_field("env.process_pool", True, text) is value
    assert sweep.parse_value("env.process_pool", text) is value


@pytest.mark.parametrize("text", ["maybe", "", "2", "t", "yess", "true false"])
def test_other_text_is_refused_as_a_boolean_in_both(text):
    from agentrl_lib.config import parse_bool, parse_field

    assert parse_bool(text) is None
    with pytest.raises(ConfigError):
        parse_field("env.process_pool", True, text)
    with pytest.raises(ConfigError):
        sweep.parse_value("env.process_pool", text)


# ------------------------------------------------------------------------------- a record cut short or unwritable
@pytest.fixture
def sweep_setup(tmp_path, tiny_model_dir, scripted):
    games = scripted_games(tmp_path / "games")
    return {"base": sweep_base(games), "out": tmp_path / "s.jsonl", "runs": tmp_path / "runs", "init": tiny_model_dir}


def _sweep(s, **kw):
    return sweep.run_sweep(s["base"], ["reward.kind=sparse"], [0], s["out"], runs_dir=s["runs"], init=s["init"],
                           progress=False, **kw)


@pytest.mark.trains
def test_a_record_cut_short_is_rebuilt_from_the_run_dir_not_stranded(sweep_setup, monkeypatch):
    """A sweep whose last record was cut short (its run pruned after recording): the next sweep records the run from
    its eval.json and metrics.jsonl and trains nothing. Negative control: resuming the pruned run strands it."""
    from agentrl_lib.checkpoint import CheckpointError
    from agentrl_lib.run import run_rl

    [rec] = _sweep(sweep_setup)
    out = sweep_setup["out"]
    out.write_bytes(out.read_bytes()[:-40])  # the record's write cut short
    warnings = []
    [again] = _sweep(sweep_setup, run=lambda *a, **k: pytest.fail("a finished run was trained again"),
                     warn=warnings.append)
    assert any("will be recorded again" in w for w in warnings)
    assert any("eval.json" in w and "metrics.jsonl" in w for w in warnings)  # what the record is rebuilt from
    assert again["eval"] == rec["eval"] and again["steps"] == rec["steps"] and again["resumed"] is True
    # rebuilt from the run dir: the precision derived from its config (as the trained record said), nothing invented
    assert again["precision"] == rec["precision"] == "fp32" and again["adamw"] is None and again["generator"] is None
    assert [json.loads(x) for x in out.read_text().splitlines()] == [again]

    # negative control: without the rebuild, the resume of the pruned run fails (the stuck sweep)
    out.write_bytes(out.read_bytes()[:-40])
    monkeypatch.setattr(sweep, "finished_run", lambda run_dir: None)
    with pytest.raises(CheckpointError, match="no usable checkpoint"):
        _sweep(sweep_setup, run=run_rl, warn=lambda line: None)


@pytest.mark.trains
def test_a_record_that_cannot_be_written_is_one_line_and_recorded_later(sweep_setup, monkeypatch):
    """A full disk when the record is appended: one line naming the results file and the run; the run dir is not
    pruned, and the same sweep later records the run without training it again."""
    def full(path, record):
        raise OSError(errno.ENOSPC, "No space left on device")  # as os.write reports it: no file named
    monkeypatch.setattr(sweep, "append_record", full)
    with pytest.raises(records.ResultsFileError) as e:
        _sweep(sweep_setup)
    msg = str(e.value)
    assert str(sweep_setup["out"]) in msg and "No space left on device" in msg and "run the same command again" in msg
    assert "\n" not in msg
    monkeypatch.undo()
    [rec] = _sweep(sweep_setup, run=lambda *a, **k: pytest.fail("a finished run was trained again"),
                   warn=lambda line: None)
    assert rec["eval"]["n_games"] == 2 and len(sweep_setup["out"].read_text().splitlines()) == 1
