"""The command line's one-line refusals of bad input (agentrl_lib/cli.py and the checks it calls before any work):
make-games' flags, games directories and manifests, out-of-range config values, model files, resumes, seeds, output
paths, family-only flags, nested or aliased YAML, a full disk at the end of `agentrl eval`, `agentrl report` into a
closed pipe. Each case once crashed, passed silently, lost a result or misled (issues 27 and 52); it runs through the
real command line so that a later change cannot bring it back. The command line's other refusals (config files,
flags, model paths on the Hub, devices) are in test_cli.py's table.

Each row of ROWS is one case: the command (`agentrl ...` argv, run in-process by `main`), the exit code expected,
the facts its message must contain (the one `agentrl CMD: error: ...` line for a refusal — checked with
helpers.assert_one_clear_error: one line, no traceback, each fact in it — or the output of a command that must work),
and `keep`: what must not be lost or half-made (a file left as it was, a result kept, no run directory config
written). Tiny random models (conftest), bandit / scripted games; the cases that need more (a closed pipe, the console
script, a real full disk) are tests below the table, each with a negative control that plants the old behaviour.
Slow ones are marked `slow`. The same kind of case for one module lives with that module's tests: a sweep's record
(test_sweep.py), ALFWorld generation (test_alfworld.py), a pool's temp dir (test_process_pool.py), the results
scripts (test_findings.py, test_regenerate.py).
"""
from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

from agentrl_lib import sweep
from agentrl_lib.cli import main
from agentrl_lib.envs import get_family

from helpers import assert_one_clear_error, console

NON_UTF8 = os.fsdecode(b"games-\xff")
"""A directory name that is not valid UTF-8 (Python holds the byte as a lone surrogate)."""
TINY_TRAIN = ["--device", "cpu", "--no-process-pool", "--algo", "grpo", "--group-size", "2", "--games-per-step", "1",
              "--max-turns", "1", "--max-new-tokens", "4", "--checkpoint-every", "1"]
"""`agentrl train` flags of a run that takes about a second per step with the tiny model on bandit games."""


# ------------------------------------------------------------------------------------------------ assets
@pytest.fixture(scope="module")
def assets(tmp_path_factory, tiny_model_dir, cooking_games):
    """Shared inputs: bandit games, a LoRA adapter of rank 2 on the tiny model, a copy of the tiny model with one NaN
    weight, and a 2-step run (checkpoints after each step) that resume cases copy."""
    import torch
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import load_file, save_file

    from agentrl_lib.models import load_policy, save_policy

    root = tmp_path_factory.mktemp("cli-errors")
    bandit = get_family("bandit").make_games(root / "bandit", 2, 0)
    base, tok = load_policy(tiny_model_dir, device="cpu")
    adapter = get_peft_model(base, LoraConfig(r=2, lora_alpha=4, target_modules="all-linear", task_type="CAUSAL_LM"))
    torch.manual_seed(0)
    for n, p in adapter.named_parameters():
        if "lora_B" in n:
            p.data.normal_(0, 0.5)  # an adapter that changes the model, as a trained SFT adapter does
    save_policy(adapter, tok, root / "lora")
    shutil.copytree(tiny_model_dir, root / "nan")
    weights = load_file(root / "nan" / "model.safetensors")
    weights["model.layers.0.mlp.up_proj.weight"][0, 0] = float("nan")
    save_file(weights, root / "nan" / "model.safetensors", metadata={"format": "pt"})
    run = root / "run"
    assert main(["train", "--games", str(bandit.root), "--init", tiny_model_dir, "--out", str(run), "--steps", "2",
                 *TINY_TRAIN]) == 0
    return {"bandit": str(bandit.root), "tw": str(cooking_games.root), "tiny": tiny_model_dir,
            "lora": str(root / "lora"), "nan": str(root / "nan"), "run2": str(run)}


@dataclass
class Workspace:
    """One case's working directory (the cwd while it runs) and the paths its argv may name."""

    tmp: Path
    paths: dict[str, str] = field(default_factory=dict)

    def __getitem__(self, key: str) -> str:
        return self.paths[key]


@pytest.fixture
def ws(tmp_path, monkeypatch, assets):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a_file").write_text("not a directory\n")
    return Workspace(tmp_path, {**assets, "tmp": str(tmp_path)})


# ------------------------------------------------------------------------------------------------ setups
def _copy_games(ws: Workspace, src: str, name: str) -> Path:
    dst = ws.tmp / name
    shutil.copytree(src, dst)
    (dst / ".agentrl-game-check.json").unlink(missing_ok=True)  # the check must run (a cached pass would skip it)
    return dst


