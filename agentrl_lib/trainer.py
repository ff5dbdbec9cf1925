"""The multi-turn RL loop: rollout → turn rewards → advantages → epochs of minibatch updates → log → checkpoint.

Every algorithm shares the loop; only the advantage estimator (advantages.ESTIMATORS[algo.advantage]) differs, and
a critic exists iff that estimator needs one (PPO's 'gae'). Trainer.step, stage by stage:

    for step in 1..N:
        1. trajectories = rollout(generator, games × G)   # batched multi-turn episodes, π_behaviour log-probs;
                                                          # episodes cut by an env fault are dropped
        2. r_turn = turn_rewards(reward.kind) − format penalty, on each turn's end token;  R = Σ_turns r_turn
        3. keep the groups with the largest return spread (StarPO-S; all by default)
        4. π_old, V_old, π_ref = forward passes over the kept trajectories (no grad)
        5. A, V_target = estimator(r, R, groups, V_old)   # GAE [ppo] | group-normalised R [grpo] | R − LOO mean [rloo]
                                                          # | ... every estimator of advantages.ESTIMATORS
        6. for epoch, minibatch: loss = clipped surrogate (× TIS weight) + c_v·value loss + β·KL(k3) − c_H·entropy;
           generator.sync(policy)
        7. metrics row (metrics.step_row) → collapse detector (alerts: warning + the row's `alerts`) → metrics.jsonl
           (rundir.py); checkpoint atomically (checkpoint.py); with train.stop_on_collapse an alert of
           train.stop_kinds stops the run after its checkpoint

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
from . import rundir
from .advantages import AdvantageInputs, top_std_groups
from .config import ConfigError, RunConfig
from .diagnostics import CollapseDetector, CollapseError, DivergenceGuard
from .distributed import data_parallel
from .envs import get_family
from .envs.base import check_env_errors, load_game_set
from .envs.pool import EnvPool, open_pool
from .envs.protocol import GameSet
from .losses import masked_mean, truncated_is_weights
from .metrics import complete_row, step_row
from .parts import run_parts
from .policy import TokenModel, prompt_groups, values_at
from .precision import bf16_logprob_gap, precision_label
from .prompts import ChatFormat, system_prompt_for
from .rewards import place_on_tokens, turn_rewards
from .rollout import RolloutStats, Trajectory, collate, rollout
from .tracking import open_tracker
from .trainer_parts import build_trainer_parts
from .update import accumulate_microbatches, no_grad_forward, select

log = logging.getLogger(__name__)


class Trainer:
    """Multi-turn RL trainer for one run directory.

    Args:
        config: the RunConfig (config.env.games must name a games dir).
        run_dir: where config.yaml, metrics.jsonl and checkpoints/ go (run.run_rl draws learning_curve.png there).
        init: model to start from ('embedded', HF id, dir, SFT output or run dir); default config.model.name.
            It is recorded as model.name in run_dir/config.yaml: the KL reference of a resumed run is that model.
        resume: continue from run_dir's newest complete checkpoint (older ones when it is damaged; step 0 when
            there is none yet) with `config` (the CLI passes rundir.resume_config(run_dir) with its flags
            applied); the starting model stays the recorded one, config.yaml is rewritten only once the state has
            loaded, and the config's lr / value_lr replace the optimizer's saved ones. Rules: agentrl_lib/rundir.py.
        pool: an EnvPool with >= games_per_step * group_size slots (default: `envs.pool.open_pool(config.env, ...)`,
            a ProcessPool unless env.process_pool is off, every game checked through it first).
    The run directory is locked (RUN/.lock) from construction until close(); `with Trainer(...) as trainer:` closes
    it (env pool and lock) on leaving the block.
    Raises:
        GameSetError / FileNotFoundError / ConfigError: bad games dir, model path or config (also max_new_tokens or
            max_turns that the loaded model's context cannot hold: config.check_context_room; a resume whose
            train.steps is below the steps done: rundir.check_steps_left; a reward.kind the games' family refuses,
            EnvFamily.check_reward, e.g. dense on swe games: before the run dir is locked or any model loads).
        FileExistsError: run_dir holds a run and resume is False.
        RunLockedError: another process is training in run_dir.
        CheckpointError: resume: no run in run_dir, a field that cannot change on resume changed (named), or no
            complete, loadable checkpoint.
    """

    def __init__(self, config: RunConfig, run_dir: str | Path, init: str | None = None, resume: bool = False,
                 pool: EnvPool | None = None, progress: bool = True):
        config.validate()
        games = load_game_set(config.env.games)  # its manifest: the family's checks come before any lock or model
        self.family = get_family(games.family)
        # its registry names (reward kind, estimator, backend, stop kinds), the reward kind among those the games'
        # family takes (e.g. swe refuses dense, EnvFamily.check_reward): checked before any lock, pool or model
        run_parts(config, self.family)
        run_dir = Path(run_dir)
        # plumbing: data parallelism (distributed.py; a SingleProcess stand-in without a launcher): rank 0 alone writes
        self.dp = data_parallel(config.model.device)
        self.dp.check_train(config.train)  # whole groups per rank; no micro-batches
        self.is_main = self.dp.is_main
        # plumbing: one trainer per run dir (RUN/.lock; released by close(), garbage collection or process death)
        lock = rundir.RunLock(run_dir) if self.is_main else None
        self._release_lock = weakref.finalize(self, lock.release) if lock else (lambda: None)
        config = rundir.start_or_resume(run_dir, config, init, resume)  # model.name: the model the run started from
        self.cfg, self.run_dir, self.progress = config, run_dir, progress and self.is_main
        self.games: GameSet = games
        n_episodes = config.train.games_per_step * config.algo.group_size // self.dp.world_size  # this process's
        if pool is None:  # plumbing: the run's envs; every game is checked through them before the model loads
            pool = open_pool(config.env, n_episodes, self.games, config.reward.kind)  # swe: envs compute the kind
        self.ckpt_root, self.metrics_path = self.run_dir / "checkpoints", self.run_dir / "metrics.jsonl"
        self.step_in_progress = None
        self.detector = CollapseDetector()  # Echo-Trap alerts over the metrics rows (diagnostics.py)
        self.divergence = DivergenceGuard(config.train.max_nonfinite_steps)  # NaN/inf steps in a row
        self.tracker = open_tracker(config.train.report_to, run_dir, self.is_main)  # plumbing: tracking.py
        parts = run_parts(config, self.family)  # of the config in effect (a resume's saved one, flags applied)
        self.estimator, self.stop_kinds = parts.estimator, parts.stop_kinds
        # the policy, critic, KL reference, rollout backend, optimizer and precision (trainer_parts.py)
        p = build_trainer_parts(config, parts, self.ckpt_root, resume, run_dir)
        self.policy, self.tok, self.value_head, self.ref, self.generator, self.opt = (
            p.policy, p.tok, p.value_head, p.ref, p.generator, p.opt)
        self.start_step = self.last_step = p.start_step
        self.last_checkpoint, self.adamw_impl, self.use_tis = p.last_checkpoint, p.adamw_impl, p.use_tis
        self.device = next(self.policy.parameters()).device
        self.chat = ChatFormat(self.tok)
        # plumbing: bf16 (train.mixed_precision bf16, model.dtype bfloat16, or auto on a bf16 GPU): every forward under
        # autocast; the weights and AdamW stay float32
        self.autocast_dtype, self.precision = p.autocast_dtype, precision_label(p.autocast_dtype)  # records say which
        amp = self.autocast_dtype is not None
        self.bf16_unchecked = amp  # precision.bf16_logprob_gap on the first batch
        self.autocast = functools.partial(torch.autocast, self.device.type, self.autocast_dtype or torch.bfloat16, amp)
        if self.is_main:
            rundir.write_config(self.run_dir / "config.yaml", config)  # only now: a failed resume changes nothing
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
        rows = self.rows = rundir.resume_metrics(self.metrics_path, self.start_step)  # self.rows: what run_rl draws,
        # also after a CollapseError; up to the resume step (rundir.py)
        self.detector.replay(rows)  # plumbing: a resumed run's detector is in the state the kept rows left it in
        self.last_step = self.start_step
        for step in range(self.start_step, cfg.train.steps):
            self.step_in_progress = step + 1
            row = complete_row(self.step(step), needs_critic=self.estimator.needs_critic)  # every METRICS key
            alerts = self.detector.update(row)  # Echo-Trap signatures (diagnostics.py)
            row["alerts"] = [a.to_dict() for a in alerts]
            rows.append(row)
            if self.is_main:
                rundir.append_metrics(self.metrics_path, row)  # strict JSON: NaN → null
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
            self.divergence.update(row, cfg.train.lr, self.last_checkpoint, self.run_dir)
            stopping = [a for a in alerts if a.kind in self.stop_kinds]  # train.stop_on_collapse, train.stop_kinds
            if stopping or step + 1 == cfg.train.steps or ((step + 1) % cfg.train.checkpoint_every == 0
                                                       and not self.divergence.streak):  # keep the pre-divergence ones
                self.save_checkpoint(step + 1)
            if stopping:
                raise CollapseError(
                    f"stopped at step {step + 1} (train.stop_on_collapse): {stopping[0].kind}: "
                    f"{stopping[0].message.split(': ', 1)[1]}. Checkpoint {self.last_checkpoint} holds the weights; "
                    f"continue with agentrl train --out {self.run_dir} --resume [--no-stop-on-collapse]")
        return rows


    def step(self, step: int) -> dict:
        """One iteration, stages 1-7 of the module docstring. Returns its metrics row (metrics.step_row)."""
        cfg, t0 = self.cfg, time.perf_counter()
        # ALGO: 1. rollout — G episodes per game, all batched
        trajs, rstats = self._rollout(step)
        ran = [t for t in trajs if t.usable]  # an episode cut by an env fault is not the policy's doing: dropped
        t_rollout = time.perf_counter() - t0
        if not ran:  # plumbing: every episode failed in the environment: nothing to learn from; the run goes on
            if self.progress:
                print(f"step {step + 1}: every episode failed ({min(t.termination for t in trajs)}); no update",
                      flush=True)
            return step_row(step, trajs, seconds={"step_seconds": time.perf_counter() - t0})

        # ALGO: 2. turn rewards on turn-end tokens; trajectory returns
        rewards = [turn_rewards(cfg.reward.kind, t.env_rewards, t.max_score, t.won, t.valid, cfg.reward.format_penalty,
                                self.family.reward_kinds) for t in ran]
        returns = torch.tensor([sum(r) for r in rewards], dtype=torch.float32)
        gids = torch.tensor([t.group for t in ran])

        # ALGO: 3. StarPO-S: keep the groups with the largest return spread (all at keep_top_std = 1), before anything
        # is forwarded, so filtered trajectories cost nothing and minibatches hold only kept ones
        kept = top_std_groups(returns, gids, cfg.algo.keep_top_std).nonzero(as_tuple=True)[0].tolist()
        batch = self._collate(ran, rewards, kept)

        # ALGO: 4. π_old, V_old, π_ref: forward passes without gradients (see _old_forward); added to the batch
        with self.autocast():
            passes = self._old_forward(batch)

        # ALGO: 5. advantages (and the critic's value targets) from the chosen estimator
        with torch.no_grad():
            batch["advantages"], value_targets = self.estimator(AdvantageInputs(
                token_rewards=batch["token_rewards"], mask=batch["mask"], returns=returns[kept], group_ids=gids[kept],
                turn_end=batch["turn_end"], values=batch.get("old_values"),
                turn_obs=[ran[i].observations[:ran[i].n_turns] for i in kept],  # the state of each action
                turn_rewards=[rewards[i] for i in kept]), cfg.algo)
        if self.estimator.needs_critic:
            batch["returns"] = value_targets

        # ALGO: 6. epochs of minibatch updates on the clipped surrogate; the generator samples from the new weights
        t1 = time.perf_counter()
        update = self._update(batch)  # None: no learning signal, no update
        self.policy.eval()
        self.generator.sync(self.policy)
        t_update = time.perf_counter() - t1

        # plumbing: 7. the metrics row (over every episode that ran, kept by the filter or not)
        return step_row(step, trajs, rstats, rewards, batch, passes, update, seconds={
            "rollout_seconds": t_rollout, "update_seconds": t_update, "step_seconds": time.perf_counter() - t0})

    def _rollout(self, step: int) -> tuple[list[Trajectory], RolloutStats]:
        """plumbing: stage 1: the step's episodes (every rank gets every episode) and the rollout's statistics. The
        games: games_per_step, without repeats while the set allows, × group_size episodes each; Python's and torch's
        RNG are seeded from (seed, step), so a resumed step samples the same games and tokens.
        Raises ConfigError when not one reply fits the context (every step would be the same)."""
        cfg = self.cfg
        rng = random.Random(cfg.train.seed * 1_000_003 + step)
        torch.manual_seed(cfg.train.seed * 1_000_003 + step)
        games = rng.sample(self.games.games, k=min(cfg.train.games_per_step, len(self.games)))
        if len(games) < cfg.train.games_per_step:
            games += rng.choices(self.games.games, k=cfg.train.games_per_step - len(games))
        episode_games = [g.path for g in games for _ in range(cfg.algo.group_size)]
        group_ids = [k for k in range(len(games)) for _ in range(cfg.algo.group_size)]
        # with data parallelism each rank plays whole groups of its share of the games, with its own seed
        episode_games, group_ids = self.dp.shard_episodes(episode_games, group_ids, cfg.algo.group_size)
        self.dp.seed_rollout(cfg.train.seed * 1_000_003 + step)
        self.policy.eval()
        with self.autocast():
            trajs, rstats = rollout(
                self.generator, self.tok, self.pool, episode_games, groups=group_ids, max_turns=cfg.env.max_turns,
                max_new_tokens=cfg.train.max_new_tokens, temperature=cfg.train.temperature,
                show_admissible=cfg.env.show_admissible, show_inventory=cfg.env.show_inventory,
                system_prompt=system_prompt_for(self.games.family, cfg.env.action_format, cfg.env.max_actions_per_turn),
                chat=self.chat, action_format=cfg.env.action_format, max_actions_per_turn=cfg.env.max_actions_per_turn)
        trajs, rstats = self.dp.gather_rollout(trajs, rstats)
        no_room = [t for t in trajs if t.n_turns == 0 and t.termination == "context_limit"]
        if no_room and len(no_room) == len(trajs):
            raise ConfigError(f"every episode's first prompt (>= {min(t.prompt_len for t in no_room)} tokens) plus "
                              f"train.max_new_tokens ({cfg.train.max_new_tokens}) exceeds the model's context "
                              f"({self.generator.context_limit} tokens): nothing can be generated; lower "
                              "--max-new-tokens (16-32 suit one action)")
        return trajs, rstats

    def _collate(self, trajs: list[Trajectory], rewards: list[list[float]], kept: list[int]) -> dict[str, torch.Tensor]:
        """plumbing: the kept trajectories as (B, T) tensors (rollout.collate) plus token_rewards (B, T) float32,
        each turn's reward on its end token (rewards.place_on_tokens)."""
        batch = collate([trajs[i] for i in kept], self.tok.pad_token_id, self.device)
        T = batch["input_ids"].shape[1]
        batch["token_rewards"] = torch.stack([place_on_tokens(rewards[i], trajs[i].turn_ends, T)
                                              for i in kept]).to(self.device)
        return batch

    @torch.no_grad()
    def _old_forward(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """Adds old_logprobs (π_old), old_values (V_old, with a critic), ref_logprobs (kl_coef > 0) and is_weights (TIS
        on) to the batch; returns their metrics (bf16, once: precision.bf16_logprob_gap, which may stop the run).

        π_old comes from the training forward: the first minibatch's ratio starts at exactly 1, whatever kernels or
        precision the rollout used; the rollout's log-probs are the behaviour policy (gap logged; TIS weights the loss).
        With algo.old_logprobs 'behaviour' π_old is the rollout's log-probs and no forward runs without a critic, nor
        with one when the rollout kept the hidden states that sampled each token (LiveRowsGenerator: collate's
        behaviour_hidden): V_old is the value head on them, the numbers the forward would give up to float rounding
        (tests/test_trainer.py bounds the difference). logprob_mismatch is then not logged: nothing was recomputed.
        """
        cfg, mask, m, old = self.cfg, batch["mask"], {}, {}
        hidden = batch.pop("behaviour_hidden", None)  # (B, T, H) or None; not carried into the minibatches
        self.policy.train()  # dropout is off (disable_dropout): train mode only switches on gradient checkpointing
        behaviour = cfg.algo.old_logprobs == "behaviour"
        if behaviour and (not self.estimator.needs_critic or hidden is not None):  # π_old: the behaviour policy
            batch["old_logprobs"] = batch["behaviour_logprobs"]
            if self.estimator.needs_critic:  # V_old: the value head on the hidden states that sampled each token
                batch["old_values"] = values_at(self.value_head, hidden, mask)
        else:
            old = no_grad_forward(self.policy, batch, cfg.train, self.dp, self.value_head)
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
        if self.bf16_unchecked:  # plumbing: does bf16 change this policy? (π_old's pass above ran under bf16)
            self.bf16_unchecked = False
            # the limit stops a run that asked for bf16 (mixed_precision bf16, dtype bfloat16); model.dtype auto's
            # bf16 on a GPU (the default there) logs the gap and warns above it
            asked = cfg.train.mixed_precision == "bf16" or cfg.model.dtype == "bfloat16"
            train = cfg.train if asked else dataclasses.replace(cfg.train, bf16_max_logprob_gap=0.0)
            m["bf16_logprob_gap"] = bf16_logprob_gap(self.policy, batch, train, self.dp, old.get("logprobs"))
            if not asked and 0 < cfg.train.bf16_max_logprob_gap < m["bf16_logprob_gap"]:
                log.warning("bf16 autocast (model.dtype auto on %s) moves this policy's action log-probs by %.3g nats "
                            "per token from fp32's (train.bf16_max_logprob_gap %g); --dtype float32 trains in fp32",
                            self.device, m["bf16_logprob_gap"], cfg.train.bf16_max_logprob_gap)
        return m

    def _ref_logprobs(self, batch) -> torch.Tensor:
        """π_ref's log-probs (B, T) float32: the frozen reference's, or the policy's with its LoRA adapter off."""
        if self.ref is not None:
            return no_grad_forward(self.ref, batch, self.cfg.train, self.dp)["logprobs"]
        with self.policy.disable_adapter():  # LoRA: the reference is the base model
            return no_grad_forward(self.policy, batch, self.cfg.train, self.dp)["logprobs"]

    def _update(self, batch: dict[str, torch.Tensor]) -> dict[str, float] | None:
        """`epochs` passes of minibatch updates over the batch (update.py's batch dict), as CleanRL writes PPO's:
        epoch → minibatch → loss and backward → clip → optimizer step. A minibatch whose loss or gradient is not finite
        is skipped (no optimizer step) and counted in `nonfinite_updates`.
        Returns: the mean over minibatches of each metric (update.minibatch_loss's, grad_norm [, value_grad_norm])
        and nonfinite_updates; None when there is no learning signal (no update; metrics.step_row logs it)."""
        mask = batch["mask"]
        if mask.sum() == 0 or (self.value_head is None and (batch["advantages"].abs() * mask).sum() == 0):
            return None  # every group had equal returns (or one member): no learning signal (GRPO/RLOO)
        logs: dict[str, list[float]] = {}
        nonfinite = 0
        for epoch in range(self.cfg.train.epochs):
            for idx in self._minibatches(batch):
                self.opt.zero_grad(set_to_none=True)
                loss, m = self._loss_and_backward(batch, idx)  # micro-batches and data-parallel ranks inside
                norms = self._clip_gradients()  # the policy's and the critic's, each to max_grad_norm
                m.update(norms)
                if torch.isfinite(loss).item() and all(math.isfinite(n) for n in norms.values()):
                    self.opt.step()
                else:  # plumbing: a diverged minibatch never reaches the weights
                    self.opt.zero_grad(set_to_none=True)
                    nonfinite += 1
                for k, v in m.items():
                    logs.setdefault(k, []).append(v)
        return {**{k: sum(v) / len(v) for k, v in logs.items()}, "nonfinite_updates": nonfinite}

    def _minibatches(self, batch: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        """One epoch's minibatches, train.minibatch_size rows each (the last may be smaller), those without a policy
        token left out: the rows in random order, or (train.group_minibatches) whole groups in random order, so a
        minibatch shares its groups' prompts (update.py). Every data-parallel rank cuts rank 0's permutation."""
        mask, B, size = batch["mask"], batch["input_ids"].shape[0], self.cfg.train.minibatch_size
        if not self.cfg.train.group_minibatches:  # random rows
            perm = torch.randperm(B)
        else:  # whole groups in random order
            groups = prompt_groups(batch["input_ids"], mask)
            perm = torch.tensor([i for g in torch.randperm(len(groups)).tolist() for i in groups[g]])
        perm = self.dp.broadcast(perm)
        return [idx for idx in perm.split(size) if mask[idx].sum() > 0]

    def _clip_gradients(self) -> dict[str, float]:
        """Clip the policy's and the critic's gradients each to train.max_grad_norm (separately: the critic's larger
        gradients must not shrink the policy's step). Returns their norms before clipping: grad_norm [,
        value_grad_norm]."""
        max_norm = self.cfg.train.max_grad_norm
        policy_params = [p for p in self.policy.parameters() if p.requires_grad]
        norms = {"grad_norm": torch.nn.utils.clip_grad_norm_(policy_params, max_norm).item()}
        if self.value_head is not None:
            norms["value_grad_norm"] = torch.nn.utils.clip_grad_norm_(self.value_head.parameters(), max_norm).item()
        return norms

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

    def close(self) -> None:
        """Close the env pool and the tracker, and release the run directory's lock."""
        self.pool.close()
        self.tracker.close()
        self._release_lock()

    def __enter__(self) -> "Trainer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
