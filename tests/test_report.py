"""agentrl_lib/report.py: a cell's outcome per seed with its mean and t interval (cell), the difference of
two cells over the seeds both have (difference: the seed-pairing rule, with its negative controls), and the table of
a results file (report: means, intervals, verdicts, the seeds a comparison left out)."""
import re

import numpy as np
import pytest

from agentrl_lib import report, stats
from agentrl_lib.records import append_record, load_records

from helpers import fake_record, fake_records, numbers


def test_report_means_std_and_intervals():
    rep = report.report(fake_records({("gae", "dense"): [0.2, 0.4, 0.6], ("grpo", "dense"): [0.5]}))
    gae, grpo = rep.cells
    assert gae["n"] == 3 and gae["mean"] == pytest.approx(0.4) and gae["std"] == pytest.approx(0.2)
    # the t interval (scipy's t quantile at 2 degrees of freedom: 4.303), not the range of the 3 values that a
    # percentile bootstrap gives (0.2, 0.6), which covers the true mean only 75% of the time
    assert gae["ci"] == pytest.approx((0.4 - 4.3027 * 0.2 / 3 ** 0.5, 0.4 + 4.3027 * 0.2 / 3 ** 0.5), abs=1e-4)
    assert stats.bootstrap_mean_ci([0.2, 0.4, 0.6]) == pytest.approx((0.2, 0.6))  # the control: the range
    assert grpo["n"] == 1 and grpo["std"] is None and grpo["ci"] is None
    md = rep.markdown()
    assert "| gae | dense | 0.400 ± 0.200 |" in md and "| 0.500 ± n/a | n/a (n < 2) | 1 |" in md
    assert "95% t intervals over seeds" in md
    assert report.report(fake_records({("gae", "dense"): [0.2, 0.4]}), metric="final.return_mean").cells[0]["mean"] == \
        pytest.approx(0.15)
    assert report.report(fake_records({("gae", "dense"): [0.2, 0.4]})).markdown() == \
        report.report(fake_records({("gae", "dense"): [0.2, 0.4]})).markdown(), "seeded: the same table twice"


def test_report_difference_interval_contains_the_true_difference():
    rng = np.random.default_rng(0)
    a, b = (0.5 + 0.05 * rng.standard_normal(30)).tolist(), (0.3 + 0.05 * rng.standard_normal(30)).tolist()
    rep = report.report(fake_records({("gae", "dense"): a, ("grpo", "dense"): b}), compare="algo.advantage")
    (d,) = rep.differences
    assert d["ci"][0] < 0.2 < d["ci"][1] and d["diff"] == pytest.approx(np.mean(a) - np.mean(b))
    assert d["verdict"] == "gae higher" and d["context"] == {"reward.kind": "dense"}


@pytest.mark.parametrize("a,b,different", [
    ([0.8, 0.85, 0.9], [0.1, 0.15, 0.2], True),      # far apart
    ([0.2, 0.5, 0.8], [0.3, 0.6, 0.7], False),       # overlapping
    ([0.3, 0.5, 0.7], [0.3, 0.5, 0.7], False),       # negative control: identical samples
    ([0.0, 0.0, 0.0], [0.0, 0.0, 0.0], False),       # every seed at 0 (BCa would be undefined here)
    ([1.0, 1.0, 1.0], [0.0, 0.0, 0.0], True),
])
def test_report_says_no_difference_only_when_the_interval_contains_zero(a, b, different):
    rep = report.report(fake_records({("gae", "sparse"): a, ("rloo", "sparse"): b}), compare="algo.advantage",
                       by="reward.kind")
    (d,) = rep.differences
    assert (d["verdict"] != report.NO_DIFFERENCE) == different
    assert (d["ci"][0] <= 0 <= d["ci"][1]) == (not different)
    assert (f"| {report.NO_DIFFERENCE} |" in rep.markdown()) == (not different)


