"""experiments.sweep_plans: the sweep plans configs/sweeps/*.yaml load and check, each part of `regenerate.py` has
one, the game sets and run configs they name exist, the sweeps' recorded runs are found by the plans (a sweep resumes
by them), and a plan with a misspelled key, a wrong type or a cell outside its sweep is refused with one line naming
the file and the key, also through the command line."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentrl_lib.records import load_results
from experiments import regenerate, sweep_plans
from experiments.sweep_plans import PLAN_DIR, PLAN_KEYS, PlanError, load_plans

ROOT = Path(__file__).resolve().parent.parent


def test_every_part_has_a_plan_and_every_plan_loads():
    """One plan file a part (and games.yaml), none other; each loads with all its keys, the run configs it names
    exist, and regenerate's names hold the loaded values."""
    assert {p.stem for p in PLAN_DIR.glob("*.yaml")} == set(PLAN_KEYS) == {*regenerate.PARTS, "games"}
    plans = load_plans()
    assert all(set(plans[name]) == set(keys) for name, keys in PLAN_KEYS.items())
    configs = {name: plan["config"] for name, plan in plans.items() if "config" in plan}
    assert set(configs) == set(regenerate.PARTS) - {"pilot", "behaviour", "evals"}  # those run another part's
    assert all((ROOT / c).is_file() for c in configs.values())
    assert regenerate.PLANS == plans and regenerate.PILOT["cells"] == plans["pilot"]["cells"]


def test_the_game_sets_the_plans_name_are_made_by_games_yaml():
    """Every game set a plan names (the probe's evaluation set, the split's hard set, the stability warm-up's sets,
    the balanced sets' pools) is one that `regenerate.games` or `balanced_games` makes."""
    plans = load_plans()
    made = {*regenerate.GAMES, *regenerate.OTHER_GAMES, *regenerate.BALANCED}
    named = [plans["probe"]["eval_games"], plans["split"]["hard_games"], *plans["stability"]["sft_games"],
             *(s["pool"] for s in plans["games"]["balanced"].values())]
    assert set(named) <= made, set(named) - made
    assert {"cooking-train", "cooking-valid", "cooking-heldout", "cooking-bal-train"} <= made  # named in code


@pytest.mark.parametrize("results,choice,config,cells", [
    ("results/algo_reward.jsonl", "results/sft_choice.json", "MAIN_CONFIG", "MAIN_CELLS"),
    ("results/incoming/algo_reward_balanced.jsonl", "results/incoming/sft_choice_balanced.json", "BALANCED_CONFIG",
     "BAL_CELLS"),
])
def test_the_plans_find_every_recorded_run_of_their_sweep(results, choice, config, cells):
    """A sweep resumes by its runs: each record's cell is a cell of the plan, and the `agentrl sweep` command the
    plan makes for it (config, grid, seed, RL start) is one the dry run counts as recorded (estimate_minutes), so
    neither the finished main sweep nor the running balanced one would run a recorded run again. The files are only
    read. Control: the same command with a planted cell value finds nothing recorded."""
    records = load_results(ROOT / results)
    init = json.loads((ROOT / choice).read_text())["chosen"]
    plan_cells = getattr(regenerate, cells)
    assert records
    for r in records:
        labels = {k: str(v) for k, v in r["cell"].items()}
        (cell,) = [c for c in plan_cells if dict(x.split("=", 1) for x in c) == labels]
        name, cmd = regenerate.sweep(getattr(regenerate, config), str(ROOT / results), cell, r["seed"], init)
        assert regenerate.estimate_minutes(cmd) == (0.0, "recorded"), name
    _, planted = regenerate.sweep(getattr(regenerate, config), str(ROOT / results), [*cell[:-1], "reward.kind=dens"],
                                  r["seed"], init)
    assert regenerate.estimate_minutes(planted)[1] != "recorded"


def plan_copy(tmp_path: Path) -> Path:
    """A copy of the plan folder to break."""
    return Path(shutil.copytree(PLAN_DIR, tmp_path / "sweeps"))


