"""The "Findings at small scale" tables of book/findings.md and README.md are computed from results/*.jsonl
(results/findings.py over agentrl_lib.findings, whose rows the chapters end with): the committed tables equal a fresh
computation, the verdicts follow the bootstrap intervals (negative controls included), and results/findings.py
reads a damaged or repeated record and a README without its markers with one line, not a traceback."""
import re
import shutil
import sys
from pathlib import Path

import pytest

from agentrl_lib import findings as lib
from agentrl_lib import judge, records, stats
from experiments import findings_page as findings

from helpers import assert_golden, numbers

ROOT = Path(__file__).resolve().parent.parent


def test_book_table_is_the_one_the_results_give():
    block = findings.block((ROOT / "book" / "findings.md").read_text())
    assert block == findings.findings_table(), ("book/findings.md's findings table is stale: run "
                                                "`python results/findings.py --write` after new results")


def test_readme_table_is_the_one_the_results_give():
    block = findings.block((ROOT / "README.md").read_text(), page=ROOT / "README.md")
    assert block == findings.findings_table(link="notebooks/"), (
        "README.md's findings table is stale: run `python results/findings.py --write` after new results")
    assert "| why it may differ |" in block.splitlines()[0]
    assert "](notebooks/02_reward.ipynb)" in block and "](../notebooks/" not in block  # links from the repo root


def test_both_pages_lead_with_the_lessons_the_results_give():
    """README and book/findings.md open their findings with lib.lessons(): every number in it computed."""
    lead = lib.lessons()
    for page in (ROOT / "README.md", ROOT / "book" / "findings.md"):
        assert findings.block(page.read_text(), findings.LESSONS_START, findings.LESSONS_END, page) == lead, (
            f"{page.name}'s lessons are stale: run `python results/findings.py --write`")
    assert "cannot be told at this scale" in lead and "learning-curve area" in lead


def test_book_balanced_status_is_the_one_its_files_give():
    block = findings.block((ROOT / "book" / "findings.md").read_text(), findings.BALANCED_START, findings.BALANCED_END)
    assert block == findings.balanced_status(), ("book/findings.md's balanced-sweep status is stale: run "
                                                 "`python results/findings.py --write`")


def test_book_design_table_is_the_one_the_sft_rounds_give():
    block = findings.block((ROOT / "book" / "findings.md").read_text(), findings.DESIGN_START, findings.DESIGN_END)
    assert block == findings.design_table(), ("book/findings.md's design table is stale: run "
                                              "`python results/findings.py --write` after a new SFT round or choice")


def test_book_cost_table_is_the_one_the_records_give():
    block = findings.block((ROOT / "book" / "findings.md").read_text(), findings.COST_START, findings.COST_END)
    assert block == findings.cost_table(), ("book/findings.md's cost table is stale: run "
                                            "`python results/findings.py --write` after new results")


def test_cost_table_medians_fresh_runs_and_sums_every_run(monkeypatch):
    """The median leaves a resumed run out (its wall time counts from the resumption), the sum keeps it; a sweep
    with no records says so; a planted typed number in the page is told apart (negative control)."""
    runs = [{"wall_seconds": 600, "device": "cpu", "machine": {"cpu_count": 2}},
            {"wall_seconds": 1800, "device": "cpu", "machine": {"cpu": "AMD EPYC"}},
            {"wall_seconds": 60, "resumed": True, "device": "cuda", "machine": {"gpu": "NVIDIA H100"}}]
    monkeypatch.setattr(findings, "load_results", lambda name: runs if name == "swe" else [])
    assert_golden("findings_cost_table.md", findings.cost_table())  # swe: 3 runs, median 20 min, 0.7 h in all
    page = f"x\n{findings.COST_START}\n| swe | 3 | cpu | 32 min | 19 h |\n{findings.COST_END}\ny"
    assert findings.block(page, findings.COST_START, findings.COST_END) != findings.cost_table()


def test_design_table_lists_every_candidate_once_in_learning_rate_order(tmp_path, monkeypatch):
    """Two rounds' files → one row per candidate, sorted by learning rate, the round that tried it; a planted stale
    block is told apart from the fresh one (negative control)."""
    import json

    inc = tmp_path / "results" / "incoming"
    inc.mkdir(parents=True)
    (inc / "sft_round1.json").write_text(json.dumps({"validation_success": {"64@9e-06": 0.8, "64@6e-06": 0.05}}))
    (inc / "sft_round2.json").write_text(json.dumps({"validation_success": {"64@7e-06": 0.4},
                                                     "invalid_rate": {"64@7e-06": 0.3}}))
    monkeypatch.setattr(findings, "ROOT", tmp_path)
    rows = [x for x in findings.design_table().splitlines() if x.startswith("| ") and "@" in x][1:]  # no header
    assert rows == ["| 1 | 64@6e-06 | 5% | — |", "| 2 | 64@7e-06 | 40% | 30% |", "| 1 | 64@9e-06 | 80% | — |"]
    page = f"x\n{findings.DESIGN_START}\nold\n{findings.DESIGN_END}\ny"
    assert findings.block(page, findings.DESIGN_START, findings.DESIGN_END) != findings.design_table()
    fresh = findings.with_block(page, findings.design_table(), findings.DESIGN_START, findings.DESIGN_END)
    assert findings.block(fresh, findings.DESIGN_START, findings.DESIGN_END) == findings.design_table()
    assert fresh.endswith("y")
    with pytest.raises(ValueError, match="findings.md lacks the markers <!-- design:start -->"):
        findings.with_block("no markers", "new", findings.DESIGN_START, findings.DESIGN_END)


def _recs(values: dict):
    out = []
    for (algo, reward), vals in values.items():
        for seed, v in enumerate(vals):
            out.append({"cell": {"algo": algo, "reward.kind": reward}, "seed": seed, "base_hash": "b",
                        "eval": {"success_rate": v},
                        "steps": [{"step": i, "group_return_std": 0.0 if v == 0 else 0.3,
                                   "success_rate": 0.0 if v == 0 else 0.5} for i in range(6)]})
    return out


@pytest.mark.parametrize("ppo,grpo,sign,verdict", [
    ([0.8, 0.9, 0.85], [0.1, 0.2, 0.15], 1, "agrees"),
    ([0.1, 0.2, 0.15], [0.8, 0.9, 0.85], 1, "disagrees"),
    ([0.1, 0.9, 0.5], [0.2, 0.8, 0.5], 1, "cannot tell at this scale"),
    ([0.5], [0.2, 0.3], 1, "cannot tell yet"),
])
def test_verdicts_follow_the_interval(ppo, grpo, sign, verdict):
    recs = _recs({("ppo", "dense"): ppo, ("grpo", "dense"): grpo})
    _, got = judge.compare(recs, "algo", "ppo", "grpo", {"reward.kind": "dense"}, sign)
    assert got.startswith(verdict)