def _manifest_not_utf8(ws, mp):
    (_copy_games(ws, ws["bandit"], "badutf8") / "manifest.json").write_bytes(b"\xff\xfe{}")


def _games_dir_not_utf8(ws, mp):
    _copy_games(ws, ws["tw"], NON_UTF8)


def _duplicate_row(ws, mp):
    mf = _copy_games(ws, ws["tw"], "dup") / "manifest.json"
    data = json.loads(mf.read_text())
    data["games"].append(data["games"][0])
    mf.write_text(json.dumps(data))


def _deep_manifest(ws, mp):
    d = _copy_games(ws, ws["bandit"], "deep")
    (d / "manifest.json").write_text('{"family": "bandit", "games": ' + "[" * 100000 + "]" * 100000 + "}")


ALIAS_BOMB = "".join(f"{a}: &{a} [{', '.join([f'*{b}' if b else '1'] * 9)}]\n"
                     for a, b in zip("abcdefghi", ["", *"abcdefgh"])) + "train: {steps: *i}\n"
"""A YAML "billion laughs": 9 anchors, each a list of 9 aliases of the one before (9**9 values from 300 bytes)."""


def _tensorboard_file(ws, mp):
    (ws.tmp / "out").mkdir()
    (ws.tmp / "out" / "tensorboard").write_text("in the way\n")


def _tensorboard_unwritable(ws, mp):
    """RUN/tensorboard in a folder that refuses new files (as a read-only mount does; root ignores permission bits,
    so the refusal is planted in the write probe fsio.check_out_path makes)."""
    import tempfile

    (ws.tmp / "out" / "tensorboard").mkdir(parents=True)
    real = tempfile.NamedTemporaryFile

    def refuse(*a, dir=None, **k):
        if str(dir) == str(ws.tmp / "out" / "tensorboard"):
            raise OSError(errno.EROFS, "Read-only file system")
        return real(*a, dir=dir, **k)
    mp.setattr(tempfile, "NamedTemporaryFile", refuse)


def _tensorboard_file_kept(ws):
    assert (ws.tmp / "out" / "tensorboard").read_text() == "in the way\n"
    assert not (ws.tmp / "out" / "metrics.jsonl").exists(), "a step ran before the refusal"


def _sft_output_in_out(ws, mp):
    shutil.copytree(ws["tiny"], ws.tmp / "out" / "policy")


def _mixed_dir(ws, mp):
    """An RL run directory into which an SFT model was written (its policy/ beside checkpoints/)."""
    shutil.copytree(ws["run2"], ws.tmp / "mixed")
    shutil.copytree(ws["tiny"], ws.tmp / "mixed" / "policy")


def _long_walkthrough(ws, mp):
    mf = _copy_games(ws, ws["bandit"], "long") / "manifest.json"
    data = json.loads(mf.read_text())
    data["games"][0].update(name="long", walkthrough=["look"] * 3_000_000)
    mf.write_text(json.dumps(data))


def _tw_copy(ws, mp):
    _copy_games(ws, ws["tw"], "tw")


def _yaml(text):
    def write(ws, mp):
        (ws.tmp / "c.yaml").write_text(text)
    return write


def _resume_copy(ws, mp):
    shutil.copytree(ws["run2"], ws.tmp / "run")


def _non_sweep_results(ws, mp):
    (ws.tmp / "bench.jsonl").write_text(json.dumps({"benchmark": "rl_step", "ratio": 2.66}) + "\n")
    (ws.tmp / "base.yaml").write_text(f"env: {{games: {ws['bandit']}, max_turns: 1}}\n")
    mp.setattr(sweep, "run_sweep", _tripwire_after(sweep.run_sweep, "run", "a sweep run started"))


def _tripwire_after(fn, kwarg, message):
    """`fn` with its `kwarg` replaced by a function that fails the test when called (the sweep's run function)."""
    def wrapped(*a, **k):
        k[kwarg] = lambda *a, **k: pytest.fail(message)
        return fn(*a, **k)
    return wrapped


def _disk_full_at_the_end(ws, mp):
    """The eval result's write fails as on a full disk (a write error names no file); the fallback goes to fallback/.
    Simulated with a monkeypatch: the real full disk is test_eval_out_on_a_full_tmpfs (slow, needs mount)."""
    import tempfile

    from agentrl_lib import fsio

    def full(path, text):
        raise OSError(errno.ENOSPC, "No space left on device")
    mp.setattr(fsio, "atomic_write_text", full)
    (ws.tmp / "fallback").mkdir()
    mp.setattr(tempfile, "gettempdir", lambda: str(ws.tmp / "fallback"))


