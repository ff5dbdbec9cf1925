"""One GRPO step of agentrl's Trainer against TRL's GRPOTrainer with a multi-turn `rollout_func`, on the same
workload, measured in one run:

    python benchmarks/bench_rl_step_vs_trl.py --games DIR [--model runs/sft] [--episodes 8] [--group-size 4]
        [--max-turns 8] [--new-tokens 24] [--minibatch 4] [--warmup 1] [--repeats 3] [--threads 2]
        [--sides ours,trl] [--machine TEXT] [--out FILE.jsonl]

The workload of one RL step, the same on both sides: `episodes / group_size` games of DIR (a dir of exactly that
many games gives both sides the same games every step), each played `group_size` times, at most `max_turns` turns of
at most `new_tokens` tokens sampled at T = 0.7 (plain softmax, no top-k), env steps in the default process pool; the
reward of an episode is agentrl's sparse return (1 if won, − 0.1 per inadmissible action, `rewards.turn_rewards`);
GRPO advantages (group-normalised returns); then 1 epoch over the 8 episodes in minibatches of `minibatch` (two AdamW
steps, lr 1e-5 constant), clipped surrogate ε 0.2 / 0.28, entropy bonus 0.001, no KL term, π_old from a forward pass,
no gradient checkpointing, fp32 on the CPU.

- ours: `trainer.Trainer(config).step(k)` (GRPO preset), the rollout batched with the KV cache kept across turns.
- trl:  `trl.GRPOTrainer(rollout_func=...)` (use_cpu, bf16 off, loss_type 'dapo': the token mean over the batch, as
  ours; steps_per_generation = episodes / minibatch, so one generation feeds the same minibatch steps as ours). Its
  `rollout_func` plays the episodes with one batched HF `generate` per turn over each conversation so far (the
  history re-encoded every turn: bench_rollout.ReencodeGenerator, the natural way with a stateless generate call),
  through the same rollout loop, prompts and env pool as ours, and returns prompt_ids, completion_ids, the sampled
  log-probs and env_mask (1 = model token, 0 = environment token) plus each episode's return for the reward function.

Each side runs in its own process (peak RSS is per side: the main process, env workers excluded), `warmup` untimed
steps then `repeats` timed ones. Per step: total seconds (ours: Trainer.step's step_seconds; TRL: from the first
minibatch step's start to the last one's end, callbacks), rollout seconds (the rollout call), update = total −
rollout (π_old forward, advantages, minibatch updates). Prints the medians, the peak RSS and the ratios TRL / ours.
agentrl skips a step's minibatch updates when every group's returns are equal (no GRPO signal), TRL runs them
anyway: such steps are listed in `skipped_update_steps` (choose games whose episodes disagree, --game-names).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ITSELF = [sys.executable, "-m", "experiments.benchmarks.bench_rl_step_vs_trl"]
"""The command that runs this module again in a fresh process (one measurement per process)."""
SIDES = ("ours", "trl")


def run_config(a):
    """The agentrl RunConfig of the workload (both sides read their settings from it)."""
    from agentrl_lib.config import AlgoConfig, EnvConfig, ModelConfig, RewardConfig, RunConfig, TrainConfig

    return RunConfig(
        env=EnvConfig(games=a.games, max_turns=a.max_turns),
        reward=RewardConfig(kind="sparse", format_penalty=0.1),
        algo=AlgoConfig.from_preset("grpo", group_size=a.group_size, clip_low=0.2, clip_high=0.28, kl_coef=0.0,
                                    old_logprobs=a.old_logprobs,
                                    entropy_coef=0.001),
        model=ModelConfig(name=a.model, device="cpu", dtype="float32"),
        train=TrainConfig(steps=a.warmup + a.repeats, games_per_step=a.episodes // a.group_size, epochs=1,
                          minibatch_size=a.minibatch, lr=1e-5, max_new_tokens=a.new_tokens, temperature=0.7,
                          gradient_checkpointing=False, seed=0))


def side_ours(a) -> dict:
    """`warmup + repeats` steps of agentrl's Trainer (GRPO). Returns per-step rows: total, rollout, update seconds,
    the trainer's own update_seconds (minibatch updates alone), episodes won, generated tokens, skipped_update."""
    from agentrl_lib.trainer import Trainer

    steps = []
    with tempfile.TemporaryDirectory() as run_dir, Trainer(run_config(a), run_dir, progress=False) as trainer:
        for k in range(a.warmup + a.repeats):
            m = trainer.step(k)
            steps.append({"total": round(m["step_seconds"], 2), "rollout": round(m["rollout_seconds"], 2),
                          "update": round(m["step_seconds"] - m["rollout_seconds"], 2),
                          "minibatch_updates": round(m.get("update_seconds", 0.0), 2),
                          "success_rate": m["success_rate"], "generated_tokens": m["generated_tokens"],
                          "seq_len_max": m["seq_len_max"], "skipped_update": m.get("skipped_update", 0.0)})
    return {"steps": steps}


