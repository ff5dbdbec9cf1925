"""Speed of the batched multi-turn rollout (HFGenerator: all live episodes in one `generate` call per turn, the KV
cache kept across turns) against slower ways to play the same episodes, measured side by side in one run:

    python benchmarks/bench_rollout.py --games DIR [--model embedded] [--episodes 8] [--group-size 4]
        [--max-turns 8] [--new-tokens 24] [--repeats 3] [--threads 2] [--machine TEXT] [--out FILE.jsonl]
        [--methods batched,concat,unshared,sequential,reencode]

- batched:    `rollout.rollout(HFGenerator(...), ...)`, the library's rollout (what the trainer runs); each group's
              shared first context is encoded once (HFGenerator's share_prefix);
- concat:     the same with `HFGenerator(..., grow_cache=False)`: transformers' DynamicCache, which appends each
              decoded token by concatenating (copying) the whole KV cache, where the default GrowingKVCache writes in
              place;
- unshared:   the same with `HFGenerator(..., share_prefix=False)`: every episode encodes its own first context;
- sequential: the same rollout called once per episode (one episode at a time, still with its KV cache);
- live:       the same with `LiveRowsGenerator` (model.generator hf-live, the default): a decode loop over the rows
              still writing their reply, with `generate`'s own draws (the same sampled_hash as batched);
- reencode:   the same batched rollout through `ReencodeGenerator`, which re-encodes every live episode's whole
              conversation at each turn (one batched `generate` over the history, no cache across turns), the way a
              rollout built on a stateless `generate(prompt)` call works (e.g. a TRL `rollout_func`).

The episodes: `episodes / group_size` games of DIR (its first ones, in manifest order), each played `group_size`
times, at most `max_turns` turns of at most `new_tokens` sampled tokens (T = 0.7), env steps in the default process
pool. After one short untimed warm-up of each method, the repeats alternate between the methods (on a shared machine
all see the same load), each method started from the same torch seed per repeat. A repeat's speed is generated
tokens / rollout wall seconds (env steps included: what a training step waits for); the JSON also has tokens per
second of `generate` alone, the load average around each repeat and the peak RSS. Prints per-repeat speeds, medians
and the ratios batched / sequential and batched / reencode.
"""
from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time

# OpenMP's busy-waiting threads collapse on a shared CPU (book/vllm.md, Speed); read when torch loads, so set it first
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import torch

from agentrl_lib.generation import HFGenerator, LiveRowsGenerator, TurnSample, _left_pad

METHODS = ("batched", "concat", "unshared", "sequential", "reencode", "live")


class ReencodeGenerator(HFGenerator):
    """The baseline without a KV cache across turns: each `generate` call left-pads every live row's whole token
    history (no padding holes: each row's ids as played) and encodes it from scratch, as a stateless
    `model.generate(prompt_ids)` per turn does. Sampling and log-probs are HFGenerator's (plain softmax(logits / T)).

    Attributes: rows — list of token-id lists, one per live episode (the conversation so far).
    """

    def start(self, contexts: list[list[int]]) -> None:
        """A new batch: the rows are the contexts (token ids); nothing is encoded yet."""
        self.device = next(self.model.parameters()).device
        self.rows = [list(c) for c in contexts]

    @torch.no_grad()
    def generate(self, max_new_tokens: int, temperature: float) -> TurnSample:
        """One batched `generate` over the full histories (left-padded, empty cache); each row's sampled ids are
        appended to it. Returns HFGenerator.generate's TurnSample."""
        self.ids, self.attn = _left_pad(self.rows, self.pad_id, self.device)
        self.cache = None  # the whole conversation is encoded again
        sample = super().generate(max_new_tokens, temperature)
        for row, ids in zip(self.rows, sample.ids):
            row.extend(ids)
        return sample

    def keep(self, rows: list[int]) -> None:
        """Keep only `rows` (indices into the current rows, in order)."""
        self.rows = [self.rows[r] for r in rows]

    def append(self, blocks: list[list[int]]) -> None:
        """Append each kept row's next environment turn (token ids)."""
        for row, block in zip(self.rows, blocks):
            row.extend(block)


