"""The verdict words and the comparisons behind them: a difference of two cells of a sweep on one outcome (held-out
success, or the learning-curve area), judged against a paper's direction and effect size (`compare`, `judge`), and
RAGEN's Echo Trap ordering tested over runs and seeds (`echo_order`, `echo_trap`). findings.py applies them to the
papers' findings; the words and their rules are documented on the book's page *Sweeps and findings*. A comparison's
text comes with the numbers it is rendered from (`Judged`, from `compare_judged`), so its readers quote numbers and
never parse text.

The verdicts (VERDICTS): "agrees" / "disagrees" (the interval excludes 0, in / against the paper's direction; a
directional finding whose interval contains 0 but stops short of the paper's effect also disagrees), "cannot tell at
this scale" (the interval contains 0; with the seeds +-15 points would need), "a floor" / "near a floor" (both cells
at 0% / at most 10% in every seed), "cannot tell yet" (no records, or below 2 seeds). Where the paper found no
difference, "agrees" needs the whole interval inside +- the paper's effect size.

Sources: R. Wang, P. Ammanabrolu, *A Practitioner's Guide to Multi-turn Agentic RL*, arXiv 2510.01132; Z. Wang et al.,
*RAGEN*, arXiv 2504.20073 (§4: the Echo Trap, the reward spread falling before the reward).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

from .report import cell, metric_value, start_of
from .stats import Comparison, difference_of, seeds_needed, two_way_residual_sd

AGREES, DISAGREES, CANNOT_TELL = "agrees", "disagrees", "cannot tell at this scale"
FLOOR, NEAR_FLOOR = "a floor", "near a floor"
NOT_RUN = "cannot tell yet"
VERDICTS = (AGREES, DISAGREES, CANNOT_TELL, FLOOR, NEAR_FLOOR, NOT_RUN)
"""Every verdict starts with one of these words (NOT_RUN: a sweep not in results/ yet, or a cell below 2 seeds)."""
RESOLVE = 0.15
"""The half-width (a fraction, +-15 points) that `seeds_needed` aims at."""
NEAR = 0.10
"""Both cells at most this success in every seed: near a floor."""
AREA = "area"
"""The metric name of the learning-curve area (curve_area) in compare()."""




def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def delta_text(diff: float, ci: tuple[float, float] | None) -> str:
    """A difference as a verdict row writes it after "Δ ": "+19 pts [+3, +34]" (points: 100 x the fractions `diff`
    and `ci`, rounded), or "+19 pts" without an interval."""
    return f"{100 * diff:+.0f} pts" + (f" [{100 * ci[0]:+.0f}, {100 * ci[1]:+.0f}]" if ci else "")


@dataclass(frozen=True)
class Judged:
    """One outcome of a finding judged (held-out success, or the learning-curve area): what a verdict row says of it,
    `ours` and `verdict` (Markdown), and the numbers both are rendered from, so that a reader (findings.lessons,
    findings.chapter_lessons) takes the numbers, never parses the text. Raises ValueError when a number and the text
    disagree (a Δ, a seeds-needed figure, a command, a mean or a p the text does not say as rendered from it)."""

    ours: str
    """Our numbers: each side's mean, the difference with its interval (compare: `_ours`)."""
    verdict: str
    """The verdict (VERDICTS' words first)."""
    diff: float | None = None
    """Δ, mean(a) - mean(b) as a fraction of success (0.19: ours says "Δ +19 pts"); None where ours says no Δ."""
    ci: tuple[float, float] | None = None
    """Δ's 95% interval (fractions); None where ours gives none."""
    seeds: tuple[int, ...] = ()
    """How many seeds each cell has, a first (ours' "(n=3)"; 0 for a cell not run); () where the row is not over
    seeds a cell (one evaluation's games, runs against one model, the Echo Trap's count)."""
    seeds_needed: int | None = None
    """The seeds (a cell, or paired) an interval of ±RESOLVE would need, where the verdict quotes it ("±15 pts needs
    ~N seeds": judge via stats.seeds_needed); None where it quotes none (resolved, over 200, enough already)."""
    means: tuple[float, float] | None = None
    """Each side's success (fractions, a first) as ours says them; None where ours does not set two side by side."""
    p: float | None = None
    """The p-value of the row's exact test (Fisher's, McNemar's) as ours says it ("p = 0.006"); None without one."""
    command: str | None = None
    """The command that would bring the missing results where the verdict says so ("cannot tell yet (`python
    results/regenerate.py main`)"); None otherwise."""

    def __post_init__(self):
        agree = {
            "Δ": ("Δ " in self.ours) == (self.diff is not None)
            and (self.diff is None or f"Δ {self.delta} (" in self.ours),  # then how it was computed
            "seeds": all(f"(n={k})" in self.ours for k in self.seeds if k),
            "seeds needed": ("needs ~" in self.verdict) == (self.seeds_needed is not None)
            and (self.seeds_needed is None or f"needs ~{self.seeds_needed} seeds" in self.verdict),
            "means": all(_pct(m) in self.ours for m in self.means or ()),
            "p": self.p is None or f"p = {self.p:.3f}" in self.ours,
            "command": ("(`" in self.verdict) == (self.command is not None)
            and (self.command is None or f"(`{self.command}`)" in self.verdict)}
        if not all(agree.values()):
            raise ValueError(f"the numbers of {', '.join(k for k, ok in agree.items() if not ok)} disagree with the "
                             f"text ({self.ours!r}; {self.verdict!r}): render both from the same numbers")

    @property
    def delta(self) -> str | None:
        """Δ as ours writes it after "Δ " (delta_text: "+19 pts [+3, +34]"); None without a difference."""
        return None if self.diff is None else delta_text(self.diff, self.ci)


