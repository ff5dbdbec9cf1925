"""The command line (agentrl_lib/cli.py, commands.py, flags.py). First a table of bad inputs (issue 9's) run through
the real command line, one row each.

Every row asserts: exit code != 0, exactly one `agentrl CMD: error: ...` line on stderr that names what to fix, no
traceback, and — for rows marked `early` — that the bad input was refused before any work started (the model, the
trainer and SFT are replaced by tripwires that fail the test if reached), so nothing is computed and then thrown
away. Rows run `main([...])` in-process (fast); a few run the installed console script in a subprocess.

Areas here: config files (values, keys, types), flags of train / sft / eval, model paths and files, devices and
dtypes, eval --out. Games directories, make-games, resumes, seeds and output paths: test_cli_errors.py's
table; game, checkpoint and env-action faults live in their own test files.

Then the config's errors through the CLI (exit code 2) and the flags generated from the config: every config field is
a documented `train` flag, spellings and aliases parse, negative numbers are values, flags override a config file.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import agentrl_lib
from agentrl_lib import cli, commands
from agentrl_lib.cli import main
from agentrl_lib.config import ALGO_PRESETS, SECTIONS, EnvConfig, RunConfig, SFTConfig
from agentrl_lib.flags import SFT_SECTIONS, build_config, config_flags, join_negative_numbers, section_args

from helpers import assert_one_clear_error, console

REPO = Path(agentrl_lib.__file__).resolve().parent.parent


class WorkStarted(AssertionError):
    """A tripwire fired: an `early` row got past its checks into loading a model, training or SFT."""


def _tripwire(what):
    def fire(*args, **kwargs):
        raise WorkStarted(f"{what} started before the bad input was refused")
    return fire


# ------------------------------------------------------------------------------------------------ shared fixtures
@pytest.fixture(scope="module")
def bad_models(tmp_path_factory, tiny_model_dir):
    """Broken copies of the tiny model: each damages one file the way a crash, a bad download or an edit would."""
    root = tmp_path_factory.mktemp("bad_models")
    tiny = Path(tiny_model_dir)
    weights = (tiny / "model.safetensors").read_bytes()

    def variant(name, edit):
        d = root / name
        shutil.copytree(tiny, d)
        edit(d)
        return str(d)

    config = json.loads((tiny / "config.json").read_text())
    (root / "empty").mkdir()
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    adapter = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny),
                             LoraConfig(r=2, target_modules="all-linear", task_type="CAUSAL_LM"))
    adapter.save_pretrained(root / "badadapter")  # a LoRA run's policy/: adapter_config.json + adapter weights
    (root / "badadapter" / "adapter_model.safetensors").write_bytes(b"\x00" * 100)
    return {
        "badadapter": str(root / "badadapter"),
        "garbage": variant("garbage", lambda d: (d / "model.safetensors").write_bytes(os.urandom(4096))),
        "truncated": variant("truncated",
                             lambda d: (d / "model.safetensors").write_bytes(weights[: len(weights) // 2])),
        "badjson": variant("badjson", lambda d: (d / "config.json").write_text('{"model_type": "llama", ')),
        "badtype": variant("badtype", lambda d: (d / "config.json").write_text(
            json.dumps({**config, "model_type": "llamaX"}))),
        "noweights": variant("noweights", lambda d: (d / "model.safetensors").unlink()),
        "badtok": variant("badtok", lambda d: (d / "tokenizer.json").write_text("garbage{")),
        "empty": str(root / "empty"),
    }


@pytest.fixture
def probe(tmp_path, monkeypatch, cooking_games, bad_models, tiny_model_dir):
    """Run one row: fills in the paths, sets up its situation, runs main(), returns (rc, stdout, stderr).

    The games' check (envs.base.check_game_set, cached in the game set) is passed here, in this process: a row whose
    command stops before it plays an episode then starts no env worker, whatever ran before it (a cold cache made
    `eval`'s default ProcessPool start one for the check; tests/cost_guard.py caught it)."""
    from agentrl_lib.envs.pool import open_pool

    open_pool(EnvConfig(games=str(cooking_games.root), process_pool=False), 1, cooking_games).close()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "ppo").mkdir(parents=True)  # so that runs/ppo2 is a typo of a local path
    (tmp_path / "a_file").write_text("not a directory\n")
    (tmp_path / "binary.yaml").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00\x00")
    paths = {"games": str(cooking_games.root), "tiny": tiny_model_dir, "tmp": str(tmp_path),
             "cfg": str(tmp_path / "c.yaml"), **bad_models}

    def run(argv, yaml_text=None, early=False, setup=(), capsys=None):
        if yaml_text is not None:
            Path(paths["cfg"]).write_text(yaml_text)
        if early:
            import agentrl_lib.models
            import agentrl_lib.sft
            import agentrl_lib.trainer

            monkeypatch.setattr(agentrl_lib.models, "load_policy", _tripwire("loading the model"))
            monkeypatch.setattr(agentrl_lib.trainer, "Trainer", _tripwire("training"))
            monkeypatch.setattr(agentrl_lib.sft, "sft", _tripwire("SFT"))
        for s in setup:
            SETUPS[s](monkeypatch)
        try:
            rc = main([a.format(**paths) for a in argv])
        except SystemExit as e:  # argparse's own errors
            rc = e.code
        out, err = capsys.readouterr()
        return rc, out, err

    return run