# ------------------------------------------------------------------------------------------------ what must be kept
def _absent(*names):
    def check(ws):
        for n in names:
            assert not (ws.tmp / n).exists(), f"{n} was made although the input was refused"
    return check


def _unchanged(name, content):
    def check(ws):
        assert (ws.tmp / name).read_text() == content, f"{name} was changed"
    return check


def _no_run_config(ws):
    assert not (ws.tmp / "out" / "config.yaml").exists(), "a run directory was started"


def _eval_result_kept(ws):
    [kept] = (ws.tmp / "fallback").glob("agentrl-unsaved-eval-*.json")
    res = json.loads(kept.read_text())
    assert res["n_games"] == 2 and len(res["per_game"]) == 2, "the per-game results were lost"
    assert not (ws.tmp / "eval.json").exists()


def _resume_changed_nothing(ws):
    before = (Path(ws["run2"]) / "config.yaml").read_text()
    assert (ws.tmp / "run" / "config.yaml").read_text() == before, "config.yaml was rewritten"
    assert (ws.tmp / "run" / "metrics.jsonl").read_text() == (Path(ws["run2"]) / "metrics.jsonl").read_text()


def _merged_full_fine_tune(ws):
    import yaml

    cfg = yaml.safe_load((ws.tmp / "out" / "config.yaml").read_text())
    policy = ws.tmp / "out" / "checkpoints" / "step_000001" / "policy"
    assert cfg["model"]["lora_rank"] == 0 and not (policy / "adapter_config.json").exists(), \
        "config.yaml says full fine-tuning: the checkpoint must be a full model, not the old adapter"
    assert (policy / "model.safetensors").is_file()


def _adapter_kept_training(ws):
    policy = ws.tmp / "out" / "checkpoints" / "step_000001" / "policy"
    assert json.loads((policy / "adapter_config.json").read_text())["r"] == 2


def _nothing(ws):
    pass


@dataclass(frozen=True)
class Case:
    """One case: `agentrl ARGV` ({name} placeholders filled from the workspace), the exit code, the facts its message
    must state (in stderr's one error line when rc != 0, else anywhere in what it printed: the field or flag, the bad
    value, the bound, the fix; a string or a tuple of them, not the sentence), what must not be lost, and its
    setups."""

    id: str
    argv: list[str]
    rc: int
    facts: str | tuple[str, ...]
    keep: Callable[[Workspace], None] = _nothing
    setup: tuple = ()


TRAIN_NEW = ["train", "--games", "{bandit}", "--out", "{tmp}/out"]
EVAL = ["eval", "--device", "cpu", "--no-process-pool"]

