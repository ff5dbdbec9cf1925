"""Batched multi-turn rollouts: all live episodes generate together each turn, and every episode is recorded as one
token sequence (a Trajectory) with exactly the ids the policy sampled.

Token layout of a trajectory (the Practitioner's Guide, §4; RAGEN's StarPO):

    [system + objective + first observation + assistant header]   mask 0   (prompt)
    [action tokens of turn 1 ... <|im_end|>]                       mask 1   (policy; turn_ends[0] = last index)
    [\\n<|im_start|>user\\n feedback <|im_end|>\\n<|im_start|>assistant\\n] mask 0 (environment)
    [action tokens of turn 2 ... <|im_end|>]                       mask 1
    ...

Introduced in notebooks/00_quickstart.ipynb.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from .envs.pool import EnvFailure, EnvPool
from .prompts import SYSTEM_PROMPT, ChatFormat, feedback_message, first_user_message, parse_action


@dataclass
class Trajectory:
    """One episode as one token sequence.

    ids / mask / logprobs have the same length T. mask[t] = 1 exactly on tokens the policy sampled (incl. each turn's
    end token); logprobs[t] is log pi_old(ids[t] | ids[:t]) at the sampling temperature for those tokens, 0 elsewhere.
    turn_ends[k] is the index of turn k's last policy token (where turn k's reward is placed).
    """

    game: str
    group: int
    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turn_ends: list[int] = field(default_factory=list)
    replies: list[str] = field(default_factory=list)
    """Decoded text of each turn's sampled tokens (without the end token)."""
    actions: list[str] = field(default_factory=list)
    """Parsed action sent to the game each turn."""
    observations: list[str] = field(default_factory=list)
    """observations[0] is the first observation; observations[k+1] answers actions[k]."""
    env_rewards: list[float] = field(default_factory=list)
    """Score increment of each turn, in game points."""
    valid: list[bool] = field(default_factory=list)
    """Whether each action was admissible."""
    truncated: list[bool] = field(default_factory=list)
    """Whether each reply hit max_new_tokens without an end token (an unsampled end token is appended, mask 0)."""
    won: bool = False
    lost: bool = False
    score: float = 0.0
    max_score: float = 1.0
    termination: str = ""
    """'won', 'lost', 'max_turns', 'context_limit' or 'env_error: ...'."""
    prompt_len: int = 0

    @property
    def n_turns(self) -> int:
        return len(self.turn_ends)

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("game", "group", "actions", "observations", "env_rewards", "valid",
                                              "won", "lost", "score", "max_score", "termination")}


@dataclass
class RolloutStats:
    episodes: int = 0
    turns: int = 0
    generated_tokens: int = 0
    generate_seconds: float = 0.0
    env_seconds: float = 0.0
    wall_seconds: float = 0.0
    sampler_gap: float = 0.0
    """Largest TurnSample.sampler_gap of the rollout (≈ 1e-6 when sampling is plain softmax(logits / T))."""

    @property
    def tokens_per_second(self) -> float:
        return self.generated_tokens / max(self.generate_seconds, 1e-9)


def _left_pad(seqs: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, width - len(s):] = torch.tensor(s, dtype=torch.long)
        attn[i, width - len(s):] = 1
    return ids.to(device), attn.to(device)


