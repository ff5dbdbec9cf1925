"""The measured numbers that book/benchmarks.md's prose ("What the tables say") quotes, each computed from a results
file, so that the prose cannot drift from the tables above it (the chapters' `glue`, for a Markdown page).

In the page a number stands between two markers, `<!-- n:KEY -->2.1×<!-- /n -->`; the markers are HTML comments, so
GitHub and the book show the number alone. `python benchmarks/report.py --write` rewrites every marked number from
numbers()[KEY], and book/build.py does the same in the book it builds; tests/test_benchmarks.py fails when the committed
page holds another number than the results give, or a marker names no known KEY.
"""
from __future__ import annotations

import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # report.py beside it, also when this file is loaded by path
from report import all_lines, newest_per, rl_step_medians, seeded_per_repeat

MARK = re.compile(r"<!-- n:([\w.-]+) -->(.*?)<!-- /n -->", re.S)
"""One marked number: group 1 its KEY, group 2 the number as the page shows it."""


def _x(ratio: float, digits: int = 1) -> str:
    return f"{ratio:.{digits}f}×"


def rl_step_numbers() -> dict[str, str]:
    """results/rl_step_vs_trl.jsonl: TRL / agentrl per part (the table's medians), the newest line of each π_old
    source, and the same workload's line before the newest (measured under load)."""
    out = {}
    newest = {r.get("old_logprobs"): r for r in newest_per("rl_step_vs_trl", "old_logprobs")}
    ours, trl = rl_step_medians(newest[None])
    for part in ("rollout", "update", "step"):
        out[f"trl.{part}"] = _x(trl[part] / ours[part])
    out["trl.peak"] = _x(ours["peak"] / trl["peak"], 2)   # agentrl's peak RSS as a share of TRL's
    ours_b, trl_b = rl_step_medians(newest["behaviour"])
    out["trl.behaviour.step"], out["trl.behaviour.update"] = (_x(trl_b[p] / ours_b[p], 2) for p in ("step", "update"))
    same = [r for r in all_lines("rl_step_vs_trl") if r.get("old_logprobs") is None
            and (r["games"], r.get("game_names")) == (newest[None]["games"], newest[None].get("game_names"))]
    earlier = same[-2]  # the same workload, measured before the newest line
    ours_e, trl_e = rl_step_medians(earlier)
    out["trl.loaded.step"], out["trl.loaded.update"] = (_x(trl_e[p] / ours_e[p]) for p in ("step", "update"))
    out["trl.loaded.load"] = f"{earlier['ours']['load_before']:.0f}–{earlier['trl']['load_after']:.0f}"
    steps = newest[None]["ours"]["steps"]
    skipped = [s for s in steps if s.get("skipped_update")]
    out["trl.skipped"] = f"{len(skipped)} of the {len(steps)}"
    out["trl.skipped.seconds"] = f"{statistics.median(s['total'] for s in skipped):.1f} s" if skipped else "—"
    out["trl.all_steps.seconds"] = f"{statistics.median(s['total'] for s in steps):.1f} s"
    return out


def rollout_numbers() -> dict[str, str]:
    """results/rollout_speed.jsonl (the first comparison with one-at-a-time and re-encoding, and the KV cache appended
    in place against concatenated, each line) and results/rollout_profile.jsonl (one decode step by rows)."""
    out = {}
    first = next(r for r in all_lines("rollout_speed") if "sequential" in r and "reencode" in r)
    out["rollout.vs_sequential"] = _x(first["speedup_vs_sequential"])
    out["rollout.vs_reencode"] = _x(first["speedup_vs_reencode"])
    runs = first["batched"]["runs"]
    out["rollout.tokens_per_turn"] = f"{sum(x['tokens'] for x in runs) / sum(x['turns'] for x in runs):.1f}"
    out["rollout.history"] = f"~{round(statistics.median(x['mean_len'] for x in runs), -1):.0f}"
    grow = [r for r in all_lines("rollout_speed") if r.get("comparison") == "batched,concat"]
    for i, r in enumerate(grow, 1):  # wall-time medians; CPU seconds, pair by pair
        out[f"grow.rollout.{i}"], out[f"grow.rollout.{i}.cpu"] = (_x(r[k], 2) for k in ("speedup_vs_concat",
                                                                                        "cpu_ratio_vs_concat"))
    profile = next(r for r in reversed(all_lines("rollout_profile")) if "concat_median_ms_by_rows" in
                   r["fixed_cache_decode"])["fixed_cache_decode"]
    out["grow.cache_len"] = f"{profile['cache_len']}"
    for rows, ms in profile["median_ms_by_rows"].items():
        out[f"grow.decode.{rows}"] = _x(profile["concat_median_ms_by_rows"][rows] / ms, 2)
    weights = next(r["weight_bytes"] for r in all_lines("rollout_profile") if r.get("weight_bytes"))
    out["profile.weight_mb"] = f"{weights / 1e6:.0f} MB"
    return out


