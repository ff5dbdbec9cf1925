"""Intervals over seeds and over games: Student's t intervals of a mean and of a difference of two cells (paired by
seed where the cells share their seeds, Welch's otherwise), the seeds a half-width needs, and percentile-bootstrap
intervals for many independent units (games).

Why t, not a bootstrap, over seeds: with 2-5 seeds a percentile bootstrap only recombines the values seen (over 3
seeds its 95% interval of a mean is their range, which holds the true mean 75% of the time: 1 - 2 (1/2)^3); the t
interval widens with the uncertainty of the spread itself. Used by report.py (the chapters' tables, `agentrl
report`) and judge.py (the findings' verdicts).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass


def _bootstrap(samples: tuple, statistic, confidence: float, n_resamples: int, seed: int,
               paired: bool = False) -> tuple[float, float] | None:
    import inspect

    import numpy as np
    from scipy.stats import bootstrap

    if any(len(s) < 2 for s in samples):
        return None
    if all(np.ptp(s) == 0 for s in samples):  # every resample gives the same statistic
        value = float(statistic(*(np.asarray(s)[None] for s in samples), axis=-1)[0])
        return value, value
    rng = np.random.default_rng(seed)
    kw = {"rng": rng} if "rng" in inspect.signature(bootstrap).parameters else {"random_state": rng}
    res = bootstrap(tuple(np.asarray(s, dtype=float) for s in samples), statistic, vectorized=True, paired=paired,
                    confidence_level=confidence, n_resamples=n_resamples, method="percentile", **kw)
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def _mean(x, axis=-1):
    import numpy as np

    return np.mean(x, axis=axis)


def _mean_diff(x, y, axis=-1):
    import numpy as np

    return np.mean(x, axis=axis) - np.mean(y, axis=axis)


def bootstrap_mean_ci(values, confidence: float = 0.95, n_resamples: int = 9999, seed: int = 0):
    """Percentile-bootstrap interval of the mean of `values` (one per seed); None when fewer than 2."""
    return _bootstrap((list(values),), _mean, confidence, n_resamples, seed)


def bootstrap_diff_ci(a, b, confidence: float = 0.95, n_resamples: int = 9999, seed: int = 0):
    """Percentile-bootstrap interval of mean(a) − mean(b), a and b resampled independently (different runs); None
    when either has fewer than 2 values."""
    return _bootstrap((list(a), list(b)), _mean_diff, confidence, n_resamples, seed)


def wilson_ci(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float] | None:
    """Wilson score interval of a success probability from `successes` out of `n` independent trials (e.g. games won
    out of the held-out games of one run: the interval over games where one seed exists); scipy's
    binomtest(...).proportion_ci(method="wilson"). Unlike the normal approximation it stays inside [0, 1] and is not
    empty at 0 or n successes. None when n is 0."""
    from scipy.stats import binomtest

    if n <= 0:
        return None
    ci = binomtest(successes, n).proportion_ci(confidence_level=confidence, method="wilson")
    return float(ci.low), float(ci.high)


def _ratio_of_sums(num, den, axis=-1):
    import numpy as np

    return np.sum(num, axis=axis) / np.sum(den, axis=axis)


def bootstrap_ratio_ci(numerators, denominators, confidence: float = 0.95, n_resamples: int = 9999,
                       seed: int = 0) -> tuple[float, float] | None:
    """Percentile-bootstrap interval of Σ numerators / Σ denominators, resampling the units (e.g. games: invalid
    turns / turns of each game) with replacement, paired, seeded (scipy.stats.bootstrap, as every interval here).
    None with fewer than 2 units or no denominator."""
    if len(numerators) < 2 or sum(denominators) <= 0:
        return None
    return _bootstrap((list(numerators), list(denominators)), _ratio_of_sums, confidence, n_resamples, seed,
                      paired=True)


def t_mean_ci(values: list[float], confidence: float = 0.95) -> tuple[float, float] | None:
    """The t interval of a mean over seeds: mean +- t((1 + confidence) / 2, n - 1) sd / sqrt(n); None below 2 values.
    Unlike a percentile bootstrap over 2-5 seeds (the range of the values seen), it widens with the uncertainty of
    the spread itself."""
    if len(values) < 2:
        return None
    mean, sd = statistics.fmean(values), statistics.stdev(values)
    half = t_quantile(len(values) - 1, confidence) * sd / math.sqrt(len(values))
    return mean - half, mean + half


@dataclass(frozen=True)
class Comparison:
    """mean(a) - mean(b) of one outcome between two cells (difference_of)."""

    a: dict[int, float]
    """{seed: outcome} of cell a (fractions)."""
    b: dict[int, float]
    paired: bool
    """Per-seed differences over the common seeds (the cells share seeds) or Welch (they do not)."""
    seeds: list[int]
    """The seeds compared: paired, those both have; Welch, every seed of each."""
    diff: float
    ci: tuple[float, float] | None
    """95% t interval of diff; None below 2 seeds a side, or paired over 2 seeds with identical differences."""
    sd: float | None
    """Paired: sd of the per-seed differences; Welch: the pooled within-cell sd. None below 2 seeds."""
    same_sign: int | None = None
    """Paired: the seeds whose difference has the paper's sign (None for Welch or no expected sign)."""

    @property
    def n(self) -> int:
        return len(self.seeds) if self.paired else min(len(self.a), len(self.b))


