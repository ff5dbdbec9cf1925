"""Checkpoints (checkpoint.py) and what they guarantee a run (issue 9 items 3, 4, 8, 10; issue 8 item 3): complete
checkpoints with a manifest, fallback from a damaged or incomplete one, non-finite weights never saved, every file
fsync'd, older formats still resumed, divergence, a resumed optimizer's learning rate, a full disk during a save, and
Ctrl-C / kill -9 resumed bit-identically. The run directory's own faults (config.yaml, metrics.jsonl, the lock,
refused resumes) are test_rundir.py's. Tiny random model + the scripted ParityEnv (helpers.parity_trainer); each check
has a negative control where it checks correctness (the guard removed or the old behaviour planted, and the check then
fails)."""
import errno
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from agentrl_lib import checkpoint as ckpt_lib
from agentrl_lib import rundir
from agentrl_lib import trainer as trainer_mod
from agentrl_lib.cli import main
from agentrl_lib.config import RunConfig
from agentrl_lib.diagnostics import DivergenceError
from agentrl_lib.envs.pool import SerialPool

from helpers import ParityEnv, parity_config, parity_trainer, strict_loads

ROOT = Path(__file__).resolve().parents[1]


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
    assert [strict_loads(x)["step"] for x in (base_run / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]


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
        t = parity_trainer(cfg, run, resume=True)
    assert t.start_step == 2 and re.search(r"step_000003\b.*\bvalue_head\.pt\b.*\bsha256\b", caplog.text)
    assert (ck / "latest").read_text() == "step_000002", "`--model RUN` must not load the damaged checkpoint"
    assert all(torch.equal(p, step2_vh[n]) for n, p in t.value_head.named_parameters())
    t.close()
    # negative control: without the manifest check the damaged checkpoint is resumed silently
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ckpt_lib, "verify_checkpoint", lambda p, need_value_head=False:
                   json.loads((Path(p) / "state.json").read_text())["step"])
        t = parity_trainer(cfg, run, resume=True)
        assert t.start_step == 3 and torch.equal(t.value_head.linear.bias, step2_vh["linear.bias"])
        t.close()
    # a missing optimizer.pt (and a truncated one) is not re-initialised: that checkpoint is skipped too
    (ck / "step_000002" / "optimizer.pt").unlink()
    with open(ck / "step_000003" / "optimizer.pt", "r+b") as f:
        f.truncate(100)
    with pytest.raises(ckpt_lib.CheckpointError, match="no usable checkpoint.*step_000003: optimizer.pt has 100 "
                                                        "bytes.*step_000002: optimizer.pt missing"):
        parity_trainer(cfg, run, resume=True)


@pytest.mark.trains
def test_nonfinite_weights_are_never_saved(run):
    t = parity_trainer(RunConfig.load(run / "config.yaml"), run, resume=True)
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
    t = parity_trainer(RunConfig.load(run / "config.yaml"), run, resume=True)
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
    assert rundir.resume_config(run) == RunConfig.load(run / "config.yaml")
    t = parity_trainer(rundir.resume_config(run), run, resume=True)
    assert t.start_step == 3
    t.close()
    (ck / "step_000003" / "value_head.pt").unlink()  # PPO needs it: that checkpoint is incomplete
    t = parity_trainer(rundir.resume_config(run), run, resume=True)
    assert t.start_step == 2
    t.close()


@pytest.mark.trains
def test_divergence_skips_nonfinite_updates_then_stops(parity_games, tiny_model_dir, tmp_path, caplog):
    """lr 1e3: step 1 blows the weights up (finite), step 2 has a NaN gradient (measured; the issue's probe)."""
    cfg = parity_config(parity_games, steps=6, lr=1e3, max_nonfinite_steps=2)
    run = tmp_path / "run"
    t = parity_trainer(cfg, run, init=tiny_model_dir)
    diverged = r"2 step\(s\) in a row \(2-3\).*last checkpoint is step_000001.*--lr 100"
    with caplog.at_level(logging.WARNING), pytest.raises(DivergenceError, match=diverged):
        t.train()
    t.close()
    assert re.search(r"\bstep 2\b.*non-finite.*\(grad_norm\)", caplog.text), caplog.text  # the step and the value
    rows = [strict_loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3] and [r["nonfinite_updates"] for r in rows] == [0, 1, 1]
    assert rows[1]["grad_norm"] is None, "NaN is written as null"
    # the weights stayed finite, no checkpoint was written during the streak, and step 1's was kept
    assert ckpt_lib.weights_finite(t.policy, t.value_head)
    assert [p.name for _, p in ckpt_lib.list_checkpoints(run / "checkpoints")] == ["step_000001"]
    # negative control: without the guard the same step 2 update puts NaN into the weights
    t2 = parity_trainer(cfg, tmp_path / "run2", init=tiny_model_dir)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(trainer_mod, "math", type("M", (), {"isfinite": staticmethod(lambda x: True)}))
        t2.step(0)
        t2.step(1)
    assert not ckpt_lib.weights_finite(t2.policy, t2.value_head)
    t2.close()