class _Batch:
    """The live episodes as one padded batch plus the KV cache of everything already encoded.

    Between turns each row gets new tokens (its environment turn) of a different length; they are appended as a
    block left-padded *within the block*, so rows keep padding holes. The attention mask is 0 on every hole (left
    padding, post-eos padding of rows that finished early, in-block padding), and `generate` derives position ids from
    the cumulative mask, so each row sees exactly the positions of its contiguous trajectory. Only new tokens are
    encoded each turn instead of the whole history.
    """

    def __init__(self, contexts: list[list[int]], pad_id: int, device):
        self.pad_id, self.device = pad_id, device
        self.ids, self.attn = _left_pad(contexts, pad_id, device)
        self.cache = None

    def append(self, blocks: list[list[int]]) -> None:
        ids, attn = _left_pad(blocks, self.pad_id, self.device)
        self.ids = torch.cat([self.ids, ids], dim=1)
        self.attn = torch.cat([self.attn, attn], dim=1)

    def keep(self, rows: list[int]) -> None:
        if rows == list(range(self.ids.shape[0])):
            return  # every row stays: no copy of the cache
        idx = torch.tensor(rows, dtype=torch.long, device=self.device)
        self.ids, self.attn = self.ids[idx], self.attn[idx]
        if self.cache is not None:
            self.cache.batch_select_indices(idx)


def sampling_config(temperature: float, max_new_tokens: int, eos_id: int, pad_id: int):
    """A complete `GenerationConfig` whose sampling distribution is exactly softmax(logits / T), or greedy at T = 0.

    transformers fills every field left at None from the model's own generation config and then from its global
    defaults, which include top_k = 50 (../shared/NOTES.md): a `do_sample=True` call that does not set top_k samples
    from the top 50 tokens only, while an RL loss that uses log softmax(logits / T) assumes the full distribution. So
    every field that adds a logits processor is set here to its neutral value, independent of how the model was
    loaded: top_k 0, top_p 1, min_p / typical_p / epsilon / eta cut-offs off, no repetition penalty, no n-gram ban,
    no suppressed or forced tokens.

    Args:
        temperature: > 0 samples from softmax(logits / T); 0 = greedy.
    Returns: transformers.GenerationConfig.
    """
    from transformers import GenerationConfig

    sample = temperature > 0
    warpers = dict(temperature=temperature, top_k=0, top_p=1.0, min_p=None, typical_p=1.0, epsilon_cutoff=0.0,
                   eta_cutoff=0.0, top_h=None) if sample else {}  # warpers only run when sampling
    return GenerationConfig(
        max_new_tokens=max_new_tokens, do_sample=sample, **warpers,
        repetition_penalty=1.0, no_repeat_ngram_size=0, encoder_repetition_penalty=1.0,
        bad_words_ids=None, suppress_tokens=None, begin_suppress_tokens=None, forced_bos_token_id=None,
        forced_eos_token_id=None, min_length=0, min_new_tokens=None, renormalize_logits=False,
        num_beams=1, num_return_sequences=1, eos_token_id=eos_id, pad_token_id=pad_id,
        output_logits=True, output_scores=True, return_dict_in_generate=True, use_cache=True)


@dataclass
class TurnSample:
    """What one batched `generate` call returns per row (see generate_turn)."""

    ids: list[list[int]]
    """Sampled ids of each row, up to and including the first end token."""
    logprobs: list[list[float]]
    """log π_behaviour of each sampled id: log-softmax of the scores the token was actually drawn from."""
    truncated: list[bool]
    """True for rows that hit max_new_tokens without an end token."""
    sampler_gap: float
    """max |log-softmax(processed scores) − log-softmax(raw logits / T)| over the sampled ids: 0 (to float error) when
    the sampler is plain softmax(logits / T); large when a hidden logits warper (top-k, top-p, penalties) is active."""


