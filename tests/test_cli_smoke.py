"""Smoke-run the real `agentrl` command line and the demo with a tiny random-weight model (CleanRL's habit): every
subcommand on real TextWorld games, resuming a run with more steps, and running the demo twice into one directory."""
import json

import pytest
import yaml

from agentrl_lib.cli import main
from agentrl_lib.demo import DemoBudget, run_demo
from agentrl_lib.model_paths import resolve_model_path
from agentrl_lib.paths import git_commit

pytestmark = [pytest.mark.slow, pytest.mark.trains, pytest.mark.subprocess]


def test_make_games_sft_train_resume_eval(tmp_path, tiny_model_dir, capsys):
    games, sft, run = tmp_path / "games", tmp_path / "sft", tmp_path / "run"
    assert main(["make-games", "textworld", "--challenge", "tw-cooking", "--challenge-args",
                 "--recipe 1 --take 1 --go 1",
                 "--n", "2", "--seed", "11", "--out", str(games)]) == 0
    manifest = json.loads((games / "manifest.json").read_text())
    assert manifest["n_games"] == 2 and all(g["walkthrough"] for g in manifest["games"])

    assert main(["sft", "--model", tiny_model_dir, "--games", str(games), "--out", str(sft), "--device", "cpu"]) == 0
    assert json.loads((sft / "sft_summary.json").read_text())["examples"] == 2

    assert main(["train", "--algo", "grpo", "--reward", "sparse", "--games", str(games), "--init", str(sft),
                 "--out", str(run), "--steps", "1", "--group-size", "2", "--games-per-step", "1", "--max-turns", "2",
                 "--kl-coef", "0.01", "--device", "cpu"]) == 0
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["model"]["name"] == str(sft.resolve()), "the run records the model it started from"
    assert saved["algo"]["advantage"] == "grpo" and saved["reward"]["kind"] == "sparse"

    # --resume continues from the checkpoint with the saved config; flags given (here --steps) extend it
    assert main(["train", "--out", str(run), "--resume", "--steps", "2"]) == 0
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert (run / "checkpoints" / "latest").read_text() == "step_000002"

    out = tmp_path / "eval.json"
    assert main(["eval", "--model", str(run), "--games", str(games), "--out", str(out), "--max-turns", "2",
                 "--device", "cpu"]) == 0
    res = json.loads(out.read_text())
    assert res["n_games"] == 2 and len(res["per_game"]) == 2 and 0.0 <= res["success_rate"] <= 1.0
    assert res["device"] == "cpu" and res["commit"] == git_commit()   # provenance, as in a sweep record
    assert "success" in capsys.readouterr().out
    assert resolve_model_path(str(run)).endswith("step_000002/policy")


def test_demo_runs_twice_into_one_directory(tmp_path, tiny_model_dir, monkeypatch):
    """A second `make demo` must not stop at the RL stage because the first one left a run behind."""
    monkeypatch.setenv("AGENTRL_HOME", str(tmp_path / "home"))
    budget = DemoBudget(train_games=2, eval_games=2, sft_games=2, rl_steps=1, games_per_step=1, group_size=2,
                        max_turns=6)
    for _ in range(2):
        summary = run_demo(tmp_path / "demo", budget, model=tiny_model_dir, progress=False)
        assert list(summary["stages"]) == ["base", "SFT", "RL"] and summary["rl"]["steps"] == 1
        assert summary["heldout_identical_to_train"] == 0
    assert (tmp_path / "demo" / "summary.json").is_file() and (tmp_path / "demo" / "stages.png").stat().st_size > 1000


def test_demo_lora_trains_an_adapter_in_both_stages_and_records_its_variant(tmp_path, tiny_model_dir, monkeypatch,
                                                                           capsys):
    """`agentrl demo --lora-rank 4 --sft-lr .. --rl-lr .. --record FILE`: SFT saves a LoRA adapter, the RL run keeps
    training it (model.lora_rank 4 in the recorded config), and FILE gets one line with the variant, per-game outcomes
    of every stage, the commit and the machine. Control: the fp32 default records as 'fp32' with lora_rank 0."""
    from agentrl_lib.cli import main
    from agentrl_lib.demo import record_demo
    from agentrl_lib.model_paths import is_adapter

    monkeypatch.setenv("AGENTRL_HOME", str(tmp_path / "home"))
    budget = DemoBudget(train_games=2, eval_games=2, sft_games=2, rl_steps=1, games_per_step=1, group_size=2,
                        max_turns=6, lora_rank=4, sft_lr=5e-4, rl_lr=3e-4)
    summary = run_demo(tmp_path / "lora", budget, model=tiny_model_dir, progress=False)
    assert is_adapter(str(tmp_path / "lora" / "sft")) and is_adapter(str(tmp_path / "lora" / "rl"))
    assert summary["variant"] == "fp32, LoRA r4 (SFT lr 0.0005, RL lr 0.0003)"
    assert summary["config"]["model"]["lora_rank"] == 4 and summary["config"]["train"]["lr"] == 3e-4
    assert summary["budget"]["sft_lr"] == 5e-4
    record_demo(summary, tmp_path / "variants.jsonl")
    plain = run_demo(tmp_path / "plain", DemoBudget(train_games=2, eval_games=2, sft_games=2, rl_steps=1,
                                                    games_per_step=1, group_size=2, max_turns=6),
                     model=tiny_model_dir, progress=False)
    assert not is_adapter(str(tmp_path / "plain" / "sft")) and plain["variant"] == "fp32"
    record_demo(plain, tmp_path / "variants.jsonl")
    lines = [json.loads(x) for x in (tmp_path / "variants.jsonl").read_text().splitlines()]
    assert [x["variant"] for x in lines] == [summary["variant"], "fp32"]
    assert [x["config"]["model"]["lora_rank"] for x in lines] == [4, 0]
    for x in lines:
        assert set(x["per_game"]) == {"base", "SFT", "RL"} and all(len(g) == 2 for g in x["per_game"].values())
        assert x["commit"] and x["machine"]["torch_device"] == "cpu" and x["seed"] == 0
    for flags, line in ((["--lora-rank", "-1"], "--lora-rank must be >= 0"), (["--rl-lr", "0"], "--rl-lr must be > 0")):
        assert main(["demo", *flags, "--out", str(tmp_path / "bad")]) == 2  # bad input: one line, before any stage
        assert line in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