def _cells(a: list[float], b: list[float], start_b: str = "runs/sft/x") -> list[dict]:
    """Two cells of planted records with configs (start model and games), a's start runs/sft/x."""
    out = []
    for algo, vals, start in (("ppo", a, "runs/sft/x"), ("grpo", b, start_b)):
        for seed, v in enumerate(vals):
            out.append({"cell": {"algo": algo}, "seed": seed, "base_hash": "b", "eval": {"success_rate": v},
                        "config": {"model": {"name": start}, "env": {"games": "games/g"}},
                        "steps": [{"step": i, "success_rate": v, "group_return_std": 0.3} for i in range(6)]})
    return out


def test_cells_that_share_seeds_are_compared_paired_and_match_scipy():
    """Same start and games: the per-seed differences, with scipy's paired t interval (ttest_rel); another start per
    cell: Welch's interval (ttest_ind, equal_var=False). A seed effect shared by both cells (planted: +-0.3 by seed)
    drops out of the paired interval only: the control is the Welch interval of the same numbers, 5 times wider."""
    from scipy.stats import ttest_ind, ttest_rel

    a = [0.2, 0.8, 0.5, 0.3, 0.7]
    b = [x - 0.1 + e for x, e in zip(a, [0.02, -0.03, 0.01, 0.0, -0.01])]
    paired = stats.difference_of(dict(enumerate(a)), dict(enumerate(b)), paired=True)
    want = ttest_rel(a, b).confidence_interval(0.95)
    assert paired.paired and paired.ci == pytest.approx((want.low, want.high))
    welch = stats.difference_of(dict(enumerate(a)), dict(enumerate(b)), paired=False)
    want = ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert not welch.paired and welch.ci == pytest.approx((want.low, want.high))
    assert (welch.ci[1] - welch.ci[0]) > 5 * (paired.ci[1] - paired.ci[0])
    ours, verdict = judge.compare(_cells(a, b), "algo", "ppo", "grpo", {}, 1)
    assert "(paired over 5 seeds)" in ours and verdict == "agrees"
    ours, verdict = judge.compare(_cells(a, b, start_b="runs/sft/y"), "algo", "ppo", "grpo", {}, 1)
    assert "(Welch, 5 seeds a cell)" in ours and verdict.startswith("cannot tell at this scale")


def test_seeds_needed_inverts_the_half_width():
    """The figure a 'cannot tell' row prints: the fewest seeds whose t half-width is <= 15 pts, checked against the
    half-width itself one seed either side (control: one seed fewer does not reach it)."""
    from scipy.stats import t

    for sd, paired in ((0.2, True), (0.1, True), (0.2, False)):
        n = stats.seeds_needed(sd, paired)

        def half(k):
            return (t.ppf(0.975, k - 1) * sd / k ** 0.5 if paired else t.ppf(0.975, 2 * k - 2) * sd * (2 / k) ** 0.5)
        assert half(n) <= 0.15 < half(n - 1)
    assert stats.seeds_needed(0.0, True) is None and stats.seeds_needed(None, False) is None
    assert stats.seeds_needed(5.0, True) == 201


def says(verdict: str, word: str, *nums: float) -> bool:
    """`verdict` is judge's `word` (its start) and its reason gives these numbers, in order (and no other)."""
    return verdict.startswith(word) and numbers(verdict) == list(nums)


def test_each_verdict_word_has_a_planted_set_that_gives_it_and_a_control_that_does_not():
    """One planted comparison per word of findings.VERDICTS, and beside each a small change that must give
    another word (each control is the planted bug the word's rule must not let through)."""
    def word(a, b, sign=1, **kw):
        return judge.compare(_cells(a, b), "algo", "ppo", "grpo", {}, sign, **kw)[1]

    assert word([0.8, 0.9, 0.7], [0.2, 0.3, 0.2]) == "agrees"
    assert word([0.2, 0.3, 0.2], [0.8, 0.9, 0.7]) == "disagrees"
    wide = word([0.8, 0.2, 0.6], [0.2, 0.8, 0.5])  # ±15 pts needs ~N seeds
    assert says(wide, judge.CANNOT_TELL, 15, numbers(wide)[1]) and numbers(wide)[1] > 3
    assert says(word([0.0, 0.0, 0.0], [0.0, 0.0, 0.0]), judge.FLOOR, 0)
    assert says(word([0.05, 0.1, 0.0], [0.0, 0.1, 0.0]), judge.NEAR_FLOOR, 10)
    assert word([0.05, 0.2, 0.0], [0.0, 0.1, 0.0]).startswith("cannot tell")  # one seed above 10%: no floor
    assert word([0.5], [0.5]).startswith("cannot tell yet")
    # no difference expected: "agrees" only when the interval lies inside +-margin
    assert says(word([0.5, 0.6, 0.55, 0.5], [0.5, 0.6, 0.56, 0.5], 0), judge.AGREES, 15)  # within ±15
    beyond = word([0.5, 0.9, 0.1, 0.5], [0.5, 0.6, 0.56, 0.5], 0)  # beyond ±15; ±15 needs ~N seeds
    assert says(beyond, judge.CANNOT_TELL, 15, 15, numbers(beyond)[2]) and "beyond" in beyond
    assert word([0.8, 0.9, 0.85], [0.5, 0.6, 0.55], 0) == "disagrees"
    # a directional finding whose interval contains 0 but stops short of the paper's effect rules that effect out
    tight = ([0.5, 0.6, 0.55, 0.5], [0.5, 0.6, 0.56, 0.49])
    assert says(word(*tight, effect=0.3), judge.DISAGREES, 30)  # rules out the paper's +30 pts
    assert says(word(*tight), judge.CANNOT_TELL, 4, 15)  # no effect given: 4 seeds resolve ±15 pts already
    assert word([0.8, 0.2, 0.6], [0.2, 0.8, 0.5], effect=0.3).startswith("cannot tell")  # reaches the effect


def test_rows_of_three_seeds_say_in_how_many_the_paper_s_direction_held():
    ours, _ = judge.compare(_cells([0.8, 0.2, 0.6], [0.2, 0.8, 0.5]), "algo", "ppo", "grpo", {}, 1)
    assert ours.endswith("; the paper's direction in 2 of 3 seeds")
    ours, _ = judge.compare(_cells([0.8, 0.2, 0.6, 0.5], [0.2, 0.8, 0.5, 0.4]), "algo", "ppo", "grpo", {}, 1)
    assert "direction in" not in ours  # four seeds: the interval speaks for itself


