"""One RL iteration in one file, top to bottom, as CleanRL writes PPO: rollout → turn rewards → π_old and V_old →
advantages → for epochs × minibatches: clipped loss → backward → gradient clipping → optimizer step.

It calls the library's own pieces (rollout.rollout, rewards.turn_rewards and place_on_tokens, the estimator functions
of advantages.py, policy.token_forward, losses.policy_loss and value_loss) in the order trainer.Trainer.step does; on
the default config path, from the same weights and the same trajectories, it gives the Trainer's losses and updated
weights up to float rounding (tests/test_one_file_loop.py). `# ALGO:` marks the algorithm, numbered as the stages
of trainer.py's module docstring, `# plumbing:` the rest.

Left out (trainer.py and update.py have them; `check_default_path` refuses a config that asks for one):
- estimators other than gae (PPO), grpo and rloo; the KL term to a frozen reference (algo.kl_coef > 0); truncated
  importance sampling (algo.tis 'on'); π_old = the rollout's log-probs (algo.old_logprobs 'behaviour'); StarPO-S's
  group filter (algo.keep_top_std < 1);
- bf16 autocast and its guard, LoRA, gradient checkpointing, micro-batches, whole-group minibatches, data
  parallelism (distributed.py); π_old in one forward, where the Trainer forwards it in chunks (the same numbers up to
  float rounding);
- skipping a minibatch whose loss or gradient is NaN/inf, the metrics row, the collapse detector, checkpoints.

Introduced in notebooks/03_policy.md §5.
"""
from __future__ import annotations

import random

import torch

from .advantages import broadcast_to_tokens, gae, grpo_advantages, rloo_advantages, whiten
from .config import RunConfig
from .envs import get_family
from .envs.pool import EnvPool
from .envs.protocol import GameSet
from .generation import Generator
from .losses import masked_mean, policy_loss, value_loss
from .policy import ValueHead, token_forward
from .prompts import ChatFormat, system_prompt_for
from .rewards import place_on_tokens, turn_rewards
from .rollout import collate, rollout
from .update import select


def check_default_path(cfg: RunConfig) -> None:
    """Raise ValueError naming every setting of `cfg` that this file leaves out (module docstring)."""
    a, t = cfg.algo, cfg.train
    asked = {"algo.advantage other than gae/grpo/rloo": a.advantage not in ("gae", "grpo", "rloo"),
             "algo.kl_coef > 0": a.kl_coef > 0, "algo.tis on": a.tis == "on",
             "algo.old_logprobs behaviour": a.old_logprobs != "recompute", "algo.keep_top_std < 1": a.keep_top_std < 1,
             "model.lora_rank": cfg.model.lora_rank,
             "model.dtype bfloat16": cfg.model.dtype == "bfloat16", "train.mixed_precision": t.mixed_precision != "no",
             "train.max_tokens_per_microbatch": t.max_tokens_per_microbatch, "train.group_minibatches":
             t.group_minibatches, "train.gradient_checkpointing": t.gradient_checkpointing}
    if any(asked.values()):
        raise ValueError(f"one_file_loop leaves out {', '.join(k for k, v in asked.items() if v)}: train with "
                         "trainer.Trainer")