def episode_games(games, episodes: int, group_size: int) -> tuple[list[str], list[int]]:
    """The benchmark's episodes: the first episodes // group_size games of the GameSet (cycled if it has fewer), each
    repeated group_size times. Returns (game path per episode, group id per episode)."""
    if episodes % group_size:
        raise ValueError(f"--episodes ({episodes}) must be a multiple of --group-size ({group_size})")
    n = episodes // group_size
    chosen = [games.games[k % len(games)].path for k in range(n)]
    return [g for g in chosen for _ in range(group_size)], [k for k in range(n) for _ in range(group_size)]


def run_method(method: str, model, tok, pool, games: list[str], groups: list[int], system_prompt: str,
               max_turns: int, new_tokens: int, seed: int) -> dict:
    """Play `games` once with `method` (one of METHODS). Returns generated tokens, wall / generate seconds, CPU
    seconds of this process (all its threads; the env workers are other processes: less sensitive than wall time to
    a shared machine's load), turns, tokens_per_s (tokens / wall s), gen_tokens_per_s (tokens / generate s), mean
    trajectory length (tokens), shared_positions (first-context positions the generator did not encode), sampled_hash
    (benchutil.sampled_hash: which tokens were sampled)."""
    from agentrl_lib.rollout import RolloutStats, rollout
    from experiments.benchmarks.benchutil import sampled_hash

    torch.manual_seed(seed)
    kw = dict(max_turns=max_turns, max_new_tokens=new_tokens, temperature=0.7, system_prompt=system_prompt)
    t0, c0 = time.perf_counter(), time.process_time()
    gen = None
    if method == "sequential":
        trajs, stats = [], RolloutStats()
        for g, k in zip(games, groups):
            tr, st = rollout(HFGenerator(model, tok), tok, pool, [g], groups=[k], **kw)
            trajs += tr
            stats.generated_tokens += st.generated_tokens
            stats.generate_seconds += st.generate_seconds
            stats.turns += st.turns
    else:
        gen = {"batched": HFGenerator, "concat": functools.partial(HFGenerator, grow_cache=False),
               "unshared": functools.partial(HFGenerator, share_prefix=False),
               "reencode": ReencodeGenerator, "live": LiveRowsGenerator}[method](model, tok)
        trajs, stats = rollout(gen, tok, pool, games, groups=groups, **kw)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"tokens": stats.generated_tokens, "seconds": round(wall, 3), "cpu_seconds": round(cpu, 3),
            "shared_positions": getattr(gen, "shared_positions", 0), "generate_seconds": round(
        stats.generate_seconds, 3), "turns": stats.turns, "tokens_per_s": round(stats.generated_tokens / wall, 2),
        "gen_tokens_per_s": round(stats.generated_tokens / max(stats.generate_seconds, 1e-9), 2),
        "mean_len": round(statistics.mean(len(t.ids) for t in trajs), 1), "won": sum(t.won for t in trajs),
        "sampled_hash": sampled_hash(trajs)}