ROWS = [
    # --- 1. make-games: generation (the relative --out for ALFWorld: test_alfworld.py)
    Case("mg-frozenlake-world-size", ["make-games", "frozenlake", "--world-size", "500", "--n", "1", "--out", "g"], 2,
         ("--world-size", "frozenlake"), _absent("g")),
    Case("mg-frozenlake-world-size-0", ["make-games", "frozenlake", "--world-size", "0", "--n", "1", "--out", "g"], 2,
         ("--world-size", "frozenlake"), _absent("g")),
    Case("mg-bandit-challenge", ["make-games", "bandit", "--challenge", "tw-cooking", "--n", "1", "--out", "g"], 2,
         ("--challenge", "bandit games"), _absent("g")),
    Case("mg-textworld-custom-flag-with-challenge", ["make-games", "textworld", "--challenge", "tw-cooking",
                                                     "--world-size", "3", "--n", "1", "--out", "g"], 2,
         ("--world-size", "custom games"), _absent("g")),
    Case("mg-sokoban-n-huge", ["make-games", "sokoban", "--n", "1000000000", "--out", "g"], 2,
         ("--n ", "[1, 100000]", "got 1000000000"), _absent("g")),
    Case("mg-bandit-n-0", ["make-games", "bandit", "--n", "0", "--out", "g"], 2, ("--n ", "[1, 100000]", "got 0"),
         _absent("g")),
    Case("mg-frozenlake-seed-negative", ["make-games", "frozenlake", "--seed", "-1", "--n", "1", "--out", "g"], 2,
         "--seed must be in [0, 4294967295]", _absent("g")),
    Case("mg-out-is-a-file", ["make-games", "bandit", "--n", "1", "--out", "a_file"], 2,
         "--out a_file is a file, not a directory", _unchanged("a_file", "not a directory\n")),
    # --- 4 / 6. games directories
    Case("games-dir-is-a-file", EVAL + ["--games", "a_file"], 2, "a_file is a file, not a directory",
         _unchanged("a_file", "not a directory\n")),
    Case("games-dir-is-its-manifest", EVAL + ["--games", "{bandit}/manifest.json"], 2, "pass its directory"),
    Case("games-manifest-not-utf8", EVAL + ["--games", "badutf8"], 2, ("manifest.json", "UTF-8", "0xff"),
         setup=(_manifest_not_utf8,)),
    Case("games-dir-name-not-utf8", EVAL + ["--games", NON_UTF8], 2, "has a name that is not valid UTF-8",
         setup=(_games_dir_not_utf8,)),
    Case("games-manifest-lists-a-game-twice", EVAL + ["--games", "dup"], 2, ("twice", "rows 1 and 4"),
         setup=(_duplicate_row,)),
    Case("eval-step-timeout-too-short", ["eval", "--device", "cpu", "--games", "tw", "--model", "{tiny}",
                                         "--step-timeout", "0.0001"], 2,
         ("step timeout", "--step-timeout"), setup=(_tw_copy,)),
    # --- 4. out-of-range values
    Case("cfg-two-train-sections", ["train", "--config", "c.yaml", "--games", "{bandit}", "--out", "out"], 2,
         ("'train'", 'twice', 'lines 1 and 3'), _no_run_config,
         (_yaml("train: {lr: 1.0e-5}\nenv: {max_turns: 2}\ntrain: {steps: 2}\n"),)),
    Case("cfg-max-new-tokens-1e11", ["train", "--config", "c.yaml", "--games", "{bandit}", "--out", "out"], 2,
         ("train.max_new_tokens (--max-new-tokens)", "[1, 131072]"), _no_run_config,
         (_yaml("train: {max_new_tokens: 1e11}\n"),)),
    Case("cfg-max-turns-23-digits", ["train", "--config", "c.yaml", "--games", "{bandit}", "--out", "out"], 2,
         "env.max_turns must be >= 1 and <= 10000", _no_run_config,
         (_yaml("env: {max_turns: 12345678901234567890123}\n"),)),
    Case("train-max-new-tokens-over-the-context", TRAIN_NEW + ["--init", "{tiny}", *TINY_TRAIN, "--max-new-tokens",
                                                               "5000"], 2,
         ("5000", "4096 tokens"), _no_run_config),
    Case("train-prompt-leaves-no-room", TRAIN_NEW + ["--init", "{tiny}", *TINY_TRAIN, "--max-new-tokens", "4090"], 2,
         ("train.max_new_tokens (4090)", "4096 tokens"), _nothing),
    Case("train-out-not-utf8", ["train", "--games", "{bandit}", "--out", NON_UTF8], 2, "is not valid UTF-8",
         _absent(NON_UTF8)),
    # --- 3. non-finite weights from disk
    Case("eval-nan-weights", EVAL + ["--games", "{bandit}", "--model", "{nan}"], 2,
         ("model.layers.0.mlp.up_proj.weight", "1 non-finite"), _absent("eval.json")),
    Case("train-init-nan-weights", TRAIN_NEW + ["--init", "{nan}", *TINY_TRAIN], 2,
         ("model.layers.0.mlp.up_proj.weight", "1 non-finite"), _no_run_config),
    # --- 5. a LoRA --init and --lora-rank
    Case("train-lora-init-other-rank", TRAIN_NEW + ["--init", "{lora}", "--lora-rank", "8", *TINY_TRAIN], 2,
         ("rank 2", "model.lora_rank (--lora-rank) is 8"), _no_run_config),
    Case("train-lora-init-rank-0-merges", TRAIN_NEW + ["--init", "{lora}", "--lora-rank", "0", "--steps", "1",
                                                       *TINY_TRAIN], 0, "done: 1 steps", _merged_full_fine_tune),
    Case("train-lora-init-same-rank", TRAIN_NEW + ["--init", "{lora}", "--lora-rank", "2", "--steps", "1",
                                                   *TINY_TRAIN], 0, "done: 1 steps", _adapter_kept_training),
    # --- 6. resume
    Case("resume-fewer-steps-than-done", ["train", "--out", "run", "--resume", "--steps", "1"], 2,
         ("2 steps", "--steps > 2"), _resume_changed_nothing, (_resume_copy,)),
    Case("resume-without-metrics", ["train", "--out", "run", "--resume", "--steps", "3"], 0,
         ("run/metrics.jsonl", "2 steps (1-2)"), _nothing,
         (_resume_copy, lambda ws, mp: (ws.tmp / "run" / "metrics.jsonl").unlink())),
    # --- 2. the end of long jobs
    Case("eval-out-disk-full", EVAL + ["--games", "{bandit}", "--model", "{tiny}", "--max-turns", "1", "--out",
                                       "eval.json"], 2,
         ("--out eval.json", "No space left on device", "kept in"), _eval_result_kept,
         (_disk_full_at_the_end,)),
    Case("sweep-into-a-non-sweep-file", ["sweep", "--base", "base.yaml", "--eval-games", "{bandit}", "--out",
                                         "bench.jsonl", "--runs-dir", "runs"], 2,
         ("bench.jsonl line 1", "sweep record"), _unchanged("bench.jsonl", '{"benchmark": "rl_step", "ratio": '
                                                                              '2.66}\n'),
         (_non_sweep_results,)),
    # --- issue 52, item 5: episodes per step and the env pool are bounded
    Case("train-group-size-100000", TRAIN_NEW + ["--group-size", "100000"], 2,
         ("algo.group_size (--group-size)", "[1, 4096]", "got 100000"), _no_run_config),
    Case("train-games-per-step-1000000", TRAIN_NEW + ["--games-per-step", "1000000"], 2,
         ("train.games_per_step (--games-per-step)", "[1, 4096]", "got 1000000"), _no_run_config),
    Case("train-episodes-per-step-100x100", TRAIN_NEW + ["--games-per-step", "100", "--group-size", "100"], 2,
         ("4096 episodes per step", "100 x 100 = 10000"), _no_run_config),
    Case("train-pool-over-the-machine", TRAIN_NEW + ["--games-per-step", "64", "--group-size", "8"], 2,
         ("--games-per-step x --group-size", "512", "bound of 64"),
         _no_run_config, (lambda ws, mp: mp.setattr(os, "cpu_count", lambda: 2),)),
    Case("eval-batch-size-huge", EVAL + ["--games", "{bandit}", "--batch-size", "1000000"], 2,
         ("--batch-size", "[1, 4096]", "got 1000000")),
    # --- issue 52, items 6 and 10: files nested too deep, a YAML alias bomb
    Case("games-manifest-nested-100000", EVAL + ["--games", "deep"], 2,
         ("manifest.json", "deeper"), setup=(_deep_manifest,)),
    Case("cfg-yaml-nested-100000", ["train", "--config", "c.yaml", "--games", "{bandit}", "--out", "out"], 2,
         ("c.yaml", "64 levels", "line 1"), _no_run_config,
         (_yaml("train: " + "[" * 100000 + "]" * 100000 + "\n"),)),
    Case("cfg-yaml-alias-bomb", ["train", "--config", "c.yaml", "--games", "{bandit}", "--out", "out"], 2,
         ("c.yaml", "aliases", "100000 values"), _no_run_config,
         (_yaml(ALIAS_BOMB),)),
    # --- issue 52, item 7: every output checked before the model loads
    Case("train-tensorboard-file-in-the-way", TRAIN_NEW + ["--init", "{tiny}", *TINY_TRAIN, "--steps", "1",
                                                           "--report-to", "tensorboard"], 2,
         ("--report-to tensorboard", "{tmp}/out/tensorboard is a file"),
         _tensorboard_file_kept, (_tensorboard_file,)),
    Case("train-tensorboard-under-a-file", TRAIN_NEW + ["--init", "{tiny}", *TINY_TRAIN, "--steps", "1",
                                                        "--report-to", "tensorboard"], 2,
         ("--report-to tensorboard", "cannot write in {tmp}/out/tensorboard", "Read-only file system"), _nothing,
         (_tensorboard_unwritable,)),
    # --- issue 52, item 8: every seed flag in [0, 2**32 - 1]
    Case("eval-seed-2**32", EVAL + ["--games", "{bandit}", "--seed", str(2**32)], 2,
         ("--seed", "[0, 4294967295]", "got 4294967296", "sampling seed")),
    Case("eval-seed-2**64", EVAL + ["--games", "{bandit}", "--seed", str(2**64)], 2,
         ("--seed", "[0, 4294967295]", "got 18446744073709551616", "sampling seed")),
    Case("demo-seed-negative", ["demo", "--seed", "-1", "--out", "d"], 2,
         ("--seed", "[0, 4294967295]", "got -1"), _absent("d")),
    Case("report-seed-2**64", ["report", "r.jsonl", "--seed", str(2**64)], 2,
         ("--seed", "[0, 4294967295]", "got 18446744073709551616", "bootstrap")),
    Case("sft-seed-2**32", ["sft", "--games", "{bandit}", "--out", "s", "--seed", str(2**32)], 2,
         ("sft.seed (--seed)", "[0, 4294967295]", "got 4294967296"), _absent("s")),
    Case("train-seed-2**64", TRAIN_NEW + ["--seed", str(2**64)], 2,
         ("train.seed (--seed)", "[0, 4294967295]", "got 18446744073709551616"), _no_run_config),
    Case("sweep-seeds-2**32", ["sweep", "--base", "base.yaml", "--seeds", f"0,{2**32}", "--eval-games", "{bandit}",
                               "--out", "s.jsonl", "--dry-run"], 2, ("--seeds", "4294967296", "[0, 4294967295]"),
         _absent("s.jsonl"), (_non_sweep_results,)),
    # --- issue 52, item 9: SFT and RL outputs kept apart
    Case("sft-into-an-rl-run", ["sft", "--games", "{bandit}", "--model", "{tiny}", "--device", "cpu", "--out", "run"],
         2, ("--out run", "RL run directory"), _resume_changed_nothing,
         (_resume_copy,)),
    Case("train-into-an-sft-dir", TRAIN_NEW + ["--init", "{tiny}", *TINY_TRAIN], 2,
         ("--out {tmp}/out", "SFT output", "{tmp}/out/policy"), _no_run_config, (_sft_output_in_out,)),
    Case("eval-ambiguous-model-dir", EVAL + ["--games", "{bandit}", "--model", "mixed"], 2,
         ("--model mixed", "ambiguous", "step_000002", "mixed/checkpoints/step_000002", "mixed/policy"),
         _absent("eval.json"), (_mixed_dir,)),
    # --- issue 52, item 10: family-only flags, walkthrough length
    Case("eval-reward-on-bandit", EVAL + ["--games", "{bandit}", "--reward", "resolved"], 2,
         ("--reward resolved", "bandit games", "game's own score")),
    Case("train-swe-kind-on-textworld", ["train", "--games", "{tw}", "--out", "out", "--reward", "resolved"], 2,
         ("reward.kind must be one of", "got 'resolved'", "swe's"),
         _no_run_config),
    Case("games-walkthrough-3000000", EVAL + ["--games", "long"], 2,
         ("'long'", '3000000 commands', '10000'), setup=(_long_walkthrough,)),
    Case("cfg-lora-alpha-1e30", ["train", "--config", "c.yaml", "--games", "{bandit}", "--out", "out"], 2,
         ("model.lora_alpha (--lora-alpha)", "(0, 4096]", "got 1e+30"), _no_run_config,
         (_yaml("model: {lora_rank: 4, lora_alpha: 1e30}\n"),)),
]