def rl_step(policy, value_head: ValueHead | None, optimizer: torch.optim.Optimizer, generator: Generator, tokenizer,
            pool: EnvPool, game_set: GameSet, cfg: RunConfig, step: int = 0) -> dict:
    """One RL iteration on `policy` (updated in place): what Trainer.step does on the default config path.

    Args:
        policy: a causal LM, float32, dropout off (models.disable_dropout); value_head: its critic for algo.advantage
            'gae', else None. optimizer: update.make_optimizer(policy, value_head, cfg.train).
        generator: the rollout backend over `policy` (generation.GENERATORS); pool: an env pool with
            train.games_per_step × algo.group_size slots; game_set: the training games (envs.base.load_game_set).
        step: the iteration's number; with train.seed it seeds the games and the sampling, as the Trainer does.
    Returns: {'losses': the total loss of each minibatch update, in order} and the mean over minibatches of
        policy_loss, value_loss (PPO), entropy, clip_frac, approx_kl, grad_norm; {'losses': []} when the batch
        carries no learning signal (every group's returns equal: no update, as the Trainer).
    Raises: ValueError when cfg asks for something this file leaves out (check_default_path).
    """
    check_default_path(cfg)
    algo, train, device = cfg.algo, cfg.train, next(policy.parameters()).device
    # plumbing: the Trainer's seeds and game draw: the same (seed, step) plays the same games and tokens
    rng = random.Random(train.seed * 1_000_003 + step)
    torch.manual_seed(train.seed * 1_000_003 + step)
    games = rng.sample(game_set.games, k=min(train.games_per_step, len(game_set)))
    games += rng.choices(game_set.games, k=train.games_per_step - len(games))
    policy.eval()  # plumbing: dropout off everywhere: π_old and the update see the same function

    # ALGO: 1. rollout: G episodes of each game, all batched; token ids as sampled, mask 1 on the policy's tokens
    trajs, _ = rollout(
        generator, tokenizer, pool, [g.path for g in games for _ in range(algo.group_size)],
        groups=[k for k in range(len(games)) for _ in range(algo.group_size)], max_turns=cfg.env.max_turns,
        max_new_tokens=train.max_new_tokens, temperature=train.temperature, show_admissible=cfg.env.show_admissible,
        show_inventory=cfg.env.show_inventory, chat=ChatFormat(tokenizer), action_format=cfg.env.action_format,
        system_prompt=system_prompt_for(game_set.family, cfg.env.action_format, cfg.env.max_actions_per_turn),
        max_actions_per_turn=cfg.env.max_actions_per_turn)
    trajs = [t for t in trajs if t.usable]  # plumbing: an episode cut by an env fault is not the policy's doing

    # ALGO: 2. turn rewards on each turn's last token; returns R_i = Σ_k r_ik (3., StarPO-S's filter: left out)
    env_kinds = get_family(game_set.family).reward_kinds  # swe: the env computes the run's kind
    rewards = [turn_rewards(cfg.reward.kind, t.env_rewards, t.max_score, t.won, t.valid, cfg.reward.format_penalty,
                            env_kinds)
               for t in trajs]
    returns = torch.tensor([sum(r) for r in rewards], dtype=torch.float32)
    group_ids = torch.tensor([t.group for t in trajs])
    batch = collate(trajs, tokenizer.pad_token_id, device)  # plumbing: (B, T) tensors, right-padded
    batch.pop("behaviour_hidden", None)  # plumbing: the sampler's hidden states; V_old is recomputed below
    T, mask = batch["input_ids"].shape[1], batch["mask"]
    batch["token_rewards"] = torch.stack([place_on_tokens(r, t.turn_ends, T) for r, t in zip(rewards, trajs)]
                                         ).to(device)

    # ALGO: 4. π_old (and the critic's V_old): the weights that sampled, one forward without gradients
    with torch.no_grad():
        old = token_forward(policy, batch["input_ids"], batch["attention_mask"], mask, train.temperature, value_head,
                            share_prefix=train.share_prefix)
        batch["old_logprobs"] = old["logprobs"]

        # ALGO: 5. advantages: token-level GAE with V_old (PPO), or one number per episode from its group
        if algo.advantage == "gae":
            batch["old_values"] = old["values"]
            adv, batch["returns"] = gae(batch["token_rewards"], old["values"], mask, algo.gamma, algo.lam,
                                        turn_end=batch["turn_end"], gamma_token=algo.gamma_token)
            batch["advantages"] = whiten(adv, mask) if algo.normalize_advantages else adv
        else:
            per_episode = (grpo_advantages(returns, group_ids, algo.grpo_std_eps) if algo.advantage == "grpo"
                           else rloo_advantages(returns, group_ids))
            batch["advantages"] = broadcast_to_tokens(per_episode.to(device), mask)
    if mask.sum() == 0 or (value_head is None and (batch["advantages"].abs() * mask).sum() == 0):
        return {"losses": []}  # plumbing: no learning signal (every group's returns equal): no update

    # ALGO: 6. epochs × minibatches of the clipped surrogate, each one gradient step
    policy_params = [p for p in policy.parameters() if p.requires_grad]
    value_params = [] if value_head is None else list(value_head.parameters())
    B, logs = batch["input_ids"].shape[0], {"losses": []}
    for epoch in range(train.epochs):
        perm = torch.randperm(B)
        for start in range(0, B, train.minibatch_size):
            idx = perm[start:start + train.minibatch_size]
            if mask[idx].sum() == 0:
                continue
            mb = select(batch, idx)  # plumbing: the minibatch's rows, cut to their longest
            out = token_forward(policy, mb["input_ids"], mb["attention_mask"], mb["mask"], train.temperature,
                                value_head, with_entropy=True, share_prefix=train.share_prefix)
            # ALGO: L = −mean_t min(ρ_t A_t, clip(ρ_t, 1 − ε_low, 1 + ε_high) A_t) − c_H·H [+ c_v·L_value]
            # (algo.loss_mode's objective, with the dual clip if set; Dr. GRPO's aggregation divides by B · L_max)
            loss, m = policy_loss(out["logprobs"], mb["old_logprobs"], mb["advantages"], mb["mask"], algo,
                                  max_tokens=cfg.env.max_turns * train.max_new_tokens)
            entropy = masked_mean(out["entropy"], mb["mask"])
            loss, m["entropy"] = loss - algo.entropy_coef * entropy, entropy.item()
            if value_head is not None:  # ALGO: PPO's critic: ½ max((V − R)², (V_clipped − R)²)
                v_loss, vm = value_loss(out["values"], mb["old_values"], mb["returns"], mb["mask"], algo.vf_clip)
                loss = loss + algo.vf_coef * v_loss
                m.update(vm)
            # ALGO: backward → clip each gradient norm (policy, critic) to max_grad_norm → optimizer step
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            m["grad_norm"] = torch.nn.utils.clip_grad_norm_(policy_params, train.max_grad_norm).item()
            if value_params:
                torch.nn.utils.clip_grad_norm_(value_params, train.max_grad_norm)
            optimizer.step()
            logs["losses"].append(loss.item())  # plumbing: the minibatch's numbers
            for k, v in m.items():
                logs.setdefault(k, []).append(v)
    generator.sync(policy)  # plumbing: the next rollout samples from the new weights
    return {k: v if k == "losses" else sum(v) / len(v) for k, v in logs.items()}