def test_the_learning_curve_area_is_the_second_outcome():
    """area = mean training success over steps; a planted record set where held-out success ties and the training
    curves differ: the held-out verdict cannot tell, the area's agrees (control: the same curves give a tie)."""
    recs = _cells([0.5, 0.5, 0.5], [0.5, 0.5, 0.5])
    for r in recs:
        r["steps"] = [{"step": i, "success_rate": (0.8 if r["cell"]["algo"] == "ppo" else 0.4) + 0.01 * r["seed"],
                       "group_return_std": 0.3} for i in range(6)]
    assert judge.curve_area(recs[0]) == pytest.approx(0.8)
    held = judge.compare(recs, "algo", "ppo", "grpo", {}, 1)
    area = judge.compare(recs, "algo", "ppo", "grpo", {}, 1, judge.AREA)
    assert held[1].startswith("cannot tell") and area[1] == "agrees" and "Δ +40 pts" in area[0]
    for r in recs:
        r["steps"] = [{"step": i, "success_rate": 0.6, "group_return_std": 0.3} for i in range(6)]
    assert judge.compare(recs, "algo", "ppo", "grpo", {}, 1, judge.AREA)[1].startswith("cannot tell")


def test_a_difference_uses_the_seeds_both_cells_have_and_names_the_rest():
    """ppo's seed 3 has no grpo partner: the Δ is over seeds 0-2 and the row says so; negative control: with the same
    seeds nothing is named."""
    recs = _recs({("ppo", "dense"): [0.8, 0.9, 0.85, 0.0], ("grpo", "dense"): [0.1, 0.2, 0.15]})
    ours, verdict = judge.compare(recs, "algo", "ppo", "grpo", {"reward.kind": "dense"}, 1)
    assert ours.startswith("ppo ") and numbers(ours)[:2] == [64, 4] and "Δ +70 pts" in ours  # ppo's 4 seeds, 64%
    assert re.search(r"over 3 seeds\b.*left out: ppo seed 3\)", ours), ours  # paired over 3; the 4th named
    assert verdict == "agrees"
    same = _recs({("ppo", "dense"): [0.8, 0.9, 0.85], ("grpo", "dense"): [0.1, 0.2, 0.15]})
    assert "left out" not in judge.compare(same, "algo", "ppo", "grpo", {"reward.kind": "dense"}, 1)[0]
    apart = _recs({("ppo", "dense"): [0.8, 0.9], ("grpo", "dense"): [0.1, 0.2]})
    for r in apart[2:]:
        r["seed"] += 2  # grpo ran seeds 2 and 3 only
    assert judge.compare(apart, "algo", "ppo", "grpo", {"reward.kind": "dense"}, 1)[1].startswith(
        "cannot tell yet (fewer than 2 seeds")


def test_a_row_carries_the_numbers_its_text_is_rendered_from(monkeypatch):
    """judge.Judged: a comparison's Δ and interval (fractions), each cell's seeds and mean, and the seeds ±15 pts
    would need are the numbers of difference_of / seeds_needed, and the text says them as rendered; chapter_lessons
    quotes the numbers. Controls: a Judged whose numbers disagree with its text is refused, naming the number; and a
    planted Δ (set past the check) changes the lesson's sentence, so the sentence reads the number, not the text."""
    import dataclasses

    recs = _cells([0.8, 0.2, 0.6], [0.2, 0.8, 0.5])
    held = judge.compare_judged(recs, "algo", "ppo", "grpo", {}, 1)
    c = stats.difference_of({0: 0.8, 1: 0.2, 2: 0.6}, {0: 0.2, 1: 0.8, 2: 0.5}, paired=True)
    assert (held.diff, held.ci, held.seeds) == (c.diff, c.ci, (3, 3)) and held.means == pytest.approx((0.8 / 1.5, 0.5))
    assert held.seeds_needed == stats.seeds_needed(c.sd, True) > 3 and held.command is None
    assert f"Δ {held.delta}" in held.ours and held.delta == f"{100 * c.diff:+.0f} pts [{100 * c.ci[0]:+.0f}, " \
        f"{100 * c.ci[1]:+.0f}]" and f"needs ~{held.seeds_needed} seeds" in held.verdict
    assert (held.ours, held.verdict) == judge.compare(recs, "algo", "ppo", "grpo", {}, 1)  # the same text
    missing = lib._not_run("main")
    assert missing.command == "python results/regenerate.py main" and f"(`{missing.command}`)" in missing.verdict

    for wrong, name in ((dict(diff=held.diff + 0.05), "Δ"), (dict(ci=None), "Δ"), (dict(diff=None, ci=None), "Δ"),
                        (dict(seeds=(4, 3)), "seeds"), (dict(seeds_needed=held.seeds_needed + 1), "seeds needed"),
                        (dict(seeds_needed=None), "seeds needed"), (dict(means=(0.9, 0.5)), "means"),
                        (dict(p=0.5), "p"), (dict(command="python results/regenerate.py main"), "command")):
        with pytest.raises(ValueError, match=rf"numbers of {name}\b.*disagree"):
            dataclasses.replace(held, **wrong)
    with pytest.raises(ValueError, match="numbers of command"):
        dataclasses.replace(missing, command=None)  # a verdict naming a command the row does not carry

    row = lib.Verdict("A planted finding", "paper", "why", "05_stability", held,
                      judge.compare_judged(recs, "algo", "ppo", "grpo", {}, 1, judge.AREA))
    monkeypatch.setattr(lib, "verdicts", lambda chapter, results=None: [row])
    said = lib.chapter_lessons("05_stability")
    assert f"(Δ {held.delta}); about {held.seeds_needed} seeds a cell would resolve ±15 points" in said, said
    planted = dataclasses.replace(held)
    object.__setattr__(planted, "diff", held.diff + 0.5)  # past the check: only the number changes, not the text
    object.__setattr__(planted, "seeds_needed", 99)
    monkeypatch.setattr(lib, "verdicts", lambda chapter, results=None: [dataclasses.replace(row, held_out=planted)])
    wrong = lib.chapter_lessons("05_stability")
    assert f"Δ {held.delta}" not in wrong and f"Δ {planted.delta}" in wrong and "about 99 seeds" in wrong, wrong


def _curve(success: list[float], std: list[float], seed: int = 0) -> dict:
    return {"seed": seed, "steps": [{"step": i + 1, "success_rate": s, "group_return_std": d}
                                    for i, (s, d) in enumerate(zip(success, std))]}


STD_FIRST = ([0.5] * 6 + [0.5, 0.5, 0.5, 0.1, 0.0, 0.0, 0.0, 0.0],
             [0.4] * 6 + [0.05, 0.05, 0.05, 0.02, 0.0, 0.0, 0.0, 0.0])
"""A planted Echo Trap: the spread falls to its floor at step 7, success falls at step 9 (its 3-step mean) and stays
down."""
REWARD_FIRST = (STD_FIRST[0], [0.4] * 6 + [0.4, 0.4, 0.4, 0.4, 0.4, 0.05, 0.05, 0.05])
"""The same fall with the spread still wide until step 12: success fell first."""