def side_trl(a) -> dict:
    """`warmup + repeats` steps of TRL's GRPOTrainer with a multi-turn rollout_func (see the module docstring).
    Returns per-step rows like side_ours (without the trainer-only fields) plus TRL's version."""
    import torch
    import trl
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from agentrl_lib.envs.base import load_game_set
    from agentrl_lib.envs.pool import open_pool
    from agentrl_lib.models import load_policy
    from agentrl_lib.prompts import ChatFormat, system_prompt_for
    from agentrl_lib.rewards import turn_rewards
    from agentrl_lib.rollout import rollout
    from experiments.benchmarks.bench_rollout import ReencodeGenerator

    cfg = run_config(a)
    game_set = load_game_set(a.games)
    model, tok = load_policy(a.model, "cpu", "float32")
    chat, system_prompt = ChatFormat(tok), system_prompt_for(game_set.family)
    pool = open_pool(cfg.env, a.episodes, game_set)
    rollouts = []  # per generation: start, seconds, won, generated tokens, longest trajectory

    def rollout_func(prompts: list[str], trainer) -> dict:
        """prompts: one game path per episode (each game group_size times). Plays them all, batched, with the
        history re-encoded every turn; returns TRL's fields plus episode_return for the reward function."""
        t0 = time.perf_counter()
        policy = trainer.accelerator.unwrap_model(trainer.model)
        trajs, stats = rollout(ReencodeGenerator(policy, tok), tok, pool, list(prompts), max_turns=cfg.env.max_turns,
                               max_new_tokens=cfg.train.max_new_tokens, temperature=cfg.train.temperature,
                               system_prompt=system_prompt, chat=chat)
        out = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [], "episode_return": []}
        for t in trajs:
            p = t.prompt_len
            completion = t.ids[p:] or [chat.eos_id]  # an episode cut before its first turn (env fault): one token
            out["prompt_ids"].append(t.ids[:p])
            out["completion_ids"].append(completion)
            out["logprobs"].append(t.behaviour_logprobs[p:] or [0.0])
            out["env_mask"].append(t.mask[p:] or [0])
            out["episode_return"].append(sum(turn_rewards(cfg.reward.kind, t.env_rewards, t.max_score, t.won, t.valid,
                                                          cfg.reward.format_penalty)))
        rollouts.append({"start": t0, "seconds": time.perf_counter() - t0, "won": sum(t.won for t in trajs),
                         "generated_tokens": stats.generated_tokens, "seq_len_max": max(len(t.ids) for t in trajs)})
        return out

    def episode_return(completions, episode_return, **kwargs) -> list[float]:
        """The reward function: each episode's return, computed in rollout_func from the game's outcome."""
        return list(episode_return)

    class StepTimes(TrainerCallback):
        """perf_counter at the start and end of every optimizer step."""

        def __init__(self):
            self.begin, self.end = [], []

        def on_step_begin(self, args, state, control, **kwargs):
            self.begin.append(time.perf_counter())

        def on_step_end(self, args, state, control, **kwargs):
            self.end.append(time.perf_counter())

    per_gen = a.episodes // a.minibatch  # optimizer steps fed by one generation (= our minibatches per epoch)
    ckpt = {"activation_checkpointing": False} if "activation_checkpointing" in GRPOConfig.__dataclass_fields__ \
        else {"gradient_checkpointing": False}
    timer = StepTimes()
    with tempfile.TemporaryDirectory() as out_dir:
        args = GRPOConfig(
            output_dir=out_dir, use_cpu=True, bf16=False, **ckpt, seed=0, report_to="none", save_strategy="no",
            logging_steps=10 ** 6, disable_tqdm=True, per_device_train_batch_size=a.minibatch,
            gradient_accumulation_steps=1, steps_per_generation=per_gen, num_generations=a.group_size,
            num_iterations=cfg.train.epochs, max_steps=(a.warmup + a.repeats) * per_gen,
            learning_rate=cfg.train.lr, lr_scheduler_type="constant", weight_decay=0.0,
            max_grad_norm=cfg.train.max_grad_norm, temperature=cfg.train.temperature, beta=cfg.algo.kl_coef,
            loss_type="dapo", epsilon=cfg.algo.clip_low, epsilon_high=cfg.algo.clip_high,
            entropy_coef=cfg.algo.entropy_coef, max_completion_length=cfg.env.max_turns * 256)
        dataset = Dataset.from_dict({"prompt": [g.path for g in game_set.games]})
        os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
        trainer = GRPOTrainer(model=model, reward_funcs=episode_return, args=args, train_dataset=dataset,
                              processing_class=tok, rollout_func=rollout_func, callbacks=[timer])
        try:
            trainer.train()
        finally:
            pool.close()
    steps = []
    for k, r in enumerate(rollouts):
        begin, end = timer.begin[k * per_gen], timer.end[k * per_gen + per_gen - 1]
        assert begin <= r["start"] <= end, "the rollout of step k must run inside step k's optimizer steps"
        total = end - begin
        steps.append({"total": round(total, 2), "rollout": round(r["seconds"], 2),
                      "update": round(total - r["seconds"], 2), "success_rate": r["won"] / a.episodes,
                      "generated_tokens": r["generated_tokens"], "seq_len_max": r["seq_len_max"]})
    return {"steps": steps, "torch_threads_in_trainer": torch.get_num_threads(), "trl_version": trl.__version__}


