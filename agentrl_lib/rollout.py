"""Batched multi-turn rollouts: all live episodes generate together each turn, and every episode is recorded as one
token sequence (a Trajectory) with exactly the ids the policy sampled.

Token layout of a trajectory (the Practitioner's Guide, §4; RAGEN's StarPO):

    [system + objective + first observation + assistant header]   mask 0   (prompt)
    [action tokens of turn 1 ... <|im_end|>]                       mask 1   (policy; turn_ends[0] = last index)
    [\\n<|im_start|>user\\n feedback <|im_end|>\\n<|im_start|>assistant\\n] mask 0 (environment)
    [action tokens of turn 2 ... <|im_end|>]                       mask 1
    ...

`rollout` plays the episodes through a generation backend (generation.py: `HFGenerator(model, tokenizer)`) and an
env pool; `collate` pads trajectories into the (B, T) tensors the trainer trains on.

Introduced in notebooks/00_quickstart.md §2.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from .envs import family_names, get_family
from .envs.pool import EnvPool
from .envs.protocol import EnvFailure
from .generation import Generator
from .prompts import SYSTEM_PROMPT, ChatFormat, feedback_message, first_user_message, parse_reply


@dataclass
class Trajectory:
    """One episode as one token sequence.

    ids / mask / behaviour_logprobs have the same length T. mask[t] = 1 exactly on tokens the policy sampled (incl.
    each turn's end token). turn_ends[k] is the index of turn k's last policy token (where turn k's reward is placed).
    """

    game: str
    group: int
    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    behaviour_logprobs: list[float] = field(default_factory=list)
    """log π_behaviour(ids[t] | ids[:t]) of each generated token: the log-prob under the distribution the rollout's
    sampler drew it from (the vLLM engine or the HF `generate` of the generation backend, at the sampling
    temperature; TurnSample.logprobs), 0 on tokens it did not generate. Not π_old: the update recomputes π_old with
    the trainer's forward unless algo.old_logprobs = 'behaviour' (collate's `behaviour_logprobs`)."""
    behaviour_hidden: list[tuple[int, torch.Tensor]] | None = field(default_factory=list)
    """(t0, (n, H) float32) per turn: the last hidden states that sampled ids[t0:t0 + n], from a backend that reads
    them (TurnSample.hidden; LiveRowsGenerator); None once a turn came without them. collate's `behaviour_hidden`."""
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

    @property
    def usable(self) -> bool:
        """Whether the loss and the group statistics use this episode: it played a turn, and no environment fault cut
        it (an env error is not the policy's doing)."""
        return self.n_turns > 0 and not self.termination.startswith("env_error")

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
    """Largest generation.TurnSample.sampler_gap of the rollout (≈ 1e-6 when sampling is plain softmax(logits / T))."""

    @property
    def tokens_per_second(self) -> float:
        return self.generated_tokens / max(self.generate_seconds, 1e-9)


def collate(trajs: list[Trajectory], pad_id: int, device) -> dict[str, torch.Tensor]:
    """Right-pad trajectories into (B, T) tensors: input_ids long, attention_mask long, mask float32 (policy tokens),
    behaviour_logprobs float32 (the rollout's log-probs of the sampled tokens, 0 elsewhere), turn_end float32 (1 on
    each turn's last policy token); and behaviour_hidden (B, T, H) float32 (at each sampled token t the hidden
    state that sampled it, 0 elsewhere) when every trajectory has them (Trajectory.behaviour_hidden)."""
    T = max(len(t.ids) for t in trajs)
    B = len(trajs)
    ids = torch.full((B, T), pad_id, dtype=torch.long)
    attn = torch.zeros((B, T), dtype=torch.long)
    mask = torch.zeros((B, T), dtype=torch.float32)
    behaviour = torch.zeros((B, T), dtype=torch.float32)
    turn_end = torch.zeros((B, T), dtype=torch.float32)
    for i, t in enumerate(trajs):
        n = len(t.ids)
        ids[i, :n] = torch.tensor(t.ids)
        attn[i, :n] = 1
        mask[i, :n] = torch.tensor(t.mask, dtype=torch.float32)
        behaviour[i, :n] = torch.tensor(t.behaviour_logprobs, dtype=torch.float32)
        turn_end[i, t.turn_ends] = 1.0
    out = dict(input_ids=ids, attention_mask=attn, mask=mask, behaviour_logprobs=behaviour, turn_end=turn_end)
    if all(t.behaviour_hidden for t in trajs):
        H = trajs[0].behaviour_hidden[0][1].shape[-1]
        hidden = torch.zeros((B, T, H), dtype=torch.float32)
        for i, t in enumerate(trajs):
            for t0, hs in t.behaviour_hidden:
                hidden[i, t0:t0 + len(hs)] = hs
        out["behaviour_hidden"] = hidden
    return {k: v.to(device) for k, v in out.items()}


def rollout(generator: Generator, tokenizer, pool: EnvPool, games: list[str], *, groups: list[int] | None = None,
            max_turns: int = 8, max_new_tokens: int = 24, temperature: float = 0.7, show_admissible: bool = False,
            show_inventory: bool = False, system_prompt: str = SYSTEM_PROMPT, chat: ChatFormat | None = None,
            progress: bool = False, action_format: str = "plain",
            max_actions_per_turn: int = 1) -> tuple[list[Trajectory], RolloutStats]:
    """Play one episode of each game in `games` (repeat a game G times for a group), all episodes batched.

    Each turn: one `generator.generate` call over the live episodes → parse each reply into an action → step every
    env → append the feedback as the next user turn (`generator.append`). Episodes end when won/lost, after `max_turns`,
    when the context would exceed the model's limit, or when the env fails (EnvFailure: that episode alone ends).

    Args:
        generator: the generation backend (generation.py), e.g. `HFGenerator(model, tokenizer)`.
        pool: needs pool.size >= len(games); episode i runs in slot i.
        groups: group id of each episode (default: index of its game among the distinct games).
        system_prompt: the game family's prompt (`prompts.system_prompt_for`); the default is TextWorld's.
        action_format, max_actions_per_turn: how a reply becomes the env's action (`prompts.parse_reply`; EnvConfig):
            "plain" (first line, the default) or "ragen" (<answer>a1 || a2</answer>, at most max_actions_per_turn).
            Not applied when the pool's family takes whole replies (EnvFamily.reply_as_action, e.g. swe).
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
    ctx_limit = generator.context_limit
    if groups is None:
        order = {g: i for i, g in enumerate(dict.fromkeys(games))}
        groups = [order[g] for g in games]
    stats = RolloutStats(episodes=len(games))
    # a family that parses replies itself (EnvFamily.reply_as_action: swe's ```bash blocks) gets them whole
    raw_replies = getattr(pool, "family", None) in family_names() and get_family(pool.family).reply_as_action
    trajs = [Trajectory(game=g, group=k) for g, k in zip(games, groups)]
    slots = list(range(len(games)))

    t = time.perf_counter()
    first = pool.reset(slots, games)
    stats.env_seconds += time.perf_counter() - t
    live, started = [], False
    for i, res in enumerate(first):
        tr = trajs[i]
        if isinstance(res, EnvFailure):
            tr.termination = f"env_error: {res.reason}"
            continue
        tr.max_score = res.info.max_score
        user = first_user_message(res.info.objective, res.obs, res.info.admissible if show_admissible else None,
                                  res.info.inventory if show_inventory else "")
        tr.ids = chat.prompt_ids(system_prompt, user)
        tr.mask, tr.behaviour_logprobs = [0] * len(tr.ids), [0.0] * len(tr.ids)
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
            if started and live:
                generator.keep(keep)
        if not live:
            break
        if not started:
            generator.start([trajs[i].ids for i in live])
            started = True
        # ALGO: the policy acts in every live episode at once (one batched generate call).
        t = time.perf_counter()
        turn_sample = generator.generate(max_new_tokens, temperature)
        seqs, lps, truncs = turn_sample.ids, turn_sample.logprobs, turn_sample.truncated
        stats.sampler_gap = max(stats.sampler_gap, turn_sample.sampler_gap)
        stats.generate_seconds += time.perf_counter() - t
        stats.generated_tokens += sum(len(s) for s in seqs)
        actions = []
        hidden = turn_sample.hidden or [None] * len(live)
        for i, seq, lp, trunc, hs in zip(live, seqs, lps, truncs, hidden):
            tr = trajs[i]
            if tr.behaviour_hidden is not None:
                tr.behaviour_hidden = None if hs is None else tr.behaviour_hidden + [(len(tr.ids), hs)]
            tr.ids += seq
            tr.mask += [1] * len(seq)
            tr.behaviour_logprobs += lp
            tr.turn_ends.append(len(tr.ids) - 1)
            if trunc:  # close the turn so the chat stays well-formed; this token was not sampled: mask 0
                tr.ids.append(chat.eos_id)
                tr.mask.append(0)
                tr.behaviour_logprobs.append(0.0)
            reply = tokenizer.decode([x for x in seq if x != chat.eos_id], skip_special_tokens=False)
            tr.replies.append(reply)
            tr.truncated.append(trunc)
            actions.append(reply if raw_replies else parse_reply(reply, action_format, max_actions_per_turn))
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
            tr.behaviour_logprobs += [0.0] * len(nxt)
            still.append(i)
            keep.append(r)
            # the unsampled eos that closes a truncated reply is not in the batch yet: it goes in with the feedback
            blocks.append(([chat.eos_id] if tr.truncated[-1] else []) + nxt)
        live = still
        if live:
            generator.keep(keep)
            generator.append(blocks)
        if progress:
            print(f"  turn {turn + 1}: {len(live)} episodes still running", flush=True)
    stats.wall_seconds = time.perf_counter() - t_start
    return trajs, stats