def test_echo_order_times_the_floor_and_the_fall():
    assert judge.echo_order(_curve(*STD_FIRST)["steps"])["order"] == "std first"
    got = judge.echo_order(_curve(*REWARD_FIRST)["steps"])
    assert got["order"] == "reward first" and got["fall_step"] == 9 and got["std_step"] == 12
    # converged: every group wins, the spread is 0 because they tie: no floor, no fall
    won = judge.echo_order(_curve([0.5] * 4 + [1.0] * 10, [0.4] * 4 + [0.0] * 10)["steps"])
    assert won == {"floor": pytest.approx(0.1), "std_step": None, "fall_step": None, "order": "no fall"}
    # a dip that comes back is not a fall (control for 'stays down')
    dip = judge.echo_order(_curve([0.6] * 6 + [0.1, 0.1, 0.1] + [0.6] * 5, [0.4] * 14)["steps"])
    assert dip["fall_step"] is None


def test_echo_trap_can_agree_disagree_or_not_tell_by_seed():
    """RAGEN's claim, tested over seeds: 5 seeds whose spread fell first agree, 5 whose success fell first
    disagree (the planted run whose std falls after the reward), and 4 seeds, or two runs of one seed counted
    once, cannot tell."""
    assert judge.echo_trap([_curve(*STD_FIRST, seed=s) for s in range(5)])[1] == "agrees"
    ours, verdict = judge.echo_trap([_curve(*REWARD_FIRST, seed=s) for s in range(5)])
    # fell (≥ 20 pts) in 5 of 5 runs; the floor (0.25 × the first 3 steps) reached before the fall in 0, at the same
    # step in 0, after it or never in 5; std first in 0 of 5 seeds; 0 runs at the floor with no fall
    assert verdict == "disagrees" and numbers(ours) == [20, 5, 5, 0.25, 3, 0, 0, 5, 0, 5, 0], ours
    assert judge.echo_trap([_curve(*STD_FIRST, seed=s) for s in range(4)])[1].startswith("cannot tell")
    one_seed = [_curve(*STD_FIRST, seed=0) for _ in range(6)]
    assert says(judge.echo_trap(one_seed)[1], judge.CANNOT_TELL, 1, 1, 5, 5, 0.05)  # 1 of 1 seeds; 5 of 5 would do
    flat = [_curve([0.5] * 4 + [1.0] * 10, [0.4] * 4 + [0.0] * 10, seed=s) for s in range(6)]
    assert says(flat_verdict := judge.echo_trap(flat)[1], judge.CANNOT_TELL) and "success fell" in flat_verdict


def test_pilot_rows_list_the_pilot_cells_from_the_chosen_start_only(monkeypatch):
    """Only regenerate.PILOT's cells and seeds started from the chosen SFT model are listed, ordered by cell then
    seed; a GRPO record, a seed outside the pilot and a run from another SFT model are left out (each would be a
    planted bug if it showed)."""
    def rec(algo, seed, success, init="runs/sft/chosen"):
        return {"cell": {"algo": algo, "reward.kind": "dense"}, "seed": seed, "config": {"model": {"name": init}},
                "eval": {"success_rate": success, "mean_turns": 6.0, "invalid_rate": 0.25}}

    records = [rec("rloo", 1, 0.5), rec("ppo", 1, 0.75), rec("ppo", 0, 0.9), rec("grpo", 0, 0.3),
               rec("ppo", 2, 0.1), rec("rloo", 0, 0.2, init="runs/sft/other")]
    monkeypatch.setattr(findings, "load_results", lambda path: records)
    rows = findings.pilot_rows(ROOT / "results" / "algo_reward.jsonl", "runs/sft/chosen")
    assert rows[0].startswith("\nThe pilot's runs (3 of 4;")
    assert rows[3:] == ["| PPO, dense | 0 | 90% | 6.0 | 25% |", "| PPO, dense | 1 | 75% | 6.0 | 25% |",
                        "| RLOO, dense | 1 | 50% | 6.0 | 25% |"]
    monkeypatch.setattr(findings, "load_results", lambda path: [])
    assert findings.pilot_rows(ROOT / "results" / "algo_reward.jsonl", "runs/sft/chosen") == []


def test_design_table_shows_the_sampled_numbers_beside_the_greedy_ones(tmp_path, monkeypatch):
    """With sft_behaviour.json the table gains the sampled columns; a candidate it lacks shows '—', not a number
    (negative control)."""
    import json

    inc = tmp_path / "results" / "incoming"
    inc.mkdir(parents=True)
    (inc / "sft_round1.json").write_text(json.dumps({"validation_success": {"64@9e-06": 0.8, "64@6e-06": 0.47},
                                                     "invalid_rate": {"64@6e-06": 0.51}}))
    (inc / "sft_behaviour.json").write_text(json.dumps({"temperature": 0.7, "candidates": {
        "64@6e-06": {"sampled_success": 0.0625, "sampled_invalid": 0.81}}}))
    monkeypatch.setattr(findings, "ROOT", tmp_path)
    lines = findings.design_table().splitlines()
    assert lines[0].endswith("| sampled at T = 0.7: success | invalid |")
    assert lines[2:4] == ["| 1 | 64@6e-06 | 47% | 51% | 6% | 81% |", "| 1 | 64@9e-06 | 80% | — | — | — |"]


def test_pilot_rows_with_design_settings_leave_the_other_settings_out(monkeypatch):
    """With settings= only records with those regenerate.DESIGN_FIELDS values are listed (a 3e-5 or a whitened pilot
    record beside the chosen design's would mix two designs in one table: the planted bugs this catches)."""
    def rec(seed, lr, whiten=False):
        return {"cell": {"algo": "ppo", "reward.kind": "dense"}, "seed": seed,
                "config": {"model": {"name": "runs/sft/chosen"}, "train": {"lr": lr},
                           "algo": {"normalize_advantages": whiten}},
                "eval": {"success_rate": 0.5, "mean_turns": 6.0, "invalid_rate": 0.25}}

    settings = {"train.lr": 1e-5, "algo.normalize_advantages": False}
    monkeypatch.setattr(findings, "load_results", lambda path: [rec(0, 3e-5), rec(1, 1e-5), rec(0, 1e-5, True)])
    rows = findings.pilot_rows(ROOT / "results" / "algo_reward.jsonl", "runs/sft/chosen", settings)
    assert rows[0].startswith("\nThe pilot's runs (1 of 4;") and rows[3:] == ["| PPO, dense | 1 | 50% | 6.0 | 25% |"]
    assert len(findings.pilot_rows(ROOT / "results" / "algo_reward.jsonl", "runs/sft/chosen")) == 6  # control