@pytest.mark.trains
def test_resume_applies_the_new_learning_rate(run):
    cfg = RunConfig.load(run / "config.yaml")
    cfg.train.lr, cfg.train.value_lr = 3e-4, 5e-5
    t = parity_trainer(cfg, run, resume=True)
    assert [g["lr"] for g in t.opt.param_groups] == [3e-4, 5e-5]
    # negative control: the optimizer state alone brings back the lr it was saved with
    state = torch.load(run / "checkpoints" / "step_000003" / "optimizer.pt")
    t.opt.load_state_dict(state)
    assert [g["lr"] for g in t.opt.param_groups] == [1e-3, 1e-4]
    t.close()


# ------------------------------------------------------------------------------------------- faults
@pytest.mark.trains
def test_disk_full_during_a_checkpoint(run, scripted, monkeypatch, capsys):
    real_save = torch.save

    def full_disk(obj, f, *a, **k):
        if str(f).endswith("optimizer.pt"):
            Path(f).write_bytes(b"\0" * 1000)  # a partial file, then the disk is full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(f))
        return real_save(obj, f, *a, **k)

    monkeypatch.setattr(torch, "save", full_disk)
    assert main(["train", "--out", str(run), "--resume", "--steps", "4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]  # (above it: transformers' loading progress bar)
    # the checkpoint not written, why (the disk is full), the one still intact, and the command that resumes from it
    assert err.startswith("agentrl train: error: ") and err.endswith(f"agentrl train --out {run} --resume"), err
    assert re.search(r"step_000004\b.*\bfull\b.*\bstep_000003\b.*\bintact\b", err), err
    ck = run / "checkpoints"
    assert (ck / "latest").read_text() == "step_000003" and not list(ck.glob(".tmp-*"))
    assert ckpt_lib.verify_checkpoint(ck / "step_000003", need_value_head=True) == 3
    monkeypatch.setattr(torch, "save", real_save)
    assert main(["train", "--out", str(run), "--resume", "--steps", "4"]) == 0
    assert (ck / "latest").read_text() == "step_000004"


FAULT_SCRIPT = textwrap.dedent("""
    import os, signal, sys
    import torch
    from agentrl_lib import trainer as trainer_mod
    from agentrl_lib.cli import main
    from agentrl_lib.envs.pool import SerialPool
    from helpers import ParityEnv

    trainer_mod.open_pool = lambda env_cfg, size, games, *kind: SerialPool(size, factory=ParityEnv)
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
def fault_flags(parity_games, tiny_model_dir, tmp_path_factory):
    cfg_file = tmp_path_factory.mktemp("fault") / "c.yaml"
    cfg_file.write_text("train:\n  checkpoint_every: 2\n  max_new_tokens: 4\n")
    return ["--config", str(cfg_file), "--games", str(parity_games), "--init", tiny_model_dir, "--algo", "ppo",
            "--steps", "3", "--games-per-step", "1", "--group-size", "2", "--max-turns", "2", "--lr", "1e-3",
            "--temperature", "1.0", "--device", "cpu"]


@pytest.fixture(scope="module")
def uninterrupted(fault_flags, tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setattr(trainer_mod, "open_pool", lambda env_cfg, size, *_: SerialPool(size, factory=ParityEnv))
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
def test_an_interrupted_run_resumes_bit_identically(fault, fault_flags, uninterrupted, tmp_path, scripted):
    run = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-c", FAULT_SCRIPT.format(fault=fault),
                           "train", "--out", str(run), *fault_flags], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "tests")}, timeout=300)  # helpers.py
    if fault == "ctrl-c":  # one line, exit 130, no traceback; step 3 not logged; step 2's checkpoint intact
        assert proc.returncode == 130, proc.stderr[-2000:]
        assert "Traceback" not in proc.stderr
        last = proc.stderr.strip().splitlines()[-1]  # the step cut short, the last checkpoint, the resume command
        assert last.startswith("agentrl train: interrupted ") and re.search(r"\b3/3\b.*\bstep_000002\b", last), last
        assert last.endswith(f": agentrl train --out {run} --resume"), last
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