def _no_cuda(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _hub_unreachable(monkeypatch):
    """Online mode with the Hub at a closed local port: refused at once, the same path as no network."""
    from huggingface_hub import constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")


def _no_vllm(monkeypatch):
    """vLLM not importable, also in .venv-vllm (generation.check_generator looks it up with find_spec)."""
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else find_spec(name, *a))


def _fifo(monkeypatch):
    """A FIFO where eval's result file would go (the cwd is the row's tmp dir): a write would replace it."""
    os.mkfifo("a_fifo")


SETUPS = {"no_cuda": _no_cuda, "offline": _offline, "hub_unreachable": _hub_unreachable, "no_vllm": _no_vllm,
          "fifo": _fifo}

TRAIN = ["train", "--games", "{games}", "--out", "{tmp}/run"]
TRAIN_CFG = ["train", "--config", "{cfg}", "--games", "{games}", "--out", "{tmp}/run"]
EVAL = ["eval", "--games", "{games}", "--device", "cpu"]
SFT = ["sft", "--games", "{games}", "--out", "{tmp}/sft", "--device", "cpu"]

# (id, argv, YAML text for {cfg} or None, substrings the error line must contain, early, setup)
ROWS = [
    # --- config files: harmful values (issue 9, defect 6)
    ("cfg-max-grad-norm-0", TRAIN_CFG, "train: {max_grad_norm: 0}", ["train.max_grad_norm", "> 0"], True, ()),
    ("cfg-max-grad-norm-neg", TRAIN_CFG, "train: {max_grad_norm: -1.0}", ["train.max_grad_norm", "reverses"], True, ()),
    ("cfg-grpo-std-eps-neg", TRAIN_CFG, "algo: {grpo_std_eps: -1.0e-6}", ["algo.grpo_std_eps", ">= 0"], True, ()),
    ("cfg-entropy-coef-neg", TRAIN_CFG, "algo: {entropy_coef: -0.01}", ["algo.entropy_coef", ">= 0"], True, ()),
    ("cfg-vf-coef-neg", TRAIN_CFG, "algo: {vf_coef: -0.1}", ["algo.vf_coef", ">= 0"], True, ()),
    ("cfg-vf-clip-neg", TRAIN_CFG, "algo: {vf_clip: -0.2}", ["algo.vf_clip", ">= 0"], True, ()),
    ("cfg-kl-coef-neg", TRAIN_CFG, "algo: {kl_coef: -0.01}", ["algo.kl_coef", ">= 0"], True, ()),
    ("cfg-value-lr-0", TRAIN_CFG, "train: {value_lr: 0}", ["train.value_lr", "> 0"], True, ()),
    ("cfg-lr-nan", TRAIN_CFG, "train: {lr: .nan}", ["train.lr", "finite"], True, ()),
    ("cfg-lr-inf-string", TRAIN_CFG, "train: {lr: '1e999'}", ["train.lr", "finite"], True, ()),
    ("cfg-lr-word", TRAIN_CFG, "train: {lr: fast}", ["train.lr", "must be a number"], True, ()),
    ("cfg-steps-fraction", TRAIN_CFG, "train: {steps: 2.5}", ["train.steps", "integer"], True, ()),
    ("cfg-seed-20-digits", TRAIN_CFG, "train: {seed: 99999999999999999999}", ["train.seed", "4294967295"], True, ()),
    ("cfg-bool-as-number", TRAIN_CFG, "env: {process_pool: 3}", ["env.process_pool", "true/false"], True, ()),
    ("cfg-device-name", TRAIN_CFG, "model: {device: tpu0}", ["model.device", "cuda:N"], True, ()),
    ("cfg-dtype-name", TRAIN_CFG, "model: {dtype: fp8}", ["model.dtype", "float32"], True, ()),
    ("cfg-action-format-name", TRAIN_CFG, "env: {action_format: json}", ["env.action_format", "ragen"], True, ()),
    ("cfg-max-actions-per-turn-0", TRAIN_CFG, "env: {max_actions_per_turn: 0}", ["env.max_actions_per_turn", ">= 1"],
     True, ()),
    ("cfg-max-actions-per-turn-fraction", TRAIN_CFG, "env: {max_actions_per_turn: 2.5}",
     ["env.max_actions_per_turn", "integer"], True, ()),
    ("cfg-reward-kind-name", TRAIN_CFG, "reward: {kind: environment}", ["reward.kind", "'env'"], True, ()),
    ("cfg-stop-kinds-name", TRAIN_CFG, "train: {stop_on_collapse: true, stop_kinds: grad_norm}",
     ["train.stop_kinds", "unknown: grad_norm", "grad_norm_spike"], True, ()),
    # --- config files: structure
    ("cfg-unknown-key", TRAIN_CFG, "algo: {nme: ppo}", ["unknown key", "nme", "valid keys"], True, ()),
    ("cfg-unknown-section", TRAIN_CFG, "optimizer: {lr: 1}", ["unknown config section", "optimizer"], True, ()),
    ("cfg-bad-yaml", TRAIN_CFG, "algo: {name: ppo\n", ["not valid YAML", "c.yaml"], True, ()),
    ("cfg-section-not-mapping", TRAIN_CFG, "train: 5\n", ["'train' must be a mapping"], True, ()),
    ("cfg-missing-file", ["train", "--config", "{tmp}/nope.yaml", "--out", "{tmp}/run"], None,
     ["nope.yaml", "does not exist"], True, ()),
    ("cfg-is-directory", ["train", "--config", "{tmp}", "--out", "{tmp}/run"], None, ["is a directory"], True, ()),
    ("cfg-binary-file", ["train", "--config", "{tmp}/binary.yaml", "--out", "{tmp}/run"], None,
     ["binary.yaml", "not a text"], True, ()),
    # --- train flags and late checks (defects 6 and 7)
    ("train-seed-20-digits", TRAIN + ["--seed", "99999999999999999999"], None, ["train.seed", "--seed"], True, ()),
    ("train-lr-neg", TRAIN + ["--lr=-1e-5"], None, ["train.lr", "> 0"], True, ()),
    ("train-dtype-float16", TRAIN + ["--dtype", "float16"], None, ["float16 cannot train", "loss scaling"], True, ()),
    ("train-lr-nan", TRAIN + ["--lr", "nan"], None, ["train.lr", "finite"], True, ()),
    ("train-kl-coef-neg", TRAIN + ["--kl-coef", "-0.1"], None, ["algo.kl_coef"], True, ()),
    ("train-max-actions-per-turn-0", TRAIN + ["--max-actions-per-turn", "0"], None,
     ["env.max_actions_per_turn", ">= 1"], True, ()),
    ("train-stop-kinds-empty", TRAIN + ["--stop-on-collapse", "--stop-kinds", ""], None,
     ["--stop-kinds", "stop_on_collapse off"], True, ()),
    ("train-eval-games-missing", TRAIN_CFG, "train: {eval_games: /nonexistent/heldout}",
     ["/nonexistent/heldout", "does not exist"], True, ()),
    ("train-out-under-file", ["train", "--games", "{games}", "--out", "{tmp}/a_file/run"], None,
     ["a_file", "is a file"], True, ()),
    ("train-device-cuda-absent", TRAIN + ["--device", "cuda"], None, ["CUDA is not available", "cpu"], True,
     ("no_cuda",)),
    ("train-init-typo", TRAIN + ["--init", "runs/ppo2"], None, ["local path runs/ppo2 does not exist", "runs/ppo"],
     True, ()),
    ("train-vllm-missing", TRAIN + ["--generator", "vllm"], None, ["vLLM is not installed", "make vllm"], True,
     ("no_vllm",)),
    # --- sft flags
    ("sft-epochs-0", SFT + ["--epochs", "0"], None, ["--epochs", "> 0"], True, ()),
    ("sft-epochs-neg", SFT + ["--epochs", "-1"], None, ["--epochs", "> 0"], True, ()),
    ("sft-lr-0", SFT + ["--lr", "0"], None, ["--lr", "> 0"], True, ()),
    ("sft-batch-size-0", SFT + ["--batch-size", "0"], None, ["--batch-size", ">= 1"], True, ()),
    ("sft-seed-neg", SFT + ["--seed", "-1"], None, ["--seed", "4294967295"], True, ()),
    ("sft-max-turns-0", SFT + ["--max-turns", "0"], None, ["--max-turns", ">= 1"], True, ()),
    ("sft-out-is-file", ["sft", "--games", "{games}", "--out", "{tmp}/a_file"], None, ["a_file", "is a file"], True,
     ()),
    ("sft-dtype-fp8", SFT + ["--dtype", "fp8"], None, ["--dtype fp8", "float32"], True, ()),
    ("sft-mixed-precision-fp8", SFT + ["--mixed-precision", "fp8"], None, ["--mixed-precision", "'no', 'bf16'"], True,
     ()),
    ("sft-max-actions-per-turn-0", SFT + ["--action-format", "ragen", "--max-actions-per-turn", "0"], None,
     ["env.max_actions_per_turn", ">= 1"], True, ()),
    # --- eval flags and --out (checked before the model loads)
    ("eval-temperature-neg", EVAL + ["--temperature", "-0.5"], None, ["--temperature", ">= 0", "greedy"], True, ()),
    ("eval-temperature-nan", EVAL + ["--temperature", "nan"], None, ["--temperature"], True, ()),
    ("eval-batch-size-0", EVAL + ["--batch-size", "0"], None, ["--batch-size must be in [1, 4096] (got 0)"], True, ()),
    ("eval-max-turns-0", EVAL + ["--max-turns", "0"], None, ["--max-turns", ">= 1"], True, ()),
    ("eval-max-new-tokens-0", EVAL + ["--max-new-tokens", "0"], None, ["--max-new-tokens", "[1, 131072]"], True, ()),
    ("eval-out-is-directory", EVAL + ["--out", "{tmp}"], None, ["is a directory", "eval.json"], True, ()),
    ("eval-out-under-file", EVAL + ["--out", "{tmp}/a_file/eval.json"], None, ["a_file", "is a file"], True, ()),
    ("eval-out-unwritable", EVAL + ["--out", "/proc/agentrl-eval.json"], None, ["/proc", "cannot write"], True, ()),
    ("eval-out-device", EVAL + ["--out", "/dev/null"], None, ["/dev/null", "a character device"], True, ()),
    ("eval-out-fifo", EVAL + ["--out", "{tmp}/a_fifo"], None, ["a_fifo", "a FIFO"], True, ("fifo",)),
    ("eval-device-tpu0", ["eval", "--games", "{games}", "--device", "tpu0"], None, ["--device tpu0", "cuda:N"], True,
     ()),
    ("eval-device-cuda-absent", ["eval", "--games", "{games}", "--device", "cuda"], None,
     ["--device cuda", "CUDA is not available"], True, ("no_cuda",)),
    ("eval-dtype-fp8", EVAL + ["--dtype", "fp8"], None, ["--dtype fp8", "bfloat16"], True, ()),
    ("eval-max-actions-per-turn-0", EVAL + ["--action-format", "ragen", "--max-actions-per-turn", "0"], None,
     ["env.max_actions_per_turn", ">= 1"], True, ()),
    ("eval-vllm-missing", EVAL + ["--backend", "vllm"], None, ["vLLM is not installed", "make vllm"], True,
     ("no_vllm",)),
    # --- model paths and files (defect 5): these really try to load
    ("model-local-typo", EVAL + ["--model", "runs/ppo2"], None, ["local path runs/ppo2 does not exist", "runs/ppo"],
     False, ()),
    ("model-dot-path", EVAL + ["--model", "./no-such-model"], None, ["./no-such-model", "does not exist"], False, ()),
    ("model-empty-dir", EVAL + ["--model", "{empty}"], None, ["holds no model"], False, ()),
    ("model-garbage-safetensors", EVAL + ["--model", "{garbage}"], None, ["model.safetensors", "corrupt"], False, ()),
    ("model-truncated-safetensors", EVAL + ["--model", "{truncated}"], None, ["model.safetensors", "truncated"], False,
     ()),
    ("model-bad-config-json", EVAL + ["--model", "{badjson}"], None, ["config.json", "not valid JSON"], False, ()),
    ("model-unknown-model-type", EVAL + ["--model", "{badtype}"], None, ["config.json", "llamaX"], False, ()),
    ("model-no-weights", EVAL + ["--model", "{noweights}"], None, ["noweights", "model.safetensors"], False, ()),
    ("model-bad-tokenizer", EVAL + ["--model", "{badtok}"], None, ["tokenizer.json", "not valid JSON"], False, ()),
    ("model-corrupt-lora-adapter", EVAL + ["--model", "{badadapter}"], None, ["adapter_model.safetensors", "corrupt"],
     False, ()),
    ("model-hub-offline", EVAL + ["--model", "agentrl-probe/no-such-model"], None,
     ["agentrl-probe/no-such-model", "offline mode"], False, ("offline",)),
    ("model-hub-unreachable", EVAL + ["--model", "agentrl-probe/no-such-model"], None,
     ["agentrl-probe/no-such-model", "cannot be reached"], False, ("hub_unreachable",)),
    ("sft-model-corrupt", SFT + ["--model", "{truncated}"], None, ["model.safetensors", "truncated"], False, ()),
]


