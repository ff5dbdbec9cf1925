"""The numbers of sweep records: one cell's outcome per seed with the mean and its t interval (`cell`), the
difference of two cells over the seeds both have (`difference`), and the table of every cell and compared pair of a
results file (`report`, behind `agentrl report`).

    records = load_results("algo_reward")                                  # records.load_results
    ppo = cell(records, algo="ppo", **{"reward.kind": "dense"})           # ppo.outcomes {seed: value}, ppo.mean, .ci
    d = difference(ppo, cell(records, algo="rloo", **{"reward.kind": "dense"}))
    d.diff, d.ci, d.verdict, d.seeds, d.dropped_a, d.dropped_b
    print(report(records, compare="reward.kind").markdown())

Comparisons by construction: a difference compares two cells over the seeds both have; a seed that one cell lacks is
dropped from the comparison (not from the cell's own mean), and says so (Difference.dropped_a / dropped_b, a note
under report's table). Intervals over seeds are Student's t intervals: of a cell's mean, and of a difference paired
by seed where the two cells' runs of a seed share their start model and games (they draw the same first rollouts),
Welch's where they do not (`difference_of`). Bootstrap intervals (scipy.stats.bootstrap, seeded) remain for units that
are many and independent, such as games (bootstrap_diff_ci, bootstrap_ratio_ci).

Introduced in the chapters' experiments (notebooks/02_reward, 03_policy, 04_sft_then_rl).
"""
from __future__ import annotations

import itertools
import json
import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from .records import cell_key, cell_text, record_base, record_base_without_start, record_key
from .stats import difference_of, t_mean_ci

NO_DIFFERENCE = "cannot tell at this scale"
"""The verdict of a difference whose interval contains 0 (agentrl_lib.findings' word for it too)."""