@pytest.mark.trains
@pytest.mark.subprocess
@pytest.mark.parametrize("case", ROWS, ids=[c.id for c in ROWS])
def test_one_line_refusal(case, ws, monkeypatch, capsys, caplog):
    for setup in case.setup:
        setup(ws, monkeypatch)
    argv = [a.format(**ws.paths) for a in case.argv]
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse's own errors
        rc = e.code
    out, err = capsys.readouterr()
    assert rc == case.rc, f"exit code {rc}, expected {case.rc}: {err.strip()[-500:]}"
    facts = [f.format(**ws.paths) for f in ((case.facts,) if isinstance(case.facts, str) else case.facts)]
    if case.rc:
        assert_one_clear_error(rc, out, err, argv[0], facts)
    else:
        assert "Traceback" not in out + err
        for fact in facts:
            assert fact in out + err + caplog.text, f"{fact!r} not in the output"
    case.keep(ws)


def test_rows_are_unique_and_cover_each_defect():
    assert len({c.id for c in ROWS}) == len(ROWS) >= 25
    assert {c.id.split("-")[0] for c in ROWS} >= {"mg", "games", "eval", "cfg", "train", "resume", "sweep"}


# ------------------------------------------------------------------------------------------------ negative controls
def _row(name):
    return next(c for c in ROWS if c.id == name)