SPAWNS = {"model-local-typo"}
"""Rows whose command starts env worker processes (found by recording process starts per test): marked subprocess."""


@pytest.mark.parametrize("row", [pytest.param(r, id=r[0], marks=pytest.mark.subprocess if r[0] in SPAWNS else ())
                                 for r in ROWS])
def test_bad_input(row, probe, capsys, tmp_path):
    name, argv, yaml_text, must_contain, early, setup = row
    t0 = time.perf_counter()
    rc, out, err = probe(argv, yaml_text, early=early, setup=setup, capsys=capsys)
    assert_one_clear_error(rc, out, err, argv[0], must_contain)
    assert time.perf_counter() - t0 < 30, "a bad input must be refused fast (no network retries)"
    # nothing half-made: no run dir config, no eval file, no SFT output
    assert not (tmp_path / "run" / "config.yaml").exists()
    assert not (tmp_path / "sft" / "policy").exists()
    assert not list(tmp_path.glob("*.json"))


def test_rows_cover_the_areas():
    """The suite keeps its breadth (issue 9 asks for >= 40 rows overall; these are the config/flag/model ones)."""
    assert len(ROWS) >= 30 and len({r[0] for r in ROWS}) == len(ROWS)
    kinds = {r[0].split("-")[0] for r in ROWS}
    assert {"cfg", "train", "sft", "eval", "model"} <= kinds