def one_side(a) -> dict:
    """Run one side in this process (`--_side`): its steps, the timed ones' medians, its peak RSS."""
    import torch

    if a.threads:
        torch.set_num_threads(a.threads)
    threads = torch.get_num_threads()
    from experiments.benchmarks.benchutil import peak_rss_gib

    t0 = time.perf_counter()
    res = side_ours(a) if a._side == "ours" else side_trl(a)
    timed = res["steps"][a.warmup:]
    res.update(warmup=res["steps"][:a.warmup], steps=timed, threads=threads, wall_seconds=round(
        time.perf_counter() - t0, 1), peak_rss_gib=round(peak_rss_gib(), 2),
        **{f"median_{k}": statistics.median(s[k] for s in timed) for k in ("total", "rollout", "update")})
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--games", required=True, help="a games dir (agentrl make-games), e.g. 2 tw-cooking games")
    p.add_argument("--game-names", default="", help="comma-separated manifest names: play only these games of "
                   "--games (e.g. game_100002,game_100005)")
    p.add_argument("--model", default="embedded", help="'embedded', a model dir or an SFT / run dir")
    p.add_argument("--episodes", type=int, default=8)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--max-turns", type=int, default=8)
    p.add_argument("--new-tokens", type=int, default=24)
    p.add_argument("--minibatch", type=int, default=4, help="episodes per optimizer step (both sides)")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps first (>= 0)")
    p.add_argument("--repeats", type=int, default=3, help="timed steps (>= 1)")
    p.add_argument("--threads", type=int, default=2, help="torch threads per side (0: torch's own)")
    p.add_argument("--old-logprobs", default="recompute", choices=["recompute", "behaviour"],
                   help="agentrl's algo.old_logprobs: behaviour takes π_old from the rollout (no no-grad forward); "
                   "TRL's side recomputes it either way (steps_per_generation > gradient_accumulation_steps)")
    p.add_argument("--sides", default="ours,trl", help="comma-separated, run in this order")
    p.add_argument("--machine", default="", help='how the results name this machine, e.g. "2-core shared CPU"')
    p.add_argument("--out", help="append one JSON line here (e.g. results/rl_step_vs_trl.jsonl)")
    p.add_argument("--_side", choices=SIDES, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.episodes % a.group_size or a.episodes % a.minibatch or a.repeats < 1 or a.warmup < 0:
        p.error("--episodes must be a multiple of --group-size and of --minibatch; --repeats >= 1, --warmup >= 0")
    if a._side:
        print(json.dumps(one_side(a)), flush=True)
        return 0

    from experiments.benchmarks.benchutil import game_subset, write_result

    with tempfile.TemporaryDirectory() as tmp:
        games = game_subset(a.games, a.game_names.split(","), tmp) if a.game_names else a.games
        result = run_sides(a, games)
    write_result(a.out, result, a, seed=0)
    return 0


def run_sides(a, games: str) -> dict:
    """Each side of a.sides in its own subprocess on the game set `games`, one after the other. Returns the result
    row: the workload, machine_info, each side's steps / medians / peak RSS / load, and the ratios TRL / ours."""
    from experiments.benchmarks.benchutil import load1, machine_info

    sides = a.sides.split(",")
    env = {**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}  # see book/vllm.md, Speed
    result = {"bench": "rl_step_vs_trl", "model": a.model, "games": os.path.abspath(a.games),
              "game_names": a.game_names, "episodes": a.episodes,
              "group_size": a.group_size, "max_turns": a.max_turns, "new_tokens": a.new_tokens,
              "minibatch": a.minibatch, "warmup": a.warmup, "repeats": a.repeats, "dtype": "float32",
              "old_logprobs": a.old_logprobs,
              **machine_info(a.machine), "omp_wait_policy": env["OMP_WAIT_POLICY"]}
    forwarded = [f"--{k.replace('_', '-')}={v}" for k, v in vars(a).items()
                 if k not in ("games", "game_names", "sides", "machine", "out", "_side")] + [f"--games={games}"]
    for side in sides:
        before = load1()
        out = subprocess.run([*ITSELF, *forwarded, f"--_side={side}"], env=env,
                             capture_output=True, text=True)
        if out.returncode:
            sys.stderr.write(out.stderr[-4000:])
            raise SystemExit(f"the {side} side failed (exit {out.returncode})")
        r = result[side] = {**json.loads(out.stdout.strip().splitlines()[-1]), "load_before": before,
                            "load_after": load1()}
        print(f"{side:4s} step total {r['median_total']:6.1f} s = rollout {r['median_rollout']:5.1f} + update "
              f"{r['median_update']:5.1f} (medians of {a.repeats}: {[s['total'] for s in r['steps']]})   peak RSS "
              f"{r['peak_rss_gib']:5.2f} GiB   load {before:.1f} -> {r['load_after']:.1f}", flush=True)
        skipped = [i + 1 for i, s in enumerate(r["steps"]) if s.get("skipped_update")]
        r["skipped_update_steps"] = skipped
        if skipped:  # agentrl skips a step's update when no group has a return spread; TRL's update runs anyway
            print(f"     {side} skipped the update of timed step(s) {skipped}: every group's returns were equal (no "
                  "GRPO signal), so those steps hold no minibatch update; compare the steps that updated, or pick "
                  "games whose episodes disagree (--game-names)", flush=True)
    if "ours" in result and "trl" in result:
        o, t = result["ours"], result["trl"]
        for k in ("total", "rollout", "update"):
            result[f"ratio_{k}"] = round(t[f"median_{k}"] / o[f"median_{k}"], 2)
        result["ratio_peak_rss"] = round(t["peak_rss_gib"] / o["peak_rss_gib"], 2)
        print(f"TRL / ours: step x{result['ratio_total']} (rollout x{result['ratio_rollout']}, update "
              f"x{result['ratio_update']}), peak RSS x{result['ratio_peak_rss']}")
    return result


if __name__ == "__main__":
    sys.exit(main())