def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--games", required=True, help="a games dir (agentrl make-games), e.g. tw-cooking games")
    p.add_argument("--game-names", default="", help="comma-separated manifest names: play only these games of "
                   "--games (e.g. game_100002,game_100005)")
    p.add_argument("--model", default="embedded", help="'embedded', a model dir or a run dir (e.g. an SFT output)")
    p.add_argument("--episodes", type=int, default=8)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--max-turns", type=int, default=8)
    p.add_argument("--new-tokens", type=int, default=24)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2, help="torch threads (0: torch's own)")
    p.add_argument("--machine", default="", help='how the results name this machine, e.g. "2-core shared CPU"')
    p.add_argument("--out", help="append one JSON line here (e.g. results/rollout_speed.jsonl)")
    p.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated, from {','.join(METHODS)}; "
                   "batched is always measured (the ratios are batched / each other method)")
    a = p.parse_args(argv)
    methods = ["batched", *(m for m in a.methods.split(",") if m != "batched")]
    if unknown := set(methods) - set(METHODS):
        p.error(f"--methods: unknown {sorted(unknown)}; choose from {','.join(METHODS)}")
    if a.threads:
        torch.set_num_threads(a.threads)

    import tempfile

    from agentrl_lib.config import EnvConfig
    from agentrl_lib.envs.base import load_game_set
    from agentrl_lib.envs.pool import open_pool
    from agentrl_lib.models import load_policy
    from agentrl_lib.prompts import system_prompt_for
    from experiments.benchmarks.benchutil import game_subset, load1, machine_info, peak_rss_gib, write_result

    tmp = tempfile.TemporaryDirectory()  # the subset's manifest lives until the end of the run
    game_set = load_game_set(game_subset(a.games, a.game_names.split(","), tmp.name) if a.game_names else a.games)
    games, groups = episode_games(game_set, a.episodes, a.group_size)
    model, tok = load_policy(a.model, "cpu", "float32")
    system_prompt = system_prompt_for(game_set.family)
    pool = open_pool(EnvConfig(games=str(game_set.root)), a.episodes, game_set)
    result = {"bench": "rollout", "model": a.model, "games": os.path.abspath(a.games),
              "game_names": a.game_names, "episodes": a.episodes,
              "group_size": a.group_size, "max_turns": a.max_turns, "new_tokens": a.new_tokens, "temperature": 0.7,
              "dtype": "float32", "repeats": a.repeats, **machine_info(a.machine),
              "methods": methods, "comparison": ",".join(methods), **{m: {"runs": []} for m in methods}}
    try:
        for m in methods:  # warm-up: first-call allocations, env workers' first reset
            run_method(m, model, tok, pool, games, groups, system_prompt, 1, 4, seed=99)
        for seed in range(a.repeats):  # interleaved: on a shared machine every method sees the same load
            for m in methods:
                before = load1()
                r = run_method(m, model, tok, pool, games, groups, system_prompt, a.max_turns, a.new_tokens, seed)
                result[m]["runs"].append({**r, "load_before": before, "load_after": load1()})
    finally:
        pool.close()
        tmp.cleanup()
    for m in methods:
        row = result[m]
        row["median_tokens_per_s"] = statistics.median(r["tokens_per_s"] for r in row["runs"])
        row["median_gen_tokens_per_s"] = statistics.median(r["gen_tokens_per_s"] for r in row["runs"])
        row["median_seconds"] = statistics.median(r["seconds"] for r in row["runs"])
        row["median_cpu_seconds"] = statistics.median(r["cpu_seconds"] for r in row["runs"])
        print(f"{m:10s} {[r['tokens_per_s'] for r in row['runs']]} tok/s, median {row['median_tokens_per_s']} "
              f"(generate alone: median {row['median_gen_tokens_per_s']} tok/s; rollout median "
              f"{row['median_seconds']} s)", flush=True)
    b = result["batched"]
    for m in methods[1:]:
        result[f"speedup_vs_{m}"] = round(b["median_tokens_per_s"] / result[m]["median_tokens_per_s"], 2)
        result[f"gen_speedup_vs_{m}"] = round(b["median_gen_tokens_per_s"] / result[m]["median_gen_tokens_per_s"], 2)
        result[f"cpu_ratio_vs_{m}"] = round(statistics.median(  # pair by pair: the same seed, the same moment
            o["cpu_seconds"] / x["cpu_seconds"] for x, o in zip(b["runs"], result[m]["runs"])), 2)
    result["peak_rss_gib"] = round(peak_rss_gib(), 2)
    ratios = ", ".join(f"batched / {m}: {result[f'speedup_vs_{m}']}x (generate alone {result[f'gen_speedup_vs_{m}']}x, "
                       f"CPU seconds pair by pair {result[f'cpu_ratio_vs_{m}']}x)" for m in methods[1:])
    print(f"{ratios} in tokens per rollout second; peak RSS {result['peak_rss_gib']} GiB, "
          f"load {os.getloadavg()[0]:.1f}")
    write_result(a.out, result, a, seed="per repeat")
    return 0


if __name__ == "__main__":
    sys.exit(main())
