"""The benchmark results files as the pages read them: results/NAME.jsonl line by line (RESULTS, all_lines,
newest_per, where), and the readings of a line that both the tables (report.py) and the numbers of the pages' prose
(page_numbers.py) use, so that neither imports the other's module for them.
"""
from __future__ import annotations

import json
import statistics

from experiments import ROOT  # the checkout: experiments.checkout_root

RESULTS = ROOT / "results"
"""The folder of the results files (tests point it at a temporary folder)."""


def all_lines(name: str) -> list[dict]:
    """Every line of results/NAME.jsonl, in order; [] when the file is absent."""
    path = RESULTS / f"{name}.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def newest_per(name: str, key: str | tuple[str, ...] | None = None) -> list[dict]:
    """The last line of results/NAME.jsonl for each value of `key` (several keys: each combination of their values),
    in order of first appearance; key None: the last line only. [] when the file is absent or empty."""
    rows = all_lines(name)
    keys = key if isinstance(key, tuple) else (key,)
    last = {tuple(r.get(k) for k in keys): r for r in rows}
    return list(last.values())


def where(r: dict) -> str:
    """'device, date, commit abc12345' of one results line."""
    date = (r.get("date") or "")[:10]
    commit = (r.get("commit") or "")[:8]
    return ", ".join(x for x in (r.get("device") or r.get("machine", ""), date, commit and f"commit {commit}") if x)


def rl_step_medians(r: dict) -> tuple[dict, dict]:
    """(agentrl's, TRL's) medians of one bench_rl_step_vs_trl line, seconds, and peak RSS, GiB: rollout over every
    timed step, update and step ("step": the line's "total") over the steps that ran an update, "peak" the trainer
    process's peak RSS. agentrl's update and step fall back to every step when each one skipped its update."""
    def side(x: dict, updated: list[dict]) -> dict:
        return {"rollout": statistics.median(s["rollout"] for s in x["steps"]),
                "update": statistics.median(s["update"] for s in updated),
                "step": statistics.median(s["total"] for s in updated), "peak": x["peak_rss_gib"]}

    ours = [s for s in r["ours"]["steps"] if not s.get("skipped_update")] or r["ours"]["steps"]
    return side(r["ours"], ours), side(r["trl"], r["trl"]["steps"])


def seeded_per_repeat(r: dict) -> bool:
    """Whether a bench_sweep_step line ran with --seed-per-repeat (its repeats had other seeds: pairs over seeds)."""
    return len(set(r.get("seeds") or [])) > 1


def demo_runs(every: list[dict]) -> dict[tuple, list[dict]]:
    """`agentrl demo --record` lines by (variant, seed), each key's runs oldest first, keys in order of first
    appearance: `[-1]` is the newest run of a variant and seed, the one the table and the page's prose show."""
    runs: dict[tuple, list[dict]] = {}
    for r in every:
        runs.setdefault((r["variant"], r["seed"]), []).append(r)
    return runs
