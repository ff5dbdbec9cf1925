"""Evaluation: play each game of a set once (greedy by default) and report success rate, turns, invalid actions.

Introduced in notebooks/00_quickstart.md §5.
"""
from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

import torch

from .config import EnvConfig, check_context_room
from .envs.pool import EnvPool, open_pool
from .envs.protocol import GameSet
from .generation import get_generator
from .prompts import ChatFormat, first_user_message, system_prompt_for
from .rollout import rollout


def evaluate(model, tokenizer, games: GameSet, max_turns: int = 8, temperature: float = 0.0, batch_size: int = 8,
             max_new_tokens: int = 24, env: EnvConfig | None = None, pool: EnvPool | None = None,
             generator: str = "hf-live", progress: bool = True, seed: int | None = None, reward_kind: str = "") -> dict:
    """Play every game in `games` once, `batch_size` episodes at a time.

    `env` (default EnvConfig()) says how the games are shown and run, as in training: pass the run's config, since a
    policy trained with the admissible commands (`show_admissible`) or the inventory (`show_inventory`) in view is
    evaluated with them. Without `pool`, the envs run as a run's do (`envs.pool.open_pool(env, ...)`): a ProcessPool
    (`process_pool`), a watchdog of `step_timeout_s` per env call, and every game checked first (`check_games`,
    cached). `max_turns` is this evaluation's own (env.max_turns is not read). `max_new_tokens`: tokens the policy
    may generate per turn (a reply cut there is truncated; a run's is train.max_new_tokens: 24 suits a one-line game
    command, a swe reply with a patch needs ~160, configs/swe.yaml; `agentrl eval --max-new-tokens`). `generator`
    names the generation backend (generation.GENERATORS; a run's is model.generator). `seed`: with temperature > 0,
    the sampling is seeded with it (torch's RNG forked: the caller's RNG is left as it was), so a sampled evaluation
    is reproducible (`agentrl eval --seed`, default 0); None samples from the caller's RNG stream. `reward_kind`: for
    a family whose env computes its reward itself (EnvFamily.reward_kinds: swe), the kind each episode's score is
    (mean_score_frac; a run's is reward.kind, `agentrl eval --reward`); other families ignore it.

    Returns a dict: success_rate, mean_turns, invalid_rate (share of turns whose action was not admissible),
    mean_score_frac (score / max_score), env_errors (episodes that ended in an env error: not loaded, crashed, hung;
    they count as lost), env_error_reasons (distinct, first 5), n_games, max_turns, temperature, max_new_tokens, seed
    (the settings it ran with; seed None when greedy), seconds, gen_tokens_per_s, and `per_game` rows (game, won,
    turns, score, max_score, actions, termination).
    Raises: ValueError if max_turns < 1 or batch_size < 1; GameSetError when a game fails the check; ConfigError
        when max_new_tokens or max_turns do not fit the model's context (config.check_context_room).
    """
    from tqdm.auto import tqdm

    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1 (got {batch_size})")
    env = env or EnvConfig()
    own_pool = pool is None
    if pool is None:
        pool = open_pool(env, min(batch_size, len(games)), games, reward_kind)
    chat = ChatFormat(tokenizer)
    rows, t0, tokens, gen_s = [], time.perf_counter(), 0, 0.0
    bar = tqdm(total=len(games), desc="eval", disable=not progress)
    seed = seed if temperature > 0 else None  # greedy decoding draws nothing: no seed to use or record
    rng = torch.random.fork_rng(devices=[]) if seed is not None else contextlib.nullcontext()
    try:
        gen = get_generator(generator)(model, tokenizer)  # one backend for every chunk (vLLM: one weight sync)
        check_context_room(max_new_tokens, max_turns, gen.context_limit, where="eval")
        with rng:
            if seed is not None:
                torch.manual_seed(seed)
            for start in range(0, len(games), pool.size):
                chunk = games.games[start:start + pool.size]
                trajs, st = rollout(gen, tokenizer, pool, [g.path for g in chunk],
                                    max_turns=max_turns,
                                    max_new_tokens=max_new_tokens, temperature=temperature,
                                    show_admissible=env.show_admissible, show_inventory=env.show_inventory, chat=chat,
                                    system_prompt=system_prompt_for(games.family, env.action_format,
                                                                    env.max_actions_per_turn),
                                    action_format=env.action_format, max_actions_per_turn=env.max_actions_per_turn)
                tokens, gen_s = tokens + st.generated_tokens, gen_s + st.generate_seconds
                for g, t in zip(chunk, trajs):
                    rows.append({"game": g.name, "won": t.won, "turns": t.n_turns, "score": t.score,
                                 "max_score": t.max_score, "invalid": sum(not v for v in t.valid),
                                 "actions": t.actions, "termination": t.termination})
                bar.update(len(chunk))
                bar.set_postfix(success=f"{sum(r['won'] for r in rows) / len(rows):.2f}")
    finally:
        bar.close()
        if own_pool:
            pool.close()
    turns = sum(r["turns"] for r in rows)
    failed = [r["termination"] for r in rows if r["termination"].startswith("env_error")]
    return {
        "success_rate": sum(r["won"] for r in rows) / len(rows),
        "mean_turns": turns / len(rows),
        "invalid_rate": sum(r["invalid"] for r in rows) / max(turns, 1),
        "mean_score_frac": sum(r["score"] / max(r["max_score"], 1e-9) for r in rows) / len(rows),
        "env_errors": len(failed),
        "env_error_reasons": list(dict.fromkeys(failed))[:5],
        "n_games": len(rows),
        "max_turns": max_turns,
        "temperature": temperature,
        "max_new_tokens": max_new_tokens,
        "seed": seed,
        "seconds": round(time.perf_counter() - t0, 1),
        "gen_tokens_per_s": tokens / max(gen_s, 1e-9),
        "per_game": rows,
    }