@pytest.mark.trains
def test_control_without_the_finite_check_nan_weights_evaluate_to_zero(ws, monkeypatch, capsys):
    """Remove check_finite_weights: the NaN model is evaluated and exits 0 (the silent 0% of the issue)."""
    from agentrl_lib import models

    monkeypatch.setattr(models, "check_finite_weights", lambda model, path: None)
    rc = main([a.format(**ws.paths) for a in _row("eval-nan-weights").argv])
    assert rc == 0 and "success 0.0%" in capsys.readouterr().out


def test_control_without_the_unique_key_loader_the_last_section_wins(tmp_path):
    import yaml

    text = "train: {lr: 1.0e-5}\nenv: {max_turns: 2}\ntrain: {steps: 2}\n"
    assert yaml.safe_load(text)["train"] == {"steps": 2}, "PyYAML drops the first train: section in silence"


@pytest.mark.trains
def test_control_without_the_context_checks_nothing_trains(ws, monkeypatch, capsys):
    """Remove both context checks (check_context_room and the all-episodes-at-the-context-limit stop): every episode
    ends at the context limit before its first reply, no update happens, and the run exits 0 (the issue's 1e11)."""
    from agentrl_lib import trainer, trainer_parts

    monkeypatch.setattr(trainer_parts, "check_context_room", lambda *a, **k: None)
    real = trainer.rollout

    def hide(*a, **k):  # the trainer's stop reads termination 'context_limit': relabel it
        trajs, stats = real(*a, **k)
        for t in trajs:
            t.termination = "max_turns"
        return trajs, stats

    monkeypatch.setattr(trainer, "rollout", hide)
    argv = [a.format(**ws.paths) for a in _row("train-max-new-tokens-over-the-context").argv] + ["--steps", "1"]
    assert main(argv) == 0
    row = json.loads((ws.tmp / "out" / "metrics.jsonl").read_text().splitlines()[0])
    assert row["mean_turns"] == 0 and row["skipped_update"] == 1


