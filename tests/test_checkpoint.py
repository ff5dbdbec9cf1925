"""Checkpoints, resume and run-directory faults (issue 9 items 3, 4, 8, 10; issue 8 item 3): divergence, damaged or
incomplete checkpoints, damaged config.yaml, refused resume overrides, torn metrics lines, strict JSON, the run
lock, a full disk and Ctrl-C. Tiny random model + the scripted ParityEnv; each check has a negative control where it
checks correctness (the guard removed or the old behaviour planted, and the check then fails)."""
import errno
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from agentrl_lib import checkpoint as ckpt_lib
from agentrl_lib import trainer as trainer_mod
from agentrl_lib.cli import main
from agentrl_lib.config import AlgoConfig, EnvConfig, ModelConfig, RunConfig, TrainConfig
from agentrl_lib.envs.pool import SerialPool
from agentrl_lib.trainer import DivergenceError, Trainer

from helpers import ParityEnv, scripted_games

ROOT = Path(__file__).resolve().parents[1]


def _cfg(games, algo="ppo", steps=3, **train):
    train = {"games_per_step": 1, "minibatch_size": 2, "max_new_tokens": 4, "checkpoint_every": 1, "lr": 1e-3,
             "temperature": 1.0, **train}
    return RunConfig(env=EnvConfig(games=str(games), max_turns=2), algo=AlgoConfig.from_preset(algo, group_size=2),
                     model=ModelConfig(device="cpu"), train=TrainConfig(steps=steps, **train))


def _trainer(cfg, run, init=None, resume=False):
    return Trainer(cfg, run, init=init, resume=resume, pool=SerialPool(2, factory=ParityEnv), progress=False)


def _state(t: Trainer) -> dict[str, torch.Tensor]:
    out = {n: p.detach().clone() for n, p in t.policy.named_parameters()}
    out.update({f"vh.{n}": p.detach().clone() for n, p in t.value_head.named_parameters()})
    return out


@pytest.fixture(scope="module")
def games(tmp_path_factory):
    return scripted_games(tmp_path_factory.mktemp("ckpt") / "games")


@pytest.fixture(scope="module")
def base_run(tmp_path_factory, games, tiny_model_dir):
    """A PPO run of 3 steps, a checkpoint after each, train.keep_checkpoints = 2; tests copy it before damaging it."""
    run = tmp_path_factory.mktemp("base") / "run"
    t = _trainer(_cfg(games), run, init=tiny_model_dir)
    t.train()
    t.close()
    return run


@pytest.fixture
def run(base_run, tmp_path):
    dst = tmp_path / "run"
    shutil.copytree(base_run, dst)
    return dst


@pytest.fixture
def scripted_cli(monkeypatch):
    """The CLI's trainer plays the scripted ParityEnv instead of TextWorld."""
    monkeypatch.setattr(trainer_mod, "open_pool", lambda env_cfg, size, games: SerialPool(size, factory=ParityEnv))


def _strict_loads(line: str):
    def refuse(name):
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(line, parse_constant=refuse)


# ---------------------------------------------------------------------------------------------- checkpoints
@pytest.mark.trains
def test_checkpoints_are_complete_and_the_newest_two_are_kept(base_run):
    ck = base_run / "checkpoints"
    assert sorted(p.name for p in ck.iterdir()) == ["latest", "step_000002", "step_000003"]
    assert (ck / "latest").read_text() == "step_000003"
    state = json.loads((ck / "step_000003" / "state.json").read_text())
    assert state["step"] == 3 and {"optimizer.pt", "value_head.pt", "config.yaml", "policy/config.json"} <= set(
        state["files"])
    assert ckpt_lib.verify_checkpoint(ck / "step_000003", need_value_head=True) == 3
    # every metrics line is strict JSON (no bare NaN), one per step
    assert [_strict_loads(x)["step"] for x in (base_run / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]


@pytest.mark.trains
def test_damaged_or_incomplete_latest_checkpoint_falls_back(run, caplog):
    ck = run / "checkpoints"
    # step 3's value head overwritten by step 2's (same size, loads fine): only the manifest's hash sees it
    vh2, vh3 = ck / "step_000002" / "value_head.pt", ck / "step_000003" / "value_head.pt"
    assert vh2.stat().st_size == vh3.stat().st_size and vh2.read_bytes() != vh3.read_bytes()
    shutil.copyfile(vh2, vh3)
    step2_vh = torch.load(vh2)
    cfg = RunConfig.load(run / "config.yaml")
    with caplog.at_level(logging.WARNING):
        t = _trainer(cfg, run, resume=True)
    assert t.start_step == 2 and "step_000003: value_head.pt does not match its sha256" in caplog.text
    assert (ck / "latest").read_text() == "step_000002", "`--model RUN` must not load the damaged checkpoint"
    assert all(torch.equal(p, step2_vh[n]) for n, p in t.value_head.named_parameters())
    t.close()
    # negative control: without the manifest check the damaged checkpoint is resumed silently
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ckpt_lib, "verify_checkpoint", lambda p, need_value_head=False:
                   json.loads((Path(p) / "state.json").read_text())["step"])
        t = _trainer(cfg, run, resume=True)
        assert t.start_step == 3 and torch.equal(t.value_head.linear.bias, step2_vh["linear.bias"])
        t.close()
    # a missing optimizer.pt (and a truncated one) is not re-initialised: that checkpoint is skipped too
    (ck / "step_000002" / "optimizer.pt").unlink()
    with open(ck / "step_000003" / "optimizer.pt", "r+b") as f:
        f.truncate(100)
    with pytest.raises(ckpt_lib.CheckpointError, match="no usable checkpoint.*step_000003: optimizer.pt has 100 "
                                                        "bytes.*step_000002: optimizer.pt missing"):
        _trainer(cfg, run, resume=True)