def test_report_pairs_within_each_by_value_and_refuses_unknown_axes():
    samples = {(algo, kind): [0.1, 0.2, 0.3] for algo in ("gae", "grpo", "rloo") for kind in ("sparse", "dense")}
    rep = report.report(fake_records(samples), compare="algo.advantage", by="reward.kind")
    assert len(rep.differences) == 2 * 3 and rep.pooled == []
    assert {d["context"]["reward.kind"] for d in rep.differences} == {"sparse", "dense"}
    assert [(d["a"], d["b"]) for d in rep.differences[:3]] == [("gae", "grpo"), ("gae", "rloo"), ("grpo", "rloo")]
    pooled = report.report(fake_records(samples), compare="algo.advantage", by=[])
    assert len(pooled.differences) == 3 and pooled.pooled == ["reward.kind"] and pooled.differences[0]["n_a"] == 6
    assert "pooled over reward.kind" in pooled.markdown()
    one = report.report(fake_records({("gae", "sparse"): [0.1, 0.2], ("gae", "dense"): [0.3, 0.4]}),
                        compare="algo.advantage", by="reward.kind")   # one value of the compared axis: nothing to pair
    assert one.differences == [] and re.search(r"\(none yet\b.*\breward\.kind\b.*\balgo\.advantage\b", one.markdown())
    assert "(none yet" not in rep.markdown()
    with pytest.raises(ValueError, match="'train.lr' is not an axis"):
        report.report(fake_records(samples), compare="train.lr")
    with pytest.raises(ValueError, match="no record has the metric"):
        report.report(fake_records(samples), metric="eval.nope")


# ------------------------------------------------------------------------------------------------ metric_value
def test_metric_value_reads_dotted_paths_and_the_last_step():
    rec = {"eval": {"success_rate": 0.25, "n_games": 4}, "evals": {"hard": {"success_rate": 0.5}},
           "wall_seconds": 12.5, "steps": [{"step": 1, "return_mean": 0.1}, {"step": 2, "return_mean": 0.3}]}
    assert report.metric_value(rec, "eval.success_rate") == 0.25
    assert report.metric_value(rec, "evals.hard.success_rate") == 0.5
    assert report.metric_value(rec, "final.return_mean") == 0.3 and report.metric_value(rec, "wall_seconds") == 12.5
    for absent in ("eval.nope", "final.nope", "evals.easy.success_rate"):
        assert report.metric_value(rec, absent) is None
    assert report.metric_value({"eval": {"success_rate": float("nan")}}, "eval.success_rate") is None
    assert report.metric_value({"eval": {"success_rate": True}}, "eval.success_rate") is None
    assert report.metric_value({"steps": []}, "final.return_mean") is None


# ------------------------------------------------------------------------------------------------ cell
def _cells(values: dict[str, dict[int, float]], kind="dense"):
    """Records of cells {algo: {seed: success}} (reward.kind = kind)."""
    return [fake_record({"algo.advantage": algo, "reward.kind": kind}, s, v)
            for algo, by_seed in values.items() for s, v in by_seed.items()]


def test_cell_is_the_report_row_of_one_cell():
    recs = fake_records({("gae", "dense"): [0.2, 0.4, 0.6], ("grpo", "dense"): [0.5]})
    c = report.cell(recs, **{"algo.advantage": "gae", "reward.kind": "dense"})
    assert c.outcomes == {0: 0.2, 1: 0.4, 2: 0.6} and c.seeds == [0, 1, 2] and c.n == 3
    row = report.report(recs).cells[0]
    assert (c.mean, c.std, c.ci) == (row["mean"], row["std"], row["ci"]) and list(c.outcomes.values()) == row["values"]
    one = report.cell(recs, **{"algo.advantage": "grpo"})  # reward.kind has one value here: still one cell
    assert one.n == 1 and one.mean == 0.5 and one.std is None and one.ci is None
    assert report.cell(recs, metric="final.return_mean", **{"algo.advantage": "gae"}).mean == pytest.approx(0.2)
    nobody = report.cell(recs, **{"algo.advantage": "rloo"})
    assert nobody.n == 0 and nobody.mean is None and nobody.ci is None


def test_cell_refuses_labels_that_select_several_cells_and_ignores_a_second_record():
    recs = fake_records({("gae", "dense"): [0.2, 0.4], ("gae", "sparse"): [0.9, 0.8]})
    with pytest.raises(ValueError, match="selects 2 cells \\(reward.kind varies\\)"):
        report.cell(recs, **{"algo.advantage": "gae"})
    with pytest.raises(ValueError, match="seed 0 was run from two base configs"):
        report.cell([fake_record({"a": 1}, 0, 0.1, "b0"), fake_record({"a": 1}, 0, 0.9, "b1")], a=1)
    # e.g. each seed's own SFT start
    per_seed_base = [fake_record({"a": 1}, 0, 0.1, "b0"), fake_record({"a": 1}, 1, 0.9, "b1")]
    assert report.cell(per_seed_base, a=1).outcomes == {0: 0.1, 1: 0.9}
    again = recs + [fake_record({"algo.advantage": "gae", "reward.kind": "dense"}, 0, 1.0)]  # one run recorded twice
    assert report.cell(again, **{"algo.advantage": "gae", "reward.kind": "dense"}).outcomes == {0: 0.2, 1: 0.4}