# ------------------------------------------------------------------------------------------ negative controls
def _row(name):
    return next(r for r in ROWS if r[0] == name)


def test_control_harness_sees_a_traceback(probe, capsys, monkeypatch):
    """Plant the old bug (dtype lookup by dict: KeyError 'fp8'): the row no longer exits with one line."""
    import torch

    import agentrl_lib.models as models

    monkeypatch.setattr(models, "pick_dtype", lambda dtype, device: {"float32": torch.float32}[dtype])
    with pytest.raises(KeyError):
        probe(*_row("eval-dtype-fp8")[1:3], early=True, capsys=capsys)


def test_control_validation_removed_lets_training_start(probe, capsys, monkeypatch):
    """Remove the max_grad_norm guard: the bad config reaches the trainer (the tripwire fires)."""
    from agentrl_lib.config import TrainConfig

    original = TrainConfig.validate
    monkeypatch.setattr(TrainConfig, "validate",
                        lambda self: original(self) if self.max_grad_norm > 0 else None)
    with pytest.raises(WorkStarted):
        probe(*_row("cfg-max-grad-norm-neg")[1:3], early=True, capsys=capsys)


def test_control_late_out_check_loads_the_model_first(probe, capsys, monkeypatch):
    """Without the early --out check, eval loads the model (and would evaluate) before finding --out unusable."""
    monkeypatch.setattr(commands, "check_out_path", lambda *a, **k: None)
    with pytest.raises(WorkStarted):
        probe(*_row("eval-out-is-directory")[1:3], early=True, capsys=capsys)


