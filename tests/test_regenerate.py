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


def test_collect_evals_appends_each_finished_evaluation_once(tmp_path, monkeypatch):
    """runs/evals (agentrl eval) and runs/evals-swe (the swe part's evaluation) land in stage_evals.jsonl once each,
    with their config; an evaluation whose result file is missing (still running) is not collected."""
    import json

    regen = load_regenerate()
    monkeypatch.setattr(regen, "ROOT", tmp_path)
    monkeypatch.setattr(regen, "RESULTS", tmp_path / "results")
    (tmp_path / "results").mkdir()
    result = {"success_rate": 0.5, "mean_turns": 3.0, "invalid_rate": 0.1, "mean_score_frac": 0.6, "n_games": 2,
              "env_errors": 0, "per_game": [{"game": "g0", "won": True, "turns": 2}, {"game": "g1", "won": False,
                                                                                    "turns": 4}]}
    for folder, meta in [("evals", {"stage": "base", "model": "embedded", "games": "cooking-heldout", "max_turns": 8}),
                         ("evals-swe", {"stage": "sft", "model": "runs/sft/x", "games": "swe-heldout-l1",
                                        "level": 1, "max_turns": 5, "max_new_tokens": 160, "extra": "dropped"})]:
        d = tmp_path / "runs" / folder
        d.mkdir(parents=True)
        (d / "a.meta.json").write_text(json.dumps(meta))
        (d / "a.json").write_text(json.dumps(result))
        (d / "b.meta.json").write_text(json.dumps({**meta, "model": "still-running"}))   # no b.json yet
    assert regen.collect_evals() == 1 and regen.collect_evals("evals-swe") == 1
    assert regen.collect_evals() == 0 and regen.collect_evals("evals-swe") == 0          # once each
    recs = [json.loads(x) for x in (tmp_path / "results" / "stage_evals.jsonl").read_text().splitlines()]
    plain, swe = recs
    assert plain["config"]["command"] == "agentrl eval" and plain["config"]["max_new_tokens"] == 24
    assert swe["config"]["command"] == "results/regenerate.py SWE_EVAL" and swe["config"]["max_new_tokens"] == 160
    assert swe["level"] == 1 and "extra" not in swe and plain["eval"]["per_game"] == [["g0", True, 2], ["g1", False, 4]]
    assert swe["eval"]["success_rate"] == 0.5 and swe["eval"]["mean_score_frac"] == 0.6