# ------------------------------------------------------------------------------------------------ report | head
@pytest.mark.subprocess
def test_report_into_a_closed_pipe_exits_quietly(tmp_path):
    recs = [{"cell": {"algo.advantage": a, "x": i}, "seed": 0, "base_hash": "b", "config": {},
             "eval": {"success_rate": 0.1 * (i % 7)}} for i in range(2000) for a in ("gae", "grpo")]
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    script = Path(sys.executable).parent / "agentrl"
    cmd = [str(script)] if script.is_file() else [sys.executable, "-m", "agentrl_lib.cli"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                        os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(cmd + ["report", "r.jsonl", "--resamples", "10"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.readline()  # `| head -1`: read one line, then close the pipe
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.wait(timeout=120)
    assert first.startswith(b"| algo.advantage")
    assert proc.returncode == 128 + signal.SIGPIPE and err == "", (proc.returncode, err[-800:])


@pytest.mark.slow
@pytest.mark.trains
@pytest.mark.subprocess
def test_console_script_refusals(tmp_path, assets):
    """Three rows through the installed console script (as a user runs them): one line each, no traceback."""
    (tmp_path / "a_file").write_text("x\n")
    for args, phrase in [(["make-games", "bandit", "--n", "0", "--out", "g"], "--n must be in"),
                         (["eval", "--games", "a_file"], "is a file, not a directory"),
                         (["eval", "--games", assets["bandit"], "--model", assets["nan"], "--device", "cpu",
                           "--no-process-pool"], "non-finite")]:
        p = console(tmp_path, *args)
        assert_one_clear_error(p.returncode, p.stdout, p.stderr.strip().splitlines()[-1], args[0], [phrase])
        assert "Traceback" not in p.stderr


# ------------------------------------------------------------------------------------------------ a real full disk
@pytest.mark.trains
@pytest.mark.subprocess
@pytest.mark.slow
def test_eval_out_on_a_full_tmpfs(tmp_path, monkeypatch, capsys, assets):
    """`agentrl eval --out` on a real full filesystem (a 64 KiB tmpfs filled before the evaluation ends): one line
    naming the file, and the per-game results kept elsewhere. Needs root and `mount -t tmpfs` (else skipped; the
    fast row eval-out-disk-full simulates ENOSPC)."""
    import tempfile

    from agentrl_lib import evaluate as evaluate_mod

    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)],
                                           capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        real = evaluate_mod.evaluate

        def fill_then_evaluate(*a, **k):  # the disk fills while the evaluation runs
            res = real(*a, **k)
            fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT)
            try:
                while os.write(fd, b"\0" * 4096):
                    pass
            except OSError as e:
                assert e.errno == errno.ENOSPC
            finally:
                os.close(fd)
            return res

        monkeypatch.setattr(evaluate_mod, "evaluate", fill_then_evaluate)
        (tmp_path / "fallback").mkdir()
        monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path / "fallback"))
        out = mnt / "eval.json"
        rc = main(EVAL + ["--games", assets["bandit"], "--model", assets["tiny"], "--max-turns", "1", "--out",
                          str(out)])
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert rc == 2 and f"--out {out} " in err and "No space left on device" in err, err
        [kept] = (tmp_path / "fallback").glob("agentrl-unsaved-eval-*.json")
        assert json.loads(kept.read_text())["n_games"] == 2
        assert not out.exists() and not list(mnt.glob(".eval.json.tmp*")), "no partial file left on the full disk"
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


