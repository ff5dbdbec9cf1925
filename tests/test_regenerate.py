"""results/regenerate.py: the pilot's rule for the number of seeds (seeds_for)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

ROOT = Path(__file__).resolve().parent.parent


def load_regenerate():
    spec = importlib.util.spec_from_file_location("regenerate", ROOT / "results" / "regenerate.py")
    regen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(regen)
    return regen


def interval_half_width(a, b) -> float:
    """scipy's pooled two-sample t interval of mean(a) - mean(b): half its width."""
    lo, hi = stats.ttest_ind(a, b, equal_var=True).confidence_interval(0.95)
    return (hi - lo) / 2


@pytest.mark.parametrize("n", [3, 4, 5, 6])
def test_half_width_is_scipys_two_sample_interval(n):
    """Two cells of n seeds whose pooled sd is the pilot's: scipy's interval has the half-width seeds_for predicts."""
    regen = load_regenerate()
    pilot = [[0.30, 0.52], [0.61, 0.47]]
    got = regen.seeds_for(pilot)
    sd = got["pooled_sd"]
    z = np.linspace(-1, 1, n)
    a = 0.5 + sd * z / z.std(ddof=1)          # sample sd exactly `sd`
    b = 0.3 + sd * z / z.std(ddof=1)
    assert got["half_width_by_n"][n] == pytest.approx(interval_half_width(a, b), rel=1e-9)


def test_a_planted_formula_error_is_caught():
    """Negative control: a half-width without the sqrt(2) of a difference disagrees with scipy's interval."""
    sd, n = 0.1, 4
    planted = stats.t.ppf(0.975, 2 * (n - 1)) * sd * (1 / n) ** 0.5
    z = np.linspace(-1, 1, n)
    a, b = 0.5 + sd * z / z.std(ddof=1), 0.3 + sd * z / z.std(ddof=1)
    assert planted != pytest.approx(interval_half_width(a, b), rel=1e-3)


def test_seed_count_rule():
    regen = load_regenerate()
    assert regen.seeds_for([[0.50, 0.60], [0.40, 0.45]])["n_seeds"] == 3          # small spread: the minimum
    wide = regen.seeds_for([[0.10, 0.60], [0.40, 0.80]])
    assert wide["n_seeds"] == regen.MAX_SEEDS and not wide["met"]                # capped, and it says so
    mid = regen.seeds_for([[0.40, 0.52], [0.45, 0.55]])
    n = mid["n_seeds"]
    assert mid["half_width_by_n"][n] <= regen.MAX_DIFF_HALF_WIDTH
    assert n == 3 or mid["half_width_by_n"][n - 1] > regen.MAX_DIFF_HALF_WIDTH    # the fewest that meets it
    with pytest.raises(ValueError):
        regen.seeds_for([[0.5], [0.4]])