@pytest.mark.trains
def test_nonfinite_weights_are_never_saved(run, tiny_model_dir, games):
    t = _trainer(RunConfig.load(run / "config.yaml"), run, resume=True)
    with torch.no_grad():
        next(t.policy.parameters())[0, 0] = float("nan")
    with pytest.raises(ckpt_lib.CheckpointError, match="non-finite"):
        t.save_checkpoint(4)
    ck = run / "checkpoints"
    assert sorted(p.name for p in ck.glob("step_*")) == ["step_000002", "step_000003"]
    assert (ck / "latest").read_text() == "step_000003" and not list(ck.glob(".tmp-*"))
    # negative control: without the check the NaN model is saved and the oldest good checkpoint pruned
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ckpt_lib, "weights_finite", lambda *m: True)
        t.save_checkpoint(4)
    assert sorted(p.name for p in ck.glob("step_*")) == ["step_000003", "step_000004"]
    t.close()


@pytest.mark.trains
def test_every_file_and_directory_is_fsynced_before_and_after_the_rename(run, monkeypatch):
    t = _trainer(RunConfig.load(run / "config.yaml"), run, resume=True)
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"))),
                                                 real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append(("replace", str(a), str(b))),
                                                     real_replace(a, b))[1])

    def unsynced(final: Path) -> list[str]:
        """Files and dirs of the checkpoint not fsync'd (under the temp name) before the rename, or the parent
        directory not fsync'd after it."""
        i = next(k for k, e in enumerate(events) if e[0] == "replace" and e[2] == str(final))
        tmp = Path(events[i][1])
        synced = {e[1] for e in events[:i] if e[0] == "fsync"}
        want = [tmp / p.relative_to(final) for p in final.rglob("*")] + [tmp]
        missing = [str(p) for p in want if str(p) not in synced]
        if not any(e == ("fsync", str(final.parent)) for e in events[i:]):
            missing.append(f"{final.parent} after the rename")
        return missing

    final = t.save_checkpoint(4)
    assert len(list(final.rglob("*"))) > 8 and unsynced(final) == []
    # negative control: without the fsync of the tree the check names the files
    events.clear()
    monkeypatch.setattr(ckpt_lib, "fsync_tree", lambda root: None)
    final = t.save_checkpoint(5)
    assert any(m.endswith("optimizer.pt") for m in unsynced(final))
    t.close()


@pytest.mark.trains
def test_checkpoints_from_before_the_manifest_still_resume(run):
    """Format 1 (state.json = {"step": N}, no config copy) as written by earlier versions."""
    ck = run / "checkpoints"
    for name in ("step_000002", "step_000003"):
        (ck / name / "state.json").write_text(json.dumps({"step": int(name[-1])}))
        (ck / name / "config.yaml").unlink()
    assert ckpt_lib.resume_config(run) == RunConfig.load(run / "config.yaml")
    t = _trainer(ckpt_lib.resume_config(run), run, resume=True)
    assert t.start_step == 3
    t.close()
    (ck / "step_000003" / "value_head.pt").unlink()  # PPO needs it: that checkpoint is incomplete
    t = _trainer(ckpt_lib.resume_config(run), run, resume=True)
    assert t.start_step == 2
    t.close()