def test_demo_mixed_precision_reaches_the_rl_stage_or_is_refused_first(tmp_path, monkeypatch):
    """`agentrl demo --mixed-precision bf16` sets the RL stage's train.mixed_precision; on hardware without bf16 it is
    refused in one line before the first stage (no games made, nothing written). The fp32 default stays "no"."""
    import agentrl_lib.demo as demo
    from agentrl_lib.config import ConfigError

    budget = DemoBudget(train_games=2, eval_games=2, sft_games=2, rl_steps=1, games_per_step=1, group_size=2,
                        max_turns=6)
    assert budget.rl_config("g", mixed_precision="bf16").train.mixed_precision == "bf16"
    assert budget.rl_config("g").train.mixed_precision == "no"
    with pytest.raises(ConfigError, match="mixed_precision"):
        budget.rl_config("g", mixed_precision="fp8")
    made = []
    monkeypatch.setattr(demo, "make_textworld_games", lambda *a, **k: made.append(a) or pytest.fail("a stage ran"))
    monkeypatch.setattr(demo, "bf16_problem", lambda device: "this CPU has no avx512_bf16 / amx_bf16")
    refusal = "--mixed-precision bf16: this CPU has no avx512_bf16.*use --mixed-precision no"
    with pytest.raises(ConfigError, match=refusal):
        run_demo(tmp_path / "demo", budget, mixed_precision="bf16", progress=False)
    assert made == [] and not (tmp_path / "demo").exists()
    monkeypatch.setattr(demo, "bf16_problem", lambda device: None)  # control: with bf16 hardware the stages start
    with pytest.raises(pytest.fail.Exception, match="a stage ran"):
        run_demo(tmp_path / "demo", budget, mixed_precision="bf16", progress=False)


def test_demo_lora_rank_brings_loras_learning_rates_unless_given(tmp_path, monkeypatch):
    """`agentrl demo --lora-rank 16` runs at LoRA's measured rates (DemoBudget.LORA_SFT_LR / LORA_RL_LR); an explicit
    --sft-lr / --rl-lr wins; control: without --lora-rank the full fine-tuning rates stay."""
    import agentrl_lib.demo as demo
    from agentrl_lib.cli import main

    seen = []
    monkeypatch.setattr(demo, "run_demo", lambda out, budget, **kw: seen.append(budget) or {})
    for flags in (["--lora-rank", "16"], ["--lora-rank", "16", "--sft-lr", "2e-3"], ["--rl-lr", "1e-5"], []):
        assert main(["demo", *flags, "--out", str(tmp_path / "d")]) in (0, None)
    assert [(b.lora_rank, b.sft_lr, b.rl_lr) for b in seen] == [
        (16, demo.DemoBudget.LORA_SFT_LR, demo.DemoBudget.LORA_RL_LR), (16, 2e-3, demo.DemoBudget.LORA_RL_LR),
        (0, 5e-5, 1e-5), (0, 5e-5, 3e-5)]
    assert demo.DemoBudget.LORA_SFT_LR > 5e-5 and demo.DemoBudget.LORA_RL_LR > 3e-5


def test_demo_group_minibatches_reaches_the_rl_config_and_names_the_variant(tmp_path, monkeypatch):
    """`agentrl demo --group-minibatches`: the RL stage's train.group_minibatches is on and the recorded variant says
    so; control: without the flag it is off and the variant is plain 'fp32'."""
    import agentrl_lib.demo as demo
    from agentrl_lib.cli import main

    seen = []
    monkeypatch.setattr(demo, "run_demo", lambda out, budget, **kw: seen.append(budget) or {})
    for flags in (["--group-minibatches"], []):
        assert main(["demo", *flags, "--out", str(tmp_path / "d")]) in (0, None)
    assert [b.rl_config(tmp_path).train.group_minibatches for b in seen] == [True, False]
    assert [demo.variant_name(b) for b in seen] == ["fp32, whole-group minibatches", "fp32"]