def test_probe_rows_give_the_first_update_kl_the_largest_drop_and_the_curve():
    def rec(lr, success, kl, games="games/cooking-valid", algo="ppo", seed=0, whiten=True):
        return {"cell": {"algo": algo, "reward.kind": "dense"}, "seed": seed,
                "config": {"model": {"name": "runs/sft/chosen"}, "train": {"lr": lr, "eval_games": games},
                           "algo": {"normalize_advantages": whiten}},
                "steps": [{"step": i + 1, "success_rate": s, "approx_kl": kl if i == 0 else 0.01}
                          for i, s in enumerate(success)], "eval": {"success_rate": 0.75}}

    records = [rec(1e-5, [0.5, 0.25, 0.75], 0.07), rec(1e-5, [0.5, 0.5], 0.06, whiten=False),
               rec(3e-5, [0.5, 0.9375, 0.0, 0.5], 0.27, "games/cooking-heldout"),
               rec(3e-5, [0.0], 0.9), rec(1e-5, [0.0], 0.9, algo="rloo"), rec(1e-5, [0.0], 0.9, seed=1)]
    lines = findings.probe_rows(records, "runs/sft/chosen")
    # each row: lr, whitened or not, the first update's KL, the largest drop, the curve, the games, held-out success
    assert_golden("findings_probe_rows.md", "\n".join(lines) + "\n")
    assert [numbers(row)[:4] for row in lines[3:]] == [[3e-05, 0.27, 94, 50], [1e-05, 0.07, 25, 50],
                                                       [1e-05, 0.06, 0, 50]]
    assert findings.probe_rows(records, "runs/sft/other") == []


@pytest.mark.parametrize("met", [True, False])
def test_design_table_says_when_the_seeds_rule_was_not_met(tmp_path, monkeypatch, met):
    """seeds_choice.json with met false → the design block says the interval target was not met and which
    differences stay unresolved; with met true it says nothing of the kind (the control)."""
    import json

    inc = tmp_path / "results" / "incoming"
    inc.mkdir(parents=True)
    (inc / "sft_round1.json").write_text(json.dumps({"validation_success": {"64@7e-06": 0.4}}))
    (inc / "seeds_choice.json").write_text(json.dumps({
        "rule": "fewest seeds (3..6) with a 95% half-width of a two-cell difference <= 0.15", "n_seeds": 6,
        "pooled_sd": 0.222 if not met else 0.1, "half_width_by_n": {"6": 0.286 if not met else 0.13}, "met": met}))
    monkeypatch.setattr(findings, "ROOT", tmp_path)
    line = next(x for x in findings.design_table().splitlines() if x.startswith("Pilot:"))
    assert ("**not met**" in line) is (not met)
    assert ("smaller than about 29 points unresolved" in line) is (not met)


def _run(cell: dict, seed: int, success: float, **more) -> dict:
    return {"cell": cell, "seed": seed, "base_hash": "b", "eval": {"success_rate": success}, "steps": [], **more}


def test_each_chapter_gets_its_own_rows_and_an_unknown_chapter_is_refused():
    rows = lib.verdicts("02_reward", results={})
    assert [v.finding for v in rows] == ["Dense turn rewards help PPO, on balanced games",
                                         "Dense rewards do not help RLOO, on balanced games",
                                         "Dense turn rewards help PPO, on the shortcut games",
                                         "Dense rewards do not help RLOO, on the shortcut games"]
    assert [v.verdict for v in rows] == ["cannot tell yet (`python results/regenerate.py balanced`)"] * 2 + \
        ["cannot tell yet (`python results/regenerate.py main`)"] * 2
    assert all(v.why for v in rows)
    every = lib.verdicts(results={})
    assert {v.chapter for v in every} == {"01_environment", "02_reward", "03_policy", "04_sft_then_rl",
                                         "05_stability", "06_swe"}
    with pytest.raises(ValueError, match="no finding belongs to chapter '07_x'"):
        lib.verdicts("07_x", results={})
    table = lib.verdict_table("02_reward", results={}).splitlines()
    assert table[0].endswith("| its verdict | why it may differ |") and len(table) == 6  # no chapter column
    assert table[1] == "|:--" * 7 + "|"
    short = lib.verdict_table("02_reward", results={}, link="x/", why=False).splitlines()
    assert short[0].endswith("| its verdict | chapter |") and short[1] == "|:--" * 7 + "|"
    *_, verdict, ours, other, link = [c.strip() for c in short[2].strip(" |").split(" | ")]
    assert verdict.startswith(judge.NOT_RUN) and "regenerate.py balanced" in verdict and ours == other == "—"
    assert link == "[02_reward](x/02_reward.ipynb)"


@pytest.mark.parametrize("chapter", ["01_environment", "04_sft_then_rl", "05_stability", "06_swe"])
def test_chapter_lessons_say_each_verdict_with_its_own_numbers(chapter):
    """A chapter's closing lessons name every finding once, count the verdicts as the rows give them, and quote each
    row's own difference and seeds needed (its numbers, Judged); control: with no results every finding is 'not run
    yet' and nothing agrees."""
    rows, text = lib.verdicts(chapter), lib.chapter_lessons(chapter)
    for v in rows:
        assert text.count(f"*{v.finding}*") == 1, v.finding
        said = text.split(f"*{v.finding}*")[1].split(". *")[0]
        if v.verdict.startswith(judge.CANNOT_TELL) and v.held_out.diff is not None:
            assert f"Δ {judge.delta_text(v.held_out.diff, v.held_out.ci)}" in said, v.finding
        if v.verdict.startswith(judge.CANNOT_TELL) and v.held_out.seeds_needed:
            assert f"about {v.held_out.seeds_needed} seeds a cell" in said, v.finding
        word = next(w for w in judge.VERDICTS if v.verdict.startswith(w))
        expect = {judge.AGREES: "agrees", judge.DISAGREES: "disagrees", judge.CANNOT_TELL: "cannot",
                  judge.FLOOR: "floor", judge.NEAR_FLOOR: "floor", judge.NOT_RUN: "not run"}[word]
        assert expect in said or (word == judge.CANNOT_TELL and v.area_verdict.startswith(("agrees", "disagrees"))
                                  and "learning-curve area" in said), (v.finding, said)
    agree = sum(v.verdict.startswith(judge.AGREES) for v in rows)
    assert text.startswith(f"This chapter tests {len(rows)} of the papers' findings: {agree} agree")
    empty = lib.chapter_lessons(chapter, results={})
    assert empty.count("not run yet: `python results/regenerate.py") == len(rows)
    # agree, disagree, cannot be told, on a floor, not run yet
    assert numbers(empty.split(". ")[0]) == [len(rows), 0, 0, 0, 0, len(rows)]
    with pytest.raises(ValueError, match="no finding belongs"):
        lib.chapter_lessons("07_x", results={})