def curve_area(record: dict) -> float | None:
    """The learning curve's area of a sweep record: mean training success over its steps (record["steps"][i]
    ["success_rate"], fractions); None when no step has one."""
    rates = [s["success_rate"] for s in record.get("steps") or [] if s.get("success_rate") is not None]
    return sum(rates) / len(rates) if rates else None


def judge(c: Comparison | None, expect_sign: int, margin: float | None = None, success: bool = True,
          cost: Callable[[int, int], str] | None = None, effect: float | None = None) -> str:
    """The verdict of a comparison (VERDICTS). `expect_sign`: +1 / -1 where the paper found a > b / a < b, 0 where
    it found no difference; `margin`: the paper's effect size (a fraction) that an "agrees" with a no-difference
    finding must rule out (default RESOLVE); `success`: the outcome is a success rate (floors apply); `cost`: (seeds
    needed, seeds run) -> what the missing seeds would cost, e.g. "about 6 CPU h more here", appended to the
    seeds-needed figure; `effect`: the paper's effect size (a fraction) of a directional finding: an interval that
    contains 0 and stops short of it rules the paper's effect out, and the verdict is "disagrees" (with why)."""
    return verdict_of(c, expect_sign, margin, success, cost, effect)[0]


def verdict_of(c: Comparison | None, expect_sign: int, margin: float | None = None, success: bool = True,
               cost: Callable[[int, int], str] | None = None, effect: float | None = None) -> tuple[str, int | None]:
    """(judge's verdict, the seeds it quotes as needed for ±RESOLVE: Judged.seeds_needed, None where it quotes
    none); the arguments as judge's."""
    if c is None or (c.n < 2):
        return f"{NOT_RUN} (fewer than 2 seeds{' common to both cells' if c is not None and c.paired else ''})", None
    if success:
        values = [*c.a.values(), *c.b.values()]
        if max(values) == 0:
            return f"{FLOOR} (both 0% in every seed): neither agrees nor disagrees", None
        if max(values) <= NEAR:
            return f"{NEAR_FLOOR} (both ≤ {_pct(NEAR)} in every seed): neither agrees nor disagrees", None
    need = seeds_needed(c.sd, c.paired)
    per = "" if c.paired else " a cell"
    quoted = None  # the seeds the verdict says ±RESOLVE needs, where it says so
    if need is None:
        plan = "spread unknown: the seeds' differences were identical"
    elif need > 200:
        plan = f"±{100 * RESOLVE:.0f} pts needs over 200 seeds{per}"
    elif need <= c.n:
        plan = f"{c.n} seeds resolve ±{100 * RESOLVE:.0f} pts already: a difference, if any, lies inside the interval"
    else:
        extra = cost(need, c.n) if cost else ""
        quoted = need
        plan = f"±{100 * RESOLVE:.0f} pts needs ~{need} seeds{per}" + (f", {extra}" if extra else "")
    if c.ci is None:
        return f"{CANNOT_TELL} ({plan})", quoted
    lo, hi = c.ci
    m = RESOLVE if margin is None else margin
    if expect_sign == 0:
        if -m < lo and hi < m:
            return f"{AGREES} (the interval lies within ±{100 * m:.0f} pts, the paper's effect size)", None
        if lo > 0 or hi < 0:
            return DISAGREES, None
        return f"{CANNOT_TELL} (the interval reaches beyond ±{100 * m:.0f} pts; {plan})", quoted
    if lo > 0 or hi < 0:
        return AGREES if (c.diff > 0) == (expect_sign > 0) else DISAGREES, None
    if effect is not None and (hi < effect if expect_sign > 0 else lo > -effect):
        return (f"{DISAGREES} (no difference, and the interval rules out the paper's "
                f"{100 * expect_sign * effect:+.0f} pts)"), None
    return f"{CANNOT_TELL} ({plan})", quoted