# ------------------------------------------------------------------------------------------ nested files: controls
def test_control_the_old_readers_recurse_or_pass_the_bomb():
    """Without the bounds: json.loads and PyYAML's SafeLoader raise RecursionError on 100,000 nested brackets (the
    traceback of issue 52), and SafeLoader accepts the alias bomb (shared objects, 9**9 values once walked)."""
    import yaml

    with pytest.raises(RecursionError):
        json.loads("[" * 100000 + "]" * 100000)
    with pytest.raises(RecursionError):
        yaml.safe_load("train: " + "[" * 100000 + "]" * 100000)
    bomb = yaml.safe_load(ALIAS_BOMB)
    assert len(bomb["train"]["steps"]) == 9 and bomb["i"][0] is bomb["h"]  # accepted: 9**9 values in 9 lists


@pytest.mark.trains
def test_control_without_the_tensorboard_preflight_step_1_runs_then_fails_without_the_flag(ws, monkeypatch,
                                                                                           capsys):
    """Remove the pre-flight (tracking's preflight and the CLI's call): the file in the way is found only when the
    first row is written, after step 1 trained, and the line says "File exists" without naming --report-to."""
    from agentrl_lib import tracking

    monkeypatch.setattr(tracking.TensorBoardTracker, "preflight", staticmethod(lambda run_dir: None))
    monkeypatch.setattr(tracking, "check_tracker_output", lambda *a: None)
    _tensorboard_file(ws, monkeypatch)
    row = _row("train-tensorboard-file-in-the-way")
    try:
        rc = main([a.format(**ws.paths) for a in row.argv])
    except Exception as e:  # the writer's own error, unreported
        rc, err = None, repr(e)
    else:
        err = capsys.readouterr().err
    assert rc != 0 and "--report-to" not in err
    assert (ws.tmp / "out" / "metrics.jsonl").read_text().count("\n") == 1, "step 1 ran before the failure"


def test_control_torch_replays_seed_0_at_2_32_and_overflows_at_2_64():
    """Why eval --seed is range-checked: torch.manual_seed(2**32) draws what seed 0 draws (the sampled evaluation
    of seed 2**32 replays seed 0's), and 2**64 raises an overflow that names no flag."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        zero = torch.rand(3)
        torch.manual_seed(2**32)
        assert torch.equal(torch.rand(3), zero)
        with pytest.raises((ValueError, RuntimeError, OverflowError)):
            torch.manual_seed(2**64)


@pytest.mark.trains
def test_control_an_ambiguous_model_dir_resolves_to_the_rl_checkpoint_in_silence(ws, monkeypatch):
    """Without the check, `--model mixed` (an RL run with an SFT model beside it) resolves to the RL checkpoint's
    policy with no word of the SFT model (model_paths.resolve_model_path takes checkpoints/latest first)."""
    from agentrl_lib.model_paths import resolve_model_path

    _mixed_dir(ws, monkeypatch)
    assert resolve_model_path("mixed") == "mixed/checkpoints/step_000002/policy"


@pytest.mark.trains
def test_control_without_the_walkthrough_bound_the_manifest_loads(ws, monkeypatch):
    """Without WALKTHROUGH_MAX the 3,000,000-command walkthrough loads, for the game check to replay (the hang)."""
    from agentrl_lib.envs import base

    _long_walkthrough(ws, monkeypatch)
    monkeypatch.setattr(base, "WALKTHROUGH_MAX", 10**9)
    assert len(base.load_game_set(ws.tmp / "long").games[0].walkthrough) == 3_000_000


@pytest.mark.trains
def test_control_without_the_eval_check_a_swe_kind_is_ignored_on_bandit(ws):
    """Without commands._check_eval_reward, a bandit env is built with --reward resolved dropped in silence
    (env_kwargs passes a kind only to a family that computes it)."""
    from agentrl_lib.config import EnvConfig

    kwargs = get_family("bandit").env_kwargs(EnvConfig(games=ws["bandit"]), "resolved")
    assert "reward" not in kwargs