# ------------------------------------------------------------------------------------------------ difference
def test_difference_compares_only_the_seeds_both_cells_have():
    """The seed-pairing rule: gae's seed 3 (an outlier, 1.0) has no grpo run, so it is left out of the comparison
    (and listed); over seeds 0-2 the two cells are identical."""
    recs = _cells({"gae": {0: 0.5, 1: 0.5, 2: 0.5, 3: 1.0}, "grpo": {0: 0.5, 1: 0.5, 2: 0.5}})
    gae, grpo = (report.cell(recs, **{"algo.advantage": a, "reward.kind": "dense"}) for a in ("gae", "grpo"))
    d = report.difference(gae, grpo)
    assert d.seeds == [0, 1, 2] and d.n == 3 and d.dropped_a == [3] and d.dropped_b == []
    assert d.diff == 0.0 and d.ci == (0.0, 0.0) and d.verdict == report.NO_DIFFERENCE
    assert gae.mean == pytest.approx(0.625), "the cell's own mean keeps every seed"
    # the note: the two cells in the order compared, the 3 seeds compared, and the run left out (gae's seed 3)
    a, b = report.cell_text(gae.labels), report.cell_text(grpo.labels)
    compared, left = d.note().split("; left out: ")
    assert compared.startswith(f"{a} − {b} ") and numbers(compared) == [3] and left == f"{a} seed 3"
    # without the rule (every seed of each cell) the outlier would make a difference of 0.125
    unpaired = stats.bootstrap_diff_ci(list(gae.outcomes.values()), list(grpo.outcomes.values()))
    assert gae.mean - grpo.mean == pytest.approx(0.125) and unpaired != d.ci and unpaired[1] > 0
    # the other way round: the extra seed is listed as b's
    assert (report.difference(grpo, gae).dropped_a, report.difference(grpo, gae).dropped_b) == ([], [3])


def test_difference_negative_control_same_seeds_drops_nothing():
    """Negative control: cells with the same seeds (in any order) drop nothing, and the difference is the paired t
    interval of all their values, seed by seed (scipy's ttest_rel)."""
    from scipy.stats import ttest_rel

    a, b = {0: 0.8, 1: 0.85, 2: 0.9}, {2: 0.2, 0: 0.1, 1: 0.15}
    recs = _cells({"gae": a, "grpo": b})
    d = report.difference(*(report.cell(recs, **{"algo.advantage": x}) for x in ("gae", "grpo")))
    assert d.dropped_a == d.dropped_b == [] and d.note() is None and d.seeds == [0, 1, 2]
    want = ttest_rel([a[s] for s in (0, 1, 2)], [b[s] for s in (0, 1, 2)]).confidence_interval(0.95)
    assert d.ci == pytest.approx((want.low, want.high))
    assert d.diff == pytest.approx(0.85 - 0.15) and d.verdict == "gae higher"


def test_difference_without_common_seeds_compares_nothing():
    recs = _cells({"gae": {0: 0.9, 1: 0.8}, "grpo": {2: 0.1, 3: 0.2}})
    d = report.difference(*(report.cell(recs, **{"algo.advantage": x}) for x in ("gae", "grpo")))
    assert d.n == 0 and d.diff is None and d.ci is None and d.verdict == "n/a (no interval)"
    assert (d.dropped_a, d.dropped_b) == ([0, 1], [2, 3]) and "has no seed both cells have" in d.note()
    one = _cells({"gae": {0: 0.9, 1: 0.8}, "grpo": {1: 0.1, 3: 0.2}})
    d1 = report.difference(*(report.cell(one, **{"algo.advantage": x}) for x in ("gae", "grpo")))
    assert d1.seeds == [1] and d1.diff == pytest.approx(0.7) and d1.ci is None, "1 common seed: no interval"


def test_difference_refuses_two_metrics():
    recs = fake_records({("gae", "dense"): [0.2, 0.4]})
    with pytest.raises(ValueError, match="compare one metric"):
        report.difference(report.cell(recs), report.cell(recs, metric="final.return_mean"))


# ------------------------------------------------------------------------------------------------ report's pairing
def test_report_differences_use_the_common_seeds_and_say_which_were_left_out():
    recs = _cells({"gae": {0: 0.2, 1: 0.4, 2: 0.6, 3: 1.0}, "grpo": {0: 0.2, 1: 0.4, 2: 0.6}})
    rep = report.report(recs, compare="algo.advantage")
    (d,) = rep.differences
    assert d["seeds"] == [0, 1, 2] and d["dropped"] == {"a": [3], "b": []} and d["n_a"] == d["n_b"] == 3
    assert d["diff"] == 0.0 and d["verdict"] == report.NO_DIFFERENCE
    assert rep.cells[0]["n"] == 4, "the cell row keeps every seed"
    [note] = [ln for ln in rep.markdown().splitlines() if ln.startswith("Note:") and " − " in ln]
    # the pooled context, the order compared, the 3 seeds compared and the run left out
    assert "reward.kind=dense: gae − grpo " in note and numbers(note) == [3, 3] and note.endswith(": gae seed 3")
    # negative control: the same seeds, no note
    same = report.report(_cells({"gae": {0: 0.2, 1: 0.4}, "grpo": {0: 0.2, 1: 0.4}}), compare="algo.advantage")
    assert same.differences[0]["dropped"] == {"a": [], "b": []} and "left out" not in same.markdown()