def _ours(c: Comparison | None, na: str, nb: str, sa: dict, sb: dict) -> str:
    text = "; ".join(f"{n} {_pct(sum(v.values()) / len(v))} (n={len(v)})" if v else f"{n} not run"
                     for n, v in ((na, sa), (nb, sb)))
    if c is None:
        return text
    how = "paired over" if c.paired else "Welch,"
    text += f"; Δ {delta_text(c.diff, c.ci)}" + ("" if c.ci else " (no interval)")
    text += f" ({how} {c.n} seeds" + ("" if c.paired else " a cell") + ")"
    if c.paired:
        left = [f"{n} seed {s}" for n, own, other in ((na, sa, sb), (nb, sb, sa)) for s in own if s not in other]
        if left:
            text += f" (left out: {', '.join(left)})"
        if c.same_sign is not None and c.n <= 3:
            text += f"; the paper's direction in {c.same_sign} of {c.n} seeds"
    return text


def _shares_seeds(ra: list[dict], rb: list[dict]) -> bool:
    """Whether two cells' runs share their seeds: for every seed both ran, the same start model (model.name) and the
    same training games (env.games), so seed s draws the same first rollouts in both (the cells differ only in their
    axes; report.start_of). Records without a config are taken to share (tests' planted records)."""
    by_a = {r["seed"]: start_of(r) for r in ra}
    return all(by_a[r["seed"]] == start_of(r) for r in rb if r["seed"] in by_a)


def _outcomes(records: list[dict], metric: str, labels: dict) -> tuple[dict[int, float], list[dict]]:
    c = cell(records, "eval.success_rate", **labels)  # one cell's runs (raises when an axis is left unnamed)
    runs = [r for r in records if r["seed"] in c.outcomes and all(r["cell"].get(k) == v for k, v in labels.items())]
    chosen: dict[int, dict] = {}
    for r in runs:
        chosen.setdefault(r["seed"], r)
    values = {s: (curve_area(r) if metric == AREA else metric_value(r, metric)) for s, r in chosen.items()}
    return {s: v for s, v in values.items() if v is not None}, list(chosen.values())