def test_control_late_eval_games_check_trains_first(probe, capsys, monkeypatch):
    """Without the early checks of train.eval_games (the CLI's and run_rl's), the trainer starts before the held-out
    games are found missing."""
    from agentrl_lib import run

    monkeypatch.setattr(commands, "_check_train_inputs", lambda a, cfg: None)
    monkeypatch.setattr(run, "load_game_set", lambda path: path)
    with pytest.raises(WorkStarted):
        probe(*_row("train-eval-games-missing")[1:3], early=True, capsys=capsys)


def test_control_typo_without_path_hint_goes_to_the_hub(probe, capsys, monkeypatch):
    """Without the local-path hint, `runs/ppo2` is taken for a Hub id (here the Hub is unreachable at once)."""
    import agentrl_lib.model_paths as model_paths

    monkeypatch.setattr(model_paths, "_local_path_hint", lambda name: "")
    rc, out, err = probe(*_row("model-local-typo")[1:3], setup=("hub_unreachable",), capsys=capsys)
    assert rc == 2 and "local path runs/ppo2 does not exist" not in err and "cannot be reached" in err


def test_control_bugs_still_show_a_traceback(monkeypatch, capsys):
    """main() turns bad inputs into one line but not genuine bugs: an internal error still raises."""
    monkeypatch.setattr(commands, "cmd_eval", lambda a: [][1])
    with pytest.raises(IndexError):
        main(["eval", "--games", "x"])
    monkeypatch.setattr(commands, "cmd_eval", lambda a: (_ for _ in ()).throw(OSError("internal: bad file descriptor")))
    with pytest.raises(OSError):
        main(["eval", "--games", "x"])