def test_split_rows_read_the_harder_games_and_the_in_domain_games_apart():
    """The generalisation row compares `evals.hard`, the in-domain row `eval`: planted so that the two disagree,
    each row must follow its own metric (a row reading the other metric would flip its verdict)."""
    recs = [_run({"sft.demos": d, "rl.episodes": 400 - 10 * d}, s, ind, evals={"hard": {"success_rate": hard}})
            for d, ind, hard in [(4, 0.9, 0.1), (20, 0.5, 0.6), (36, 0.95, 0.6)] for s in range(3)
            for ind, hard in [(ind + 0.01 * s, hard + 0.01 * s)]]
    rows = {v.finding: v for v in lib.verdicts("04_sft_then_rl", results={"sft_rl_split": recs})}
    assert rows["Mostly RL generalises worse to harder games than an SFT:RL mix"].verdict == "agrees"   # 60% vs 10%
    assert rows["More SFT, more in-domain success"].verdict == "agrees"                               # 95% vs 50%
    assert says(rows["On harder games the mix is about as good as mostly SFT"].verdict, judge.AGREES, 15)


def test_exploration_rows_compare_turn_budgets():
    recs = [_run({"env.max_turns": t, "algo": "ppo"}, s, v + 0.01 * s) for t, v in [(5, 0.2), (10, 0.7), (15, 0.7)]
            for s in range(3)]
    rows = lib.verdicts("01_environment", results={"exploration": recs})
    got = {v.finding: v.verdict for v in rows}
    assert got["A 2× turn budget beats 1× (exploration)"] == "agrees"
    assert says(got["More than 2× the turns adds little"], judge.AGREES, 18)  # within ±18 pts
    worse = [{**r, "eval": {"success_rate": 0.9 - r["eval"]["success_rate"]}} for r in recs]  # negative control
    assert {v.finding: v.verdict for v in lib.verdicts("01_environment", results={"exploration": worse})}[
        "A 2× turn budget beats 1× (exploration)"] == "disagrees"


def test_transfer_compares_the_small_worlds_policy_on_the_large_games_with_the_large_worlds_own():
    """The w2-o3-q4 runs' `evals.w8` against the w8-o12-q4 runs' own evaluation, seed by seed; the w2 runs' own
    (in-domain) evaluation must not be used: planted at 100%, it would make the rows differ."""
    small = [_run({"level": "w2-o3-q4"}, s, 1.0, evals={"w8": {"success_rate": 0.3 + 0.01 * s}}) for s in range(3)]
    large = [_run({"level": "w8-o12-q4"}, s, 0.3 + 0.02 * s) for s in range(3)]
    row = next(v for v in lib.verdicts("01_environment", results={"complexity": small + large})
               if v.finding.startswith("Simple worlds"))
    assert numbers(row.ours)[:4] == [31, 3, 32, 3], row.ours  # w2's policy on w8 31% (3 seeds), w8's own 32%
    assert row.ours.index("w2-o3-q4") < row.ours.index("w8-o12-q4") and says(row.verdict, judge.AGREES, 15)
    lacking = [_run({"level": "w2-o3-q4"}, s, 1.0) for s in range(3)] + large
    row = next(v for v in lib.verdicts("01_environment", results={"complexity": lacking})
               if v.finding.startswith("Simple worlds"))
    assert row.verdict.startswith("cannot tell yet")


def test_base_model_row_bootstraps_over_games_of_one_evaluation():
    def ev(level, wins):
        return {"stage": "base", "level": level, "eval": {"per_game": [[f"g{i}", w, 8] for i, w in enumerate(wins)]}}

    far = [ev("w2-o3-q4", [True] * 20 + [False] * 44), ev("w8-o12-q4", [False] * 64)]
    got = lib.compare_evaluations(far, {"stage": "base", "level": "w2-o3-q4"},
                                  {"stage": "base", "level": "w8-o12-q4"}, 1, ("w2", "w8"))
    ours, verdict = got.ours, got.verdict
    assert ours.startswith("w2 ") and numbers(ours)[:5] == [31, 64, 0, 64, 31] and verdict == "agrees"  # Δ +31
    assert got.means == (20 / 64, 0.0) and got.diff == 20 / 64 and got.ci == stats.bootstrap_diff_ci(
        [1.0] * 20 + [0.0] * 44, [0.0] * 64) and got.seeds == ()  # the numbers: games, not seeds
    near = [ev("w2-o3-q4", [True] * 2 + [False] * 62), ev("w8-o12-q4", [True] + [False] * 63)]
    assert says(lib.compare_evaluations(near, {"level": "w2-o3-q4"}, {"level": "w8-o12-q4"}, 1, ("w2", "w8")).verdict,
                judge.NEAR_FLOOR, 10)
    close = [ev("w2-o3-q4", [True] * 20 + [False] * 44), ev("w8-o12-q4", [True] * 16 + [False] * 48)]
    close_verdict = lib.compare_evaluations(close, {"level": "w2-o3-q4"}, {"level": "w8-o12-q4"}, 1,
                                            ("w2", "w8")).verdict
    assert says(close_verdict, judge.CANNOT_TELL) and "one model each" in close_verdict
    floor = [ev("w2-o3-q4", [False] * 64), ev("w8-o12-q4", [False] * 64)]  # nothing won: the verdict says why
    assert says(lib.compare_evaluations(floor, {"level": "w2-o3-q4"}, {"level": "w8-o12-q4"}, 1, ("w2", "w8")).verdict,
                judge.FLOOR, 0)


def test_hyperparameter_table_reads_the_run_config_and_names_a_missing_field():
    config = {"model": {"name": "runs/sft/x"}, "train": {"lr": 1e-5, "games_per_step": 4, "steps": 25,
                                                         "eval_temperature": 0.0},
              "algo": {"group_size": 4, "normalize_advantages": False}}
    table = lib.hyperparameter_table(config, {"model": "7B", "train.lr": "1e-6", "episodes per step": "256",
                                              "RL episodes": "400", "train.eval_temperature": "0.4",
                                              "algo.normalize_advantages": "yes"})
    assert_golden("findings_hyperparameter_table.md", table)
    ours = {row.split(" | ")[0].strip("| "): row.split(" | ")[1] for row in table.splitlines()[2:]}
    assert numbers(ours["episodes per step"]) == [16] and numbers(ours["RL episodes"]) == [400]  # 4 x 4, 16 x 25
    with pytest.raises(KeyError, match="algo.kl_coef"):
        lib.hyperparameter_table(config, {"algo.kl_coef": "0.01"})


