"""Data-parallel training (agentrl_lib/distributed.py): 2 CPU processes × B/2 episodes train to the weights of
1 process × B episodes, and without the gradient all-reduce they do not (the negative control).

The episodes are fixed: one single-process `agentrl train` run records its rollouts (tiny random model, FrozenLake
games, 2 turns) and scripts their outcomes (a win for some episodes, so groups differ); every run below replays
them (tests/ddp_worker.py). `accelerate launch --config_file configs/accelerate/cpu_2proc.yaml` starts the two
processes (gloo) that run the real CLI, `agentrl_lib.cli.main(["train", ...])`, with the data-parallel code path.
Two configurations: GRPO with the StarPO-S filter (half the groups kept, so a minibatch can leave a rank without
rows), Dr. GRPO's constant normaliser and a KL term to a frozen reference; PPO with a critic (value head, GAE).
"""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from ddp_worker import patch_close, recorder, replayer
from safetensors.torch import load_file

REPO = Path(__file__).resolve().parents[1]
LAUNCH_CONFIG = REPO / "configs" / "accelerate" / "cpu_2proc.yaml"
TOL = 1e-5
"""Weights of 2 processes and of 1 process may differ by float rounding only (fp32; measured: 1.3e-7 GRPO,
3.7e-7 PPO)."""

RUNS = {  # name: (flags, minibatch_size); 4 games × group 2 = 8 episodes a step, 2 steps, 2 epochs
    "grpo": (["--algo", "grpo", "--keep-top-std", "0.5", "--loss-agg", "seq_mean_token_sum_norm",
              "--kl-coef", "0.05"], 3),
    "ppo": (["--algo", "ppo", "--lora-rank", "4", "--gradient-checkpointing", "--kl-coef", "0.05"], 3),
}
"""GRPO: StarPO-S keeps 2 of 4 groups, so the second minibatch of each epoch has 1 row and rank 1 none; the KL
reference is a frozen copy. PPO: a critic (value head, GAE), a LoRA adapter (the KL reference is the adapter
switched off) and gradient checkpointing under DDP."""


def train_argv(games, model, out, name):
    flags, minibatch = RUNS[name]
    return ["train", *flags, "--games", str(games), "--model", str(model), "--out", str(out), "--steps", "2",
            "--games-per-step", "4", "--group-size", "2", "--minibatch-size", str(minibatch), "--epochs", "2",
            "--max-turns", "2", "--max-new-tokens", "6", "--temperature", "1.0", "--lr", "1e-3",
            "--reward", "sparse", "--seed", "3", "--device", "cpu", "--no-process-pool", "--checkpoint-every", "1"]


def script_outcomes(steps):
    """Episode j of group g wins (reward 1 on its last turn) when (g + j) % 2 == 0, or when g % 4 == 3: groups of
    return spread 0.5 and 0, so the StarPO-S filter has a choice and GRPO has a signal."""
    for trajs in steps:
        for i, t in enumerate(trajs):
            j = sum(u.group == t.group for u in trajs[:i])
            t.won = (t.group + j) % 2 == 0 or t.group % 4 == 3
            t.termination = "won" if t.won else t.termination
    return steps


def changed(w: dict, start: dict) -> float:
    """How far training moved the weights: max |w − start| over the base weights, or max |lora_B| (zero at init)."""
    if any(k in start for k in w):
        return max_diff(w, start, common=True)
    return max(v.abs().max().item() for k, v in w.items() if "lora_B" in k)


def weights(run) -> dict[str, torch.Tensor]:
    return torch.load(Path(run) / "rank0.pt")


def max_diff(a: dict, b: dict, common: bool = False) -> float:
    """max |a − b| over every tensor (over the names both have, with common)."""
    assert common or a.keys() == b.keys()
    return max((a[k].float() - b[k].float()).abs().max().item() for k in a if k in b)