@torch.no_grad()
def generate_turn(model, batch: _Batch, eos_id: int, max_new_tokens: int, temperature: float) -> TurnSample:
    """One batched `generate` call for all live episodes, continuing from the batch's KV cache.

    Args:
        batch: the live episodes (ending with the assistant header); updated in place with the sampled tokens, their
            attention mask (0 after each row's eos) and the new cache.
        temperature: 0 = greedy; otherwise plain sampling from softmax(logits / T) (`sampling_config`: no top-k,
            top-p or other warper), so the returned log-probs are the exact behaviour-policy log-probs.
    Returns:
        TurnSample. Log-probs are those of the distribution sampled (T = 1 when greedy), read from the processed
        scores; `sampler_gap` compares them with softmax(raw logits / T).
    """
    sample = temperature > 0
    width = batch.ids.shape[1]
    gen_cfg = sampling_config(temperature, max_new_tokens, eos_id, batch.pad_id)
    out = model.generate(input_ids=batch.ids, attention_mask=batch.attn, past_key_values=batch.cache,
                         generation_config=gen_cfg)
    new = out.sequences[:, width:]  # (B, n_steps)
    scores = torch.stack(out.scores, dim=1).float()  # (B, n_steps, V): what the next token was drawn from
    token_logp = torch.log_softmax(scores, dim=-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)  # (B, n_steps)
    raw = torch.stack(out.logits, dim=1).float() / (temperature if sample else 1.0)
    raw_logp = torch.log_softmax(raw, dim=-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
    ids, lps, truncated, gap = [], [], [], 0.0
    new_attn = torch.zeros_like(new)
    for r, (row, lp) in enumerate(zip(new.tolist(), token_logp.tolist())):
        n = row.index(eos_id) + 1 if eos_id in row else len(row)
        ids.append(row[:n])
        lps.append(lp[:n])
        truncated.append(eos_id not in row[:n])
        new_attn[r, :n] = 1
        if n:
            gap = max(gap, (token_logp[r, :n] - raw_logp[r, :n]).abs().max().item())
    batch.ids, batch.attn, batch.cache = out.sequences, torch.cat([batch.attn, new_attn], dim=1), out.past_key_values
    return TurnSample(ids, lps, truncated, gap)


def rollout(model, tokenizer, pool: EnvPool, games: list[str], groups: list[int] | None = None, max_turns: int = 8,
            max_new_tokens: int = 24, temperature: float = 0.7, show_admissible: bool = False,
            show_inventory: bool = False, system_prompt: str = SYSTEM_PROMPT, chat: ChatFormat | None = None,
            progress: bool = False) -> tuple[list[Trajectory], RolloutStats]:
    """Play one episode of each game in `games` (repeat a game G times for a group), all episodes batched.

    Each turn: one `generate` call over the live episodes → parse each reply into an action → step every env →
    append the feedback as the next user turn. Episodes end when won/lost, after `max_turns`, when the context would
    exceed the model's limit, or when the env fails (EnvFailure: that episode alone ends).

    Args:
        pool: needs pool.size >= len(games); episode i runs in slot i.
        groups: group id of each episode (default: index of its game among the distinct games).
        system_prompt: the game family's prompt (`prompts.system_prompt_for`); the default is TextWorld's.
    Returns:
        (trajectories in the order of `games`, RolloutStats).
    Raises:
        ValueError: max_turns < 1, or the pool has fewer slots than episodes.
    """
    if max_turns < 1:
        raise ValueError(f"max_turns must be >= 1 (got {max_turns})")
    if pool.size < len(games):
        raise ValueError(f"the env pool has {pool.size} slots for {len(games)} episodes; make a bigger pool")
    t_start = time.perf_counter()
    chat = chat or ChatFormat(tokenizer)
    pad_id = tokenizer.pad_token_id
    ctx_limit = getattr(model.config, "max_position_embeddings", 8192) or 8192
    if groups is None:
        order = {g: i for i, g in enumerate(dict.fromkeys(games))}
        groups = [order[g] for g in games]
    stats = RolloutStats(episodes=len(games))
    trajs = [Trajectory(game=g, group=k) for g, k in zip(games, groups)]
    slots = list(range(len(games)))

    t = time.perf_counter()
    first = pool.reset(slots, games)
    stats.env_seconds += time.perf_counter() - t
    live, batch = [], None
    device = next(model.parameters()).device
    for i, res in enumerate(first):
        tr = trajs[i]
        if isinstance(res, EnvFailure):
            tr.termination = f"env_error: {res.reason}"
            continue
        tr.max_score = res.info.max_score
        user = first_user_message(res.info.objective, res.obs, res.info.admissible if show_admissible else None,
                                  res.info.inventory if show_inventory else "")
        tr.ids = chat.prompt_ids(system_prompt, user)
        tr.mask, tr.logprobs = [0] * len(tr.ids), [0.0] * len(tr.ids)
        tr.prompt_len = len(tr.ids)
        tr.observations.append(res.obs)
        live.append(i)

    for turn in range(max_turns):
        over = [r for r, i in enumerate(live) if len(trajs[i].ids) + max_new_tokens > ctx_limit]
        for r in over:
            trajs[live[r]].termination = "context_limit"
        if over:
            keep = [r for r in range(len(live)) if r not in over]
            live = [live[r] for r in keep]
            if batch is not None and live:
                batch.keep(keep)
        if not live:
            break
        if batch is None:
            batch = _Batch([trajs[i].ids for i in live], pad_id, device)
        # ALGO: the policy acts in every live episode at once (one batched generate call).
        t = time.perf_counter()
        turn_sample = generate_turn(model, batch, chat.eos_id, max_new_tokens, temperature)
        seqs, lps, truncs = turn_sample.ids, turn_sample.logprobs, turn_sample.truncated
        stats.sampler_gap = max(stats.sampler_gap, turn_sample.sampler_gap)
        stats.generate_seconds += time.perf_counter() - t
        stats.generated_tokens += sum(len(s) for s in seqs)
        actions = []
        for i, seq, lp, trunc in zip(live, seqs, lps, truncs):
            tr = trajs[i]
            tr.ids += seq
            tr.mask += [1] * len(seq)
            tr.logprobs += lp
            tr.turn_ends.append(len(tr.ids) - 1)
            if trunc:  # close the turn so the chat stays well-formed; this token was not sampled: mask 0
                tr.ids.append(chat.eos_id)
                tr.mask.append(0)
                tr.logprobs.append(0.0)
            reply = tokenizer.decode([x for x in seq if x != chat.eos_id], skip_special_tokens=False)
            tr.replies.append(reply)
            tr.truncated.append(trunc)
            actions.append(parse_action(reply))
            tr.actions.append(actions[-1])
        # plumbing: every env takes its action; a failed env ends only its own episode.
        t = time.perf_counter()
        results = pool.step(live, actions)
        stats.env_seconds += time.perf_counter() - t
        stats.turns += len(live)
        still, blocks, keep = [], [], []
        for r, (i, res) in enumerate(zip(live, results)):
            tr = trajs[i]
            if isinstance(res, EnvFailure):
                tr.env_rewards.append(0.0)
                tr.valid.append(False)
                tr.termination = f"env_error: {res.reason}"
                continue
            tr.env_rewards.append(res.reward)
            tr.valid.append(res.info.valid)
            tr.observations.append(res.obs)
            tr.won, tr.lost, tr.score = res.info.won, res.info.lost, res.info.score
            if res.done:
                tr.termination = "won" if tr.won else ("lost" if tr.lost else "done")
                continue
            if turn == max_turns - 1:
                tr.termination = "max_turns"
                continue
            user = feedback_message(res.obs, res.info.admissible if show_admissible else None,
                                    res.info.inventory if show_inventory else "")
            nxt = chat.user_turn_ids(user)
            tr.ids += nxt
            tr.mask += [0] * len(nxt)
            tr.logprobs += [0.0] * len(nxt)
            still.append(i)
            keep.append(r)
            # the unsampled eos that closes a truncated reply is not in the batch yet: it goes in with the feedback
            blocks.append(([chat.eos_id] if tr.truncated[-1] else []) + nxt)
        live = still
        if live:
            batch.keep(keep)
            batch.append(blocks)
        if progress:
            print(f"  turn {turn + 1}: {len(live)} episodes still running", flush=True)
    stats.wall_seconds = time.perf_counter() - t_start
    return trajs, stats
