"""One whole RL step of the findings' sweep (configs/cooking.yaml: 4 games × group 4 = 16 episodes, ≤ 8 turns × ≤ 24
tokens), `Trainer.step` from a fresh Trainer per measurement, with each performance lever toggled and all together:

    python benchmarks/bench_sweep_step.py --init RUN_OR_MODEL_DIR [--config configs/cooking.yaml] [--games DIR]
        [--algo ppo|grpo|rloo] [--settings baseline,exact,exact+behaviour,live,live+behaviour,grouped,bf16,all,
        lora,vllm]
        [--repeats 3] [--seed-per-repeat]
        [--warmup 1] [--threads 2] [--set section.field=value ...] [--machine TEXT] [--out results/sweep_step.jsonl]

Settings (each over the config; `baseline` always runs first):
- baseline:        the step before the levers: transformers' `generate` (model.generator hf), train.share_prefix
                   off, algo.old_logprobs recompute, random-row minibatches, fp32, the rollout's KV cache
                   transformers' DynamicCache;
- exact:           train.share_prefix on (the default): each group's first prompt prefilled once in the rollout and
                   forwarded once in the no-grad pass and the update; and the rollout's KV cache a GrowingKVCache
                   (the generators' default, not a config field: `generator.grow_cache` here), appended in place.
                   Exact: the same sampled tokens, the same losses;
- exact+behaviour: exact, and π_old the rollout's log-probs (no no-grad pass); critic-free estimators only (PPO's
                   critic still needs the pass for V_old, so it saves nothing there and is skipped);
- grouped:         exact + train.group_minibatches (other rows share a minibatch: other losses, not exact);
- bf16:            the best exact setting (live+behaviour) + train.mixed_precision bf16 (skipped on a CPU without
                   avx512_bf16/amx_bf16);
- all:             the best exact setting + grouped + bf16 where the CPU has it (skipped when it repeats another);
- lora:            the best exact setting + model.lora_rank 16 (only a LoRA adapter trains: another update; at step 0
                   the adapter adds nothing, so the rollout samples baseline's tokens);
- vllm:            the best exact setting + model.generator vllm: rollouts from the vLLM engine (weights synced
                   after the update); other kernels, so other sampled tokens: not exact. Needs .venv-vllm/bin/python.
- live:            exact + model.generator hf-live: the decode steps only the rows still writing their reply
                   (generation.LiveRowsGenerator), drawing the very tokens `generate` draws (the same exponential
                   noise, the live rows' slices). Exact;
- live+behaviour:  live + algo.old_logprobs behaviour: π_old the rollout's log-probs and, with a critic, V_old the
                   value head on the hidden states that sampled each token (kept by the live decode loop): no no-grad
                   pass for any estimator. Exact up to float rounding (checked like the others).

Every measurement seeds alike (train.seed, step 0), so each setting plays the same games and, for the exact
settings, samples the same tokens. `--seed-per-repeat`: repeat r seeds train.seed + r instead (every setting of a
repeat alike), so the pairs are over seeds: for a setting that samples other tokens than baseline (`live`, `vllm`),
one seed's draws are not the whole answer. After an untimed short step of each setting (--warmup), the settings
alternate within each repeat (A B C A B C ...: the same load of a shared machine). Per measurement: wall seconds of
the step and of its rollout / π_old (rewards, no-grad passes, advantages) / update (epochs of minibatches) parts, CPU
seconds of the process and its env workers, sampled tokens (count and a hash), the batch's tokens and the prompt
positions its groups share, the first minibatch's loss.
Reports medians, the speed-up vs baseline of the medians and pair by pair (per repeat: baseline / setting), in wall
and CPU seconds, and checks the exact settings (tokens identical, first loss within 1e-5 relative of baseline's).
Appends one JSON line to --out (book/benchmarks.md: python benchmarks/report.py --write).
Memory: the process peaked at 12-14 GB (peak_rss_gib in results/sweep_step.jsonl) and at 17 GB with the vLLM engine
beside the Trainers; on a 24 GB machine run it beside nothing heavier than one sweep.
"""
from __future__ import annotations