def test_a_pooled_report_pairs_runs_of_the_same_seed_and_pooled_cell():
    """Pooled over reward.kind, a unit is (reward.kind, seed): gae's dense seed 1 has no grpo partner (grpo ran seed 1
    only with sparse rewards), so it is left out, named with its pooled cell."""
    recs = (_cells({"gae": {0: 0.5, 1: 0.9}, "grpo": {0: 0.5}}, "dense")
            + _cells({"gae": {0: 0.3, 1: 0.3}, "grpo": {0: 0.3, 1: 0.3}}, "sparse"))
    rep = report.report(recs, compare="algo.advantage", by=[])
    (d,) = rep.differences
    assert d["n_a"] == 3 and d["diff"] == 0.0 and d["dropped"] == {"a": [1], "b": []}
    assert "left out: gae seed 1 (reward.kind=dense)" in rep.markdown()


def test_a_pooled_axis_that_changes_with_the_compared_one_pairs_by_seed():
    """The complexity sweep's shape: each level has its own env.games and each seed its own base config (its own SFT
    model), pooled; every side has one run per seed, so runs pair by seed (pairing by pooled cell would pair
    nothing)."""
    recs = [fake_record({"level": lvl, "env.games": f"games/{lvl}"}, s, v, base_hash=f"{lvl}-s{s}")
            for lvl, vals in (("w2", [0.8, 0.9, 0.7]), ("w8", [0.4, 0.5])) for s, v in enumerate(vals)]
    rep = report.report(recs, "eval.success_rate", compare="level", by=[])
    (d,) = rep.differences
    assert d["seeds"] == [0, 1] and d["dropped"] == {"a": [2], "b": []}
    assert d["diff"] == pytest.approx(0.85 - 0.45)
    [note] = [ln for ln in rep.markdown().splitlines() if ln.startswith("Note:") and " − " in ln]
    assert "w2 − w8 " in note and numbers(note) == [2, 2] and note.endswith(": w2 seed 2")  # 2 seeds; w2's seed 2
    assert report.cell(recs, level="w2").outcomes == {0: 0.8, 1: 0.9, 2: 0.7}


def test_runs_from_each_seeds_own_sft_model_are_one_cells_seeds():
    """The split and complexity sweeps start each seed from its own SFT model (model.name differs, so record_base
    does): the report's cell rows hold both seeds. Runs whose configs differ otherwise (here the learning rate) stay
    apart (column `base`), and so do two runs of one seed from two starts."""
    def rec(demos, seed, value, model=None, lr=1e-5):
        return {"cell": {"sft.demos": demos}, "seed": seed, "base_hash": "x", "eval": {"success_rate": value},
                "config": {"model": {"name": model or f"runs/sft/d{demos}-s{seed}"}, "train": {"lr": lr}}}

    recs = [rec(d, s, v) for d, vals in ((4, [0.0, 0.1]), (20, [0.6, 0.8])) for s, v in enumerate(vals)]
    rep = report.report(recs, compare="sft.demos", by=[])
    assert [(c["cell"], c["n"]) for c in rep.cells] == [({"sft.demos": 4}, 2), ({"sft.demos": 20}, 2)]
    assert "runs that differ only in it are one cell's seeds" in rep.markdown()
    (d,) = rep.differences
    assert d["seeds"] == [0, 1] and d["diff"] == pytest.approx(-0.65)
    other_lr = recs[:2] + [rec(20, 0, 0.6), rec(20, 1, 0.8, lr=3e-5)]
    assert sorted(c["n"] for c in report.report(other_lr).cells) == [1, 1, 2]
    same_seed = recs + [rec(4, 0, 0.5, model="runs/sft/another")]
    assert all(c["n"] == 1 for c in report.report(same_seed).cells)


def test_a_report_file_round_trip(tmp_path):
    out = tmp_path / "r.jsonl"
    for r in fake_records({("gae", "dense"): [0.2, 0.4]}):
        append_record(out, r)
    assert report.report(load_records(out)).cells[0]["values"] == [0.2, 0.4]