def test_the_resolved_rows_compute_their_tests():
    """Counter-game wins (Fisher), GRPO against its start (t over runs) and SFT alone against SFT then RL
    (McNemar): planted records that must agree, and controls that must not."""
    places = {f"f{i}": "fridge" for i in range(6)} | {f"c{i}": "counter" for i in range(6)}

    def run(algo, seed, counter_wins):
        per_game = [[g, p == "fridge" or int(g[1:]) < counter_wins, 5] for g, p in places.items()]
        return {"cell": {"algo": algo, "reward.kind": "dense"}, "seed": seed, "eval": {"per_game": per_game},
                "config": {"train": {"eval_games": "games/planted"}}}

    import unittest.mock as mock

    from scipy.stats import binomtest, fisher_exact

    with mock.patch.object(lib, "game_places", lambda games: places):
        recs = [run("ppo", s, 3) for s in range(8)] + [run("grpo", s, 0) for s in range(8)] + [run("rloo", 0, 1)]
        got = lib._counter_wins({"algo_reward": recs})
        assert got.ours.startswith("PPO 8 of 8, GRPO 0 of 8, RLOO 1 of 1") and got.verdict == "agrees"
        assert got.p == pytest.approx(fisher_exact([[8, 0], [0, 8]]).pvalue)  # the p the text says
        even = [run("ppo", s, s % 2) for s in range(8)] + [run("grpo", s, s % 2) for s in range(8)]
        assert lib._counter_wins({"algo_reward": even}).verdict.startswith("cannot tell")  # control: equal shares

    start = {"main_start": True, "games": "cooking-heldout", "eval": {"success_rate": 0.5}}
    grpo = [{"cell": {"algo": "grpo", "reward.kind": k}, "seed": s, "eval": {"success_rate": 0.5 + 0.01 * s}}
            for k in ("dense", "sparse") for s in range(3)]
    got = lib._grpo_vs_start({"algo_reward": grpo, "stage_evals": [start]})
    assert got.verdict.startswith("agrees") and got.diff == pytest.approx(0.01) and got.means[1] == 0.5
    moved = [{**r, "eval": {"success_rate": 0.9 + 0.01 * r["seed"]}} for r in grpo]
    assert lib._grpo_vs_start({"algo_reward": moved, "stage_evals": [start]}).verdict == "disagrees"

    games = [f"g{i}" for i in range(20)]
    sft = {"stage": "sft", "demos": 36, "games": "cooking-heldout", "seed": 0,
           "eval": {"success_rate": 0.9, "per_game": [[g, i < 18, 5] for i, g in enumerate(games)]}}
    rl = {"cell": {"sft.demos": 36, "rl.episodes": 40}, "seed": 0,
          "eval": {"success_rate": 0.4, "per_game": [[g, i < 8, 5] for i, g in enumerate(games)]}}
    got = lib._sft_alone({"sft_rl_split": [rl], "stage_evals": [sft]})
    assert "by SFT alone only 10, by SFT then RL only 0" in got.ours and got.verdict == "agrees"
    assert got.means == (0.9, 0.4) and got.p == pytest.approx(binomtest(10, 10, 0.5).pvalue)  # what lessons() quotes
    same = {**rl, "eval": {"success_rate": 0.9, "per_game": sft["eval"]["per_game"]}}
    assert lib._sft_alone({"sft_rl_split": [same], "stage_evals": [sft]}).verdict.startswith("cannot tell")


def test_balanced_status_reads_the_running_sweeps_files(tmp_path, monkeypatch):
    import json

    inc = tmp_path / "results" / "incoming"
    inc.mkdir(parents=True)
    monkeypatch.setattr(findings, "ROOT", tmp_path)
    assert findings.balanced_status().startswith("The RL start is not chosen yet")
    (inc / "sft_choice_balanced.json").write_text(json.dumps({
        "rule": "r", "sampled_success": {"64@8e-06": 0.6, "64@7e-06": 0.45}, "chosen_demos": 64, "chosen_lr": 7e-6,
        "sampled_invalid": {"64@8e-06": 0.2, "64@7e-06": 0.3}}))
    lines = findings.balanced_status().splitlines()
    assert lines[2:4] == ["| 64@7e-06 | 45% | 30% |", "| 64@8e-06 | 60% | 20% |"] and "Chosen: 64@7e-06" in lines[-1]
    (inc / "seeds_choice_balanced.json").write_text(json.dumps({
        "n_seeds": 4, "half_width_by_n": {"4": 0.12}, "met": True, "pilot_seeds": [0, 1], "paired_diff_sd": 0.08,
        "heldout": {"paired_diff_sd": 0.2}}))
    pilot = next(ln for ln in findings.balanced_status().splitlines() if ln.startswith("Pilot"))
    # pilot seeds 0, 1; sd 8.0 points of the area, 20.0 of held-out success; 4 seeds; half-width 12 points
    assert numbers(pilot) == [0, 1, 8.0, 20.0, 4, 12] and "not met" not in pilot
    assert "Budget:" not in findings.balanced_status()   # a choice written before the budget was recorded
    choice = json.loads((inc / "seeds_choice_balanced.json").read_text())
    (inc / "seeds_choice_balanced.json").write_text(json.dumps({**choice, "budget": {
        "median_run_cpu_hours": 0.95, "all_cells_cpu_hours": 34.9, "later_cells": ["algo=ppo", "algo=grpo"],
        "later_runs": 16, "planned_cpu_hours": 27.3, "pilot_cpu_hours": 12.1}}))
    budget = next(ln for ln in findings.balanced_status().splitlines() if ln.startswith("Budget:"))
    # a run's median, the seeds, every cell, the later runs, all the planned hours, the pilot's
    assert numbers(budget) == [0.95, 4, 34.9, 16, 27.3, 12.1] and "algo=ppo, algo=grpo" in budget