def t_quantile(df: float, confidence: float = 0.95) -> float:
    """t((1 + confidence) / 2, df): Student's t quantile (scipy), the factor of a two-sided interval (2.776 at 4
    degrees of freedom for 95%)."""
    from scipy.stats import t

    return float(t.ppf((1 + confidence) / 2, df))


def difference_of(a: dict[int, float], b: dict[int, float], paired: bool, expect_sign: int = 0,
                  confidence: float = 0.95) -> Comparison | None:
    """The difference of two cells' outcomes {seed: value}: paired, the mean of a[s] - b[s] over the seeds both have
    with the t interval mean +- t(0.975, n-1) sd / sqrt(n); else Welch's interval (scipy's t with the
    Welch-Satterthwaite degrees of freedom). None when no seed (paired) or a cell (Welch) is there."""
    if paired:
        seeds = [s for s in a if s in b]
        if not seeds:
            return None
        d = [a[s] - b[s] for s in seeds]
        mean = sum(d) / len(d)
        sd = statistics.stdev(d) if len(d) > 1 else None
        ci = None
        if sd is not None and not (sd == 0 and len(d) < 3):  # 2 equal differences: no spread to judge by
            half = t_quantile(len(d) - 1, confidence) * sd / math.sqrt(len(d))
            ci = (mean - half, mean + half)
        same = sum((x > 0) == (expect_sign > 0) and x != 0 for x in d) if expect_sign else None
        return Comparison(a, b, True, seeds, mean, ci, sd, same)
    if not a or not b:
        return None
    xa, xb = list(a.values()), list(b.values())
    mean = sum(xa) / len(xa) - sum(xb) / len(xb)
    if len(xa) < 2 or len(xb) < 2:
        return Comparison(a, b, False, sorted({*a, *b}), mean, None, None)
    va, vb = statistics.variance(xa), statistics.variance(xb)
    sd = math.sqrt(((len(xa) - 1) * va + (len(xb) - 1) * vb) / (len(xa) + len(xb) - 2))
    se2 = va / len(xa) + vb / len(xb)
    if se2 == 0:
        ci = None if min(len(xa), len(xb)) < 3 else (mean, mean)
    else:
        df = se2 ** 2 / ((va / len(xa)) ** 2 / (len(xa) - 1) + (vb / len(xb)) ** 2 / (len(xb) - 1)) \
            if va and vb else len(xa) + len(xb) - 2
        half = t_quantile(df, confidence) * math.sqrt(se2)
        ci = (mean - half, mean + half)
    return Comparison(a, b, False, sorted({*a, *b}), mean, ci, sd)


def seeds_needed(sd: float | None, paired: bool, half_width: float = 0.15, most: int = 200) -> int | None:
    """The fewest seeds n (2..most) whose 95% interval of a difference has half-width <= half_width at this spread:
    paired t(0.975, n-1) sd / sqrt(n); unpaired (seeds per cell) t(0.975, 2n-2) sd sqrt(2 / n). None when sd is
    unknown or 0 (nothing measured to plan by), `most` + 1 when even `most` seeds would not do."""
    if not sd:
        return None
    for n in range(2, most + 1):
        half = t_quantile(n - 1) * sd / math.sqrt(n) if paired else t_quantile(2 * n - 2) * sd * math.sqrt(2 / n)
        if half <= half_width:
            return n
    return most + 1


def two_way_residual_sd(table: dict[str, dict[int, float]]) -> tuple[float, list[int]] | None:
    """(s_e, the seeds used) of a cell x seed table {cell: {seed: value}} over the seeds every cell has: the spread left
    once each cell's and each seed's own level is taken out, s_e^2 = sum (y - cell mean - seed mean + grand mean)^2 /
    ((C-1)(S-1)). A paired difference of two cells has sd s_e sqrt(2). None with fewer than 2 cells or 2 common
    seeds."""
    if len(table) < 2:
        return None
    seeds = sorted(set.intersection(*(set(v) for v in table.values())))
    if len(seeds) < 2:
        return None
    y = [[v[s] for s in seeds] for v in table.values()]
    c, n = len(y), len(seeds)
    grand = sum(map(sum, y)) / (c * n)
    row = [sum(r) / n for r in y]
    col = [sum(y[i][j] for i in range(c)) / c for j in range(n)]
    ss = sum((y[i][j] - row[i] - col[j] + grand) ** 2 for i in range(c) for j in range(n))
    return math.sqrt(ss / ((c - 1) * (n - 1))), seeds
