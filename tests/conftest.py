"""Shared fixtures: the embedded tokenizer, a tiny random-weight model built from a config (no download), a few real
TextWorld games generated once per session, and a trained run directory (test_checkpoint.py, test_rundir.py).

The session summary ends with its wall time, CPU time, the CPU model and the load average at its start.

Plugins: cost_guard (a test that trains or starts a process without its cost mark fails; its docstring says where it
looks) and pytester (tests/test_conftest_guard.py runs small test files with it)."""
from __future__ import annotations

import os
import shutil
import time

import pytest
import torch

pytest_plugins = ["cost_guard", "pytester"]

QUICK_RUN_BUDGET_S = 180
"""`make test-fast` (the tests not marked trains, subprocess or slow) should end within this many seconds on the
project's machine kind (2 cores); the session summary says when it did not."""
_SESSION: dict = {}


def pytest_sessionstart(session):
    from agentrl_lib.notebook import cpu_seconds  # self + finished children (e.g. TextWorld's compiler)

    _SESSION.update(start=time.perf_counter(), cpu=cpu_seconds(),
                    load=os.getloadavg()[0] if hasattr(os, "getloadavg") else None)


@pytest.hookimpl(trylast=True)  # after --durations' table, so the line ends the output
def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """One line with the session's wall time and the machine it ran on (CPU model, cores, load average at the start:
    a timing means little without them), and a second when a quick run (`-m` leaving out slow) overran its budget."""
    if "start" not in _SESSION or os.environ.get("AGENTRL_NESTED_TEST") == "1":
        return   # a test run by envstats.run_test (a chapter's plant-a-bug check reads the last lines of its output)
    from agentrl_lib.notebook import cpu_name, cpu_seconds

    wall = time.perf_counter() - _SESSION["start"]
    load = "" if _SESSION["load"] is None else f", load average {_SESSION['load']:.1f} at the start"
    used = cpu_seconds() - _SESSION["cpu"]  # less sensitive than the wall time to other work on the machine
    terminalreporter.write_line(f"session wall time {wall:.0f} s ({wall / 60:.1f} min), CPU time {used:.0f} s, on "
                                f"{cpu_name()}{load}")
    if "not slow" in (config.getoption("markexpr") or "") and wall > QUICK_RUN_BUDGET_S:
        terminalreporter.write_line(f"the quick run took over its {QUICK_RUN_BUDGET_S} s budget (tests/conftest.py; "
                                    "more with other work on the CPU): --durations lists the slowest; mark those "
                                    "over ~10 s alone `slow`")


@pytest.fixture(scope="session")
def tokenizer():
    from agentrl_lib.models import load_tokenizer

    return load_tokenizer("embedded")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tokenizer):
    """A 2-layer Llama with SmolLM2's vocabulary and chat template, random weights, saved like any HF model dir."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                      tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
                      eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model = LlamaForCausalLM(cfg)
    path = tmp_path_factory.mktemp("tiny_model")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def cooking_games(tmp_path_factory):
    """Three real tw-cooking games (recipe 1, take 1, go 1), generated with textworld's generator."""
    from agentrl_lib.envs.textworld import make_textworld_games

    return make_textworld_games(tmp_path_factory.mktemp("cooking"), 3, seed=7, challenge="tw-cooking",
                                challenge_args="--recipe 1 --take 1 --go 1", progress=False)


@pytest.fixture(scope="session")
def custom_games(tmp_path_factory):
    """Two custom games with the paper's knobs (world size 2, 3 objects, quest length 3)."""
    from agentrl_lib.envs.textworld import make_textworld_games

    return make_textworld_games(tmp_path_factory.mktemp("custom"), 2, seed=3, world_size=2, nb_objects=3,
                                quest_length=3, progress=False)


def fast_mode() -> bool:
    return os.environ.get("AGENTRL_FAST") == "1"


@pytest.fixture
def scripted(monkeypatch):
    """Training and evaluation play the scripted ParityEnv (helpers.py) instead of TextWorld."""
    from agentrl_lib import evaluate as evaluate_mod
    from agentrl_lib import trainer as trainer_mod
    from agentrl_lib.envs.pool import SerialPool

    from helpers import ParityEnv

    def pool(env_cfg, size, games, reward_kind=""):
        return SerialPool(size, factory=ParityEnv)

    monkeypatch.setattr(trainer_mod, "open_pool", pool)
    monkeypatch.setattr(evaluate_mod, "open_pool", pool)


@pytest.fixture(scope="session")
def parity_games(tmp_path_factory):
    """Two placeholder games for ParityEnv (helpers.scripted_games)."""
    from helpers import scripted_games

    return scripted_games(tmp_path_factory.mktemp("ckpt") / "games")


@pytest.fixture(scope="session")
def base_run(tmp_path_factory, parity_games, tiny_model_dir):
    """A PPO run of 3 steps, a checkpoint after each, train.keep_checkpoints = 2; tests copy it (`run`) before
    damaging it."""
    from helpers import parity_config, parity_trainer

    run = tmp_path_factory.mktemp("base") / "run"
    t = parity_trainer(parity_config(parity_games), run, init=tiny_model_dir)
    t.train()
    t.close()
    return run


@pytest.fixture
def run(base_run, tmp_path):
    """A copy of base_run that a test may damage."""
    dst = tmp_path / "run"
    shutil.copytree(base_run, dst)
    return dst