def first_reply_probabilities(model, tokenizer, env, game: str, replies: list[str], family: str,
                              env_cfg: EnvConfig | None = None) -> dict[str, float]:
    """The exact probability, under `model` at temperature 1, that its first reply in `game` is each of `replies`
    word for word, then the end-of-turn token: the product of the probabilities of `ChatFormat.action_ids(reply)`
    after the first prompt a rollout builds (`family`'s system prompt, `first_user_message` of `env.reset(game)`,
    shown as `env_cfg` says: admissible commands, inventory, action format). A reply written another way ("dragon.",
    " Dragon") is another reply, so the sum is at most 1 and the rest is every other reply.

    Returns {reply: probability} (floats in [0, 1]); what `env.reset(game)` raises propagates.
    Introduced in notebooks/05_stability.md §2 (what a format-only warm-up leaves the policy preferring)."""
    env_cfg = env_cfg or EnvConfig()
    first = env.reset(game)
    chat = ChatFormat(tokenizer)
    user = first_user_message(first.info.objective, first.obs, first.info.admissible if env_cfg.show_admissible
                              else None, first.info.inventory if env_cfg.show_inventory else "")
    prompt = chat.prompt_ids(system_prompt_for(family, env_cfg.action_format, env_cfg.max_actions_per_turn), user)
    device = next(model.parameters()).device
    out = {}
    with torch.no_grad():
        for reply in replies:
            ids = chat.action_ids(reply)
            x = torch.tensor([prompt + ids], device=device)
            logp = torch.log_softmax(model(x).logits[0, len(prompt) - 1:-1].float(), dim=-1)
            out[reply] = float(logp.gather(1, torch.tensor(ids, device=device)[:, None]).sum().exp())
    return out


def save_eval(result: dict, path: str | Path) -> None:
    """Write an evaluation result as JSON, atomically (fsio.atomic_write_text: the old file or the new one,
    never a mix or a stray temp file).

    Raises: OSError whose filename is `path` (a full disk's write error names no file otherwise)."""
    from .fsio import atomic_write_text

    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(result, indent=1))
    except OSError as e:
        raise OSError(e.errno, e.strerror or str(e), str(path)) from e


def keep_unsaved(text: str, what: str) -> str:
    """Put `text` (a result that could not be written where it was asked for, e.g. on a full disk) where it is not
    lost: a new file `agentrl-unsaved-WHAT-<time>-<pid>.json` in the first of the system's temp dir, the agentrl cache
    root (paths.cache_root) and the home directory that takes it; if none does, print it to stdout.
    Returns the file's path, or 'stdout (printed above)'."""
    import os
    import tempfile

    from .paths import cache_root

    name = f"agentrl-unsaved-{what}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.json"
    for folder in (tempfile.gettempdir, cache_root, Path.home):
        path = None
        try:
            path = Path(folder()) / name
            with open(path, "x") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            return str(path)
        except OSError:
            if path is not None:
                try:
                    path.unlink(missing_ok=True)  # a partial copy is no copy
                except OSError:
                    pass
    print(text, flush=True)
    return "stdout (printed above)"


def format_eval(result: dict, name: str = "") -> str:
    """One line: success rate, mean turns, invalid-action rate, env errors (episodes the env failed)."""
    return (f"{name + ': ' if name else ''}success {result['success_rate']:.1%} on {result['n_games']} games, "
            f"mean turns {result['mean_turns']:.1f}, invalid actions {result['invalid_rate']:.1%}, "
            f"env errors {result.get('env_errors', 0)}/{result['n_games']}")