@pytest.mark.trains
def test_divergence_skips_nonfinite_updates_then_stops(games, tiny_model_dir, tmp_path, caplog):
    """lr 1e3: step 1 blows the weights up (finite), step 2 has a NaN gradient (measured; the issue's probe)."""
    cfg = _cfg(games, steps=6, lr=1e3, max_nonfinite_steps=2)
    run = tmp_path / "run"
    t = _trainer(cfg, run, init=tiny_model_dir)
    diverged = r"2 step\(s\) in a row \(2-3\).*last checkpoint is step_000001.*--lr 100"
    with caplog.at_level(logging.WARNING), pytest.raises(DivergenceError, match=diverged):
        t.train()
    t.close()
    assert "step 2: non-finite loss or gradient (grad_norm)" in caplog.text
    rows = [_strict_loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3] and [r["nonfinite_updates"] for r in rows] == [0, 1, 1]
    assert rows[1]["grad_norm"] is None, "NaN is written as null"
    # the weights stayed finite, no checkpoint was written during the streak, and step 1's was kept
    assert ckpt_lib.weights_finite(t.policy, t.value_head)
    assert [p.name for _, p in ckpt_lib.list_checkpoints(run / "checkpoints")] == ["step_000001"]
    # negative control: without the guard the same step 2 update puts NaN into the weights
    t2 = _trainer(cfg, tmp_path / "run2", init=tiny_model_dir)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(trainer_mod, "math", type("M", (), {"isfinite": staticmethod(lambda x: True)}))
        t2.step(0)
        t2.step(1)
    assert not ckpt_lib.weights_finite(t2.policy, t2.value_head)
    t2.close()