@pytest.mark.parametrize("name,old,new,says", [
    ("pilot", "seeds: [0, 1]", "seed: [0, 1]", "pilot.yaml: unknown key(s) ['seed']; valid keys: ['cells', 'seeds']"),
    ("complexity", "epochs: 2.0", "epoch: 2.0", "complexity.yaml: unknown key(s) ['epoch'] in sft; valid keys"),
    ("pilot", "seeds: [0, 1]", "seeds: 0, 1", "pilot.yaml: seeds must be a list of seeds (integers)"),
    ("explore", "steps: 15", "steps: fifteen", "explore.yaml: steps must be an integer, got 'fifteen'"),
    ("behaviour", "[64, 9.0e-6]", "[64, fast]", "behaviour.yaml: candidates[1][1] must be a number"),
    ("main", "max_seeds: 6", "max_seeds: 6\nmax_seeds: 7",
     "main.yaml is not valid YAML: key 'max_seeds' is given twice"),
    ("probe", "config: configs/cooking.yaml", "config: configs/cooking.yml",
     "probe.yaml: config must be a run config file of this checkout"),
    ("pilot", "[algo=rloo, reward.kind=dense]", "[algo=rloo, reward.kind=dens]",
     "pilot.yaml: cells[1] ['algo=rloo', 'reward.kind=dens'] is not one of"),
    ("balanced", "later_cells:", "later_cells:\n  - [algo=ppo, reward.kind=none]",
     "balanced.yaml: later_cells[0] ['algo=ppo', 'reward.kind=none'] is not one of"),
])
def test_a_broken_plan_is_refused_naming_the_file_and_key(tmp_path, name, old, new, says):
    """Each planted fault in one plan file is one PlanError line naming that file and the key; the control (the
    copy as it was) loads and equals the committed plans."""
    plans = plan_copy(tmp_path)
    assert load_plans(plans) == load_plans()  # control: the unbroken copy
    path = plans / f"{name}.yaml"
    assert path.read_text().count(old) == 1
    path.write_text(path.read_text().replace(old, new))
    with pytest.raises(PlanError) as e:
        load_plans(plans)
    assert f"sweep plan {plans}/{says}" in str(e.value) and "\n" not in str(e.value)


def test_a_missing_an_empty_and_a_stray_plan_file_are_named(tmp_path):
    plans = plan_copy(tmp_path)
    (plans / "swe.yaml").unlink()
    with pytest.raises(PlanError, match=r"swe.yaml does not exist: restore it"):
        load_plans(plans)
    (plans / "swe.yaml").write_text("# nothing yet\n")
    with pytest.raises(PlanError, match=r"swe.yaml is empty: write its keys"):
        load_plans(plans)
    shutil.copy(PLAN_DIR / "swe.yaml", plans / "swe.yaml")
    shutil.copy(PLAN_DIR / "main.yaml", plans / "mian.yaml")
    with pytest.raises(PlanError, match=r"mian.yaml is no part's plan"):
        load_plans(plans)


def test_a_learning_rate_yaml_reads_as_text_is_still_a_number():
    """PyYAML reads `6e-6` as text (YAML 1.1 floats need a dot): the plans take it as the number it reads as; words
    and non-finite values are refused."""
    assert sweep_plans.number("6e-6", "lr") == 6e-6 and sweep_plans.number(2, "epochs") == 2.0
    for bad in ["fast", "nan", True, None]:
        with pytest.raises(sweep_plans._Bad, match="lr must be a number"):
            sweep_plans.number(bad, "lr")


@pytest.mark.subprocess
def test_regenerate_prints_a_broken_plan_as_one_line(tmp_path):
    """`python results/regenerate.py` run on a checkout (AGENTRL_CHECKOUT) whose pilot plan misspells a key: exit 2
    and one line `regenerate.py: error: sweep plan configs/sweeps/pilot.yaml: unknown key(s) ['seed'] ...`, no
    traceback, nothing run. Control: the same checkout with the plan as committed plans the pilot."""
    for d in ("results", "book"):
        (tmp_path / d).mkdir()
    (tmp_path / "pyproject.toml").write_text("")
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    cmd = [sys.executable, str(ROOT / "results" / "regenerate.py"), "pilot", "--dry-run", "--results",
           str(tmp_path / "out")]
    env = {**os.environ, "AGENTRL_CHECKOUT": str(tmp_path), "OMP_NUM_THREADS": "1"}
    ok = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert ok.returncode == 0 and "algo_reward-ppo-dense" in ok.stdout, ok.stderr[-800:]  # control
    pilot = tmp_path / "configs" / "sweeps" / "pilot.yaml"
    pilot.write_text(pilot.read_text().replace("seeds: [0, 1]", "seed: [0, 1]"))
    bad = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert bad.returncode == 2 and bad.stdout == "" and "Traceback" not in bad.stderr, bad.stderr[-800:]
    [line] = bad.stderr.splitlines()  # the plan file, the key it does not know, then the keys it does
    assert line.startswith("regenerate.py: error: ") and \
        re.search(r"configs/sweeps/pilot\.yaml\b.*\['seed'\].*\['cells', 'seeds'\]", line), line
