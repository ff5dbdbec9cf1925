"""What the bf16 guard (train.bf16_max_logprob_gap) reads at the start of a run, for several starting models: the
mean |log π_bf16 − log π_fp32| over the first batch's action tokens (precision.bf16_logprob_gap), as the first step of
`agentrl train --mixed-precision bf16` computes it (Trainer step 0's rollout under autocast, π_old forwarded under
autocast, then the same batch in fp32).

    python benchmarks/bench_bf16_guard.py --models embedded,RUN_OR_SFT_DIR,... [--names base,sft,...]
        [--config configs/cooking.yaml] [--games DIR] [--threads 2] [--machine TEXT] [--out results/bf16_guard.jsonl]

Why: the guard's limit (0.03 nats per action token) is set between what a start that bf16 leaves intact reads and
what a start whose fine-tuning bf16 rounds away reads (results/bf16_rollout.jsonl: the findings' SFT start won ~40
points less often under bf16). Each model plays the same games with the same seed (step 0 of the config); the
guard is set to log only (limit 0), so every model is measured. Appends one JSON line with every model's gap and
the limit to --out. A CPU without bf16 (hardware.bf16_problem) is refused in one line.
"""
from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # no spinning threads on a shared CPU; read when torch loads



def guard_gap(a, init: str, pool) -> dict:
    """The guard's reading on Trainer step 0's batch from `init`, with the batch's size."""
    from agentrl_lib.rewards import turn_rewards
    from agentrl_lib.trainer import Trainer
    from experiments.benchmarks.bench_sweep_step import KeepOpen, build_config

    cfg = build_config(a, {"train.share_prefix": True, "train.mixed_precision": "bf16",
                           "train.bf16_max_logprob_gap": 0.0})
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(cfg, Path(tmp) / "run", init=init, pool=KeepOpen(pool), progress=False)
        try:
            trajs, _ = trainer._rollout(0)
            ran = [t for t in trajs if t.usable]
            rewards = [turn_rewards(cfg.reward.kind, t.env_rewards, t.max_score, t.won, t.valid,
                                    cfg.reward.format_penalty) for t in ran]
            batch = trainer._collate(ran, rewards, list(range(len(ran))))
            with trainer.autocast():  # as Trainer.step: π_old under autocast, then the guard's fp32 pass
                gap = trainer._old_forward(batch)["bf16_logprob_gap"]
        finally:
            trainer.close()
    return {"gap": round(gap, 5), "episodes": len(ran), "action_tokens": int(batch["mask"].sum()),
            "won": sum(bool(t.won) for t in ran)}


def main(argv: list[str] | None = None) -> dict:
    from experiments.benchmarks.bench_sweep_step import add_config_args

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", required=True, help="comma-separated starting models (embedded, SFT or run dirs)")
    p.add_argument("--names", default="", help="comma-separated labels of --models for the table (default: the "
                   "paths' last parts)")
    add_config_args(p, "an algorithm preset (it sets the config; only step 0's batch runs)")
    p.add_argument("--out", default="", help="append one JSON line (e.g. results/bf16_guard.jsonl)")
    a = p.parse_args(argv)
    import torch

    from agentrl_lib.config import TrainConfig
    from agentrl_lib.envs.base import load_game_set
    from agentrl_lib.envs.pool import open_pool
    from agentrl_lib.hardware import bf16_problem
    from experiments.benchmarks.bench_sweep_step import build_config
    from experiments.benchmarks.benchutil import load1, machine_info, write_result

    if why := bf16_problem(torch.device("cpu")):
        raise SystemExit(f"bench_bf16_guard: this CPU cannot run bf16 ({why}); nothing to measure")
    models = [m for m in a.models.split(",") if m]
    names = [n for n in a.names.split(",") if n] or [Path(m).name for m in models]
    if len(names) != len(models):
        raise SystemExit(f"--names: {len(names)} labels for {len(models)} models; give one per model")
    if a.threads:
        torch.set_num_threads(a.threads)
    cfg = build_config(a, {})
    games = load_game_set(cfg.env.games)
    result = {"bench": "bf16_guard", "config_file": a.config, "games": str(games.root),
              "episodes": cfg.train.games_per_step * cfg.algo.group_size, "limit": TrainConfig().bf16_max_logprob_gap,
              **machine_info(a.machine), "load_before": load1(), "models": []}
    pool = open_pool(cfg.env, result["episodes"], games)
    try:
        for name, model in zip(names, models):
            row = {"name": name, "model": model, **guard_gap(a, model, pool)}
            result["models"].append(row)
            print(f"{name}: bf16_logprob_gap {row['gap']:.4f} nats per action token over {row['action_tokens']} "
                  f"tokens of {row['episodes']} episodes ({'above' if row['gap'] > result['limit'] else 'within'} "
                  f"the limit {result['limit']})", flush=True)
    finally:
        pool.close()
    result["load_after"] = load1()
    write_result(a.out, result, a, seed=cfg.train.seed)
    return result


if __name__ == "__main__":
    main()