def test_multiline_messages_become_one_line(monkeypatch, capsys):
    from agentrl_lib.config import ConfigError

    def fail(a):
        raise ConfigError("first\n  second\n\nthird")
    monkeypatch.setattr(commands, "cmd_eval", fail)
    assert main(["eval", "--games", "x"]) == 2
    assert capsys.readouterr().err == "agentrl eval: error: first second third\n"


def test_disk_errors_with_a_path_are_one_line(monkeypatch, capsys):
    import errno

    def full(a):
        raise OSError(errno.ENOSPC, "No space left on device", "/runs/x/checkpoints/step_000002")
    monkeypatch.setattr(commands, "cmd_eval", full)
    assert main(["eval", "--games", "x"]) == 2
    assert capsys.readouterr().err == \
        "agentrl eval: error: No space left on device: /runs/x/checkpoints/step_000002\n"


# ------------------------------------------------------------------------------------------ good inputs accepted
def test_numeric_strings_from_yaml_are_numbers(tmp_path):
    """PyYAML reads `1e-5` as a string (YAML 1.1 floats need a dot); the README writes `lr: 1e-5`."""
    import yaml

    text = "train:\n  lr: 1e-5\n  steps: 1e1\n  seed: '7'\nalgo:\n  kl_coef: 1E-3\n"
    assert isinstance(yaml.safe_load(text)["train"]["lr"], str)  # the trap this guards against
    (tmp_path / "c.yaml").write_text(text)
    cfg = RunConfig.load(tmp_path / "c.yaml")
    assert (cfg.train.lr, cfg.train.steps, cfg.train.seed, cfg.algo.kl_coef) == (1e-5, 10, 7, 1e-3)
    assert isinstance(cfg.train.steps, int) and isinstance(cfg.train.lr, float)


def test_cached_hub_model_loads_when_the_hub_is_unreachable(tmp_path, monkeypatch, tiny_model_dir):
    """A Hub id already in the HF cache loads from its snapshot (no retries) when the Hub cannot be reached."""
    from huggingface_hub import constants

    import agentrl_lib.model_paths as model_paths

    snap = tmp_path / "hub" / "models--agentrl-probe--tiny" / "snapshots" / "0123abc"
    shutil.copytree(tiny_model_dir, snap)
    (snap.parent.parent / "refs").mkdir()
    (snap.parent.parent / "refs" / "main").write_text("0123abc")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    _hub_unreachable(monkeypatch)
    t0 = time.perf_counter()
    assert model_paths.check_hub_model("agentrl-probe/tiny") == str(snap)
    _offline(monkeypatch)
    assert model_paths.check_hub_model("agentrl-probe/tiny") == str(snap)
    assert time.perf_counter() - t0 < 5