def rows(run) -> list[dict]:
    return [json.loads(x) for x in (Path(run) / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def frozenlake(tmp_path_factory):
    from agentrl_lib.envs import get_family

    return get_family("frozenlake").make_games(tmp_path_factory.mktemp("frozenlake"), 8, seed=0).root


@pytest.mark.slow
@pytest.mark.trains
@pytest.mark.subprocess
def test_two_processes_train_the_weights_of_one(tiny_model_dir, frozenlake, tmp_path, monkeypatch):
    from agentrl_lib import trainer as trainer_mod
    from agentrl_lib.cli import main

    monkeypatch.setattr(trainer_mod.Trainer, "close", trainer_mod.Trainer.close)  # restored after the test
    patch_close(trainer_mod.Trainer)  # every run saves RUN/rank{r}.pt

    # the episodes: a real single-process run records them; their outcomes are then scripted
    steps = []
    monkeypatch.setattr(trainer_mod, "rollout", recorder(trainer_mod.rollout, steps))
    assert main(train_argv(frozenlake, tiny_model_dir, tmp_path / "record", "grpo")) == 0
    episodes = tmp_path / "episodes.pkl"
    episodes.write_bytes(pickle.dumps(script_outcomes(steps)))

    start = {f"policy.{k}": v for k, v in load_file(Path(tiny_model_dir) / "model.safetensors").items()}

    # (a) one process, replaying the episodes
    for name in RUNS:
        monkeypatch.setattr(trainer_mod, "rollout", replayer(steps))
        assert main(train_argv(frozenlake, tiny_model_dir, tmp_path / f"one-{name}", name)) == 0

    # (b) two processes (accelerate launch, gloo), the same episodes; (c) the same without the gradient all-reduce
    runs = [{"argv": train_argv(frozenlake, tiny_model_dir, tmp_path / f"two-{name}", name)} for name in RUNS]
    runs.append({"argv": train_argv(frozenlake, tiny_model_dir, tmp_path / "nosync-grpo", "grpo"),
                 "no_grad_sync": True})
    # (d) the real rollout in 2 processes (each plays its 2 games × 2), 1 step, then --resume for a second
    real = tmp_path / "two-real"
    runs += [{"argv": train_argv(frozenlake, tiny_model_dir, real, "grpo") + ["--steps", "1"], "replay": False},
             {"argv": ["train", "--out", str(real), "--resume", "--steps", "2"], "replay": False}]
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"episodes": str(episodes), "runs": runs}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")]), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(LAUNCH_CONFIG),
                           str(REPO / "tests" / "ddp_worker.py"), str(spec)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]

    for name in RUNS:
        one, two = tmp_path / f"one-{name}", tmp_path / f"two-{name}"
        a, b = weights(one), weights(two)
        print(f"{name}: max |Δ| 1 vs 2 processes {max_diff(a, b):.2e}; kept {[r['kept_fraction'] for r in rows(one)]}")
        assert max_diff(a, b) < TOL, f"{name}: 2 processes trained other weights than 1 (max |Δ| {max_diff(a, b)})"
        assert max_diff(b, torch.load(two / "rank1.pt")) == 0.0, f"{name}: the two ranks hold different weights"
        # the update was real (no skipped step), and the logged rows are the single-process ones
        r1, r2 = rows(one), rows(two)
        assert [r["step"] for r in r2] == [1, 2], "rank 0 alone writes metrics.jsonl, one row per step"
        assert all(r["skipped_update"] == 0.0 for r in r1)
        assert changed(a, start) > 100 * TOL, f"{name}: training did not change the weights"
        for k in ("episodes", "success_rate", "return_mean", "group_return_std", "kept_fraction", "policy_tokens"):
            assert [r[k] for r in r1] == [r[k] for r in r2], k
        for k in ("policy_loss", "entropy", "approx_kl", "clip_frac", "grad_norm", "logprob_mismatch_mean",
                  "kl_ref") + \
                 (("value_loss", "value_grad_norm", "explained_variance") if name == "ppo" else ()):
            assert [r[k] for r in r2] == pytest.approx([r[k] for r in r1], rel=1e-4, abs=1e-6), k
        assert (two / "checkpoints" / "latest").read_text() == "step_000002"
        assert sorted(p.name for p in (two / "checkpoints").iterdir()) == ["latest", "step_000001", "step_000002"]

    r = rows(real)
    assert [x["step"] for x in r] == [1, 2] and all(x["episodes"] == 8 for x in r)
    assert (real / "checkpoints" / "latest").read_text() == "step_000002"
    assert max_diff(weights(real), torch.load(real / "rank1.pt")) == 0.0

    # the check catches a missing all-reduce: each rank stepped on its own shard
    a, c0, c1 = weights(tmp_path / "one-grpo"), weights(tmp_path / "nosync-grpo"), \
        torch.load(tmp_path / "nosync-grpo" / "rank1.pt")
    print(f"no all-reduce: max |Δ| vs 1 process {max_diff(a, c0):.2e}, rank 0 vs rank 1 {max_diff(c0, c1):.2e}")
    assert max_diff(a, c0) > 100 * TOL and max_diff(c0, c1) > 100 * TOL, (max_diff(a, c0), max_diff(c0, c1))


def test_a_single_process_builds_no_process_group_and_uneven_shares_are_refused(monkeypatch):
    from agentrl_lib import distributed
    from agentrl_lib.config import ConfigError, TrainConfig

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert isinstance(distributed.data_parallel("cpu"), distributed.SingleProcess)  # no launcher: no process group
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert isinstance(distributed.data_parallel("cpu"), distributed.SingleProcess)  # --num_processes 1: the same
    dp = distributed.DataParallel.__new__(distributed.DataParallel)  # a rank's view, without a process group
    dp.rank, dp.world_size = 1, 2
    with pytest.raises(ConfigError, match="games-per-step 4"):
        dp.check_train(TrainConfig(games_per_step=3))
    with pytest.raises(ConfigError, match="max_tokens_per_microbatch is single-process only"):
        dp.check_train(TrainConfig(games_per_step=4, max_tokens_per_microbatch=512))
    dp.check_train(TrainConfig(games_per_step=4))
    games, groups = dp.shard_episodes(list("aabbccdd"), [0, 0, 1, 1, 2, 2, 3, 3], group_size=2)
    assert games == list("ccdd") and groups == [2, 2, 3, 3]  # whole groups, the second half, global group ids
    assert dp.rows(torch.arange(5)).tolist() == [1, 3]
