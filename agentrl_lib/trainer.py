"""The multi-turn RL loop: rollout → turn rewards → advantages → epochs of minibatch updates → log → checkpoint.

Every algorithm shares the loop; only the advantage estimator (advantages.ESTIMATORS[algo.advantage]) differs, and
a critic exists iff that estimator needs one (PPO's 'gae'). Trainer.step, stage by stage:

    for step in 1..N:
        1. trajectories = rollout(generator, games × G)   # batched multi-turn episodes, π_behaviour log-probs;
                                                          # episodes cut by an env fault are dropped
        2. r_turn = turn_rewards(sparse | dense) − format penalty, on each turn's end token;  R = Σ_turns r_turn
        3. keep the groups with the largest return spread (StarPO-S; all by default)
        4. π_old, V_old, π_ref = forward passes over the kept trajectories (no grad)
        5. A, V_target = estimator(r, R, groups, V_old)   # GAE [ppo] | group-normalised R [grpo] | R − LOO mean [rloo]
                                                          # | ... every estimator of advantages.ESTIMATORS
        6. for epoch, minibatch: loss = clipped surrogate (× TIS weight) + c_v·value loss + β·KL(k3) − c_H·entropy;
           generator.sync(policy)
        7. metrics row → collapse detector (alerts: warning + the row's `alerts`) → metrics.jsonl; checkpoint
           atomically; with train.stop_on_collapse an alert of train.stop_kinds stops the run after its checkpoint

Data parallelism (`accelerate launch -m agentrl_lib.cli train`): each process rolls out whole groups of its share of
the games, all see the whole batch for stages 2-5, and each trains on its rows of every minibatch with DDP-averaged
gradients: the same weights as one process playing the whole batch (agentrl_lib/distributed.py).

Critic (PPO): a linear value head on the policy's last hidden state — a *shared backbone*, as TRL's
AutoModelForCausalLMWithValueHead. On a CPU a separate critic would double the cost of every update; the price is
that value-loss gradients reach the policy's backbone (kept small by vf_coef, 0.1 as in TRL). The paper uses a
separate critic (lr 1e-5); with a GPU and a bigger model that is the better choice.

Introduced in notebooks/00_quickstart.md §5.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import math
import random
import time
import weakref
from pathlib import Path

import torch

from . import checkpoint as ckpt_lib
from .advantages import ESTIMATORS, AdvantageInputs, singleton_groups, top_std_groups
from .config import ConfigError, RunConfig, check_context_room
from .diagnostics import CollapseDetector, CollapseError, input_dependence, repetition_rate
from .distributed import data_parallel
from .envs.base import GameSet, check_env_errors, load_game_set
from .envs.pool import EnvPool, open_pool
from .generation import GENERATORS
from .losses import explained_variance, masked_mean, truncated_is_weights
from .metrics import complete_row
from .models import (
    base_model,
    bf16_problem,
    disable_dropout,
    enable_gradient_checkpointing,
    frozen_reference,
    is_adapter,
    load_policy,
    load_reference,
    load_start_policy,
)
from .policy import TokenModel, ValueHead, prompt_groups, token_forward
from .prompts import ChatFormat, system_prompt_for
from .rewards import place_on_tokens, turn_rewards
from .rollout import Trajectory, collate, rollout
from .tracking import open_tracker
from .update import accumulate_microbatches, forward_in_chunks, select

log = logging.getLogger(__name__)


class DivergenceError(ValueError):
    """Training produced non-finite losses or gradients for train.max_nonfinite_steps steps in a row."""


class Trainer:
    """Multi-turn RL trainer for one run directory.

    Args:
        config: the RunConfig (config.env.games must name a games dir).
        run_dir: where config.yaml, metrics.jsonl and checkpoints/ go (run.run_rl draws learning_curve.png there).
        init: model to start from ('embedded', HF id, dir, SFT output or run dir); default config.model.name.
            It is recorded as model.name in run_dir/config.yaml: the KL reference of a resumed run is that model.
        resume: continue from run_dir's newest complete checkpoint (older ones when it is damaged; step 0 when
            there is none yet) with `config` (the CLI passes checkpoint.resume_config(run_dir) with its flags
            applied); the starting model stays the recorded one, config.yaml is rewritten only once the state has
            loaded, and the config's lr / value_lr replace the optimizer's saved ones. Rules: agentrl_lib/checkpoint.py.
        pool: an EnvPool with >= games_per_step * group_size slots (default: `envs.pool.open_pool(config.env, ...)`,
            a ProcessPool unless env.process_pool is off, every game checked through it first).
    The run directory is locked (RUN/.lock) from construction until close(); `with Trainer(...) as trainer:` closes
    it (env pool and lock) on leaving the block.
    Raises:
        GameSetError / FileNotFoundError / ConfigError: bad games dir, model path or config (also max_new_tokens or
            max_turns that the loaded model's context cannot hold: config.check_context_room).
        FileExistsError: run_dir holds a run and resume is False.
        RunLockedError: another process is training in run_dir.
        CheckpointError: resume: no run in run_dir, a field that cannot change on resume changed (named), or no
            complete, loadable checkpoint.
    """

    def __init__(self, config: RunConfig, run_dir: str | Path, init: str | None = None, resume: bool = False,
                 pool: EnvPool | None = None, progress: bool = True):
        config.validate()
        run_dir = Path(run_dir)
        # plumbing: data parallelism (distributed.py; a SingleProcess stand-in without a launcher): rank 0 alone writes
        self.dp = data_parallel(config.model.device)
        self.dp.check_games_per_step(config.train.games_per_step)
        if self.dp.world_size > 1 and config.train.max_tokens_per_microbatch:  # ranks could cut different numbers
            # of micro-batches and wait on each other's gradient all-reduce forever
            raise ConfigError("train.max_tokens_per_microbatch is single-process only: with data parallelism "
                              "each rank already trains on 1/W of every minibatch; use --max-tokens-per-"
                              "microbatch 0 (or --minibatch-size smaller) under accelerate launch")
        self.is_main = self.dp.is_main
        # plumbing: one trainer per run dir (RUN/.lock; released by close(), garbage collection or process death)
        lock = ckpt_lib.RunLock(run_dir) if self.is_main else None
        self._release_lock = weakref.finalize(self, lock.release) if lock else (lambda: None)
        if init:
            local = Path(init).expanduser()
            init = str(local.resolve()) if local.exists() else init  # a resume may start from another directory
        if resume:  # the resume rules: see agentrl_lib/checkpoint.py
            if not ckpt_lib.run_exists(run_dir):
                raise ckpt_lib.CheckpointError(f"no run in {run_dir} (no config.yaml, no checkpoints/); start one "
                                               "without --resume")
            recorded = ckpt_lib.recorded_config(run_dir) or config
            ckpt_lib.check_resume_overrides(recorded, config, init)
            init = recorded.model.name  # the model a run started from is a fact of the run (the KL reference)
        elif ckpt_lib.list_checkpoints(run_dir / "checkpoints") or (run_dir / "checkpoints" / "latest").is_file():
            raise FileExistsError(f"{run_dir} already holds a run; pass --resume to continue it or pick a new --out")
        if init:  # the run's config names the model it starts from (the KL reference)
            config = dataclasses.replace(config, model=dataclasses.replace(config.model, name=init))
        self.cfg, self.run_dir, self.progress = config, run_dir, progress and self.is_main
        self.games: GameSet = load_game_set(config.env.games)
        n_episodes = config.train.games_per_step * config.algo.group_size // self.dp.world_size  # this process's
        if pool is None:  # plumbing: the run's envs; every game is checked through them before the model loads
            pool = open_pool(config.env, n_episodes, self.games)
        self.ckpt_root = self.run_dir / "checkpoints"
        self.metrics_path = self.run_dir / "metrics.jsonl"
        self.start_step, self.last_checkpoint, self.step_in_progress, self._nonfinite_streak = 0, None, None, []
        self.detector = CollapseDetector()  # Echo-Trap alerts over the metrics rows (diagnostics.py)
        self.tracker = open_tracker(config.train.report_to, run_dir, self.is_main)  # plumbing: tracking.py
        mc = config.model
        self.estimator = ESTIMATORS[config.algo.advantage]
        need_vh = self.estimator.needs_critic  # a critic exists iff the estimator needs one
        state = None
        if resume and ckpt_lib.list_checkpoints(self.ckpt_root):  # newest complete checkpoint that loads, else older
            def load(ckpt: Path):
                return (*load_policy(str(ckpt / "policy"), mc.device, mc.dtype), ckpt_lib.read_training_state(ckpt))

            self.start_step, ckpt, (self.policy, self.tok, state) = ckpt_lib.load_newest(self.ckpt_root, load, need_vh)
            self.last_checkpoint = ckpt.name
            if config.train.steps < self.start_step:  # before config.yaml is rewritten: nothing changes
                raise ConfigError(f"--resume with train.steps (--steps) {config.train.steps}: {run_dir} has already "
                                  f"trained {self.start_step} steps; pass --steps > {self.start_step} to train on, or "
                                  f"evaluate it as it is: agentrl eval --model {run_dir}")
        else:
            if resume:
                log.warning("%s has no checkpoint yet: starting at step 1 with its saved config", run_dir)
            torch.manual_seed(config.train.seed)  # plumbing: a new LoRA adapter's random init follows the run's seed
            # a LoRA adapter as init: merged for lora_rank 0, trained on at its own rank, else refused
            self.policy, self.tok = load_start_policy(config.model.name, mc.device, mc.dtype, lora_rank=mc.lora_rank,
                                                      lora_alpha=mc.lora_alpha)
        self.last_step = self.start_step
        self.device = next(self.policy.parameters()).device
        self.chat = ChatFormat(self.tok)
        self.generator = GENERATORS[mc.generator](self.policy, self.tok)  # the backend (generation.py)
        if getattr(self.generator, "context_limit", None):  # before any rollout: a budget the context cannot hold
            check_context_room(config.train.max_new_tokens, config.env.max_turns, self.generator.context_limit)
        hidden = base_model(self.policy).config.hidden_size
        self.value_head = ValueHead(hidden).to(self.device) if need_vh else None
        disable_dropout(self.policy)  # π_old is computed without dropout: the update must see the same function
        # ALGO: the frozen reference policy of the KL term is the model the run started from (an SFT LoRA adapter
        # merged into its base). A LoRA adapter created by this run is switched off instead (_ref_logprobs).
        self.ref = None
        if config.algo.kl_coef > 0:
            init_is_adapter = is_adapter(config.model.name)
            if init_is_adapter or not hasattr(self.policy, "disable_adapter"):  # a resumed policy is not the start
                self.ref = (load_reference(config.model.name, mc.device, mc.dtype) if state is not None
                            else frozen_reference(self.policy))
        policy_dtype = next(self.policy.parameters()).dtype
        # plumbing: train.mixed_precision bf16: every forward under autocast (weights and AdamW stay in policy_dtype)
        self.autocast = functools.partial(torch.autocast, self.device.type, dtype=torch.bfloat16,
                                          enabled=config.train.mixed_precision == "bf16")
        if config.train.mixed_precision == "bf16" and (why := bf16_problem(self.device)):
            raise ConfigError(f"train.mixed_precision bf16: {why}; use --mixed-precision no")
        low_precision = policy_dtype != torch.float32 or config.train.mixed_precision == "bf16"
        self.use_tis = config.algo.tis == "on" or (config.algo.tis == "auto" and low_precision
                                                    and config.algo.old_logprobs == "recompute")
        groups = [{"params": [p for p in self.policy.parameters() if p.requires_grad], "lr": config.train.lr}]
        if self.value_head is not None:
            groups.append({"params": list(self.value_head.parameters()), "lr": config.train.value_lr})
        self.opt = torch.optim.AdamW(groups, weight_decay=0.0)
        if config.train.gradient_checkpointing:  # active in train() mode only: rollouts keep their KV cache
            enable_gradient_checkpointing(self.policy)
        if state is not None:  # optimizer + value head; then the config's lr / value_lr (a resume may change them)
            ckpt_lib.apply_training_state(state, self.opt, self.value_head,
                                          [config.train.lr, config.train.value_lr])
        if self.is_main:
            ckpt_lib.write_config(self.run_dir / "config.yaml", config)  # only now: a failed resume changes nothing
        # plumbing: the update's forward; with data parallelism it goes through DDP, which averages the ranks' gradients
        self.forward = functools.partial(self.dp.prepare(TokenModel(self.policy, self.value_head)),
                                         temperature=config.train.temperature, share_prefix=config.train.share_prefix)
        self.pool = pool
        if self.pool.size < n_episodes:
            raise ValueError(f"pool has {self.pool.size} slots; the run needs {n_episodes} (games_per_step*group_size)")

    # ------------------------------------------------------------------------------------------------ the loop
    def train(self) -> list[dict]:
        """Run config.train.steps iterations (from the checkpoint's step when resuming). Returns all metrics rows.

        A step whose loss or gradient is NaN/inf skips those updates (logged as nonfinite_updates, with a warning).
        Every row goes through self.detector (diagnostics.CollapseDetector; a resume replays the kept rows first):
        its alerts are logged as warnings and stored in the row's `alerts` list.
        Raises:
            DivergenceError: train.max_nonfinite_steps such steps in a row (the last checkpoint holds finite weights).
            CollapseError: train.stop_on_collapse and the detector raised an alert of a kind in train.stop_kinds
                (default: reward_std_collapse only; the others are logged); the step was checkpointed first
                (resume continues; the same alert is not raised again until its condition has cleared).
            CheckpointError: a checkpoint or metrics row could not be written (disk full, ...).
            TooManyEnvErrors: more than env.max_env_error_frac of a step's episodes ended in an env error.
            ConfigError: every episode of a step ended at the context limit before its first reply (prompt +
                train.max_new_tokens exceed the model's context).
        """
        cfg = self.cfg
        rows = self.rows = self._read_metrics()  # self.rows: what run_rl draws, also after a CollapseError
        self.detector.replay(rows)  # plumbing: a resumed run's detector is in the state the kept rows left it in
        self.last_step = self.start_step
        for step in range(self.start_step, cfg.train.steps):
            self.step_in_progress = step + 1
            row = complete_row(self.step(step), needs_critic=self.estimator.needs_critic)  # every METRICS key
            alerts = self.detector.update(row)  # Echo-Trap signatures (diagnostics.py)
            row["alerts"] = [a.to_dict() for a in alerts]
            rows.append(row)
            if self.is_main:
                ckpt_lib.append_metrics(self.metrics_path, row)  # strict JSON: NaN → null
                self.tracker.write(row)  # train.report_to: the same row's scalars (tracking.py)
            self.step_in_progress, self.last_step = None, step + 1
            if self.progress:
                print(f"step {step + 1}/{cfg.train.steps}  success {row['success_rate']:.2f}  return "
                      f"{row['return_mean']:+.3f}  invalid {row['invalid_rate']:.2f}  turns {row['mean_turns']:.1f}  "
                      f"entropy {row['entropy']:.3f}  env errors {row.get('env_errors', 0)}/{row['episodes']}  "
                      f"{row['step_seconds']:.0f}s", flush=True)
            check_env_errors(row.get("env_errors", 0), row["episodes"], cfg.env.max_env_error_frac,
                             (row.get("env_error_reasons") or ["see the episodes' termination"])[0], f"step {step + 1}")
            for a in alerts:
                log.warning("%s", a.message)
            self._check_finite(row)
            stopping = [a for a in alerts if cfg.train.stops_on(a.kind)]  # train.stop_on_collapse, train.stop_kinds
            stop = bool(stopping)
            if stop or step + 1 == cfg.train.steps or ((step + 1) % cfg.train.checkpoint_every == 0
                                                       and not self._nonfinite_streak):  # keep the pre-divergence ones
                self.save_checkpoint(step + 1)
            if stop:
                raise CollapseError(
                    f"stopped at step {step + 1} (train.stop_on_collapse): {stopping[0].kind}: "
                    f"{stopping[0].message.split(': ', 1)[1]}. Checkpoint {self.last_checkpoint} holds the weights; "
                    f"continue with agentrl train --out {self.run_dir} --resume [--no-stop-on-collapse]")
        return rows

    def _check_finite(self, row: dict) -> None:
        """plumbing: count consecutive steps with non-finite updates or metrics; stop after max_nonfinite_steps."""
        if not row.get("nonfinite_updates") and is_finite_row(row):  # None: no update ran
            self._nonfinite_streak = []
            return
        self._nonfinite_streak.append(row["step"])
        bad = [k for k, v in row.items() if isinstance(v, float) and not math.isfinite(v)
               and k not in ("entropy", "explained_variance")]
        log.warning("step %d: non-finite loss or gradient (%s); %s update(s) skipped, weights unchanged by them",
                    row["step"], ", ".join(bad) or "nan", row.get("nonfinite_updates", "no"))
        k = self.cfg.train.max_nonfinite_steps
        if len(self._nonfinite_streak) >= k:
            lr = self.cfg.train.lr
            raise DivergenceError(
                f"training diverged: {k} step(s) in a row ({self._nonfinite_streak[0]}-{self._nonfinite_streak[-1]}) "
                f"had a NaN/inf loss or gradient at lr {lr:g}. The last checkpoint is "
                f"{self.last_checkpoint or 'none (resume starts over)'}; resume it with a lower learning rate: "
                f"agentrl train --out {self.run_dir} --resume --lr {lr / 10:g}")

    def step(self, step: int) -> dict:
        """One iteration, stages 1-7 of the module docstring. Returns its metrics row."""
        cfg, t0 = self.cfg, time.perf_counter()
        episode_games, group_ids = self._sample_games(step)  # plumbing: the same step, the same games and tokens
        # plumbing: with data parallelism each rank plays whole groups of its share of the games, with its own seed
        episode_games, group_ids = self.dp.shard_episodes(episode_games, group_ids, cfg.algo.group_size)
        self.dp.seed_rollout(cfg.train.seed * 1_000_003 + step)

        # ALGO: 1. rollout — G episodes per game, all batched
        self.policy.eval()
        with self.autocast():
            trajs, rstats = rollout(
                self.generator, self.tok, self.pool, episode_games, groups=group_ids, max_turns=cfg.env.max_turns,
                max_new_tokens=cfg.train.max_new_tokens, temperature=cfg.train.temperature,
                show_admissible=cfg.env.show_admissible, show_inventory=cfg.env.show_inventory,
                system_prompt=system_prompt_for(self.games.family, cfg.env.action_format, cfg.env.max_actions_per_turn),
                chat=self.chat, action_format=cfg.env.action_format, max_actions_per_turn=cfg.env.max_actions_per_turn)
        trajs, rstats = self.dp.gather_rollout(trajs, rstats)  # plumbing: every rank gets every episode
        # an episode cut by an environment fault is not the policy's doing: it leaves the loss and the group statistics
        trajs_ok = [t for t in trajs if t.n_turns > 0 and not t.termination.startswith("env_error")]
        t_rollout = time.perf_counter() - t0
        no_room = [t for t in trajs if t.n_turns == 0 and t.termination == "context_limit"]
        if no_room and len(no_room) == len(trajs):  # plumbing: not one reply fits; every step would be the same
            raise ConfigError(f"every episode's first prompt (>= {min(t.prompt_len for t in no_room)} tokens) plus "
                              f"train.max_new_tokens ({cfg.train.max_new_tokens}) exceeds the model's context "
                              f"({self.generator.context_limit} tokens): nothing can be generated; lower "
                              "--max-new-tokens (16-32 suit one action)")
        if not trajs_ok:  # plumbing: every episode failed in the environment: nothing to learn from; the run goes on
            return self._all_failed_row(step, trajs, t0)

        # ALGO: 2. turn rewards on turn-end tokens; trajectory returns
        rewards = [turn_rewards(cfg.reward.kind, t.env_rewards, t.max_score, t.won, t.valid, cfg.reward.format_penalty)
                   for t in trajs_ok]
        returns = torch.tensor([sum(r) for r in rewards], dtype=torch.float32)
        gids = torch.tensor([t.group for t in trajs_ok])

        # ALGO: 3. StarPO-S: keep the groups with the largest return spread (all at keep_top_std = 1), before anything
        # is forwarded, so filtered trajectories cost nothing and minibatches hold only kept ones
        kept = top_std_groups(returns, gids, cfg.algo.keep_top_std).nonzero(as_tuple=True)[0].tolist()
        batch = self._collate(trajs_ok, rewards, kept)

        # ALGO: 4. π_old, V_old, π_ref: forward passes without gradients (see _old_forward); added to the batch
        with self.autocast():
            m = self._old_forward(batch, rstats)

        # ALGO: 5. advantages (and the critic's value targets) from the chosen estimator
        with torch.no_grad():
            batch["advantages"], value_targets = self.estimator(AdvantageInputs(
                token_rewards=batch["token_rewards"], mask=batch["mask"], returns=returns[kept], group_ids=gids[kept],
                turn_end=batch["turn_end"], values=batch.get("old_values"),
                turn_obs=[trajs_ok[i].observations[:trajs_ok[i].n_turns] for i in kept],  # the state of each action
                turn_rewards=[rewards[i] for i in kept]), cfg.algo)
        if self.estimator.needs_critic:
            batch["returns"] = value_targets
            m["explained_variance"] = explained_variance(batch["old_values"], value_targets, batch["mask"])

        # ALGO: 6. epochs of minibatch updates on the clipped surrogate; the generator samples from the new weights
        t1 = time.perf_counter()
        m.update(self._update(batch))
        self.policy.eval()
        self.generator.sync(self.policy)
        t_update = time.perf_counter() - t1

        # plumbing: 7. metrics (over every episode that ran, kept by the filter or not)
        m.update(self._metrics_row(step, trajs, trajs_ok, rewards, returns, gids, len(kept), batch, rstats))
        m.update(rollout_seconds=t_rollout, update_seconds=t_update, step_seconds=time.perf_counter() - t0)
        return m

    def _sample_games(self, step: int) -> tuple[list[str], list[int]]:
        """plumbing: the step's games (games_per_step, without repeats while the set allows) × group_size episodes
        and their group ids. Seeds Python's and torch's RNG from (seed, step): a resumed step samples the same."""
        cfg = self.cfg
        rng = random.Random(cfg.train.seed * 1_000_003 + step)
        torch.manual_seed(cfg.train.seed * 1_000_003 + step)
        games = rng.sample(self.games.games, k=min(cfg.train.games_per_step, len(self.games)))
        if len(games) < cfg.train.games_per_step:
            games += rng.choices(self.games.games, k=cfg.train.games_per_step - len(games))
        episode_games = [g.path for g in games for _ in range(cfg.algo.group_size)]
        group_ids = [k for k in range(len(games)) for _ in range(cfg.algo.group_size)]
        return episode_games, group_ids

    def _all_failed_row(self, step: int, trajs: list[Trajectory], t0: float) -> dict:
        """plumbing: the metrics row of a step whose every episode failed in the environment (no update)."""
        n_env_errors = sum(t.termination.startswith("env_error") for t in trajs)
        reasons = sorted({t.termination for t in trajs})
        if self.progress:
            print(f"step {step + 1}: every episode failed ({reasons[0]}); no update", flush=True)
        return {"step": step + 1, "episodes": len(trajs), "env_errors": n_env_errors, "success_rate": 0.0,
                "return_mean": 0.0, "invalid_rate": 0.0, "mean_turns": 0.0, "entropy": float("nan"),
                "skipped_update": 1.0, "step_seconds": time.perf_counter() - t0, "env_error_reasons": reasons}

    def _collate(self, trajs: list[Trajectory], rewards: list[list[float]], kept: list[int]) -> dict[str, torch.Tensor]:
        """plumbing: the kept trajectories as (B, T) tensors (rollout.collate) plus token_rewards (B, T) float32,
        each turn's reward on its end token (rewards.place_on_tokens)."""
        batch = collate([trajs[i] for i in kept], self.tok.pad_token_id, self.device)
        T = batch["input_ids"].shape[1]
        batch["token_rewards"] = torch.stack([place_on_tokens(rewards[i], trajs[i].turn_ends, T)
                                              for i in kept]).to(self.device)
        return batch

    @torch.no_grad()
    def _old_forward(self, batch: dict[str, torch.Tensor], rstats) -> dict[str, float]:
        """Adds old_logprobs (π_old), old_values (V_old, with a critic), ref_logprobs (kl_coef > 0) and is_weights
        (TIS on) to the batch; returns their metrics.

        π_old comes from the training forward: the ratio of the first minibatch starts at exactly 1, whatever kernels
        or precision the rollout used; the rollout's own log-probs are the behaviour policy (their gap is logged, and
        weights the loss with truncated IS when TIS is on).
        With algo.old_logprobs 'behaviour' π_old is the rollout's log-probs and, without a critic, no forward runs
        (logprob_mismatch is then not logged: nothing was recomputed to compare).
        """
        cfg, mask, m = self.cfg, batch["mask"], {}
        self.policy.train()  # dropout is off (disable_dropout): train mode only switches on gradient checkpointing
        m["sampler_gap"] = rstats.sampler_gap
        behaviour = cfg.algo.old_logprobs == "behaviour"
        if behaviour and not self.estimator.needs_critic:  # π_old is the behaviour policy: no forward at all
            batch["old_logprobs"] = batch["behaviour_logprobs"]
        else:
            old = self._no_grad_forward(self.policy, batch, self.value_head)
            gap = (old["logprobs"] - batch["behaviour_logprobs"]).abs() * mask
            m["logprob_mismatch"] = gap.max().item()
            m["logprob_mismatch_mean"] = (gap.sum() / mask.sum().clamp(min=1)).item()
            # with 'behaviour' the forward ran for the critic's values only
            batch["old_logprobs"] = batch["behaviour_logprobs"] if behaviour else old["logprobs"]
            if "values" in old:
                batch["old_values"] = old["values"]
        if self.use_tis:
            batch["is_weights"] = truncated_is_weights(batch["old_logprobs"], batch["behaviour_logprobs"], mask,
                                                       cfg.algo.tis_cap)
            m["tis_weight_mean"] = masked_mean(batch["is_weights"], mask).item()
        if cfg.algo.kl_coef > 0:
            batch["ref_logprobs"] = self._ref_logprobs(batch)
        return m

    def _metrics_row(self, step: int, trajs: list[Trajectory], trajs_ok: list[Trajectory], rewards, returns, gids,
                     n_kept: int, batch, rstats) -> dict:
        """plumbing: the step's episode statistics (every episode that ran, kept by the filter or not)."""
        grp_std = [returns[gids == g].std(unbiased=False).item() for g in gids.unique()]
        n_turns = sum(t.n_turns for t in trajs_ok)
        return {
            "step": step + 1,
            "episodes": len(trajs),
            "success_rate": sum(t.won for t in trajs_ok) / len(trajs_ok),
            "return_mean": returns.mean().item(),
            "return_std": returns.std(unbiased=False).item(),
            "reward_mean": (sum(sum(r) for r in rewards) / max(n_turns, 1)),
            "group_return_std": sum(grp_std) / len(grp_std),
            "zero_std_group_frac": sum(x <= 1e-6 for x in grp_std) / len(grp_std),
            "singleton_groups": singleton_groups(gids),
            "kept_fraction": n_kept / len(trajs_ok),
            "mean_turns": n_turns / len(trajs_ok),
            "invalid_rate": sum(not v for t in trajs_ok for v in t.valid) / max(n_turns, 1),
            "repetition_rate": repetition_rate((t.actions, t.replies) for t in trajs_ok),
            "response_length": sum(sum(t.mask) for t in trajs_ok) / max(n_turns, 1),
            "input_dependence": input_dependence([t.replies for t in trajs_ok], [t.game for t in trajs_ok]),
            "truncated_rate": sum(x for t in trajs_ok for x in t.truncated) / max(n_turns, 1),
            "env_errors": sum(t.termination.startswith("env_error") for t in trajs),
            "env_error_reasons": sorted({t.termination for t in trajs if t.termination.startswith("env_error")}),
            "generated_tokens": rstats.generated_tokens,
            "gen_tokens_per_s": rstats.tokens_per_second,
            "policy_tokens": int(batch["mask"].sum().item()),
            "seq_len_max": batch["input_ids"].shape[1],
        }

    def _ref_logprobs(self, batch) -> torch.Tensor:
        if self.ref is not None:
            return self._no_grad_forward(self.ref, batch)["logprobs"]
        with self.policy.disable_adapter():  # LoRA: the reference is the base model
            return self._no_grad_forward(self.policy, batch)["logprobs"]

    def _no_grad_forward(self, model, batch, value_head: ValueHead | None = None) -> dict[str, torch.Tensor]:
        """plumbing: token_forward over the whole batch (called under no_grad) in chunks of rows of similar length
        (update.forward_in_chunks; budget max_tokens_per_microbatch, or minibatch_size × the longest row when that is
        0: never more than a training minibatch holds). With data parallelism each rank forwards its rows
        (DataParallel.rows) and the results are gathered: every rank gets the whole batch's."""
        B = batch["input_ids"].shape[0]
        rows = self.dp.rows(torch.arange(B, device=batch["input_ids"].device))
        if not len(rows):  # more ranks than episodes: this one has none
            keys = ("logprobs",) + (("values",) if value_head is not None else ())
            return {k: self.dp.gather_rows(batch["mask"].new_zeros((0, batch["mask"].shape[1])), B) for k in keys}
        mine = select(batch, rows, T=batch["input_ids"].shape[1])
        budget = self.cfg.train.max_tokens_per_microbatch or \
            self.cfg.train.minibatch_size * int(mine["attention_mask"].sum(1).max())
        share = self.cfg.train.share_prefix
        forward = functools.partial(token_forward, model, temperature=self.cfg.train.temperature, value_head=value_head,
                                    share_prefix=share)
        out = forward_in_chunks(forward, mine, budget,
                                prompt_groups(mine["input_ids"], mine["mask"]) if share else None)
        return {k: self.dp.gather_rows(v, B) for k, v in out.items()}

    def _update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """`epochs` passes of minibatch updates over the batch (update.py's batch dict). Gradients of the policy and of
        the value head are clipped separately (each to max_grad_norm) and both norms are logged; a minibatch whose
        loss or gradient is not finite is skipped (no optimizer step) and counted in `nonfinite_updates`."""
        cfg = self.cfg
        mask = batch["mask"]
        B = batch["input_ids"].shape[0]
        sums: dict[str, list[float]] = {}
        if mask.sum() == 0 or (self.value_head is None and (batch["advantages"].abs() * mask).sum() == 0):
            # every group had equal returns (or one member): no learning signal (GRPO/RLOO); skip, log zeros
            return {"skipped_update": 1.0, "entropy": float("nan"), "clip_frac": 0.0, "approx_kl": 0.0,
                    "grad_norm": 0.0, "policy_loss": 0.0, "kl_ref": 0.0, "nonfinite_updates": 0}
        policy_params = [p for p in self.policy.parameters() if p.requires_grad]
        value_params = [] if self.value_head is None else list(self.value_head.parameters())
        nonfinite = 0
        groups = prompt_groups(batch["input_ids"], batch["mask"]) if cfg.train.group_minibatches else None
        for epoch in range(cfg.train.epochs):
            if groups is None:  # random rows
                perm = torch.randperm(B)
            else:  # whole groups in random order (train.group_minibatches)
                perm = torch.tensor([i for g in torch.randperm(len(groups)).tolist() for i in groups[g]])
            perm = self.dp.broadcast(perm)  # every rank cuts the same minibatches (rank 0's permutation)
            for start in range(0, B, cfg.train.minibatch_size):
                idx = perm[start:start + cfg.train.minibatch_size]
                if mask[idx].sum() == 0:
                    continue
                self.opt.zero_grad(set_to_none=True)
                loss, pm = self._loss_and_backward(batch, idx)
                gn = torch.nn.utils.clip_grad_norm_(policy_params, cfg.train.max_grad_norm)
                pm["grad_norm"] = gn.item()
                finite = torch.isfinite(loss).item() and math.isfinite(pm["grad_norm"])
                if value_params:
                    vgn = torch.nn.utils.clip_grad_norm_(value_params, cfg.train.max_grad_norm)
                    pm["value_grad_norm"] = vgn.item()
                    finite = finite and math.isfinite(pm["value_grad_norm"])
                if not finite:  # plumbing: a diverged minibatch never reaches the weights
                    self.opt.zero_grad(set_to_none=True)
                    nonfinite += 1
                else:
                    self.opt.step()
                for k, v in pm.items():
                    sums.setdefault(k, []).append(v)
        res = {k: sum(v) / len(v) for k, v in sums.items()}
        res.setdefault("kl_ref", 0.0)
        res["skipped_update"] = 0.0
        res["nonfinite_updates"] = nonfinite
        return res

    def _loss_and_backward(self, batch: dict[str, torch.Tensor], idx: torch.Tensor
                           ) -> tuple[torch.Tensor, dict[str, float]]:
        """The loss of minibatch `idx` (rows of the batch) and its backward pass; returns (loss, metrics). The rows are
        cut to their longest (right padding: the tokens after it change nothing), so no forward or backward works on
        the padding that the rollout batch's longest episode put on shorter ones; with train.max_tokens_per_microbatch
        the gradient is accumulated over micro-batches (update.accumulate_microbatches).

        With data parallelism (distributed.py) rank r computes L_r over its rows idx[r::W] with the minibatch's global
        token and episode counts as denominators (Σ_r L_r = L, the single-process loss), DDP averages the gradients
        of W · L_r to ∇L, and the returned loss and metrics are the sums over ranks: the single-process values. An
        empty share (a minibatch with fewer rows than ranks) forwards one row with its mask zeroed: every rank must
        join every gradient all-reduce, and that row adds nothing to L_r."""
        cfg = self.cfg
        n_tokens, n_episodes = batch["mask"][idx].sum().item(), len(idx)
        mine = self.dp.rows(idx)
        mb = select(batch, mine if len(mine) else idx[:1])
        if not len(mine):
            mb["mask"] = mb["mask"] * 0.0
        with self.autocast():  # train.mixed_precision; backward follows the forward's dtypes
            loss, pm = accumulate_microbatches(self.forward, mb, cfg.algo, cfg.train.max_tokens_per_microbatch,
                                               cfg.env.max_turns * cfg.train.max_new_tokens, n_tokens, n_episodes,
                                               self.dp.backward)
        total = self.dp.sum([loss.item(), *pm.values()])
        return torch.tensor(total[0]), dict(zip(pm, total[1:]))

    # ----------------------------------------------------------------------------------------- checkpoints
    def save_checkpoint(self, step: int) -> Path:
        """Write checkpoints/step_NNNNNN (zero-padded step) durably and atomically, point `latest` at it, keep the
        newest train.keep_checkpoints. Refuses non-finite weights. See checkpoint.save_checkpoint. With data
        parallelism rank 0 writes it (the weights are the same on every rank), the others record its name, and all
        wait until it is written (a resume or a reader that starts next finds it)."""
        if self.is_main:
            path = ckpt_lib.save_checkpoint(self.ckpt_root, step, self.policy, self.tok, self.opt, self.value_head,
                                            self.cfg, keep=self.cfg.train.keep_checkpoints)
        else:
            path = self.ckpt_root / ckpt_lib.checkpoint_name(step)
        self.dp.barrier()
        self.last_checkpoint = path.name
        return path

    def _read_metrics(self) -> list[dict]:
        """Metrics rows up to the resume step (later rows, from an interrupted run, are dropped and rewritten). Steps
        done but without a row (metrics.jsonl deleted or cut) are named in one logged warning: the learning curve
        and the collapse detector go on without them."""
        rows = ckpt_lib.read_metrics(self.metrics_path, self.start_step)
        missing = sorted(set(range(1, self.start_step + 1)) - {r["step"] for r in rows})
        if missing:
            what = f"step {missing[0]}" if len(missing) == 1 else f"{len(missing)} steps ({missing[0]}-{missing[-1]})"
            line = (f"{self.metrics_path} has no row for {what} of the {self.start_step} this run has done "
                    "(deleted or damaged): its curve and the collapse detector go on without them")
            log.warning(line)
        return rows

    def close(self) -> None:
        """Close the env pool and the tracker, and release the run directory's lock."""
        self.pool.close()
        self.tracker.close()
        self._release_lock()

    def __enter__(self) -> "Trainer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def is_finite_row(row: dict) -> bool:
    """True if every numeric metric is finite (NaN allowed only for metrics that are undefined this step)."""
    allowed_nan = {"explained_variance", "entropy"}
    return all(math.isfinite(v) or k in allowed_nan for k, v in row.items() if isinstance(v, float))