# ------------------------------------------------------------------------------------------ the real console script
@pytest.mark.slow
@pytest.mark.subprocess
def test_console_script_prints_one_line_and_no_traceback(tmp_path, cooking_games):
    (tmp_path / "runs" / "ppo").mkdir(parents=True)
    (tmp_path / "c.yaml").write_text("train: {max_grad_norm: -1}\n")
    cases = [
        (["eval", "--games", str(cooking_games.root), "--model", "runs/ppo2", "--device", "cpu"],
         "local path runs/ppo2 does not exist"),
        (["eval", "--games", str(cooking_games.root), "--dtype", "fp8"], "--dtype fp8"),
        (["train", "--config", "c.yaml", "--games", str(cooking_games.root), "--out", "run"], "train.max_grad_norm"),
    ]
    for args, expect in cases:
        p = console(tmp_path, *args)
        assert_one_clear_error(p.returncode, p.stdout, p.stderr, args[0], [expect])
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------------------ errors of the config, via the CLI
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


# ---------------------------------------------------------------------- every config field is a documented flag
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
    flags = config_flags()
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

    monkeypatch.setitem(SECTIONS, "extra", Undocumented)
    problems = _help_problems(config_flags(("extra",)))
    assert len(problems) == 1 and problems[0].startswith("extra.bare: no help")


def test_every_sft_config_field_is_an_sft_flag_with_help():
    """`agentrl sft`'s settings are generated from SFTConfig as train's are from RunConfig: one documented flag per
    field, its value read into the dataclass; a field left out keeps the dataclass default (None: not given)."""
    flags = config_flags(of=SFT_SECTIONS)
    assert {f.key for f in flags} == {f"sft.{g.name}" for g in dataclasses.fields(SFTConfig)}
    assert _help_problems(flags) == []
    text = cli.build_parser()._subparsers._group_actions[0].choices["sft"].format_help()
    assert all(f.flags[0] in text for f in flags)
    a = cli.build_parser().parse_args(["sft", "--games", "g", "--out", "o", "--epochs", "2", "--max-turns", "3"])
    cfg = SFTConfig(**section_args(a, "sft"))
    assert (cfg.epochs, cfg.max_turns, cfg.demos, cfg.lr, cfg.batch_size) == (2.0, 3, None, 5e-5, 4)


@pytest.mark.parametrize("text", ["1000", "1e3", "1000.0"])
def test_flags_and_config_files_read_values_alike(text, tmp_path):
    """One parser (config.parse_field) reads a value given as a flag and the same text in a config file."""
    p = tmp_path / "c.yaml"
    p.write_text(f"train: {{steps: '{text}'}}\n")
    a = cli.build_parser().parse_args(["train", "--out", "o", "--steps", text])
    assert getattr(a, "train.steps") == build_config(a).train.steps == RunConfig.load(p).train.steps == 1000


def test_flag_of_the_wrong_type_names_the_field(capsys):
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["train", "--out", "o", "--steps", "2.5"])
    err = capsys.readouterr().err  # the flag, the field, the type it takes and the value given
    assert re.search(r"--steps: train\.steps\b.*\binteger\b.*'2\.5'", err), err


def test_golden_spellings_and_aliases_parse():
    """The flags scripts use (the golden regression script, README) keep working, and aliases reach the same field."""
    argv = ["train", "--out", "o", "--games", "g", "--init", "m", "--algo", "ppo", "--reward", "dense", "--steps", "2",
            "--games-per-step", "1", "--group-size", "4", "--max-turns", "4", "--epochs", "2", "--minibatch-size",
            "2", "--kl-coef", "0.05", "--keep-top-std", "0.5", "--lora-rank", "4", "--seed", "3", "--lr", "1e-5",
            "--step-timeout", "9", "--no-process-pool", "--gradient-checkpointing"]
    cfg = build_config(cli.build_parser().parse_args(argv))
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
    argv = join_negative_numbers(["train", "--out", "o", "--lr", value, "--kl-coef", value])
    a = cli.build_parser().parse_args(argv)
    assert getattr(a, "train.lr") == getattr(a, "algo.kl_coef") == float(value)
    assert join_negative_numbers(["--lr", "-x"]) == ["--lr", "-x"]  # not a number: left to argparse


def test_control_argparse_alone_misreads_scientific_negatives():
    """Without join_negative_numbers argparse takes -1e-5 for a flag (the quirk the join fixes)."""
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["train", "--out", "o", "--lr", "-1e-5"])