import argparse
import gc
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # no spinning threads on a shared CPU; read when torch loads

from experiments import ROOT  # the checkout: experiments.checkout_root

BASELINE = {"model.generator": "hf", "generator.grow_cache": False, "train.share_prefix": False,
            "algo.old_logprobs": "recompute", "train.group_minibatches": False,
            "train.mixed_precision": "no", "train.bf16_max_logprob_gap": 0.0}  # bf16: timed, never refused here
LEVERS = {  # setting → the levers it turns on over BASELINE ("bf16" and "all" are built by plan())
    "baseline": {},
    "exact": {"generator.grow_cache": True, "train.share_prefix": True},
    "exact+behaviour": {"generator.grow_cache": True, "train.share_prefix": True, "algo.old_logprobs": "behaviour"},
    "grouped": {"generator.grow_cache": True, "train.share_prefix": True, "train.group_minibatches": True},
    "live": {"generator.grow_cache": True, "train.share_prefix": True, "model.generator": "hf-live"},
    "live+behaviour": {"generator.grow_cache": True, "train.share_prefix": True, "model.generator": "hf-live",
                       "algo.old_logprobs": "behaviour"},
}
GENERATOR_LEVERS = ("generator.grow_cache",)  # attributes of the Trainer's generator, not config fields
LORA_RANK = 16  # `lora`: the best exact setting + a peft LoRA adapter of this rank (alpha 32): at step 0 its
# adapter adds 0 (B = 0), so it samples baseline's tokens, but only the adapter trains: another update, not exact
EXACT = {"exact", "exact+behaviour", "live", "live+behaviour"}  # must sample baseline's tokens and match its first
# minibatch loss
REL_TOL = 1e-5


def vllm_problem() -> str | None:
    """Why the `vllm` setting cannot run in this Python, or None (it needs vLLM: run the script with
    .venv-vllm/bin/python, which `make vllm` builds)."""
    import importlib.util

    return None if importlib.util.find_spec("vllm") else "no vllm in this Python: run with .venv-vllm/bin/python"


def plan(names: list[str], critic: bool, bf16_problem: str | None) -> tuple[dict, dict]:
    """The settings to run: ({name: levers}, {name: why skipped}), baseline first."""
    best = LEVERS["live+behaviour"]
    table = {**LEVERS, "bf16": {**best, "train.mixed_precision": "bf16"},
             "lora": {**best, "model.lora_rank": LORA_RANK},
             "vllm": {**best, "model.generator": "vllm"},
             "all": {**best, "train.group_minibatches": True,
                     **({} if bf16_problem else {"train.mixed_precision": "bf16"})}}
    run, skipped = {}, {}
    for name in ["baseline", *(n for n in names if n != "baseline")]:
        if name not in table:
            raise SystemExit(f"--settings: unknown {name!r}; choose from {', '.join(table)}")
        if name == "exact+behaviour" and critic:
            skipped[name] = ("the critic needs the no-grad forward for V_old (`generate` keeps no hidden states): "
                             "π_old from the rollout saves no pass; live+behaviour does")
        elif name == "bf16" and bf16_problem:
            skipped[name] = bf16_problem
        elif name == "vllm" and (why := vllm_problem()):
            skipped[name] = why
        elif same := next((n for n, levers in run.items() if levers == table[name]), None):
            skipped[name] = f"the same levers as {same}"
        else:
            run[name] = table[name]
    return run, skipped


def add_config_args(p: argparse.ArgumentParser, algo_help: str) -> None:
    """The flags build_config reads (--config, --games, --algo, --set), with --threads and --machine, as every
    benchmark that starts Trainers from a run config takes them."""
    p.add_argument("--config", default=str(ROOT / "configs" / "cooking.yaml"))
    p.add_argument("--games", default="", help="games dir (default: the config's env.games)")
    p.add_argument("--algo", default="ppo", help=algo_help)
    p.add_argument("--threads", type=int, default=2, help="torch threads (0: torch's own)")
    p.add_argument("--set", action="append", default=[], help="a config override, e.g. train.games_per_step=1")
    p.add_argument("--machine", default="", help='how the results name this machine, e.g. "2-core shared CPU"')


