"""Does bf16 autocast change what the policy samples? The rollout of the sweep step (configs/cooking.yaml: 16
episodes, T = 0.7), at the same weights, in fp32 and under train.mixed_precision bf16, over several steps' games and
seeds:

    python benchmarks/bench_bf16_rollout.py --init RUN_OR_MODEL_DIR [--config configs/cooking.yaml] [--games DIR]
        [--steps 6] [--base MODEL] [--threads 2] [--set section.field=value ...] [--machine TEXT]
        [--out results/bf16_rollout.jsonl]

Why: in bench_sweep_step's one bf16 step the rollout sampled 1,390 tokens against fp32's 644 at the same weights and
seed. Under autocast the output layer's logits are computed in bf16 (about 3 significant digits: at a logit of 20 the
spacing is 0.125) before the sampler's softmax, so the probability of ending a reply may move; or that step was one
draw. Each of `--steps` steps k plays the games and torch seed of Trainer step k (Trainer._rollout(k)), once per
precision (alternating, from fresh Trainers at the same weights). Per episode: policy tokens per turn (the reply
length), turns, won, the share of invalid commands. Per step: the two precisions' means and whether they sampled the
same tokens. Then, over the steps: the mean paired difference bf16 − fp32 of the reply length and of the success
rate with a 95% bootstrap interval (agentrl_lib.stats.bootstrap_mean_ci over the per-step differences; steps are
independent draws of games and seeds). An interval that holds 0 says no difference at this number of steps.
With `--base MODEL` (the model --init was fine-tuned from, e.g. embedded), also why: of the weights the fine-tuning
changed, the share a cast to bf16 maps back onto the base's bf16 value (the change is lost in the forward under
autocast), and the median relative change |Δw| / |w| (median over tensors of the per-tensor median); bf16 keeps 8
significant bits, so a change below about 2^-9 ≈ 2e-3 of a weight rounds away. `--steps 0 --base MODEL` measures
only that (kind "weights"; the rollout comparison is kind "rollout").
Appends one JSON line to --out. A CPU without bf16 (hardware.bf16_problem) is refused in one line.
"""
from __future__ import annotations

import argparse
import gc
import os
import statistics
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # no spinning threads on a shared CPU; read when torch loads

PRECISIONS = ("no", "bf16")  # train.mixed_precision


def episode_stats(trajs) -> list[dict]:
    """Per trajectory: policy tokens per turn (float), turns, won (bool), invalid share of its commands."""
    out = []
    for t in trajs:
        turns = max(t.n_turns, 1)
        valid = list(t.valid)[:t.n_turns]
        out.append({"tokens_per_turn": sum(t.mask) / turns, "turns": t.n_turns, "won": bool(t.won),
                    "invalid": (sum(not v for v in valid) / len(valid)) if valid else 0.0})
    return out


def step_summary(episodes: list[dict]) -> dict:
    return {"tokens_per_turn": round(statistics.fmean(e["tokens_per_turn"] for e in episodes), 3),
            "success_rate": round(statistics.fmean(e["won"] for e in episodes), 4),
            "invalid_rate": round(statistics.fmean(e["invalid"] for e in episodes), 4),
            "turns": round(statistics.fmean(e["turns"] for e in episodes), 3)}


def paired(per_step: list[dict], key: str) -> dict:
    """The mean over steps of bf16 − fp32 of `key` and its 95% bootstrap interval (None below 2 steps)."""
    from agentrl_lib.stats import bootstrap_mean_ci

    diffs = [s["bf16"][key] - s["no"][key] for s in per_step]
    ci = bootstrap_mean_ci(diffs)
    return {"mean_diff": round(statistics.fmean(diffs), 4), "ci": [round(x, 4) for x in ci] if ci else None,
            "diffs": [round(d, 4) for d in diffs],
            "verdict": "n/a (fewer than 2 steps)" if ci is None else
            "no difference at this number of steps" if ci[0] <= 0 <= ci[1] else
            ("bf16 higher" if ci[0] > 0 else "bf16 lower")}


def weights_lost_in_bf16(init: str, base: str) -> dict:
    """Of the weights that differ between `init` and `base` (both loaded in fp32), the share whose bf16 casts are
    equal (the change vanishes under autocast), and the median over tensors of the median relative change
    |w_init − w_base| / |w_base| (where w_base ≠ 0). Raises ValueError when the two models' parameters differ in
    names or shapes."""
    import torch

    from agentrl_lib.models import load_start_policy

    a, _ = load_start_policy(base, device="cpu", dtype="float32")
    b, _ = load_start_policy(init, device="cpu", dtype="float32")
    pa, pb = dict(a.named_parameters()), dict(b.named_parameters())
    if {k: v.shape for k, v in pa.items()} != {k: v.shape for k, v in pb.items()}:
        raise ValueError(f"{init} and {base} are not the same architecture: --base must be the model --init was "
                         "fine-tuned from")
    changed = lost = total = 0
    rel = []
    with torch.no_grad():
        for name, wa in pa.items():
            wb = pb[name]
            moved = wb != wa
            changed += int(moved.sum())
            total += wa.numel()
            lost += int(((wa.bfloat16() == wb.bfloat16()) & moved).sum())
            nz = moved & (wa != 0)
            if nz.any():
                rel.append(float(((wb - wa).abs()[nz] / wa.abs()[nz]).median()))
    return {"base": base, "changed_share": round(changed / total, 4),
            "lost_in_bf16_share": round(lost / max(changed, 1), 4),
            "median_relative_change": float(f"{statistics.median(rel):.3g}") if rel else None}


