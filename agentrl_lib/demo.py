"""The recipe end to end (Practitioner's Guide §5): make games → evaluate the base model → SFT warm-up on
walkthroughs → evaluate → RL → evaluate, all on held-out games, then a table base → SFT → RL.

`agentrl demo` and `make demo` run it; notebooks/00_quickstart.ipynb runs the same steps one cell at a time.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from .config import ALGO_PRESETS, AlgoConfig, ConfigError, EnvConfig, ModelConfig, RewardConfig, RunConfig, TrainConfig
from .envs.textworld import make_textworld_games
from .evaluate import evaluate, format_eval, save_eval
from .hardware import bf16_problem, cpu_model, pick_device
from .models import load_policy
from .paths import cache_root, git_commit
from .records import compact_eval, machine_info


@dataclass
class DemoBudget:
    """Sizes of each stage; `full()` is the `make demo` budget (12-20 min on 2 CPU cores), `fast()` the CI one."""

    train_games: int = 16
    eval_games: int = 16
    sft_games: int = 16
    sft_epochs: float = 1.0
    rl_steps: int = 12
    games_per_step: int = 2
    group_size: int = 4
    max_turns: int = 8
    rl_lr: float = 3e-5
    """RL learning rate. Measured on the full budget: 1e-5 left held-out success at the SFT level (68.8%); 3e-5 raised
    it to 81.2% (one seed, before the correctness fixes) and 87.5% after them (one seed: 14 vs 13 of 16 games)."""
    sft_lr: float = 5e-5
    """SFT learning rate (TRL SFTTrainer, constant)."""
    group_minibatches: bool = False
    """RL minibatches of whole groups (train.group_minibatches: each group's prompt forwarded once in the update;
    another split of the episodes into gradient steps, so not exact). `--group-minibatches` on `agentrl demo`."""
    lora_rank: int = 0
    """0: SFT and RL fine-tune every weight. r > 0: SFT trains a peft LoRA adapter of rank r (alpha 32) and RL keeps
    training it (model.lora_rank); LoRA wants a higher learning rate than full fine-tuning: `with_lora` sets it."""

    LORA_SFT_LR = 1e-3
    """LoRA's SFT learning rate (20x full fine-tuning's 5e-5): of 5e-4, 1e-3, 1.5e-3, 2e-3 and 3e-3 at rank 16, the one
    whose SFT model fits the 16 training walkthroughs nearest full fine-tuning's (mean NLL per action token 0.075 vs
    0.061; 5e-4 left 0.52). Chosen on training data only: benchmarks/bench_lora_sft_lr.py, results/lora_sft_lr.jsonl.
    Above the usual 10x, as "LoRA Without Regret" notes for very short runs (~15x): this SFT is 4 optimizer steps."""
    LORA_RL_LR = 3e-4
    """LoRA's RL learning rate: 10x full fine-tuning's 3e-5, the ratio Schulman et al. 2025 ("LoRA Without Regret",
    Thinking Machines Lab) find for SFT and RL alike; not tuned here. One demo run at it (seed 0) lowered the held-out
    result from the SFT model's (results/demo_variants.jsonl)."""

    def with_lora(self, rank: int) -> "DemoBudget":
        """This budget with a rank-`rank` LoRA adapter (0: full fine-tuning, the rates unchanged) and LoRA's learning
        rates (LORA_SFT_LR, LORA_RL_LR). Returns self."""
        self.lora_rank = rank
        if rank > 0:
            self.sft_lr, self.rl_lr = self.LORA_SFT_LR, self.LORA_RL_LR
        return self

    @classmethod
    def full(cls) -> "DemoBudget":
        return cls()

    @classmethod
    def fast(cls) -> "DemoBudget":
        return cls(train_games=4, eval_games=4, sft_games=4, sft_epochs=1.0, rl_steps=1, games_per_step=1,
                   group_size=2, max_turns=6)

    def rl_config(self, train_games: str | Path, algo: str = "ppo", reward: str = "dense", seed: int = 0,
                  mixed_precision: str = "no") -> RunConfig:
        """The demo's RL stage as a RunConfig: `algo` a preset of config.ALGO_PRESETS, `reward` a reward.kind, the
        training games dir, this budget's turns, group size, steps, games per step and lr; one checkpoint, at the end.
        `mixed_precision`: train.mixed_precision ("no": fp32; "bf16": autocast, where the hardware has bf16).
        """
        return RunConfig(model=ModelConfig(lora_rank=self.lora_rank),
                         env=EnvConfig(games=str(train_games), max_turns=self.max_turns),
                         reward=RewardConfig(kind=reward),
                         algo=AlgoConfig(**ALGO_PRESETS[algo], group_size=self.group_size),
                         train=TrainConfig(steps=self.rl_steps, games_per_step=self.games_per_step, minibatch_size=4,
                                           lr=self.rl_lr, seed=seed, checkpoint_every=max(self.rl_steps, 1),
                                           mixed_precision=mixed_precision,
                                           group_minibatches=self.group_minibatches))