def metric_value(record: dict, metric: str) -> float | None:
    """The number `metric` names in a record: a dotted path ('eval.success_rate', 'wall_seconds') or
    'final.KEY' (KEY of the last training step, e.g. final.success_rate). None when absent or null."""
    if metric.startswith("final."):
        steps = record.get("steps") or []
        value = steps[-1].get(metric[len("final."):]) if steps else None
    else:
        value = record
        for part in metric.split("."):
            value = value.get(part) if isinstance(value, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _summary(values: list[float], confidence: float, n_resamples: int, seed: int):
    """(mean, std, t interval of the mean) of one cell's values over seeds; std and interval None below 2."""
    return (statistics.fmean(values) if values else None, statistics.stdev(values) if len(values) > 1 else None,
            t_mean_ci(values, confidence))


def _over(n: int) -> str:
    return f"compares the {n} seed{'s' if n > 1 else ''} both cells have" if n else "has no seed both cells have"


def _verdict(diff: float | None, ci: tuple[float, float] | None, name_a: Any, name_b: Any) -> str:
    if ci is None:
        return "n/a (no interval)"
    if ci[0] <= 0 <= ci[1]:
        return NO_DIFFERENCE
    return f"{name_a} higher" if diff > 0 else f"{name_b} higher"


def _paired(a: dict, b: dict, confidence: float, n_resamples: int, seed: int, paired: bool = True):
    """The comparison of two cells' outcomes {unit: value} (unit: a seed; in a pooled comparison a seed of a pooled
    cell) over the units both have: (common units in a's order, units only a has, units only b has, mean(a) −
    mean(b) over the common units or None, its interval or None). The interval (difference_of): a t interval of the
    per-unit differences where the runs of a unit share it (`paired`: the same start model and games, so a seed
    draws the same first rollouts on both sides), Welch's over the same units otherwise."""
    common = [u for u in a if u in b]
    c = difference_of({i: a[u] for i, u in enumerate(common)}, {i: b[u] for i, u in enumerate(common)}, paired,
                      confidence=confidence) if common else None
    return (common, [u for u in a if u not in b], [u for u in b if u not in a], c.diff if c else None,
            c.ci if c else None)


@dataclass(frozen=True)
class Cell:
    """One cell of a sweep (cell()): the outcome of each seed and their summary."""

    labels: dict[str, Any]
    """The labels it was selected by ({axis: value})."""
    metric: str
    outcomes: dict[int, float]
    """{seed: value of `metric`}, in results-file order; a run without the metric is absent."""
    mean: float | None
    std: float | None
    """Over seeds (ddof 1); None below 2 seeds."""
    ci: tuple[float, float] | None
    """t interval of the mean (t_mean_ci); None below 2 seeds."""

    @property
    def n(self) -> int:
        return len(self.outcomes)

    @property
    def seeds(self) -> list[int]:
        return list(self.outcomes)


def cell(records: list[dict], metric: str = "eval.success_rate", confidence: float = 0.95, n_resamples: int = 9999,
         seed: int = 0, **labels: Any) -> Cell:
    """The cell of `records` whose axes have the values `labels` (dotted axis names through a dict:
    `cell(records, algo="ppo", **{"reward.kind": "dense"})`): `metric` (metric_value) of each seed, their mean,
    std and the t interval of the mean (as report's cell rows).

    A second record of the same run (cell, seed and base config: records.record_key) is ignored; runs of one cell
    from per-seed base configs (e.g. each seed's own SFT model) are one cell. A cell nobody ran has no outcomes
    (n 0, mean None).
    Raises: ValueError when the labels select runs of more than one cell (an axis left unnamed, e.g. reward.kind
        beside algo="ppo"; the message names it) or two base configs ran the same seed: their seeds would mix.
    """
    chosen = [r for r in records if all(k in r["cell"] and r["cell"][k] == v for k, v in labels.items())]
    cells = {cell_key(r["cell"]) for r in chosen}
    if len(cells) > 1:
        varying = sorted({k for r in chosen for k in r["cell"]
                          if len({json.dumps(x["cell"].get(k), default=str) for x in chosen}) > 1})
        raise ValueError(f"{cell_text(labels)} selects {len(cells)} cells ({', '.join(varying)} varies): name a value "
                         "for every axis, so that one cell's seeds are compared")
    outcomes: dict[int, float] = {}
    runs: dict[int, tuple] = {}
    for r in chosen:
        k = record_key(r)
        s = k[1]
        if s in runs:  # the same run again (ignored), or another base config's run of this seed
            if runs[s] != k:
                raise ValueError(f"{cell_text(labels)}: seed {s} was run from two base configs ({runs[s][2]}, "
                                 f"{k[2]}): keep one base's records (records.record_base), or report them apart "
                                 "(report's `base` axis)")
            continue
        runs[s] = k
        value = metric_value(r, metric)
        if value is not None:
            outcomes[s] = value
    mean, std, ci = _summary(list(outcomes.values()), confidence, n_resamples, seed)
    return Cell(dict(labels), metric, outcomes, mean, std, ci)


@dataclass(frozen=True)
class Difference:
    """mean(a) − mean(b) of two cells over the seeds both have (difference())."""

    a: Cell
    b: Cell
    seeds: list[int]
    """The seeds compared: those of a that b has too, in a's order."""
    dropped_a: list[int]
    """Seeds only a has: left out of the comparison (not of a's own mean)."""
    dropped_b: list[int]
    """Seeds only b has."""
    diff: float | None
    """mean over `seeds` of a − that of b; None without a common seed."""
    ci: tuple[float, float] | None
    """t interval of diff, paired by seed (difference_of: Cell outcomes carry no start model, so `difference` pairs
    the common seeds); None below 2 seeds, or 2 seeds with equal differences."""
    verdict: str
    """NO_DIFFERENCE when ci contains 0, else "<a> higher" / "<b> higher" (the value of the one label they differ in,
    or the labels that differ), "n/a (n < 2)" without an interval."""

    @property
    def n(self) -> int:
        return len(self.seeds)

    def note(self) -> str | None:
        """One line naming the seeds left out of the comparison; None when both cells have the same seeds."""
        left = [f"{cell_text(c.labels)} seed {s}" for c, ss in ((self.a, self.dropped_a), (self.b, self.dropped_b))
                for s in ss]
        return (f"{cell_text(self.a.labels)} − {cell_text(self.b.labels)} {_over(self.n)}; left out: "
                f"{', '.join(left)}") if left else None


def difference(a: Cell, b: Cell, confidence: float = 0.95, n_resamples: int = 9999, seed: int = 0) -> Difference:
    """mean(a) − mean(b) over the seeds both cells have, its t interval paired by seed (difference_of; for cells
    that start from different models use report(), which tells the two apart) and the verdict. A seed one cell
    lacks is dropped from the comparison and listed (dropped_a / dropped_b; Difference.note says it in a line).

    Raises: ValueError when the cells summarise different metrics.
    """
    if a.metric != b.metric:
        raise ValueError(f"difference of {a.metric} and {b.metric}: compare one metric")
    seeds, only_a, only_b, diff, ci = _paired(a.outcomes, b.outcomes, confidence, n_resamples, seed)
    differ = [k for k in {**a.labels, **b.labels} if a.labels.get(k) != b.labels.get(k)]
    name_a, name_b = ((a.labels.get(differ[0]), b.labels.get(differ[0])) if len(differ) == 1 else
                      (cell_text({k: a.labels.get(k) for k in differ}), cell_text({k: b.labels.get(k) for k in differ}))
                      if differ else ("a", "b"))
    return Difference(a, b, seeds, only_a, only_b, diff, ci, _verdict(diff, ci, name_a, name_b))


@dataclass
class Report:
    """What `report` computed: `cells` (one row per cell: cell, n, mean, std, ci, values, seeds) and `differences`
    (one row per compared pair: context, a, b, n_a, n_b, diff, ci, verdict, seeds compared, dropped {"a": seeds only
    a has, "b": ...}), each a dict; `markdown()` renders both as tables with a footer and notes; a notebook displays
    it as Markdown."""

    metric: str
    axes: list[str]
    cells: list[dict] = field(default_factory=list)
    differences: list[dict] = field(default_factory=list)
    compare: str | None = None
    by: list[str] = field(default_factory=list)
    pooled: list[str] = field(default_factory=list)
    confidence: float = 0.95
    n_resamples: int = 9999
    seed: int = 0
    notes: list[str] = field(default_factory=list)

    def markdown(self) -> str:
        pct = f"{self.confidence:.0%}"
        head = self.axes + [f"{self.metric} (mean ± std)", f"{pct} CI of the mean", "seeds"]
        lines = _table(head, [[_fmt_cell(c["cell"].get(a)) for a in self.axes]
                              + [f"{_num(c['mean'])} ± {_num(c['std'])}", _ci(c["ci"]), str(c["n"])]
                              for c in self.cells])
        if self.compare:
            lines += ["", f"Differences of {self.metric} between values of {self.compare}"
                      + (f", within each {', '.join(self.by)}" if self.by else "")
                      + (f" (pooled over {', '.join(self.pooled)})" if self.pooled else "") + ":", ""]
            lines += _table(self.by + ["difference", "Δ mean", f"{pct} CI", "verdict"],
                            [[_fmt_cell(d["context"].get(a)) for a in self.by]
                             + [f"{d['a']} − {d['b']}", _num(d["diff"], signed=True),
                                _ci(d["ci"], signed=True) if d["ci"] else "n/a",
                                d["verdict"]] for d in self.differences]) if self.differences else [
                f"(none yet: every {', '.join(self.by) or 'cell'} has one value of {self.compare} so far)"]
        ns = sorted({c["n"] for c in self.cells})
        paired = {d.get("paired") for d in self.differences}
        how = ("paired by seed (the runs of a seed share their start and games)" if paired == {True} else
               "Welch's (the cells start from different models or games)" if paired == {False} else
               "paired by seed where the cells share their start and games, Welch's elsewhere")
        lines += ["", f"Intervals: {pct} t intervals over seeds (Student's t: they widen with the uncertainty of the "
                      f"spread, where a percentile bootstrap over a handful of seeds is about their range)"
                      + (f"; a difference's is {how}" if self.differences else "")
                      + f". Seeds per cell: {', '.join(map(str, ns))}. \"{NO_DIFFERENCE}\": the interval contains 0."]
        lines += [f"Note: {n}" for n in self.notes]
        return "\n".join(lines)

    def _repr_markdown_(self) -> str:
        return self.markdown()

    def __str__(self) -> str:
        return self.markdown()


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    esc = lambda s: str(s).replace("|", "\\|")  # noqa: E731
    return (["| " + " | ".join(map(esc, head)) + " |", "|" + "|".join(":--" for _ in head) + "|"]
            + ["| " + " | ".join(map(esc, r)) + " |" for r in rows])


def _fmt_cell(v: Any) -> str:
    return "—" if v is None else str(v)


def _num(x: float | None, signed: bool = False) -> str:
    if x is None:
        return "n/a"
    return f"{x:+.3f}" if signed else f"{x:.3f}"


def _ci(ci: tuple[float, float] | None, signed: bool = False) -> str:
    return "n/a (n < 2)" if ci is None else f"[{_num(ci[0], signed)}, {_num(ci[1], signed)}]"


def start_of(record: dict) -> str:
    """A run's start: its model.name and env.games (a JSON string). Two runs of one seed with the same start draw the
    same first rollouts, so a difference over them is paired; records without a config (planted in tests) share
    one start."""
    conf = record.get("config") or {}
    return json.dumps([str((conf.get("model") or {}).get("name")), str((conf.get("env") or {}).get("games"))])


def report(records: list[dict], metric: str = "eval.success_rate", compare: str | None = None,
           by: str | list[str] | None = None, confidence: float = 0.95, n_resamples: int = 9999,
           seed: int = 0) -> Report:
    """Per cell: mean ± std of `metric` over seeds, the number of seeds, and the t interval of the mean; with
    `compare` (an axis), for each pair of its values: the difference of means and its t interval, verdict
    NO_DIFFERENCE ("cannot tell at this scale") when the interval contains 0. A difference compares the two sides over
    the seeds both have; a seed one side lacks is left out of that difference (not of the cell rows), the row's
    "dropped" lists it and a note under the table says so. Where pooled axes give a side several runs of one seed
    (compare algo pooled over reward.kind), a run is paired with the run of the same seed and the same pooled cell;
    where each side has one run per seed (a pooled axis that changes with the compared one, e.g. env.games with a
    `level` tag, or per-seed base configs), runs are paired by seed alone.

    The interval of a difference (difference_of) is paired, a t interval of the per-unit differences, where every
    common unit's two runs share their start (start_of: model.name and env.games, so a seed draws the same first
    rollouts on both sides: the sweeps here reuse one seed across cells), and Welch's otherwise (each seed's own SFT
    model, or other games); the row's "paired" says which. Student's t, not a percentile bootstrap: over 2-5 seeds a
    bootstrap only recombines the values seen (with 3 seeds its 95% interval of a mean is their range, which holds
    the true mean 75% of the time). Fewer than 2 seeds: std and intervals are "n/a".

    Args:
        records: sweep records (records.load_results / load_records); records of several base configs
            (record_base) are told apart by an extra axis `base`, except runs that differ only in the model they
            start from (model.name: each seed's own SFT model, records.record_base_without_start), which are one
            cell's seeds unless two of them ran the same seed.
        metric: what to summarise (metric_value): 'eval.success_rate', 'eval.mean_turns', 'final.return_mean', ...
        compare: the axis whose values are differenced pairwise (in the order they first appear).
        by: axes (a list, or comma-separated) held fixed for the differences: pairs are formed within each of their
            combinations. Default: every other axis. Axes in neither are pooled (their runs are merged), as noted.
        confidence: of every interval; n_resamples, seed: kept for the bootstrap helpers' callers (unused here).
    Raises:
        ValueError: no records, no record has the metric, or `compare` / `by` is not an axis of the records.
    """
    if not records:
        raise ValueError("no records to report")
    axes: list[str] = []
    for r in records:
        axes += [k for k in r["cell"] if k not in axes]
    # runs of a cell that differ only in the model they start from (each seed's own SFT model) are that cell's
    # seeds, unless two of them ran the same seed: then every base config is told apart (column `base`)
    bases_of: dict[tuple[str, int], set[str]] = {}
    for r in records:
        bases_of.setdefault((cell_key(r["cell"]), int(r["seed"])), set()).add(record_base(r))
    base_of = record_base if any(len(b) > 1 for b in bases_of.values()) else record_base_without_start
    hashes = list(dict.fromkeys(base_of(r) for r in records))
    notes = []
    cell_of = lambda r: {**r["cell"], **({"base": base_of(r)} if len(hashes) > 1 else {})}  # noqa: E731
    if len(hashes) > 1:
        axes.append("base")
        notes.append(f"the records come from {len(hashes)} base configs; column `base` is their hash")
    starts = {(r.get("config") or {}).get("model", {}).get("name") for r in records}
    if base_of is record_base_without_start and len({record_base(r) for r in records}) > len(hashes):
        notes.append(f"the runs start from {len(starts)} models (model.name, e.g. each seed's own SFT model); runs "
                     "that differ only in it are one cell's seeds")
    groups: dict[str, tuple[dict, list[float], list[int], list[str]]] = {}
    seen: set = set()
    missing = 0
    for r in records:
        k = record_key(r)
        if k in seen:
            notes.append(f"a second record of {cell_text(r['cell'])} seed {r['seed']} was ignored")
            continue
        seen.add(k)
        v = metric_value(r, metric)
        if v is None:
            missing += 1
            continue
        cell = cell_of(r)
        g = groups.setdefault(cell_key(cell), (cell, [], [], []))
        g[1].append(v)
        g[2].append(r["seed"])
        g[3].append(start_of(r))
    if not groups:
        raise ValueError(f"no record has the metric {metric!r} (e.g. eval.success_rate, final.return_mean)")
    if missing:
        notes.append(f"{missing} record(s) have no {metric} and were left out")
    rep = Report(metric, axes, confidence=confidence, n_resamples=n_resamples, seed=seed, notes=notes)
    for cell, values, seeds, _ in groups.values():
        mean, std, ci = _summary(values, confidence, n_resamples, seed)
        rep.cells.append({"cell": cell, "n": len(values), "mean": mean, "std": std, "ci": ci, "values": values,
                          "seeds": seeds})
    if compare is None:
        return rep
    by_list = [b.strip() for b in by.split(",")] if isinstance(by, str) else list(by or [])
    for name in [compare] + by_list:
        if name not in axes:
            raise ValueError(f"{name!r} is not an axis of these records (axes: {', '.join(axes) or 'none'})")
    if compare in by_list:
        raise ValueError(f"{compare!r} cannot be both compared and held fixed (--by)")
    by_list = by_list if by is not None else [a for a in axes if a != compare]
    rep.compare, rep.by, rep.pooled = compare, by_list, [a for a in axes if a != compare and a not in by_list]
    # each side of a comparison: its runs as (pooled cell, seed) → value
    contexts: dict[str, tuple[dict, dict[str, tuple[Any, dict]]]] = {}
    starts: dict[tuple, str] = {}  # (compared value, pooled cell, seed) -> the run's start (model, games)
    for cell, values, seeds, run_starts in groups.values():
        ctx = {a: cell.get(a) for a in by_list}
        pooled = cell_text({a: cell.get(a) for a in rep.pooled}) if rep.pooled else ""
        sides = contexts.setdefault(json.dumps(ctx, sort_keys=True, default=str), (ctx, {}))[1]
        runs = sides.setdefault(json.dumps(cell.get(compare), default=str), (cell.get(compare), {}))[1]
        runs.update({(pooled, s): v for s, v in zip(seeds, values)})
        starts.update({(json.dumps(ctx, sort_keys=True, default=str), json.dumps(cell.get(compare), default=str),
                        pooled, s): st for s, st in zip(seeds, run_starts)})
    for key, (ctx, sides) in contexts.items():
        for (ka, (va, a)), (kb, (vb, b)) in itertools.combinations(sides.items(), 2):
            start_a = {u: starts[(key, ka, *u)] for u in a}
            start_b = {u: starts[(key, kb, *u)] for u in b}
            if all(len({s for _, s in x}) == len(x) for x in (a, b)):  # one run per seed on each side: pair by seed
                start_a, start_b = ({("", s): st for (_, s), st in x.items()} for x in (start_a, start_b))
                a, b = ({("", s): v for (_, s), v in x.items()} for x in (a, b))
            shared = all(start_a[u] == start_b[u] for u in a if u in b)
            common, only_a, only_b, diff, ci = _paired(a, b, confidence, n_resamples, seed, paired=shared)
            rep.differences.append({"context": ctx, "a": va, "b": vb, "n_a": len(common), "n_b": len(common),
                                    "diff": diff, "ci": ci, "verdict": _verdict(diff, ci, va, vb), "paired": shared,
                                    "seeds": [s for _, s in common],
                                    "dropped": {"a": [s for _, s in only_a], "b": [s for _, s in only_b]}})
            if only_a or only_b:
                left = ", ".join(f"{v} seed {s}" + (f" ({p})" if p else "")
                                 for v, units in ((va, only_a), (vb, only_b)) for p, s in units)
                rep.notes.append(f"{cell_text(ctx) + ': ' if ctx else ''}{va} − {vb} {_over(len(common))}; left out: "
                                 f"{left}")
    return rep