def build_config(a, levers: dict, warmup: bool = False):
    """The run config of one measurement: --config, --algo's preset, --set, BASELINE, then `levers`."""
    from agentrl_lib.config import ALGO_PRESETS, RunConfig, parse_field

    cfg = RunConfig.load(a.config)
    overrides = {**{f"algo.{k}": v for k, v in ALGO_PRESETS[a.algo].items()}, "model.device": "cpu",
                 **({"env.games": a.games} if a.games else {}), **dict(s.split("=", 1) for s in a.set),
                 **BASELINE, **levers, **({"env.max_turns": 1, "train.max_new_tokens": 4} if warmup else {})}
    for key, value in overrides.items():
        if key in GENERATOR_LEVERS:
            continue  # set on the Trainer's generator by measure()
        section, name = key.split(".", 1)
        setattr(getattr(cfg, section), name, parse_field(key, getattr(getattr(cfg, section), name), value))
    cfg.validate()
    return cfg


class KeepOpen:
    """The shared env pool, lent to each Trainer: its close() (Trainer.close) leaves the pool open."""

    def __init__(self, pool):
        self.pool = pool

    def __getattr__(self, name):
        return getattr(self.pool, name)

    def close(self) -> None:
        pass


def measure(a, levers: dict, pool, warmup: bool = False) -> dict:
    """One Trainer.step(0) from a fresh Trainer (not timed: its construction); what it did and how long it took."""
    from agentrl_lib.policy import common_prefix_length, prompt_groups
    from agentrl_lib.trainer import Trainer
    from experiments.benchmarks.benchutil import cpu_seconds, load1, sampled_hash

    cfg = build_config(a, levers, warmup)
    seen: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(cfg, Path(tmp) / "run", init=a.init, pool=KeepOpen(pool), progress=False)
        for key in GENERATOR_LEVERS:  # only HF generators have them (vLLM keeps its own cache)
            if hasattr(trainer.generator, name := key.split(".", 1)[1]):
                setattr(trainer.generator, name, {**BASELINE, **levers}[key])
        rollout, old_forward, loss_and_backward = trainer._rollout, trainer._old_forward, trainer._loss_and_backward

        def probe_rollout(step):  # the sampled trajectories
            seen["trajs"], stats = rollout(step)
            return seen["trajs"], stats

        def probe_old_forward(batch):  # the collated batch, and whether π_old's no-grad forward ran
            seen["batch"] = batch
            metrics = old_forward(batch)
            seen["old_forward_ran"] = "logprob_mismatch" in metrics  # logged only when the forward recomputed π_old
            return metrics

        def probe_loss(batch, idx):  # the first minibatch's loss, before any weight changed
            loss, pm = loss_and_backward(batch, idx)
            seen.setdefault("first_loss", loss.item())
            return loss, pm

        trainer._rollout, trainer._old_forward = probe_rollout, probe_old_forward
        trainer._loss_and_backward = probe_loss
        load, c0, t0 = load1(), cpu_seconds(), time.perf_counter()
        row = trainer.step(0)
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
        shared_rollout = getattr(trainer.generator, "shared_positions", 0)
        grow_cache = getattr(trainer.generator, "grow_cache", None)
        precision, adamw = getattr(trainer, "precision", None), getattr(trainer, "adamw_impl", None)
        trainer.close()
    del trainer
    gc.collect()
    batch = seen.get("batch")
    shareable = 0  # prompt positions a shared forward of the whole batch skips (policy.hidden_states' rule)
    for rows in prompt_groups(batch["input_ids"], batch["mask"]) if batch is not None else []:
        P = common_prefix_length(batch["input_ids"][rows], batch["attention_mask"][rows])
        shareable += (len(rows) - 1) * P if len(rows) > 1 and P >= 16 else 0
    rollout_s, update_s = row.get("rollout_seconds", wall), row.get("update_seconds", 0.0)
    return {"seconds": round(wall, 3), "cpu_seconds": round(cpu, 3), "rollout_seconds": round(rollout_s, 3),
            "old_seconds": round(row["step_seconds"] - rollout_s - update_s, 3), "update_seconds": round(update_s, 3),
            "old_forward_ran": seen.get("old_forward_ran"),
            "sampled_tokens": sum(sum(1 for m in t.mask if m) for t in seen["trajs"]),
            "sampled_hash": sampled_hash(seen["trajs"]),
            "batch_tokens": int(batch["attention_mask"].sum()) if batch is not None else 0,
            "shareable_prompt_positions": shareable, "rollout_shared_positions": shared_rollout,
            "grow_cache": grow_cache, "first_loss": seen.get("first_loss"),
            "precision": precision, "adamw": adamw,  # Trainer.precision ('fp32' / 'bf16-autocast'), update.adamw's
            "skipped_update": row.get("skipped_update", 0.0), "success_rate": row["success_rate"],
            "load_before": load, "load_after": load1()}