GAME_FAMILY = {"challenge": "tw-cooking", "challenge_args": "--recipe 1 --take 1 --go 1"}
"""The demo's games: one-room cooking (read the recipe, take the ingredient, prepare and eat the meal; max score 3,
walkthrough 5 commands), small enough for a CPU and with intermediate scores for dense rewards."""
HELD_OUT_SEED = 100_000


def make_demo_games(budget: DemoBudget, seed: int = 0, progress: bool = True):
    """The demo's training games (seeds `seed`...) and held-out games (seeds HELD_OUT_SEED...), budget.train_games
    and budget.eval_games of GAME_FAMILY, as two GameSets; cached under the cache root, keyed by their parameters
    (make_textworld_games). benchmarks/bench_first_run.py times them in a fresh cache."""
    games_root = cache_root() / "games"
    train = make_textworld_games(games_root / f"cooking-train-s{seed}-n{budget.train_games}", budget.train_games,
                                 seed=seed, progress=progress, **GAME_FAMILY)
    held = make_textworld_games(games_root / f"cooking-heldout-s{HELD_OUT_SEED}-n{budget.eval_games}",
                                budget.eval_games, seed=HELD_OUT_SEED, progress=progress, **GAME_FAMILY)
    return train, held


def run_demo(out: str | Path, budget: DemoBudget | None = None, algo: str = "ppo", reward: str = "dense",
             model: str = "embedded", seed: int = 0, progress: bool = True, mixed_precision: str = "no") -> dict:
    """Run the whole recipe into `out` and return the summary (also out/summary.json and out/stages.png).

    `mixed_precision` "bf16": the RL stage's forwards under bf16 autocast (train.mixed_precision; the evaluations and
    SFT stay as they are). Raises ConfigError before any stage runs when the hardware has no bf16
    (hardware.bf16_problem).

    Stages (held-out = games with seeds from HELD_OUT_SEED, disjoint from the training seeds):
    1. make training and held-out games;  2. evaluate the base model;  3. SFT on training walkthroughs;
    4. evaluate;  5. RL (algo, reward) from the SFT model;  6. evaluate the RL model.
    """
    from .plots import plot_stage_comparison, save_and_close
    from .run import run_rl
    from .sft import sft

    budget = budget or DemoBudget.full()
    rl_model = budget.rl_config(".", algo, reward, seed, mixed_precision).model  # bad values fail before any stage
    if mixed_precision == "bf16" and (why := bf16_problem(pick_device(rl_model.device))):  # the Trainer's device
        raise ConfigError(f"--mixed-precision bf16: {why}; use --mixed-precision no")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    timings: dict[str, float] = {}

    def say(msg: str) -> None:
        if progress:
            print(f"[{time.perf_counter() - t0:6.0f}s] {msg}", flush=True)

    # 1. games
    t = time.perf_counter()
    train, held = make_demo_games(budget, seed, progress)
    overlap = {g.params.get("fingerprint") for g in train.games} & {g.params.get("fingerprint") for g in held.games}
    timings["games"] = time.perf_counter() - t
    say(f"{len(train)} training games, {len(held)} held-out games ({len(overlap)} identical to a training game)")

    def eval_stage(name: str, model_name: str) -> dict:
        t = time.perf_counter()
        pol, tok = load_policy(model_name)
        res = evaluate(pol, tok, held, max_turns=budget.max_turns, progress=progress)
        save_eval(res, out / f"eval_{name}.json")
        timings[f"eval_{name}"] = time.perf_counter() - t
        say(format_eval(res, name))
        return res

    results = {"base": eval_stage("base", model)}

    # 3. SFT warm-up on the training games' walkthroughs
    t = time.perf_counter()
    sft_games = train if budget.sft_games >= len(train) else _subset(train, budget.sft_games)
    sft_summary = sft(model, sft_games, out / "sft", epochs=budget.sft_epochs, lr=budget.sft_lr, seed=seed,
                      max_turns=budget.max_turns, lora_rank=budget.lora_rank)
    timings["sft"] = time.perf_counter() - t
    say(f"SFT on {sft_summary['examples']} walkthroughs: loss {sft_summary['train_loss'][0]:.2f} → "
        f"{sft_summary['train_loss'][-1]:.2f} in {sft_summary['seconds']:.0f}s")
    results["SFT"] = eval_stage("sft", str(out / "sft"))

    # 5. RL from the SFT model
    t = time.perf_counter()
    shutil.rmtree(out / "rl", ignore_errors=True)  # a previous demo's RL run started from an older SFT model
    rl_config = budget.rl_config(train.root, algo, reward, seed, mixed_precision)
    rows = run_rl(rl_config, out / "rl", init=str(out / "sft"), progress=progress)["rows"]
    timings["rl"] = time.perf_counter() - t
    results["RL"] = eval_stage("rl", str(out / "rl"))
    save_and_close(plot_stage_comparison(results, title=f"held-out cooking games ({len(held)})"), out / "stages.png")

    summary = {
        "stages": {k: {m: v[m] for m in ("success_rate", "mean_turns", "invalid_rate", "mean_score_frac", "env_errors")}
                   for k, v in results.items()},
        "per_game": {k: compact_eval(v)["per_game"] for k, v in results.items()},  # [[game, won, turns], ...]
        "variant": variant_name(budget, mixed_precision), "config": rl_config.to_dict(),
        "budget": budget.__dict__, "algo": algo, "reward": reward, "model": model, "seed": seed,
        "mixed_precision": mixed_precision,
        "games": GAME_FAMILY, "train_games": str(train.root), "heldout_games": str(held.root),
        "heldout_identical_to_train": len(overlap),
        "sft": {k: sft_summary[k] for k in ("examples", "seconds", "train_loss")},
        "rl": {"steps": len(rows), "step_seconds_median": _median([r["step_seconds"] for r in rows]),
               "rollout_seconds_median": _median([r["rollout_seconds"] for r in rows]),
               "update_seconds_median": _median([r["update_seconds"] for r in rows]),
               "gen_tokens_per_s_median": _median([r["gen_tokens_per_s"] for r in rows]),
               "train_success_first": rows[0]["success_rate"] if rows else None,
               "train_success_last": rows[-1]["success_rate"] if rows else None},
        "timings_seconds": {k: round(v, 1) for k, v in timings.items()},
        "total_seconds": round(time.perf_counter() - t0, 1),
        "peak_rss_gb": _peak_rss_gb(), "commit": git_commit(), "cpu_threads": os.cpu_count(),
        "machine": (machine := {**machine_info(), "cpu": cpu_model()}), "device": machine["torch_device"],
        "date": time.strftime("%Y-%m-%d"),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    if progress:
        print(format_table(summary))
    return summary


def variant_name(budget: DemoBudget, mixed_precision: str = "no") -> str:
    """The demo variant a summary belongs to, e.g. 'fp32', 'bf16', 'fp32, whole-group minibatches',
    'fp32, LoRA r16 (SFT lr 0.0005, RL lr 0.0003)' (the learning rates named when not DemoBudget's defaults)."""
    default = DemoBudget()
    name = "bf16" if mixed_precision == "bf16" else "fp32"
    if budget.group_minibatches:
        name += ", whole-group minibatches"
    if budget.lora_rank:
        name += f", LoRA r{budget.lora_rank}"
    if (budget.sft_lr, budget.rl_lr) != (default.sft_lr, default.rl_lr):
        name += f" (SFT lr {budget.sft_lr:g}, RL lr {budget.rl_lr:g})"
    return name


def record_demo(summary: dict, results_file: str | Path) -> dict:
    """Append one demo run's summary (run_demo's: its variant, the RL config, seed, commit, machine, per-game outcomes
    of each stage) as one JSON line to `results_file` (records.append_record), e.g. results/demo_variants.jsonl,
    which book/benchmarks.md renders (benchmarks/report.py). Returns the line as written."""
    from .records import append_record

    return append_record(results_file, summary)


def format_table(summary: dict) -> str:
    """The base → SFT → RL table as Markdown."""
    lines = ["| stage | success rate | mean turns | invalid-action rate | score / max |", "|---|---|---|---|---|"]
    for name, s in summary["stages"].items():
        lines.append(f"| {name} | {s['success_rate']:.1%} | {s['mean_turns']:.1f} | {s['invalid_rate']:.1%} | "
                     f"{s['mean_score_frac']:.2f} |")
    return "\n".join(lines)


def _subset(games, n):
    return games.first(min(n, len(games)))


def _median(xs: list[float | None]) -> float | None:
    """The median of the values that are not None (a step where every episode failed has no rollout timing)."""
    xs = sorted(x for x in xs if x is not None)
    return None if not xs else (xs[len(xs) // 2] if len(xs) % 2 else 0.5 * (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]))


def _peak_rss_gb() -> float:
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2, 2)