# ------------------------------------------------------------------------------------------------- resume
@pytest.mark.trains
def test_missing_or_truncated_config_is_restored_from_the_checkpoint(run, tmp_path, caplog):
    original = RunConfig.load(run / "config.yaml")
    lines = (run / "config.yaml").read_text().splitlines(keepends=True)
    (run / "config.yaml").write_text("".join(lines[: len(lines) // 2]))  # cut in the middle of the algo section
    # negative control: the plain loader is fooled by the truncated file (defaults fill the lost keys)
    assert RunConfig.load(run / "config.yaml") != original
    with caplog.at_level(logging.WARNING):
        assert ckpt_lib.resume_config(run) == original
    assert "is incomplete" in caplog.text and "using the copy saved with checkpoint step_000003" in caplog.text
    (run / "config.yaml").unlink()
    assert ckpt_lib.resume_config(run) == original
    # no copy to fall back on: a clear error, no defaults
    old = tmp_path / "old"
    old.mkdir()
    (old / "config.yaml").write_text("")
    with pytest.raises(ckpt_lib.CheckpointError, match="empty or not a mapping, and no checkpoint holds a copy"):
        ckpt_lib.resume_config(old)


def test_resume_on_a_directory_without_a_run(tmp_path, capsys):
    assert main(["train", "--out", str(tmp_path / "nothing"), "--resume"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("agentrl train: error: no run in") and "\n" not in err


@pytest.mark.trains
def test_incompatible_resume_overrides_are_refused_and_change_nothing(run, scripted_cli, capsys):
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".lock"}
    for flags, field in [(["--algo", "grpo"], "algo.advantage ('gae' → 'grpo')"),
                         (["--lora-rank", "4"], "model.lora_rank (0 → 4)"),
                         (["--init", str(run)], "model.name")]:
        assert main(["train", "--out", str(run), "--resume", "--steps", "4", *flags]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("agentrl train: error: --resume cannot change") and field in err and "\n" not in err
    assert before == {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".lock"}
    # allowed changes resume, and the config is rewritten with them
    assert main(["train", "--out", str(run), "--resume", "--steps", "4", "--lr", "2e-4"]) == 0
    assert RunConfig.load(run / "config.yaml").train.lr == 2e-4
    assert [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3, 4]


@pytest.mark.trains
def test_resume_applies_the_new_learning_rate(run):
    cfg = RunConfig.load(run / "config.yaml")
    cfg.train.lr, cfg.train.value_lr = 3e-4, 5e-5
    t = _trainer(cfg, run, resume=True)
    assert [g["lr"] for g in t.opt.param_groups] == [3e-4, 5e-5]
    # negative control: the optimizer state alone brings back the lr it was saved with
    state = torch.load(run / "checkpoints" / "step_000003" / "optimizer.pt")
    t.opt.load_state_dict(state)
    assert [g["lr"] for g in t.opt.param_groups] == [1e-3, 1e-4]
    t.close()


@pytest.mark.trains
def test_a_torn_metrics_line_does_not_block_resume(run, caplog):
    path = run / "metrics.jsonl"
    with open(path, "a") as f:
        f.write('{"step": 4, "return_mean": 0.3, "grad_')  # a crash in the middle of a row
    torn = path.read_text().splitlines()[-1]
    with pytest.raises(json.JSONDecodeError):  # negative control: what the old reader did with it
        json.loads(torn)
    with caplog.at_level(logging.WARNING):
        rows = ckpt_lib.read_metrics(path, upto_step=3)
    assert [r["step"] for r in rows] == [1, 2, 3] and "skipped 1 unreadable line(s) (line 4" in caplog.text
    assert [_strict_loads(x)["step"] for x in path.read_text().splitlines()] == [1, 2, 3]


def test_metrics_are_strict_json():
    row = {"step": 1, "entropy": float("nan"), "grad_norm": float("inf"), "return_mean": 0.5, "reasons": ["x"]}
    line = ckpt_lib.json_line(row)
    assert _strict_loads(line) == {"step": 1, "entropy": None, "grad_norm": None, "return_mean": 0.5,
                                   "reasons": ["x"]}
    with pytest.raises(ValueError, match="NaN"):  # negative control: json.dumps writes bare NaN
        _strict_loads(json.dumps(row))


# ----------------------------------------------------------------------------------------- run-directory faults
@pytest.mark.trains
@pytest.mark.subprocess
def test_a_second_trainer_is_refused_while_the_first_holds_the_lock(run, scripted_cli, capsys):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from agentrl_lib.checkpoint import RunLock; RunLock(sys.argv[1]); "
                               "print('locked', flush=True); sys.stdin.read()", str(run)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert main(["train", "--out", str(run), "--resume", "--steps", "4"]) == 2
        err = capsys.readouterr().err.strip()
        assert err == (f"agentrl train: error: {run} is in use by another trainer (pid {holder.pid}); wait for it to "
                       "finish or stop it, or pass another --out"), err
        # negative control: without the lock the second trainer would start writing the same directory
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(ckpt_lib, "RunLock", lambda d: type("NoLock", (), {"release": lambda self: None})())
            _trainer(RunConfig.load(run / "config.yaml"), run, resume=True).close()
    finally:
        holder.kill()  # kill -9: the kernel releases the lock of a dead holder
        holder.wait()
    t = _trainer(RunConfig.load(run / "config.yaml"), run, resume=True)
    t.close()


@pytest.mark.trains
def test_disk_full_during_a_checkpoint(run, scripted_cli, monkeypatch, capsys):
    real_save = torch.save

    def full_disk(obj, f, *a, **k):
        if str(f).endswith("optimizer.pt"):
            Path(f).write_bytes(b"\0" * 1000)  # a partial file, then the disk is full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(f))
        return real_save(obj, f, *a, **k)

    monkeypatch.setattr(torch, "save", full_disk)
    assert main(["train", "--out", str(run), "--resume", "--steps", "4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]  # (above it: transformers' loading progress bar)
    assert err.startswith("agentrl train: error: could not write checkpoint step_000004 (the disk is full); the "
                          "previous checkpoint (step_000003) is intact") and err.endswith(f"--out {run} --resume")
    ck = run / "checkpoints"
    assert (ck / "latest").read_text() == "step_000003" and not list(ck.glob(".tmp-*"))
    assert ckpt_lib.verify_checkpoint(ck / "step_000003", need_value_head=True) == 3
    monkeypatch.setattr(torch, "save", real_save)
    assert main(["train", "--out", str(run), "--resume", "--steps", "4"]) == 0
    assert (ck / "latest").read_text() == "step_000004"


FAULT_SCRIPT = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {tests!r})
    import torch
    from agentrl_lib import trainer as trainer_mod
    from agentrl_lib.cli import main
    from agentrl_lib.envs.pool import SerialPool
    from helpers import ParityEnv

    trainer_mod.open_pool = lambda env_cfg, size, games: SerialPool(size, factory=ParityEnv)
    # a suite started as a background job (`make test &`) hands its children SIGINT ignored, and Python then installs
    # no KeyboardInterrupt handler: restore the one an interactive Ctrl-C meets
    signal.signal(signal.SIGINT, signal.default_int_handler)
    step, save = trainer_mod.Trainer.step, torch.save

    def step_then_ctrl_c(self, i):  # Ctrl-C in the middle of step 3 (after its rollout and update)
        row = step(self, i)
        if i == 2:
            os.kill(os.getpid(), signal.SIGINT)
        return row

    def save_then_die(obj, f, *a, **k):  # kill -9 in the middle of writing checkpoint step_000002
        save(obj, f, *a, **k)
        if str(f).endswith("step_000002/optimizer.pt"):
            os.kill(os.getpid(), signal.SIGKILL)

    if {fault!r} == "ctrl-c":
        trainer_mod.Trainer.step = step_then_ctrl_c
    else:
        torch.save = save_then_die
    sys.exit(main(sys.argv[1:]))
""")


@pytest.fixture(scope="module")
def fault_flags(games, tiny_model_dir, tmp_path_factory):
    cfg_file = tmp_path_factory.mktemp("fault") / "c.yaml"
    cfg_file.write_text("train:\n  checkpoint_every: 2\n  max_new_tokens: 4\n")
    return ["--config", str(cfg_file), "--games", str(games), "--init", tiny_model_dir, "--algo", "ppo", "--steps",
            "3", "--games-per-step", "1", "--group-size", "2", "--max-turns", "2", "--lr", "1e-3", "--temperature",
            "1.0", "--device", "cpu"]


@pytest.fixture(scope="module")
def uninterrupted(fault_flags, tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setattr(trainer_mod, "open_pool", lambda env_cfg, size, games: SerialPool(size, factory=ParityEnv))
    ref = tmp_path_factory.mktemp("ref") / "run"
    assert main(["train", "--out", str(ref), *fault_flags]) == 0
    mp.undo()
    return ref


def _same_run(a: Path, b: Path) -> bool:
    """Same metrics (timings aside) and bit-identical final weights, value head and optimizer state."""
    def rows(d):
        skip = ("seconds", "tokens_per_s")
        return [{k: v for k, v in json.loads(x).items() if not k.endswith(skip)}
                for x in (d / "metrics.jsonl").read_text().splitlines()]

    ck = [d / "checkpoints" / "step_000003" for d in (a, b)]
    sa, sb = (ckpt_lib.read_training_state(c) for c in ck)
    return (rows(a) == rows(b)
            and ((ck[0] / "policy" / "model.safetensors").read_bytes()
                 == (ck[1] / "policy" / "model.safetensors").read_bytes())
            and torch.equal(sa["value_head"]["linear.weight"], sb["value_head"]["linear.weight"])
            and all(torch.equal(x, y) for x, y in zip(sa["optimizer"]["state"][0].values(),
                                                      sb["optimizer"]["state"][0].values())))


@pytest.mark.slow
@pytest.mark.trains
@pytest.mark.subprocess
@pytest.mark.parametrize("fault", ["ctrl-c", "kill-9-in-checkpoint"])
def test_an_interrupted_run_resumes_bit_identically(fault, fault_flags, uninterrupted, tmp_path, scripted_cli):
    run = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-c", FAULT_SCRIPT.format(tests=str(ROOT / "tests"), fault=fault),
                           "train", "--out", str(run), *fault_flags], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    if fault == "ctrl-c":  # one line, exit 130, no traceback; step 3 not logged; step 2's checkpoint intact
        assert proc.returncode == 130, proc.stderr[-2000:]
        assert "Traceback" not in proc.stderr
        assert proc.stderr.strip().splitlines()[-1] == (
            f"agentrl train: interrupted during step 3/3 (that step is not saved); the last checkpoint is step_000002; "
            f"resume with: agentrl train --out {run} --resume")
        assert [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    else:  # killed while writing its only checkpoint: a temp dir is left, no checkpoint; resume starts over
        assert proc.returncode == -signal.SIGKILL
        assert [p.name for p in (run / "checkpoints").iterdir()] == [".tmp-step_000002"]
    spare = tmp_path / "spare"
    shutil.copytree(run, spare)
    assert main(["train", "--out", str(run), "--resume"]) == 0
    assert _same_run(run, uninterrupted)
    assert not list((run / "checkpoints").glob(".tmp-*"))
    if fault == "ctrl-c":  # negative control: a resume that does not restore the optimizer state is caught
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(ckpt_lib, "apply_training_state", lambda state, opt, vh=None, lrs=None: vh.load_state_dict(
                state["value_head"]))
            assert main(["train", "--out", str(spare), "--resume"]) == 0
        assert not _same_run(spare, uninterrupted)