def compare(records: list[dict], axis: str, a: Any, b: Any, where: dict | None = None, expect_sign: int = 1,
            metric: str = "eval.success_rate", names: tuple[str, str] | None = None, margin: float | None = None,
            cost: Callable[[int, int], str] | None = None, effect: float | None = None) -> tuple[str, str]:
    """(ours, verdict) for mean(a) - mean(b) of `metric` (a dotted record field, or AREA: the learning-curve area)
    between two values of `axis` within `where` ({axis: value} held fixed): paired by seed where the cells share
    seeds (_shares_seeds), Welch's otherwise (difference_of); the verdict by `judge`. compare_judged gives the
    numbers with them.

    expect_sign: +1 where the paper found a > b, -1 where a < b, 0 where it found no difference (then `margin`, the
    paper's effect size, bounds an "agrees"; `effect`: the paper's effect of a directional finding, see judge).
    `names` label a and b in the text (default: the values).
    Raises ValueError (from report.cell) when `where` leaves an axis unnamed."""
    got = compare_judged(records, axis, a, b, where, expect_sign, metric, names, margin, cost, effect)
    return got.ours, got.verdict


def compare_judged(records: list[dict], axis: str, a: Any, b: Any, where: dict | None = None, expect_sign: int = 1,
                   metric: str = "eval.success_rate", names: tuple[str, str] | None = None,
                   margin: float | None = None, cost: Callable[[int, int], str] | None = None,
                   effect: float | None = None) -> Judged:
    """compare's (ours, verdict) with the numbers they are rendered from (Judged: Δ and its interval, each cell's
    seeds and mean, the seeds ±RESOLVE would need); the arguments and errors as compare's."""
    where = where or {}
    na, nb = names or (str(a), str(b))
    (sa, ra), (sb, rb) = (_outcomes(records, metric, {**where, axis: v}) for v in (a, b))
    c = difference_of(sa, sb, _shares_seeds(ra, rb), expect_sign) if sa and sb else None
    success = metric == AREA or metric.endswith("success_rate")
    verdict, need = verdict_of(c, expect_sign, margin, success, cost, effect)
    means = (sum(sa.values()) / len(sa), sum(sb.values()) / len(sb)) if sa and sb else None
    return Judged(_ours(c, na, nb, sa, sb), verdict, c.diff if c else None, c.ci if c else None,
                  (len(sa), len(sb)), need, means)


ECHO = {"floor_frac": 0.25, "window": 3, "drop": 0.2, "converged": 0.9}
"""The Echo Trap test's thresholds (echo_order). The std's floor scales with the reward: floor_frac x the run's own
starting spread (the mean within-group return std of its first `window` steps), so it means the same on the bandit's
payouts (0.1 for the safe arm, 1 a quarter of the time for the risky one: starting std 0.03-0.14) as on the cooking
games' returns (0-1: starting std 0.4-0.6). The std has reached its floor at the first of `window` consecutive steps
at or under it while training success is below `converged` (all-win groups tie because they converged, not because
they collapsed, and are left out). Success has fallen at the first step whose mean over `window` steps is `drop` (20
points) or more under the best such mean before it and stays there to the run's end (a collapse, not one noisy dip:
a step's success is 16 sampled episodes)."""


def echo_order(steps: list[dict]) -> dict:
    """One run's Echo Trap timing from its metrics rows (a record's "steps"): {"floor": the std's floor (ECHO),
    "std_step": the step the group return std reached it or None, "fall_step": the step success fell (ECHO) or None,
    "order": "std first" (the std reached its floor before the fall: RAGEN's claim), "together" (at the same step),
    "reward first" (success fell first, or fell while the std never reached its floor), "no fall"}. Both steps are
    the first step of their `window`. Steps lacking a std or success are skipped; a run shorter than two windows has
    "no fall"."""
    rows = [r for r in steps if r.get("group_return_std") is not None and r.get("success_rate") is not None]
    w = ECHO["window"]
    if len(rows) < 2 * w:
        return {"floor": None, "std_step": None, "fall_step": None, "order": "no fall"}
    floor = ECHO["floor_frac"] * sum(r["group_return_std"] for r in rows[:w]) / w
    std_step = None
    for i in range(w, len(rows) - w + 1):  # after the steps that set the floor
        span = rows[i:i + w]
        if all(r["group_return_std"] <= floor and r["success_rate"] < ECHO["converged"] for r in span):
            std_step = span[0]["step"]
            break
    means = [sum(r["success_rate"] for r in rows[i:i + w]) / w for i in range(len(rows) - w + 1)]
    fall_step = None
    for i in range(1, len(means)):
        bar = max(means[:i]) - ECHO["drop"]
        if all(m <= bar for m in means[i:]):  # fell, and never came back up to the bar: a collapse, not a dip
            fall_step = rows[i]["step"]  # the window's first step, as std_step's
            break
    order = ("no fall" if fall_step is None else "reward first" if std_step is None or std_step > fall_step
             else "std first" if std_step < fall_step else "together")
    return {"floor": floor, "std_step": std_step, "fall_step": fall_step, "order": order}


