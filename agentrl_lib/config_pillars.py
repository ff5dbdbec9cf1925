"""The three pillars of the design space as config sections: the environment (EnvConfig), the reward (RewardConfig)
and the policy optimisation (AlgoConfig, with its presets ALGO_PRESETS). config.RunConfig holds them beside the model
and the budget (config_training.py); every field's docstring is its `agentrl train` flag's help.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .config_values import (
    EPISODES_PER_STEP_MAX,
    MAX_TURNS_MAX,
    ActionFormat,
    ConfigError,
    LossAgg,
    OldLogprobs,
    TisMode,
    check_closed,
)

ALGO_PRESETS: dict[str, dict[str, Any]] = {
    "ppo": {"advantage": "gae"},                      # critic, token-level GAE
    "grpo": {"advantage": "grpo"},
    "rloo": {"advantage": "rloo"},
    "turn_ppo": {"advantage": "turn_gae"},            # critic, one value per turn
    "bilevel_ppo": {"advantage": "bilevel_gae"},      # critic, turn-level across turns, token-level within (RAGEN)
    "dr_grpo": {"advantage": "dr_grpo", "loss_agg": "seq_mean_token_sum_norm"},  # both halves of Dr. GRPO
    "reinforce_pp": {"advantage": "reinforce_pp"},
    "gigpo": {"advantage": "gigpo"},
    # StarPO-S (RAGEN §4.2, Wang et al. 2025): keep the top 25% of groups by return std, a critic, decoupled clip,
    # no KL, entropy bonus 0.001
    "starpo_s": {"advantage": "gae", "keep_top_std": 0.25, "clip_low": 0.2, "clip_high": 0.28, "kl_coef": 0.0,
                 "entropy_coef": 0.001},
}
"""Named algorithms as AlgoConfig field values (`--algo ppo`, `AlgoConfig.from_preset("ppo")`); the estimators are
in advantages.ESTIMATORS (its module docstring has the table)."""


@dataclass
class EnvConfig:
    """Environment pillar: which games, how long an episode may run, what the agent sees."""

    games: str = ""
    """Directory of generated games (made by `agentrl make-games`, e.g. games/train); must contain a manifest.json."""
    max_turns: int = 8
    """Turns per episode before it is cut off (the paper uses about 2x the walkthrough length; 8-12)."""
    show_admissible: bool = False
    """List the admissible commands in each observation (off in the paper: the agent must find valid commands). Use
    the same setting for SFT, RL and evaluation; e.g. on for a first run of a weak model."""
    show_inventory: bool = False
    """Append the inventory to each observation (costs ~15 tokens per turn; use the same setting for SFT, RL and
    evaluation)."""
    process_pool: bool = True
    """Run each episode's env in its own worker process: a crashed or hung game interpreter ends only its episode.
    Costs 0-4 ms per step and ~2 s to start 8 workers (measured, envs/pool.py). Off (`--no-process-pool`): envs step
    in this process, and a hung step ends the process after step_timeout_s (resumable with --resume)."""
    step_timeout_s: float = 30.0
    """Watchdog of one env reset/step, in seconds (> 0): TextWorld steps take 2-15 ms, ALFWorld resets up to 0.5 s;
    10-120. A step past it is an env error for its episode (process pool) or ends the process (serial pool). A family
    whose steps need longer raises it (EnvFamily.step_timeout_s; swe: 70, a 30 s command then a 30 s test run)."""
    max_env_error_frac: float = 0.5
    """Stop training (and make `agentrl eval` exit non-zero) when more than this fraction of a step's (an
    evaluation's) episodes end in an env error, in [0, 1]; 1 never stops. Env-error episodes are counted as
    `env_errors` in every summary."""
    check_games: bool = True
    """Check every game before a run uses it: reset it and replay its walkthrough to a win, through the run's envs
    (~2-5 s for 16 TextWorld games; cached next to manifest.json, so a second run over an unchanged set is instant)."""
    action_format: ActionFormat = "plain"
    """How a reply becomes an action (prompts.ACTION_FORMATS): 'plain', the reply's first non-empty line; 'ragen',
    RAGEN's `<think>...</think><answer>a1 || a2</answer>` (a reply without an <answer> is an invalid turn: format
    penalty). The system prompt states the format in use; use the same setting for SFT, RL and evaluation."""
    max_actions_per_turn: int = 1
    """Actions one 'ragen' answer may carry, >= 1 (RAGEN: 5 with 5 turns, 1 for bandit); the frozenlake and sokoban
    envs make them in order, stopping when the episode ends, and the turn's reward is their sum (envs.base.make_moves).
    Actions past this many are dropped (RAGEN's rule). Not applied in the 'plain' format, whose first line goes to the
    env as is (so a plain 'Left || Up' is two moves for those envs). There is no cap per episode: max_turns × this
    bounds an episode's actions (and those envs end an episode at 100 moves). RAGEN's max_actions_per_traj (10, with
    5 turns × 5) is a tighter budget; max_turns × max_actions_per_turn = 10 (e.g. 5 × 2) gives the same total."""
    def validate(self) -> None:
        check_closed("env", self)
        if not (isinstance(self.max_actions_per_turn, int) and self.max_actions_per_turn >= 1):
            raise ConfigError(f"env.max_actions_per_turn must be an integer >= 1 (got {self.max_actions_per_turn!r});"
                              " RAGEN uses 5 for Sokoban and FrozenLake, 1 for Bandit")
        if not 1 <= self.max_turns <= MAX_TURNS_MAX:
            raise ConfigError(f"env.max_turns must be >= 1 and <= {MAX_TURNS_MAX} (got {self.max_turns}); the paper "
                              "uses 8-12 for small TextWorld games")
        if not self.step_timeout_s > 0:
            raise ConfigError(f"env.step_timeout_s must be > 0 seconds (got {self.step_timeout_s}); 30 is the default")
        if not 0.0 <= self.max_env_error_frac <= 1.0:
            raise ConfigError(f"env.max_env_error_frac must be in [0, 1] (got {self.max_env_error_frac}); 0.5 stops a "
                              "run when more than half of a step's episodes fail, 1 never stops")


@dataclass
class RewardConfig:
    """Reward pillar: how the game's outcome becomes turn-level rewards (see agentrl_lib/rewards.py)."""

    kind: str = "dense"
    """A key of rewards.REWARD_KINDS: 'sparse' (1 on the last turn if won, else 0), 'dense' (each turn's score
    increment / max score: a won game sums to 1), 'env' (each turn's reward exactly as the environment gives it:
    RAGEN's rewards for bandit's random payout, Sokoban's −0.1 per move / ±1 / +10; unscaled, so a won game need not
    out-score a lost one), or one you registered; or a kind the games' family computes itself
    (EnvFamily.reward_kinds), which such a family takes alone: swe's 'pass_ratio' (passing / listed tests, the
    Practitioner's Guide's), 'resolved' (1 if every listed test passes, SWE-Gym's) or 'relative' (the pass ratio
    above the unpatched baseline: a no-op earns 0), e.g. --reward pass_ratio."""
    format_penalty: float = 0.1
    """Subtracted from a turn's reward when the action is not admissible/understood, in reward units, in [0, 1]
    (RAGEN uses 0.1; 0 disables it)."""

    def validate(self) -> None:
        """The checks this section can make alone; reward.kind is a registry name, checked where it is looked up
        (rewards.get_reward)."""
        if not (isinstance(self.kind, str) and self.kind):
            raise ConfigError(f"reward.kind must name a kind of rewards.REWARD_KINDS (got {self.kind!r}); e.g. dense")
        if not 0.0 <= self.format_penalty <= 1.0:
            raise ConfigError(f"reward.format_penalty must be in [0, 1] (got {self.format_penalty}); 0 disables it")


@dataclass
class AlgoConfig:
    """Policy-optimisation pillar: the advantage estimator (agentrl_lib/advantages.py, ESTIMATORS) and the
    clipped-surrogate loss. `AlgoConfig.from_preset("grpo")` builds one of ALGO_PRESETS."""

    advantage: str = "gae"
    """Advantage estimator, a key of advantages.ESTIMATORS: 'gae' (critic + token-level GAE; PPO), 'turn_gae' (critic,
    one value per turn), 'bilevel_gae' (critic, RAGEN's turn + token levels), 'grpo' (group-normalised return),
    'dr_grpo' (return - group mean), 'rloo' (leave-one-out baseline), 'reinforce_pp' (batch-whitened reward-to-go),
    'gigpo' (episode + identical-state step groups), or one you registered."""
    group_size: int = 4
    """Episodes per game in one rollout batch (G), >= 1; group estimators (grpo, dr_grpo, rloo, gigpo) need G >= 2
    for a baseline. RAGEN uses 4-16."""
    gamma: float = 1.0
    """Discount between turns for GAE, in [0, 1] (no unit), applied at each turn's last token; 0.95-1.0 (the
    Practitioner's Guide: 1.0; RAGEN's turn-level gamma)."""
    gamma_token: float = 1.0
    """Discount between tokens of one reply for GAE, in [0, 1] (RAGEN's token-level gamma, 1.0); 1.0 keeps a reply's
    length from changing its credit."""
    lam: float = 1.0
    """GAE lambda, in [0, 1]; 0.95-1.0 (the paper uses 1.0: advantage = remaining return - value)."""
    clip_low: float = 0.2
    """epsilon_low of the clipped probability ratio, in (0, 1); 0.1-0.3 (PPO: 0.2)."""
    clip_high: float = 0.28
    """epsilon_high of the clipped probability ratio, > 0; 0.2-0.3 (StarPO-S / DAPO decoupled clipping: 0.28; 0.2
    for plain PPO)."""
    kl_coef: float = 0.0
    """Weight of the k3 KL estimate to the frozen reference policy, >= 0 (0 disables the reference model; the paper
    uses 0.001-0.01)."""
    dual_clip: float = 0.0
    """Dual clip c > 1 for negative advantages: the objective is bounded below by c·A (Ye et al. 2020 use 3.0);
    0 = off."""
    tis: TisMode = "auto"
    """Truncated importance sampling between the rollout's and the trainer's log-probs (Yao et al. 2025): 'on', 'off',
    or 'auto' (on when the policy runs in bf16/fp16, where the two differ; off in fp32 on a CPU, where they agree to
    ~1e-6)."""
    old_logprobs: OldLogprobs = "recompute"
    """Where π_old, the denominator of the clipped ratio, comes from: 'recompute' (a no-grad forward of the trainer
    over the rollout batch before the update: the first ratio is exactly 1 whatever the rollout's kernels or
    precision; verl's and TRL's default) or 'behaviour' (the log-probs the rollout sampled with, the behaviour
    policy's: no such forward, GRPO updates 1.37x faster in benchmarks/bench_update_speed.py; equal to 'recompute'
    up to the rollout/trainer mismatch, ~1e-6 with the HF backend in fp32 on a CPU, larger in bf16 or with vLLM).
    A critic's V_old comes from the hidden states that sampled each token where the generator keeps them ('hf-live',
    the default: no forward at all); with another generator the forward still runs, for the values only. The default
    stays 'recompute': the field is part of a run's identity (records.base_key), so changing it would leave every
    recorded sweep cell unmatched."""
    tis_cap: float = 2.0
    """C of truncated importance sampling, w = min(pi_old / pi_rollout, C), > 0; 1.5-5 (Yao et al. 2025 use 2)."""
    entropy_coef: float = 0.001
    """Weight of the entropy bonus (nats), >= 0; 0-0.01 (StarPO-S: 0.001)."""
    vf_coef: float = 0.1
    """Weight of the value loss, >= 0, used with a critic ('gae'); 0.1-1 (0.1 as TRL's PPO with a shared
    backbone)."""
    vf_clip: float = 0.2
    """Clip range of the value prediction around its rollout value, in return units, >= 0, used with a critic; 0.2
    is typical (0 disables)."""
    normalize_advantages: bool = True
    """Whiten GAE advantages over the batch's policy tokens to mean 0, std 1 (grpo / rloo are already normalised per
    group)."""
    grpo_std_eps: float = 1e-6
    """Epsilon in GRPO's (R - mean) / (std + eps), in return units, >= 0; 1e-8-1e-4."""
    keep_top_std: float = 1.0
    """StarPO-S filter: fraction of groups kept, those with the highest within-group return std, in (0, 1]; 1.0
    keeps all (RAGEN: 0.25)."""
    loss_mode: str = "ppo_clip"
    """The policy loss, a key of losses.POLICY_LOSSES (verl's actor.policy_loss.loss_mode): 'ppo_clip' (the clipped
    surrogate with clip_low / clip_high and dual_clip; PPO, GRPO and RLOO here all use it) or one you registered
    with losses.register_policy_loss (book/extending.md)."""
    loss_agg: LossAgg = "token_mean"
    """How the clipped surrogate averages over tokens: 'token_mean' (over the minibatch's policy tokens; DAPO, TRL) or
    'seq_mean_token_sum_norm' (token sum / (episodes × max_turns × max_new_tokens), a constant; Dr. GRPO, Liu et al.
    2025). The latter's steps are smaller by about mean episode tokens / (max_turns × max_new_tokens) at the same lr;
    see losses.LOSS_AGGS."""
    gigpo_step_weight: float = 1.0
    """GiGPO's ω: weight of the step-level advantage (over turns taken in identical observations) added to the
    episode-level one, >= 0; Feng et al. 2025 and verl-agent use 1.0 (0 = GRPO with GiGPO's per-turn plumbing)."""

    @classmethod
    def from_preset(cls, preset: str, **overrides: Any) -> "AlgoConfig":
        """The AlgoConfig of ALGO_PRESETS[preset] ('ppo', 'grpo', 'starpo_s', ...) with `overrides` applied.

        Raises: ConfigError for an unknown preset.
        """
        if preset not in ALGO_PRESETS:
            raise ConfigError(f"unknown algorithm preset {preset!r}; presets: {sorted(ALGO_PRESETS)}")
        return cls(**{**ALGO_PRESETS[preset], **overrides})

    @property
    def label(self) -> str:
        """A name for plots and titles: of the presets whose fields this config has, the one setting the most fields
        ('starpo_s' before 'ppo'; the first listed on a tie), else the estimator's name."""
        matching = [(len(values), -i, preset) for i, (preset, values) in enumerate(ALGO_PRESETS.items())
                    if all(getattr(self, k) == v for k, v in values.items())]
        return max(matching)[2] if matching else self.advantage

    def validate(self) -> None:
        """The checks this section can make alone; algo.advantage and algo.loss_mode are registry names, checked where
        they are looked up (advantages.get_estimator, with the group size it needs; losses.get_policy_loss; both
        called by parts.run_parts)."""
        check_closed("algo", self)
        for name in ("advantage", "loss_mode"):  # registry names: looked up by parts.run_parts
            if not (isinstance(getattr(self, name), str) and getattr(self, name)):
                raise ConfigError(f"algo.{name} must name a registered entry (got {getattr(self, name)!r}); e.g. "
                                  f"{'gae, grpo, rloo' if name == 'advantage' else 'ppo_clip'}")
        if not 1 <= self.group_size <= EPISODES_PER_STEP_MAX:
            raise ConfigError(f"algo.group_size (--group-size) must be in [1, {EPISODES_PER_STEP_MAX}] (got "
                              f"{self.group_size}): episodes per game in one step; RAGEN uses 4-16")
        for name in ("gamma", "gamma_token", "lam"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ConfigError(f"algo.{name} must be in [0, 1] (got {v})")
        if not (0 < self.clip_low < 1 and 0 < self.clip_high < 10):
            raise ConfigError(f"algo.clip_low must be in (0, 1) and clip_high > 0 "
                              f"(got {self.clip_low}, {self.clip_high})")
        if not 0.0 < self.keep_top_std <= 1.0:
            raise ConfigError(f"algo.keep_top_std must be in (0, 1] (got {self.keep_top_std})")
        if self.keep_top_std < 1.0 and self.group_size < 2:
            raise ConfigError(f"algo.keep_top_std {self.keep_top_std} ranks groups by their within-group return std, "
                              "which is 0 for a group of one episode: use --group-size 4 (RAGEN) or keep_top_std 1")
        if self.dual_clip != 0 and not self.dual_clip > 1:
            raise ConfigError(f"algo.dual_clip must be 0 (off) or > 1 (got {self.dual_clip}); Ye et al. 2020 use 3")
        if self.old_logprobs == "behaviour" and self.tis == "on":
            raise ConfigError("algo.tis 'on' corrects π_old (the trainer's) for the rollout's log-probs, and "
                              "algo.old_logprobs 'behaviour' makes π_old the rollout's: the weights would all be 1. "
                              "Use --old-logprobs recompute with TIS, or --tis off")
        if not self.tis_cap > 0:
            raise ConfigError(f"algo.tis_cap must be > 0 (got {self.tis_cap}); Yao et al. 2025 use 2")
        for name, why in [("kl_coef", "0 disables the KL term; the paper uses 0.001-0.01"),
                          ("entropy_coef", "a negative weight penalises entropy; StarPO-S uses 0.001"),
                          ("vf_coef", "a negative weight trains the critic away from the returns; 0.1 is typical"),
                          ("vf_clip", "0 disables value clipping; 0.2 is typical"),
                          ("grpo_std_eps", "a negative epsilon can flip the sign of advantages; use 1e-6"),
                          ("gigpo_step_weight", "a negative weight reverses the step-level credit; GiGPO uses 1")]:
            if getattr(self, name) < 0:
                raise ConfigError(f"algo.{name} must be >= 0 (got {getattr(self, name)}); {why}")