def other_numbers() -> dict[str, str]:
    """results/sweep_step.jsonl (the exact lever paired over seeds), demo_variants.jsonl (the demo's stages) and
    env_step.jsonl (one env step's median per family)."""
    out = {}
    paired = [r for r in newest_per("sweep_step", ("algo", "comparison")) if seeded_per_repeat(r)
              and "grouped" in r["summary"]][-1]["summary"]["exact"]
    out["sweep.exact.medians"] = _x(paired["speedup"], 2)
    out["sweep.exact.pairs"] = _x(paired["median_pair_speedup"], 2)
    demo = {}
    for r in all_lines("demo_variants"):
        demo[(r["variant"], r["seed"])] = r  # the newest of each variant and seed, as the table

    def won(r: dict) -> int:
        return sum(bool(w) for _, w, _ in r["per_game"]["RL"])

    fp32, bf16 = demo[("fp32", 0)], demo[("bf16", 0)]
    grouped = demo[("fp32, whole-group minibatches", 0)]
    out["demo.bf16.won"] = f"{won(bf16)}" if won(bf16) else "none"
    out["demo.fp32.won"], out["demo.games"] = f"{won(fp32)}", f"{len(fp32['per_game']['RL'])}"
    for name, r in (("fp32", fp32), ("grouped", grouped)):
        out[f"demo.{name}.update"] = f"{r['rl']['update_seconds_median']:.0f} s"
        out[f"demo.{name}.heldout"] = f"{r['stages']['RL']['success_rate']:.1%}".replace(".0%", "%")
    fam = next(r for r in reversed(all_lines("env_step")) if "textworld" in r["families"])["families"]
    for name in ("textworld", "alfworld"):
        out[f"env.{name}"] = f"~{fam[name]['step_ms_median']:.0f} ms"
    swe = next((r["families"]["swe"] for r in reversed(all_lines("env_step")) if "swe" in r["families"]), None)
    if swe:
        out["env.swe"], out["env.swe.test_run"] = f"{swe['step_ms_median']:.0f} ms", f"{swe['test_run_ms']:.0f} ms"
    out["env.ragen"] = f"{max(fam[n]['step_ms_median'] for n in ('bandit', 'frozenlake', 'sokoban')):.2f} ms"
    return out


def numbers() -> dict[str, str]:
    """Every marked number of book/benchmarks.md by KEY, as the page shows it (e.g. 'trl.step' → '2.1×')."""
    return {**rl_step_numbers(), **rollout_numbers(), **other_numbers()}


def with_numbers(text: str, values: dict[str, str] | None = None) -> str:
    """`text` with every marked number replaced by its value from numbers() (or `values`); raises ValueError naming
    the markers whose KEY is unknown."""
    values = numbers() if values is None else values
    unknown = sorted({m.group(1) for m in MARK.finditer(text)} - set(values))
    if unknown:
        raise ValueError(f"markers with no number in benchmarks/page_numbers.py: {', '.join(unknown)}")
    return MARK.sub(lambda m: f"<!-- n:{m.group(1)} -->{values[m.group(1)]}<!-- /n -->", text)
