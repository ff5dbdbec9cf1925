"""The "Findings at small scale" table of book/findings.md is computed from results/*.jsonl (results/findings.py): the
committed table equals a fresh computation, and the verdicts follow the bootstrap intervals (negative controls
included)."""
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("findings", ROOT / "results" / "findings.py")
findings = importlib.util.module_from_spec(spec)
spec.loader.exec_module(findings)


def test_book_table_is_the_one_the_results_give():
    block = findings.page_block((ROOT / "book" / "findings.md").read_text())
    assert block == findings.findings_table(), ("book/findings.md's findings table is stale: run "
                                                "`python results/findings.py --write` after new results")


def test_book_design_table_is_the_one_the_sft_rounds_give():
    block = findings.design_block((ROOT / "book" / "findings.md").read_text())
    assert block == findings.design_table(), ("book/findings.md's design table is stale: run "
                                              "`python results/findings.py --write` after a new SFT round or choice")


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
    assert findings.design_block(page) != findings.design_table()
    fresh = findings.with_block(page, findings.design_table(), findings.DESIGN_START, findings.DESIGN_END)
    assert findings.design_block(fresh) == findings.design_table() and fresh.endswith("y")


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
    ([0.1, 0.9, 0.5], [0.2, 0.8, 0.5], 1, "no difference at this scale"),
    ([0.5], [0.2, 0.3], 1, "cannot tell yet"),
])
def test_verdicts_follow_the_interval(ppo, grpo, sign, verdict):
    recs = _recs({("ppo", "dense"): ppo, ("grpo", "dense"): grpo})
    _, got = findings._difference(recs, "algo", "ppo", "grpo", {"reward.kind": "dense"}, sign)
    assert got.startswith(verdict)


def test_a_difference_uses_the_seeds_both_cells_have_and_names_the_rest():
    """ppo's seed 3 has no grpo partner: the Δ is over seeds 0-2 and the row says so; negative control: with the same
    seeds nothing is named."""
    recs = _recs({("ppo", "dense"): [0.8, 0.9, 0.85, 0.0], ("grpo", "dense"): [0.1, 0.2, 0.15]})
    ours, verdict = findings._difference(recs, "algo", "ppo", "grpo", {"reward.kind": "dense"}, 1)
    assert "ppo 64% (n=4)" in ours and "Δ +70 pts" in ours and ours.endswith("over the 3 seeds both have "
                                                                                "(left out: ppo seed 3)")
    assert verdict == "agrees"
    same = _recs({("ppo", "dense"): [0.8, 0.9, 0.85], ("grpo", "dense"): [0.1, 0.2, 0.15]})
    assert "left out" not in findings._difference(same, "algo", "ppo", "grpo", {"reward.kind": "dense"}, 1)[0]
    apart = _recs({("ppo", "dense"): [0.8, 0.9], ("grpo", "dense"): [0.1, 0.2]})
    for r in apart[2:]:
        r["seed"] += 2  # grpo ran seeds 2 and 3 only
    assert findings._difference(apart, "algo", "ppo", "grpo", {"reward.kind": "dense"}, 1)[1] == \
        "cannot tell yet (fewer than 2 seeds common to both cells)"


def test_collapse_counts_runs_stuck_at_zero_spread():
    recs = _recs({("ppo", "dense"): [0.0, 0.5], ("grpo", "dense"): [0.0]})
    ours, verdict = findings._collapse(recs)
    assert ours.startswith("2 of 3 runs") and "(steps 4-4)" in ours and verdict.startswith("agrees")
    ours, verdict = findings._collapse(_recs({("ppo", "dense"): [0.5, 0.6]}))
    assert ours.startswith("0 of 2") and verdict == "not seen at this scale"


def test_a_converged_run_is_not_a_collapse():
    """Zero spread because every episode wins is convergence, not the Echo Trap (the detector's convergence check);
    the same flat spread at 0% success is counted."""
    won = [{"step": i, "group_return_std": 0.0, "success_rate": 1.0} for i in range(8)]
    lost = [{"step": i, "group_return_std": 0.0, "success_rate": 0.0} for i in range(8)]
    assert findings._collapse([{"steps": won}])[0].startswith("0 of 1")
    assert findings._collapse([{"steps": lost}])[0].startswith("1 of 1")


def test_collapse_uses_the_alerts_a_run_logged():
    """A record whose rows carry the detector's alerts is read, not re-judged (one definition of a collapse)."""
    alert = {"step": 3, "kind": "reward_std_collapse", "message": "m", "evidence": {}}
    rows = [{"step": i, "group_return_std": 0.3, "success_rate": 0.5, "alerts": [alert] if i == 3 else []}
            for i in range(1, 6)]
    assert findings._collapse([{"steps": rows}])[0].startswith("1 of 1 runs raised the reward-std collapse alert "
                                                               "(steps 3-3)")


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
    assert lines[3:] == ["| 3e-05 | yes | 0.270 | 94 points | 50 94 0 50 | cooking-heldout | 75% |",
                         "| 1e-05 | yes | 0.070 | 25 points | 50 25 75 | cooking-valid | 75% |",
                         "| 1e-05 | no | 0.060 | 0 points | 50 50 | cooking-valid | 75% |"]
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