def test_balanced_rows_read_the_balanced_sweep_only():
    """The balanced rows compare cells of results/algo_reward_balanced.jsonl, paired by seed; the shortcut sweep's
    records (algo_reward) do not reach them (control), and GRPO's start there is the balanced start's evaluation."""
    planted = [{**r, "config": {"train": {"eval_games": "games/planted"}}}
               for r in _recs({("ppo", "sparse"): [0.9, 1.0, 0.95], ("grpo", "sparse"): [0.0, 0.1, 0.05]})]
    row = "PPO beats GRPO, sparse reward, on balanced games"
    got = {v.finding: v for v in lib.verdicts("03_policy", results={"algo_reward_balanced": planted})}
    assert got[row].verdict == "agrees" and "(paired over 3 seeds)" in got[row].ours
    shortcut = "PPO beats GRPO, sparse reward, on the shortcut games"
    assert got[shortcut].verdict.startswith("cannot tell yet")  # the shortcut rows: not run
    other = {v.finding: v for v in lib.verdicts("03_policy", results={"algo_reward": planted})}
    assert other[row].verdict == "cannot tell yet (`python results/regenerate.py balanced`)"
    assert other[shortcut].verdict == "agrees"
    same = _recs({("ppo", "sparse"): [0.1, 0.9, 0.5], ("grpo", "sparse"): [0.2, 0.8, 0.5]})
    assert {v.finding: v for v in lib.verdicts("03_policy", results={"algo_reward_balanced": same})}[
        row].verdict.startswith("cannot tell at this scale")

    grpo = [{"cell": {"algo": "grpo", "reward.kind": k}, "seed": s, "eval": {"success_rate": 0.5 + 0.01 * s}}
            for k in ("dense", "sparse") for s in range(3)]
    main_start = {"main_start": True, "games": "cooking-heldout", "eval": {"success_rate": 0.5}}
    bal_start = {"balanced_start": True, "games": "cooking-bal-heldout", "eval": {"success_rate": 0.9}}
    res = {"algo_reward_balanced": grpo, "stage_evals": [main_start, bal_start]}
    assert lib._grpo_vs_start(res, "algo_reward_balanced").verdict == "disagrees"  # 0.5 against the balanced 0.9
    assert lib._grpo_vs_start({**res, "stage_evals": [main_start]}, "algo_reward_balanced").ours.startswith(
        "the SFT start's held-out evaluation is not in")  # control: the shortcut start is not the balanced one


def test_cost_counts_a_resumed_run_at_its_training_time():
    """A run that resumed after a stop records the wall time of its last stretch only: the cost of more seeds
    takes the larger of wall_seconds and train_seconds (control: the wall times alone give a tenth of it)."""
    fresh = {"device": "cpu", "wall_seconds": 3600.0, "train_seconds": 3000.0}
    resumed = {"device": "cpu", "wall_seconds": 360.0, "train_seconds": 3600.0}
    assert lib._cost([resumed] * 3)(3, 1) == "about 4.0 CPU h more here"   # 2 cells x 2 seeds x 1 h
    assert lib._cost([fresh] * 3)(3, 1) == "about 4.0 CPU h more here"
    assert lib._cost([{**resumed, "train_seconds": None}] * 3)(3, 1) == "about 0.4 CPU h more here"


def test_place_habits_count_runs_by_the_places_they_won_and_lead_the_lessons():
    """A run that wins only one place's held-out games has a habit; the lessons say how many runs of the balanced
    sweep had which (control: a shortcut-sweep record set does not make the balanced sentence)."""
    import unittest.mock as mock

    places = {"f0": "fridge", "f1": "fridge", "c0": "counter", "c1": "counter"}

    def run(seed, won):
        return {"cell": {"algo": "ppo", "reward.kind": "sparse"}, "seed": seed, "base_hash": "b",
                "config": {"train": {"eval_games": "games/planted"}, "env": {"games": "games/planted-train"}},
                "eval": {"success_rate": len(won) / 4, "per_game": [[g, g in won, 5] for g in places]},
                "steps": [{"step": 0, "success_rate": 0.5, "group_return_std": 0.3}]}

    recs = [run(0, {"f0", "f1"}), run(1, {"c0"}), run(2, {"c1"}), run(3, {"f0", "c0"}), run(4, set())]
    with mock.patch.object(lib, "game_places", lambda games: places):
        assert lib.place_habits(recs) == {"fridge only": 1, "counter only": 2, "both": 1, "none": 1}
        text = lib.lessons({"algo_reward_balanced": recs})
        said = text[text.index("On the balanced games"):].split(".")[0]
        assert numbers(said) == [5, 1, 2, 1, 1]  # runs; fridge only, counter only, both, none
        assert re.search(r"5 runs\D*1 \D*fridge\D*2 \D*counter\D*1 \D*both\D*1 \D*nothing$", said), said
        assert "On the balanced games" not in lib.lessons({"algo_reward": recs})
    with mock.patch.object(lib, "game_places", lambda games: {}):
        assert lib.place_habits(recs) == {}   # places unknown: nothing counted
    assert lib.place_habits([]) == {}


# ------------------------------------------------------------------------ results/findings.py on damaged inputs
@pytest.fixture
def results_copy(tmp_path, monkeypatch):
    """A copy of results/*.jsonl that records.load_results reads instead of the checkout's."""
    for f in records.RESULTS_DIR.glob("*.jsonl"):
        shutil.copy(f, tmp_path / f.name)
    monkeypatch.setattr(records, "RESULTS_DIR", tmp_path)
    return tmp_path


def test_findings_on_a_garbage_line_is_one_line(results_copy, monkeypatch, capsys):
    """results/findings.py with a garbage line 2 in algo_reward.jsonl: one line naming the file and line, exit 2
    (was a 20-line traceback). Negative control: the table's own code raises ResultsFileError (the traceback)."""
    path = results_copy / "algo_reward.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text(lines[0] + "garbage\n" + "".join(lines[1:]))
    monkeypatch.setattr(sys, "argv", ["findings.py"])
    with pytest.raises(SystemExit) as e:
        findings.main()
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("findings.py: error: ") and f"{path} line 2 is not a sweep record" in err
    with pytest.raises(records.ResultsFileError):  # control
        findings.findings_table()


def test_findings_write_checks_both_pages_before_writing_either(tmp_path, monkeypatch, capsys):
    """`findings.py --write` with a README that lacks its markers: one line naming README.md, and book/findings.md
    is left as it was (both pages are checked before either is written)."""
    page, readme = tmp_path / "findings.md", tmp_path / "README.md"
    shutil.copy(findings.PAGE, page)
    readme.write_text("# a README without the findings markers\n")
    before = page.read_text()
    monkeypatch.setattr(findings, "PAGE", page)
    monkeypatch.setattr(findings, "README", readme)
    monkeypatch.setattr(sys, "argv", ["findings.py", "--write"])
    with pytest.raises(SystemExit) as e:
        findings.main()
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and err.startswith("findings.py: error: README.md ")
    assert findings.START in err and findings.END in err
    assert page.read_text() == before, "book/findings.md was rewritten before the README failed"


def test_findings_counts_a_repeated_record_once(results_copy, capsys):
    """A record appended twice to a results file counts once in the findings (by its run: cell, seed, base config),
    with a note naming the file. Negative control: records.load_results alone returns it twice."""
    path = results_copy / "algo_reward.jsonl"
    first = path.read_text().splitlines(keepends=True)[0]
    path.write_text(path.read_text() + first)
    once = findings.load_results("algo_reward")
    err = capsys.readouterr().err
    assert re.search(r"^algo_reward: 1 record\S* repeat", err, re.M), err  # the file and the count
    twice = records.load_results("algo_reward")
    assert len(twice) == len(once) + 1  # control
    assert len({records.record_key(r) for r in once}) == len(once)
