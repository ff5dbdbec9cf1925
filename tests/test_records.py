"""agentrl_lib/records.py: a results file read back (a write cut short ignored once, any other damaged line refused),
appends under a lock (with its negative control), load_results (a results file by name, [] before it exists, plain
evaluation files) and a record's identity and contents."""
import json
from pathlib import Path

import pytest

from agentrl_lib import cli, records
from agentrl_lib.config import RunConfig

from helpers import fake_record, fake_records


# ------------------------------------------------------------------------------------------------ the file
def test_a_cut_last_line_is_reported_once_and_ignored(tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    recs = fake_records({("gae", "dense"): [0.2, 0.4]})
    for r in recs:
        records.append_record(out, r)
    with out.open("a") as f:
        f.write(json.dumps(fake_record({"algo.advantage": "gae"}, 2, 0.6))[:25])  # a write cut short
    warnings = []
    assert records.load_records(out, warnings.append) == recs
    assert len(warnings) == 1 and "line 3 is damaged" in warnings[0] and "\n" not in warnings[0]
    assert cli.main(["report", str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.err.strip().count("\n") == 0 and "line 3 is damaged" in captured.err
    assert "| gae | dense | 0.300 ± 0.141 |" in captured.out
    # the next append drops the cut line first, so every line of the file is a record again
    records.append_record(out, recs[0])
    assert [json.loads(x) for x in out.read_text().splitlines()] == recs + recs[:1]
    # a damaged line before the last was not written by a sweep: refused, by line number
    out.write_text("{oops\n" + out.read_text())
    with pytest.raises(records.ResultsFileError, match="line 1 is not a sweep record"):
        records.load_records(out)
    assert cli.main(["report", str(out)]) == 2
    assert "line 1 is not a sweep record" in capsys.readouterr().err




@pytest.mark.parametrize("locked", [True, False])
def test_parallel_sweeps_wait_for_the_results_lock(tmp_path, monkeypatch, locked):
    """Sweeps run in parallel into one file (one process per seed on a GPU machine) append under a lock; negative
    control: without the lock, an append goes through while another writer holds the file."""
    import contextlib
    import threading
    import time

    out = tmp_path / "r.jsonl"
    if not locked:
        monkeypatch.setattr(records, "_results_lock", lambda path: contextlib.nullcontext())
    lock = records._results_lock(out)
    lock.__enter__()  # another writer holds the file
    t = threading.Thread(target=records.append_record, args=(out, fake_record({"a": 1}, 0, 0.5)))
    t.start()
    time.sleep(0.5)
    written_while_held = out.exists() and out.read_text() != ""
    lock.__exit__(None, None, None)
    t.join(5)
    assert written_while_held is (not locked)
    assert len(out.read_text().splitlines()) == 1


# ------------------------------------------------------------------------------------------------ load_results
def test_load_results_finds_a_results_file_by_name(tmp_path, monkeypatch):
    monkeypatch.setattr(records, "RESULTS_DIR", tmp_path)
    assert records.results_path("algo_reward") == records.results_path("algo_reward.jsonl") == \
        tmp_path / "algo_reward.jsonl"
    assert records.results_path("elsewhere/r.jsonl") == Path("elsewhere/r.jsonl")
    assert records.results_path(tmp_path / "x.jsonl") == tmp_path / "x.jsonl"
    assert records.load_results("algo_reward") == [], "not committed yet: no records, no error"
    recs = fake_records({("gae", "dense"): [0.2, 0.4]})
    for r in recs:
        records.append_record(tmp_path / "algo_reward.jsonl", r)
    assert records.load_results("algo_reward") == records.load_results(tmp_path / "algo_reward.jsonl") == recs


def test_load_results_reads_plain_evaluation_files_and_refuses_damage(tmp_path, monkeypatch):
    """results/stage_evals.jsonl holds evaluations of models without RL (no cell, seed, base_hash): read as they are;
    a sweep's file keeps load_records' strictness (negative control: a non-record line in it is refused)."""
    monkeypatch.setattr(records, "RESULTS_DIR", tmp_path)
    evals = [{"stage": "base", "eval": {"success_rate": 0.1}}, {"stage": "sft", "eval": {"success_rate": 0.5}}]
    path = tmp_path / "stage_evals.jsonl"
    for e in evals:
        records.append_record(path, e)
    with path.open("a") as f:
        f.write('{"stage": "rl", "ev')  # a write cut short
    warnings = []
    assert records.load_results("stage_evals", warnings.append) == evals and "line 3 is damaged" in warnings[0]
    path.write_text(path.read_text() + "\n[1, 2]\n")
    with pytest.raises(records.ResultsFileError, match="line 3 is not a JSON object"):
        records.load_results("stage_evals")
    sweep_file = tmp_path / "s.jsonl"
    records.append_record(sweep_file, fake_record({"a": 1}, 0, 0.5))
    records.append_record(sweep_file, evals[0])
    with pytest.raises(records.ResultsFileError, match="line 2 is not a sweep record"):
        records.load_results("s")


def test_committed_results_files_load_by_name():
    root = Path(__file__).resolve().parent.parent / "results"
    assert records.RESULTS_DIR == root
    assert records.load_results("stability") == records.load_records(root / "stability.jsonl") != []
    assert records.load_results("algo_reward_first_design") == \
        records.load_records(root / "algo_reward_first_design.jsonl") != []
    stage = records.load_results("stage_evals")
    assert stage and all("stage" in r and "eval" in r for r in stage)
    # every evaluation names its seed: an SFT model's, or null for the untrained base model evaluated greedily
    # (negative control: the five base-model lines written before regenerate.collect_evals set it lacked the key)
    assert all("seed" in r and (r["seed"] is None) == (r["stage"] == "base") for r in stage)


# ------------------------------------------------------------------------------------------------ one record
def test_record_identity_ignores_new_fields_execution_fields_and_the_cells_own_fields():
    cfg = RunConfig()
    cfg.train.lr = 2e-5
    cell = {"algo.advantage": "grpo"}
    key = records.base_key(cfg, cell)
    data = cfg.to_dict()
    del data["train"]["max_tokens_per_microbatch"]      # a record written before this field existed
    data["train"]["gradient_checkpointing"] = True      # how, not what (EXECUTION_FIELDS)
    data["algo"]["advantage"] = "grpo"                  # the cell's own axis
    data["train"]["seed"] = 7
    assert records.base_key(data, cell) == key
    data["train"]["lr"] = 1e-4                           # negative control: another experiment
    assert records.base_key(data, cell) != key
    rec = {"cell": cell, "seed": 3, "base_hash": "whatever", "config": cfg.to_dict()}
    assert records.record_key(rec) == (records.cell_key(cell), 3, key) and records.record_base(rec) == key
    assert records.record_base({"cell": cell, "seed": 3, "base_hash": "abc"}) == "abc"
    assert records.cell_text(cell) == "algo.advantage=grpo" and records.cell_text({}) == "base"


def test_generate_and_the_live_decode_loop_are_one_run(monkeypatch):
    """'hf' (transformers' generate) and 'hf-live' (the default since it draws generate's tokens) give one base_key:
    the records made with 'hf' stay done. Controls: vLLM (other kernels, other tokens) is another experiment, and so
    is 'hf' once SAME_DRAWS no longer joins them."""
    from agentrl_lib.config import RunConfig as Config

    live, hf, vllm = Config(), Config(), Config()
    hf.model.generator, vllm.model.generator = "hf", "vllm"
    assert live.model.generator == "hf-live"
    assert records.base_key(hf, {}) == records.base_key(live, {}) == records.base_key(hf.to_dict(), {})
    assert records.base_key(vllm, {}) != records.base_key(live, {})
    monkeypatch.setattr(records, "SAME_DRAWS", {})
    assert records.base_key(hf, {}) != records.base_key(live, {})


def test_compact_eval_and_finished_run(tmp_path):
    ev = {"success_rate": 0.123456789, "mean_turns": 2.0, "invalid_rate": 0.0, "mean_score_frac": 0.5,
          "n_games": 2, "env_errors": 0, "extra": 1,
          "per_game": [{"game": "g0", "won": 1, "turns": 2, "actions": ["x"]}]}
    assert records.compact_eval(ev) == {"success_rate": 0.12346, "mean_turns": 2.0, "invalid_rate": 0.0,
                                        "mean_score_frac": 0.5, "n_games": 2, "env_errors": 0,
                                        "per_game": [["g0", True, 2]]}
    run = tmp_path / "run"
    run.mkdir()
    assert records.finished_run(run) is None
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "success_rate": 0.5}) + "\n")
    assert records.finished_run(run) is None, "trained but not evaluated"
    (run / "eval.json").write_text(json.dumps(ev))
    done = records.finished_run(run)
    assert done["rows"] == [{"step": 1, "success_rate": 0.5}] and done["eval"]["n_games"] == 2


def test_ingredient_places_reads_the_place_from_each_walkthrough():
    def ep(game, take):
        return {"game": game, "walkthrough": ["inventory", "examine cookbook", take, "prepare meal", "eat meal"]}

    evaluations = [{"eval": {"episodes": [ep("a", "take red tuna from fridge"), ep("b", "take salt from counter"),
                                          {"game": "c", "walkthrough": ["go north", "eat apple"]}]}},
                   {"eval": {"episodes": [ep("a", "take red tuna from fridge")]}}, {"eval": {}}]
    assert records.ingredient_places(evaluations) == {"a": "fridge", "b": "counter"}
    assert records.ingredient_places([]) == {}
    # the committed records: the exploration part's 64 held-out cooking games, one place each (chapters 01, 03, 04
    # count wins by it; a reader that took the word after the first "from" of any command, or every "take", would
    # give other counts)
    places = records.ingredient_places(records.load_results("exploration_evals"))   # committed: never empty here
    assert len(places) == 64 and sorted(set(places.values())) == ["counter", "fridge"]
    assert sum(p == "fridge" for p in places.values()) == 37
