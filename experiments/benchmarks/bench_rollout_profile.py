"""Where the batched multi-turn rollout's time goes, turn by turn: the model's prefills and decode steps, the rest of
`generate`, the environments, and the Python between them.

    python benchmarks/bench_rollout_profile.py --games DIR [--model embedded] [--episodes 16] [--group-size 4]
        [--max-turns 8] [--new-tokens 24] [--repeats 3] [--threads 2] [--machine TEXT] [--out FILE.jsonl]

The rollout is the library's (`rollout.rollout` with `HFGenerator`, each group's first context encoded once; with
--generator hf-live, generation.LiveRowsGenerator: the decode steps only the rows still writing), on the
first `episodes / group_size` games of DIR, each played `group_size` times at T = 0.7. Hooks on the model time every
forward with its shape (rows × new positions, and the KV cache's length before it); nothing in the rollout changes.
A rollout's wall seconds split into:
- first prefill:  `HFGenerator.start`'s forward (each group's first context but its last token, once per group);
- turn prefill:   the first forward of each turn's `generate` (the new environment turn of every live row);
- decode:         `generate`'s one-position forwards (one per sampled token step, every live row each step);
- sampling:       the rest of `generate` (logits processors, sampling, stopping, cache bookkeeping) and
                  HFGenerator's log-prob read-out of the scores;
- env:            the environment steps and resets (`RolloutStats.env_seconds`; worker processes);
- python:         the rest (chat template, tokenization, reply parsing, the rows' bookkeeping).
Also per turn: decode steps (the longest reply of the turn, up to --new-tokens) against the live rows' reply
lengths: `idle_row_steps` is the share of decoded row-steps (the rows of every decode forward) that did not produce
a reply's next token: rows that had already ended their reply (a batched `generate` steps every row until the last
one stops; hf-live forwards a row's eos once before it leaves); and the median decode step by batch rows, with the
weight bytes it reads (fp32 parameters / step seconds: a memory-bound step reads every weight once); and, apart
from the rollout, one decode step at a fixed cache length (--decode-cache; default: the median cache length of the
rollout's decode steps) for each of --decode-rows rows: what a step costs with fewer live rows, everything else equal,
with the generators' GrowingKVCache (appends in place) and with transformers' DynamicCache (copies the whole cache at
every step).
After one short untimed warm-up, `repeats` rollouts (torch seed r for repeat r); medians over repeats. Appends one
JSON line to --out (book/benchmarks.md: python benchmarks/report.py --write).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # no spinning threads on a shared CPU; read when torch loads
import torch

from agentrl_lib.generation import CACHE_ARG, HFGenerator, TurnSample

PARTS = ("first_prefill", "turn_prefill", "decode", "sampling", "env", "python")


class ForwardClock:
    """Times every forward of `model` from its backbone's pre-hook to its output layer's post-hook: `generate` calls
    the causal LM, which calls both; LiveRowsGenerator calls the two itself (it keeps the hidden state that samples).
    `calls`: one (rows, new positions, cache length, seconds) tuple per forward, in order."""

    def __init__(self, model):
        from agentrl_lib.models import base_model

        base = base_model(model)
        self.calls: list[tuple[int, int, int, float]] = []
        self._handles = [base.get_decoder().register_forward_pre_hook(self._pre, with_kwargs=True),
                         base.get_output_embeddings().register_forward_hook(self._post, with_kwargs=True)]

    def _pre(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        cache = kwargs.get(CACHE_ARG)  # the KV cache argument of this transformers version
        past = cache.get_seq_length() if cache is not None and hasattr(cache, "get_seq_length") else 0
        self._open = (*ids.shape, int(past), time.perf_counter())

    def _post(self, module, args, kwargs, output):
        rows, q, past, t0 = self._open
        self.calls.append((rows, q, past, time.perf_counter() - t0))

    def remove(self) -> None:
        for h in self._handles:
            h.remove()


class ProfiledGenerator(HFGenerator):
    """HFGenerator that records, for each `start` and each turn's `generate`, its wall seconds and the forwards
    (ForwardClock) made inside it. `turns`: dicts with rows, decode steps, reply lengths, seconds and the forwards.
    `profiled("hf-live")` is the same over the live-rows decode."""

    def __init__(self, model, tokenizer, clock: ForwardClock):
        super().__init__(model, tokenizer)
        self.clock, self.turns, self.start_calls = clock, [], []

    def start(self, contexts: list[list[int]]) -> None:
        n = len(self.clock.calls)
        super().start(contexts)
        self.start_calls += self.clock.calls[n:]

    def generate(self, max_new_tokens: int, temperature: float) -> TurnSample:
        n, t0 = len(self.clock.calls), time.perf_counter()
        sample = super().generate(max_new_tokens, temperature)
        seconds = time.perf_counter() - t0
        lengths = [len(ids) for ids in sample.ids]
        self.turns.append({"rows": len(lengths), "steps": max(lengths, default=0), "reply_lengths": lengths,
                           "seconds": seconds, "forwards": self.clock.calls[n:]})
        return sample


def profiled(backend: str) -> type:
    """The profiling generator over backend 'hf' (HFGenerator) or 'hf-live' (generation.LiveRowsGenerator)."""
    if backend == "hf":
        return ProfiledGenerator
    from agentrl_lib.generation import LiveRowsGenerator

    return type("ProfiledLiveRowsGenerator", (ProfiledGenerator, LiveRowsGenerator), {})


def profile_once(model, tok, pool, games, groups, system_prompt, max_turns, new_tokens, seed,
                 backend: str = "hf") -> dict:
    """One rollout under the profiler. Returns the parts' seconds (PARTS), wall seconds, per-turn rows / decode
    steps / idle row-steps, and every decode forward as (rows, cache length, seconds)."""
    from agentrl_lib.rollout import rollout

    clock = ForwardClock(model)
    gen = profiled(backend)(model, tok, clock)
    torch.manual_seed(seed)
    try:
        t0 = time.perf_counter()
        _, stats = rollout(gen, tok, pool, games, groups=groups, max_turns=max_turns, max_new_tokens=new_tokens,
                           temperature=0.7, system_prompt=system_prompt)
        wall = time.perf_counter() - t0
    finally:
        clock.remove()
    parts = dict.fromkeys(PARTS, 0.0)
    parts["first_prefill"] = sum(c[3] for c in gen.start_calls)
    decodes, row_steps, used = [], 0, 0
    for turn in gen.turns:
        fw = turn["forwards"]
        if fw:  # the first forward of generate encodes the new block (1 position on the first turn: see start)
            parts["turn_prefill"] += fw[0][3]
        parts["decode"] += sum(c[3] for c in fw[1:])
        decodes += [(c[0], c[2], c[3]) for c in fw[1:]]
        parts["sampling"] += turn["seconds"] - sum(c[3] for c in fw)
        row_steps += sum(c[0] for c in fw[1:])  # rows of every decode forward (hf: all rows; hf-live: live rows)
        used += sum(max(n - 1, 0) for n in turn["reply_lengths"])  # tokens after each reply's first (the prefill's)
    parts["env"] = stats.env_seconds
    parts["python"] = wall - sum(parts.values())
    return {"seconds": round(wall, 3), "parts": {k: round(v, 6) for k, v in parts.items()},
            "turns": [{"rows": t["rows"], "steps": t["steps"], "reply_tokens": sum(t["reply_lengths"])}
                      for t in gen.turns],
            "generated_tokens": stats.generated_tokens, "decode_row_steps": row_steps,
            "idle_row_steps": round(1 - used / row_steps, 3) if row_steps else 0.0,
            "turn_prefill_positions": sum(t["forwards"][0][0] * t["forwards"][0][1] for t in gen.turns
                                          if t["forwards"]),
            "decode_forwards": [(r, past, round(s, 6)) for r, past, s in decodes]}


@torch.no_grad()
def decode_step_ms(model, rows: int, cache_len: int, steps: int = 10, grow: bool = True) -> float:
    """Median milliseconds of one decode forward (1 new position per row) over `rows` rows whose KV cache holds
    `cache_len` positions (random token ids: the cost does not depend on them); the first 2 steps are not counted.
    grow: the cache a GrowingKVCache (the generators' default), else transformers' DynamicCache."""
    from agentrl_lib.generation import new_cache

    gen = torch.Generator().manual_seed(0)
    cache = new_cache(grow)
    model(input_ids=torch.randint(100, 1000, (rows, cache_len), generator=gen), use_cache=True, logits_to_keep=1,
          **{CACHE_ARG: cache})
    times = []
    for _ in range(steps + 2):
        t0 = time.perf_counter()
        model(input_ids=torch.randint(100, 1000, (rows, 1), generator=gen), use_cache=True, **{CACHE_ARG: cache})
        times.append(time.perf_counter() - t0)
    return round(1000 * statistics.median(times[2:]), 2)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--games", required=True, help="a games dir (agentrl make-games), e.g. the sweep's cooking games")
    p.add_argument("--model", default="embedded", help="'embedded', a model dir or a run dir (e.g. an SFT output)")
    p.add_argument("--episodes", type=int, default=16)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--max-turns", type=int, default=8)
    p.add_argument("--new-tokens", type=int, default=24)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2, help="torch threads (0: torch's own)")
    p.add_argument("--generator", default="hf", choices=("hf", "hf-live"), help="the rollout's backend: hf "
                   "(transformers generate) or hf-live (a decode loop over the rows still writing)")
    p.add_argument("--decode-rows", default="16,4,1", help="rows of the fixed-cache decode-step measurement ('' to "
                   "skip it)")
    p.add_argument("--decode-cache", type=int, default=0, help="its cache length (0: the median cache length of the "
                   "rollout's decode steps)")
    p.add_argument("--machine", default="", help='how the results name this machine, e.g. "2-core shared CPU"')
    p.add_argument("--out", help="append one JSON line here (e.g. results/rollout_profile.jsonl)")
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)

    from agentrl_lib.config import EnvConfig
    from agentrl_lib.envs.base import load_game_set
    from agentrl_lib.envs.pool import open_pool
    from agentrl_lib.models import load_policy
    from agentrl_lib.prompts import system_prompt_for
    from experiments.benchmarks.bench_rollout import episode_games
    from experiments.benchmarks.benchutil import load1, machine_info, peak_rss_gib, write_result

    game_set = load_game_set(a.games)
    games, groups = episode_games(game_set, a.episodes, a.group_size)
    model, tok = load_policy(a.model, "cpu", "float32")
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    system_prompt = system_prompt_for(game_set.family)
    pool = open_pool(EnvConfig(games=str(game_set.root)), a.episodes, game_set)
    runs = []
    try:
        profile_once(model, tok, pool, games, groups, system_prompt, 1, 4, seed=99, backend=a.generator)  # warm-up
        for r in range(a.repeats):
            before = load1()
            runs.append({**profile_once(model, tok, pool, games, groups, system_prompt, a.max_turns,
                                        a.new_tokens, r, backend=a.generator), "load_before": before,
                         "load_after": load1()})
    finally:
        pool.close()
    cache_len = a.decode_cache or int(statistics.median(past for x in runs for _, past, _ in x["decode_forwards"]))
    rows_list = [int(x) for x in a.decode_rows.split(",") if x.strip()]
    fixed = {rows: [] for rows in rows_list}
    concat = {rows: [] for rows in rows_list}  # the same with DynamicCache
    for _ in range(2):  # twice, alternating: each row count and cache sees the same load
        for rows in rows_list:
            fixed[rows].append(decode_step_ms(model, rows, cache_len))
            concat[rows].append(decode_step_ms(model, rows, cache_len, grow=False))
    median = {k: round(statistics.median(x["parts"][k] for x in runs), 3) for k in PARTS}
    wall = statistics.median(x["seconds"] for x in runs)
    by_rows: dict[int, list[float]] = {}
    for x in runs:
        for rows, _, s in x["decode_forwards"]:
            by_rows.setdefault(rows, []).append(s)
    decode_step = {rows: {"median_ms": round(1000 * statistics.median(v), 2), "n": len(v),
                          "weight_gb_per_s": round(weight_bytes / statistics.median(v) / 1e9, 1)}
                   for rows, v in sorted(by_rows.items())}
    result = {"bench": "rollout_profile", "generator": a.generator, "model": a.model, "games": os.path.abspath(a.games),
              "episodes": a.episodes, "group_size": a.group_size, "max_turns": a.max_turns,
              "new_tokens": a.new_tokens, "temperature": 0.7, "dtype": "float32", "repeats": a.repeats,
              "weight_bytes": weight_bytes, **machine_info(a.machine),
              "runs": runs,
              "median_seconds": wall, "median_parts": median,
              "median_shares": {k: round(v / sum(median.values()), 3) for k, v in median.items()},
              "median_idle_row_steps": statistics.median(x["idle_row_steps"] for x in runs),
              "decode_step_by_rows": decode_step, "fixed_cache_decode": {
                  "cache_len": cache_len,
                  "median_ms_by_rows": {r: round(statistics.median(v), 2) for r, v in fixed.items()},
                  "runs_ms": fixed, "concat_median_ms_by_rows": {r: round(statistics.median(v), 2)
                                                                 for r, v in concat.items()},
                  "concat_runs_ms": concat}, "peak_rss_gib": round(peak_rss_gib(), 2)}
    for k in PARTS:
        print(f"{k:14s} {median[k]:8.2f} s  {result['median_shares'][k]:6.1%}")
    print(f"rollout {wall:.1f} s (median of {a.repeats}); decoded row-steps idle (row already past its reply): "
          f"{result['median_idle_row_steps']:.0%}; decode step by rows: "
          + ", ".join(f"{r}: {d['median_ms']} ms" for r, d in decode_step.items())
          + f"; at a fixed {cache_len}-position cache: "
          + ", ".join(f"{r} rows {statistics.median(v)} ms (DynamicCache {statistics.median(concat[r])} ms)"
                      for r, v in fixed.items()))
    write_result(a.out, result, a, seed="per repeat")
    return 0


if __name__ == "__main__":
    sys.exit(main())