def exactness_problems(runs: dict[str, list[dict]]) -> list[str]:
    """What breaks the exact levers' promise: an EXACT setting whose sampled tokens differ from baseline's in some
    repeat, or whose first minibatch loss differs by more than REL_TOL relative (1e-9 absolute floor)."""
    problems = []
    for name in (n for n in runs if n in EXACT):
        for r, (base, x) in enumerate(zip(runs["baseline"], runs[name])):
            if x["sampled_hash"] != base["sampled_hash"]:
                problems.append(f"{name}, repeat {r + 1}: sampled tokens differ from baseline's ({x['sampled_tokens']}"
                                f" vs {base['sampled_tokens']} tokens, hash {x['sampled_hash']} vs "
                                f"{base['sampled_hash']})")
            a, b = x["first_loss"], base["first_loss"]
            if (a is None) != (b is None) or (a is not None and abs(a - b) > REL_TOL * max(abs(a), abs(b)) + 1e-9):
                problems.append(f"{name}, repeat {r + 1}: first minibatch loss {a} vs baseline's {b}")
    return problems


def summarize(runs: list[dict], base: list[dict]) -> dict:
    """Medians of one setting's runs and its speed-ups vs baseline (of the medians, and pair by pair)."""
    med = {f"median_{k}": statistics.median(x[k] for x in runs)
           for k in ("seconds", "cpu_seconds", "rollout_seconds", "old_seconds", "update_seconds")}
    bmed = {k: statistics.median(x[k] for x in base) for k in ("seconds", "cpu_seconds")}
    pairs = [round(b["seconds"] / x["seconds"], 3) for b, x in zip(base, runs)]
    cpu_pairs = [round(b["cpu_seconds"] / x["cpu_seconds"], 3) for b, x in zip(base, runs)]
    return {**med, "speedup": round(bmed["seconds"] / med["median_seconds"], 3),
            "cpu_speedup": round(bmed["cpu_seconds"] / med["median_cpu_seconds"], 3), "pair_speedups": pairs,
            "pair_cpu_speedups": cpu_pairs, "median_pair_speedup": statistics.median(pairs),
            "median_pair_cpu_speedup": statistics.median(cpu_pairs)}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--init", default="embedded", help="the model the step starts from: an SFT output, run or model dir")
    add_config_args(p, "an algorithm preset (config.ALGO_PRESETS): ppo, grpo, rloo, ...")
    p.add_argument("--settings", default="baseline,exact,exact+behaviour,grouped,bf16,all")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed-per-repeat", action="store_true",
                   help="repeat r seeds train.seed + r (pairs over seeds); default: every repeat the same seed")
    p.add_argument("--warmup", type=int, default=1, help="1: an untimed short step (1 turn × 4 tokens) per setting")
    p.add_argument("--out", default="", help="append one JSON line (e.g. results/sweep_step.jsonl)")
    a = p.parse_args(argv)
    import torch

    from agentrl_lib.advantages import ESTIMATORS
    from agentrl_lib.envs.base import load_game_set
    from agentrl_lib.envs.pool import open_pool
    from agentrl_lib.hardware import bf16_problem
    from experiments.benchmarks.benchutil import load1, machine_info, peak_rss_gib, write_result

    if a.threads:
        torch.set_num_threads(a.threads)
    cfg = build_config(a, {})
    no_bf16 = bf16_problem(torch.device("cpu"))
    settings, skipped = plan(a.settings.split(","), ESTIMATORS[cfg.algo.advantage].needs_critic, no_bf16)
    for name, why in skipped.items():
        print(f"skipped {name}: {why}", flush=True)
    games = load_game_set(cfg.env.games)
    n_episodes = cfg.train.games_per_step * cfg.algo.group_size
    result = {"bench": "sweep_step", "algo": a.algo, "init": a.init, "config_file": a.config,
              "games": str(games.root), "episodes": n_episodes, "group_size": cfg.algo.group_size,
              "max_turns": cfg.env.max_turns, "new_tokens": cfg.train.max_new_tokens,
              "minibatch": cfg.train.minibatch_size, "repeats": a.repeats, "settings": list(settings),
              "comparison": ",".join(settings) + (";seed per repeat" if a.seed_per_repeat else ""),
              "seeds": [cfg.train.seed + r if a.seed_per_repeat else cfg.train.seed for r in range(a.repeats)],
              "levers": settings, "skipped": skipped, "bf16_hardware": no_bf16 is None, "bf16_problem": no_bf16 or "",
              **machine_info(a.machine), "load_before": load1()}
    runs: dict[str, list[dict]] = {name: [] for name in settings}
    pool = open_pool(cfg.env, n_episodes, games)
    try:
        for levers in settings.values() if a.warmup else ():  # first calls (allocations, bf16 kernels), env resets
            measure(a, levers, pool, warmup=True)
        for r in range(a.repeats):
            for name, levers in settings.items():
                x = measure(a, {**levers, "train.seed": result["seeds"][r]}, pool)
                runs[name].append(x)
                print(f"repeat {r + 1} {name:16s} step {x['seconds']:7.1f} s (rollout {x['rollout_seconds']:.1f}, "
                      f"π_old {x['old_seconds']:.1f}, update {x['update_seconds']:.1f}), CPU {x['cpu_seconds']:.1f} s;"
                      f" {x['sampled_tokens']} sampled tokens ({x['sampled_hash']}), first loss {x['first_loss']}",
                      flush=True)
    finally:
        pool.close()
    result.update(runs=runs, summary={n: summarize(runs[n], runs["baseline"]) for n in settings},
                  load_after=load1(), peak_rss_gib=round(peak_rss_gib(), 2))
    problems = exactness_problems(runs)
    result["exact_check"] = {"ok": not problems, "problems": problems, "rel_tol": REL_TOL,
                             "settings": [n for n in settings if n in EXACT]}
    print(f"{result['cpu']} ({', '.join(result['cpu_flags'])}), {result['torch_threads']} threads, load "
          f"{result['load_before']}–{result['load_after']}; medians of {a.repeats}:")
    for name, s in result["summary"].items():
        print(f"  {name:16s} {s['median_seconds']:7.1f} s  CPU {s['median_cpu_seconds']:7.1f} s  speed-up "
              f"{s['speedup']:.2f}x (pairs {s['pair_speedups']}), CPU {s['cpu_speedup']:.2f}x")
    if problems:
        print("EXACT-LEVERS CHECK FAILED:\n  " + "\n  ".join(problems))
    elif result["exact_check"]["settings"]:
        print(f"exact-levers check passed: {', '.join(result['exact_check']['settings'])} sampled baseline's tokens "
              f"and matched its first minibatch loss within {REL_TOL:g} relative")
    write_result(a.out, result, a, seed=cfg.train.seed)
    return result


if __name__ == "__main__":
    main()