def play(a, precision: str, step: int, pool) -> tuple[list[dict], list]:
    """Trainer step `step`'s rollout (its games and seed) at the weights of --init, in one precision."""
    from agentrl_lib.trainer import Trainer
    from experiments.benchmarks.bench_sweep_step import KeepOpen, build_config

    cfg = build_config(a, {"train.share_prefix": True, "train.mixed_precision": precision})
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(cfg, Path(tmp) / "run", init=a.init, pool=KeepOpen(pool), progress=False)
        trajs, _ = trainer._rollout(step)
        trainer.close()
    del trainer
    gc.collect()
    return episode_stats(trajs), [[i for i, m in zip(t.ids, t.mask) if m] for t in trajs]


def main(argv: list[str] | None = None) -> dict:
    from experiments.benchmarks.bench_sweep_step import add_config_args

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--init", default="embedded", help="the weights: an SFT output, run or model dir")
    add_config_args(p, "an algorithm preset (only the rollout runs; it sets the config)")
    p.add_argument("--steps", type=int, default=6, help="rollouts per precision: the games and seeds of steps 0..N-1")
    p.add_argument("--base", default="", help="the model --init was fine-tuned from (e.g. embedded): also measure the "
                   "share of its weight changes a cast to bf16 erases")
    p.add_argument("--out", default="", help="append one JSON line (e.g. results/bf16_rollout.jsonl)")
    a = p.parse_args(argv)
    import torch

    from agentrl_lib.envs.base import load_game_set
    from agentrl_lib.envs.pool import open_pool
    from agentrl_lib.hardware import bf16_problem
    from experiments.benchmarks.bench_sweep_step import build_config
    from experiments.benchmarks.benchutil import load1, machine_info, write_result

    if why := bf16_problem(torch.device("cpu")):
        raise SystemExit(f"bench_bf16_rollout: this CPU cannot run bf16 ({why}); nothing to compare")
    if a.steps < 0 or (a.steps == 0 and not a.base):
        raise SystemExit("--steps must be >= 1 (or 0 with --base: the weights only)")
    if a.threads:
        torch.set_num_threads(a.threads)
    cfg = build_config(a, {})
    games = load_game_set(cfg.env.games)
    n_episodes = cfg.train.games_per_step * cfg.algo.group_size
    result = {"bench": "bf16_rollout", "kind": "rollout" if a.steps else "weights", "init": a.init,
              "config_file": a.config, "games": str(games.root),
              "episodes": n_episodes, "max_turns": cfg.env.max_turns, "new_tokens": cfg.train.max_new_tokens,
              "temperature": cfg.train.temperature, "steps": a.steps, **machine_info(a.machine),
              "load_before": load1()}
    if a.base:
        result["weights"] = w = weights_lost_in_bf16(a.init, a.base)
        print(f"weights: {w['changed_share']:.1%} changed from {a.base}; {w['lost_in_bf16_share']:.1%} of the changes "
              f"vanish in a cast to bf16 (median relative change {w['median_relative_change']})", flush=True)
    if not a.steps:
        result["load_after"] = load1()
        write_result(a.out, result, a, seed=cfg.train.seed)
        return result
    per_step = []
    pool = open_pool(cfg.env, n_episodes, games)
    try:
        for k in range(a.steps):
            row, sampled = {"step": k}, {}
            for precision in (PRECISIONS if k % 2 == 0 else PRECISIONS[::-1]):  # alternate which goes first
                episodes, sampled[precision] = play(a, precision, k, pool)
                row[precision] = step_summary(episodes)
            row["same_tokens"] = sampled["no"] == sampled["bf16"]
            per_step.append(row)
            print(f"step {k}: reply tokens/turn fp32 {row['no']['tokens_per_turn']:.1f} vs bf16 "
                  f"{row['bf16']['tokens_per_turn']:.1f}; success {row['no']['success_rate']:.2f} vs "
                  f"{row['bf16']['success_rate']:.2f}; same tokens: {row['same_tokens']}", flush=True)
    finally:
        pool.close()
    result.update(per_step=per_step, load_after=load1(),
                  summary={key: paired(per_step, key) for key in ("tokens_per_turn", "success_rate",
                                                                  "invalid_rate", "turns")},
                  same_tokens_steps=sum(r["same_tokens"] for r in per_step))
    print(f"{result['cpu']}, {result['torch_threads']} threads, load {result['load_before']}–{result['load_after']}; "
          f"over {a.steps} steps ({result['same_tokens_steps']} sampled identical tokens):")
    for key, s in result["summary"].items():
        print(f"  {key:16s} bf16 − fp32 {s['mean_diff']:+.3f}, 95% CI {s['ci']}: {s['verdict']}")
    write_result(a.out, result, a, seed=cfg.train.seed)
    return result


if __name__ == "__main__":
    main()