def echo_trap(records: list[dict]) -> tuple[str, str]:
    """(ours, verdict) for RAGEN's Echo Trap claim, the within-group reward spread falls BEFORE the reward does, over
    the runs of a results file (echo_order per run), counted over runs and over seeds. Runs of one seed are not
    independent (they share the start and the first rollouts), so the test's unit is the seed: a seed votes "std
    first" when most of its runs whose success fell had the std at its floor first, "reward first" when most had
    the fall first (ties and seeds with no ordered fall do not vote). "agrees" when the exact one-sided binomial test
    of k of m voting seeds against 1/2 gives p < 0.05, "disagrees" when the same holds for m - k, otherwise "cannot
    tell at this scale"; it needs 5 seeds or more to speak (5 of 5: p = 0.031)."""
    from scipy.stats import binomtest

    orders = [(r.get("seed"), echo_order(r.get("steps") or [])) for r in records]
    count = {k: sum(o["order"] == k for _, o in orders) for k in ("std first", "together", "reward first", "no fall")}
    flat = sum(o["std_step"] is not None and o["order"] == "no fall" for _, o in orders)
    falls = len(orders) - count["no fall"]
    votes = {}
    for seed in dict.fromkeys(s for s, _ in orders):
        k = sum(o["order"] == "std first" for s, o in orders if s == seed)
        m = sum(o["order"] == "reward first" for s, o in orders if s == seed)
        if k != m:
            votes[seed] = "std first" if k > m else "reward first"
    k = sum(v == "std first" for v in votes.values())
    m = len(votes)
    ours = (f"success fell (≥ {100 * ECHO['drop']:.0f} pts, for good) in {falls} of {len(records)} runs: the group "
            f"return std reached its floor (≤ {ECHO['floor_frac']:g} × its first {ECHO['window']} steps' level) before "
            f"the fall in {count['std first']}, at the same step in {count['together']}, after it or never in "
            f"{count['reward first']}; by seed, std first in {k} of {m} seeds; {flat} more runs' std reached the "
            "floor with no fall (converged habits)")
    if not m:
        why = "no run's success fell" if not falls else "no seed's falls were ordered one way"
        return ours, f"{CANNOT_TELL} ({why}: nothing to order)"
    if binomtest(k, m, 0.5, alternative="greater").pvalue < 0.05:
        return ours, AGREES
    if binomtest(m - k, m, 0.5, alternative="greater").pvalue < 0.05:
        return ours, DISAGREES
    return ours, f"{CANNOT_TELL} (std first in {k} of {m} seeds; 5 of 5 seeds one way would give p < 0.05)"


def residual_sd(records: list[dict], metric: str = "eval.success_rate") -> tuple[float, int] | None:
    """(sd, seeds) of a sweep's seed-to-seed noise once each seed's shared part is taken out: the residual sd of the
    two-way layout cell x seed over the seeds every cell has (s_e^2 = sum (y - cell mean - seed mean + grand mean)^2
    / ((C-1)(S-1)); `metric` a record field or AREA). None with fewer than 2 cells or 2 common seeds."""
    table: dict[str, dict[int, float]] = {}
    for r in records:
        v = curve_area(r) if metric == AREA else metric_value(r, metric)
        if v is not None:
            table.setdefault(json.dumps(r["cell"], sort_keys=True, default=str), {}).setdefault(r["seed"], v)
    got = two_way_residual_sd(table)
    return None if got is None else (got[0], len(got[1]))