def test_flags_override_config_file_and_presets_come_first(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("train: {steps: 7, lr: 2.0e-5}\nalgo: {advantage: rloo, group_size: 3}\nenv: {process_pool: false}\n")
    parse = cli.build_parser().parse_args
    cfg = build_config(parse(["train", "--out", "o", "--config", str(p), "--lr", "3e-5"]))
    assert (cfg.train.steps, cfg.train.lr, cfg.algo.advantage, cfg.algo.group_size, cfg.env.process_pool) == \
        (7, 3e-5, "rloo", 3, False), "a flag not given keeps the file's value"
    cfg = build_config(parse(["train", "--out", "o", "--config", str(p), "--algo", "ppo"]))
    assert dataclasses.asdict(cfg.algo).items() >= ALGO_PRESETS["ppo"].items() and cfg.algo.group_size == 3
    field, value = next(iter(ALGO_PRESETS["grpo"].items()))
    flag = next(f for f in config_flags(("algo",)) if f.key == f"algo.{field}").flags[0]
    other = next(v for v in ALGO_PRESETS.values() if v != ALGO_PRESETS["grpo"])[field]
    cfg = build_config(parse(["train", "--out", "o", "--algo", "grpo", flag, other]))
    assert getattr(cfg.algo, field) == other, "an explicit algo flag overrides the preset"


def test_unknown_config_key_is_refused_by_name(tmp_path, capsys):
    p = tmp_path / "c.yaml"
    p.write_text("train: {stpes: 3}\n")
    assert main(["train", "--config", str(p), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "stpes" in err and "valid keys" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("flags,expected,seed", [([], 24, 0), (["--max-new-tokens", "160", "--seed", "3"], 160, 3)])
def test_eval_max_new_tokens_reaches_the_evaluation(flags, expected, seed, cooking_games, monkeypatch, capsys):
    """`agentrl eval --max-new-tokens N --seed S` (the train section's fields, generated like every config flag) are
    the evaluation's budget per turn and sampling seed; without them, TrainConfig's defaults. Negative control (by
    hand): cmd_eval without max_new_tokens= in its evaluate() call gives 24 for the second case."""
    import agentrl_lib.envs.pool
    import agentrl_lib.evaluate
    import agentrl_lib.models
    from agentrl_lib.config import TrainConfig

    seen = {}

    class NoPool:
        def close(self):
            pass

    def fake_evaluate(model, tok, games, **kwargs):
        seen.update(kwargs)
        return {"success_rate": 0.0, "mean_turns": 1.0, "invalid_rate": 0.0, "n_games": len(games), "env_errors": 0,
                "env_error_reasons": []}

    monkeypatch.setattr(agentrl_lib.envs.pool, "open_pool", lambda *a, **k: NoPool())
    # a stand-in model: eval records the device it ran on (res["device"]), as a loaded policy has it
    monkeypatch.setattr(agentrl_lib.models, "load_policy", lambda *a, **k: (SimpleNamespace(device="cpu"), None))
    monkeypatch.setattr(agentrl_lib.evaluate, "evaluate", fake_evaluate)
    assert main(["eval", "--games", str(cooking_games.root), "--device", "cpu", *flags]) == 0
    assert seen["max_new_tokens"] == expected and (expected != 24 or expected == TrainConfig().max_new_tokens)
    assert seen["seed"] == seed
    assert "--max-new-tokens N" in cli.build_parser()._subparsers._group_actions[0].choices["eval"].format_help()


def test_eval_and_sft_share_the_env_flags():
    sub = cli.build_parser()._subparsers._group_actions[0].choices
    for cmd, flags in [("eval", ["--games", "--max-turns", "--show-admissible", "--no-show-inventory",
                                 "--step-timeout", "--no-process-pool", "--max-env-error-frac", "--no-check-games"]),
                       ("sft", ["--games", "--show-admissible", "--show-inventory"])]:
        text = sub[cmd].format_help()
        assert all(f in text for f in flags), cmd
    a = cli.build_parser().parse_args(["eval", "--games", "g", "--no-process-pool", "--step-timeout", "5"])
    env = EnvConfig(**section_args(a, "env"))
    assert (env.games, env.process_pool, env.step_timeout_s, env.max_turns, env.check_games) == \
        ("g", False, 5.0, 8, True)
    assert isinstance(cli.build_parser(), argparse.ArgumentParser)
