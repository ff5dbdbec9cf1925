"""The swe family (agentrl_lib/envs/swe.py, swe_tasks.py): task validity and reproducibility, the mutators, the
rewards of gold / no-op / partial / test-deleting / test-editing / conftest-injecting submissions, the episode
(walkthrough, format errors, truncation, timeouts, auto-submit), the gold patch out of the agent's reach, and
`agentrl eval` on 2 tasks with a tiny random model."""
from __future__ import annotations

import ast
import json
import re
import shutil
from pathlib import Path

import pytest

from agentrl_lib.envs.sandbox import sandbox_problem

from helpers import numbers

PROBLEM = sandbox_problem()
pytestmark = [pytest.mark.skipif(PROBLEM is not None, reason=f"no sandbox here: {PROBLEM}"),
              pytest.mark.subprocess]  # every task is made and scored in bwrap sandboxes

BLOCK = "```bash\n{}\n```"


@pytest.fixture(scope="module")
def tasks_dir(tmp_path_factory):
    from agentrl_lib.envs.swe import make_swe_games

    return make_swe_games(tmp_path_factory.mktemp("swe") / "train", 3, seed=0)


@pytest.fixture(scope="module")
def held_out_dir(tmp_path_factory):
    from agentrl_lib.envs.swe import make_swe_games

    return make_swe_games(tmp_path_factory.mktemp("swe") / "held", 2, seed=0, split="valid_unseen")


def _task(game) -> dict:
    return json.loads((Path(game.path) / "task.json").read_text())


def _env(**kw):
    from agentrl_lib.envs.swe import SweEnv

    return SweEnv(log=False, **kw)


# ---------------------------------------------------------------------------------------------------- mutators

def test_mutators_edit_exactly_the_node():
    from agentrl_lib.envs.swe_tasks import functions, mutations

    src = ("def f(a, b):\n    # keep me\n    x = a + (b)\n    if a < b and b:\n        x = x * 2\n"
           "    total(x)\n    return x\n")
    muts = mutations(src, functions(src)[0])
    got = {(m.kind, m.apply(src).splitlines()[m.line - 1].strip()) for m in muts}
    assert ("flip_operator", "x = a - (b)") in got
    assert ("flip_operator", "x = x // 2") in got
    assert ("flip_comparison", "if a <= b and b:") in got
    assert ("flip_boolean", "if a < b or b:") in got
    assert ("invert_condition", "if not (a < b and b):") in got
    assert ("off_by_one", "x = x * 3") in got and ("off_by_one", "x = x * 1") in got
    removed = [m.apply(src) for m in muts if m.kind == "remove_statement"]
    assert any("total(x)" not in s for s in removed) and any("x = a + (b)" not in s for s in removed)
    for m in muts:  # every mutant parses, keeps the comment, and differs from the original in one place
        out = m.apply(src)
        ast.parse(out)
        assert "# keep me" in out and out != src


# ---------------------------------------------------------------------------------------------------- tasks

@pytest.mark.subprocess
def test_tasks_are_valid_and_record_the_swe_gym_fields(tasks_dir):
    from agentrl_lib.envs.swe_tasks import score_submission

    assert len(tasks_dir) == 3 and tasks_dir.family == "swe"
    ids = set()
    for g in tasks_dir.games:
        t = _task(g)
        for key in ("instance_id", "files", "problem_statement", "patch", "FAIL_TO_PASS", "PASS_TO_PASS"):
            assert t[key], key
        assert set(t["problem_statement"]) == {"1", "2", "3"} and t["function"] in t["problem_statement"]["1"]
        assert not set(t["FAIL_TO_PASS"]) & set(t["PASS_TO_PASS"])
        assert t["patch"].startswith(f"--- a/{t['files'][0]}") and t["split"] == "train"
        ids.add((t["module"], t["function"], t["mutation"]["line"], t["mutation"]["after"]))
        # the buggy repository fails FAIL_TO_PASS; the gold patch, applied as an agent would, passes every test
        repo = Path(g.path) / "repo"
        gold = _apply_gold(t, repo, Path(g.path).parent.parent / "gold-check")
        res = score_submission(t, repo, gold)
        assert res["n_pass"] == res["n_total"] == len(t["FAIL_TO_PASS"]) + len(t["PASS_TO_PASS"])
        noop = score_submission(t, repo, repo, cache=False)  # run, not the recorded baseline
        assert noop["fail_to_pass_passed"] == 0 and noop["n_pass"] == len(t["PASS_TO_PASS"]) == t["unpatched"]["n_pass"]
        assert noop["cached"] == "" and noop["test_seconds"] > 0
    assert len(ids) == 3  # different (function, mutation) per task
    stats = tasks_dir.params["generation"]
    assert stats["kept"] == 3 and stats["tried"] >= 3 and stats["max_per_function"] == 1  # least-used functions first


def _apply_gold(t: dict, repo: Path, dest: Path) -> Path:
    from agentrl_lib.envs.sandbox import run_sandboxed

    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(repo, dest)
    (dest / "gold.diff").write_text(t["patch"])
    r = run_sandboxed("patch -p1 --batch < gold.diff && rm gold.diff", dest)
    assert r.returncode == 0, r.output
    return dest


@pytest.mark.subprocess
def test_generation_is_seeded_and_prefix_stable(tasks_dir, tmp_path):
    from agentrl_lib.envs.swe import make_swe_games

    again = make_swe_games(tmp_path / "again", 2, seed=0)
    assert [g.name for g in again.games] == [g.name for g in tasks_dir.games[:2]]
    assert [_task(g)["patch"] for g in again.games] == [_task(g)["patch"] for g in tasks_dir.games[:2]]
    other = make_swe_games(tmp_path / "other", 2, seed=1)
    assert [g.name for g in other.games] != [g.name for g in tasks_dir.games[:2]]


@pytest.mark.subprocess
def test_train_and_held_out_never_share_a_function(tasks_dir, held_out_dir):
    from agentrl_lib.envs.swe_tasks import SOURCES, check_source, function_split, functions

    train = {(_task(g)["package"]["name"], _task(g)["module"], _task(g)["function"]) for g in tasks_dir.games}
    held = {(_task(g)["package"]["name"], _task(g)["module"], _task(g)["function"]) for g in held_out_dir.games}
    assert train and held and not train & held
    assert all(_task(g)["split"] == "valid_unseen" for g in held_out_dir.games)
    # the split is a property of the function alone
    pkg = SOURCES["toolz"]
    names = [(m, f.name) for m in pkg.modules for f in functions((check_source(pkg) / m).read_text())]
    splits = {function_split("toolz", m, f) for m, f in names}
    assert splits == {"train", "valid_unseen"}
    assert all(function_split(p, m, f) == "valid_unseen" for p, m, f in held)


# ---------------------------------------------------------------------------------------------------- rewards

def test_reward_kinds_by_hand():
    from agentrl_lib.envs.swe_tasks import reward_kinds

    assert reward_kinds(10, 10, 8) == {"pass_ratio": 1.0, "resolved": 1.0, "relative": 1.0}
    assert reward_kinds(8, 10, 8) == {"pass_ratio": 0.8, "resolved": 0.0, "relative": 0.0}  # no-op
    assert reward_kinds(9, 10, 8)["relative"] == pytest.approx(0.5)
    assert reward_kinds(3, 10, 8)["relative"] == 0.0  # worse than doing nothing: clipped at 0
    with pytest.raises(ValueError):
        reward_kinds(0, 0, 0)


def _episode(game, commands, **kw):
    env = _env(**kw)
    try:
        env.reset(game.path)
        for c in commands:
            r = env.step(BLOCK.format(c))
            if r.done:
                return r
        return env.step(BLOCK.format("submit"))
    finally:
        env.close()


@pytest.mark.subprocess
def test_gold_noop_deleting_editing_and_conftest_submissions(tasks_dir):
    g = tasks_dir.games[0]
    t = _task(g)
    n = len(t["FAIL_TO_PASS"]) + len(t["PASS_TO_PASS"])
    base = len(t["PASS_TO_PASS"]) / n
    env = _env(reward="pass_ratio")
    env.reset(g.path)
    for a in g.walkthrough:
        r = env.step(a)
    assert r.done and r.info.won and r.reward == 1.0
    noop = _episode(g, [], reward="pass_ratio")
    assert noop.reward == pytest.approx(base) and not noop.info.won  # the paper's kind pays a no-op the P2P share
    assert _episode(g, [], reward="relative").reward == 0.0  # the baseline-relative kind does not
    assert _episode(g, [], reward="resolved").reward == 0.0
    test_file = t["test_files"][0]
    deleting = _episode(g, [f"rm -rf {Path(test_file).parent}"], reward="relative")
    assert deleting.reward == 0.0 and "ignored" in deleting.obs
    editing = _episode(g, [f"sed -i 's/assert /assert True or /' {test_file}"], reward="relative")
    assert editing.reward == 0.0 and "ignored" in editing.obs
    hook = ("def pytest_runtest_logreport(report):\n    report.outcome = 'passed'\n")
    conftest = _episode(g, [f"printf \"{hook}\" > conftest.py"], reward="relative")
    assert conftest.reward == 0.0 and "conftest.py" in conftest.obs
    # negative control: the same conftest in the repository really does turn failures into passes
    from agentrl_lib.envs.swe_tasks import run_tests
    ctl = Path(g.path).parent.parent / "conftest-control"
    shutil.rmtree(ctl, ignore_errors=True)
    shutil.copytree(Path(g.path) / "repo", ctl)
    (ctl / "conftest.py").write_text(hook)
    outcomes, _ = run_tests(ctl, t["test_files"])
    assert all(outcomes.get(tid) == "passed" for tid in t["FAIL_TO_PASS"])


@pytest.mark.subprocess
def test_a_partial_submission(tasks_dir):
    """The gold fix plus a second planted bug elsewhere in the file: some listed tests fail again."""
    from agentrl_lib.envs.swe_tasks import functions, mutations, reward_kinds, score_submission

    g = tasks_dir.games[0]
    t = _task(g)
    repo = Path(g.path) / "repo"
    work = _apply_gold(t, repo, Path(g.path).parent.parent / "partial")
    module = work / t["files"][0]
    fixed = module.read_text()
    others = [f for f in functions(fixed) if f.name != t["function"]]
    for f in others[:12]:
        for m in mutations(fixed, f)[:2]:
            module.write_text(m.apply(fixed))
            res = score_submission(t, repo, work)
            if 0 < res["n_pass"] < res["n_total"]:
                want = reward_kinds(res["n_pass"], res["n_total"], len(t["PASS_TO_PASS"]))
                assert {k: res[k] for k in want} == want and res["resolved"] == 0.0
                assert 0.0 < res["pass_ratio"] < 1.0 and res["relative"] < 1.0
                return
    pytest.skip("no second mutation broke a listed test of this task")


# ---------------------------------------------------------------------------------------------------- episodes

@pytest.mark.subprocess
def test_episode_mechanics(tasks_dir):
    from agentrl_lib.envs.swe import parse_command

    assert parse_command("Let me look.\n```bash\nls -la\n```\nmore") == "ls -la"
    assert parse_command("```\ncat a\n```") == "cat a" and parse_command("submit") == "submit"
    assert parse_command("ls -la") is None and parse_command("```bash\n\n```") is None
    g = tasks_dir.games[1]
    env = _env(max_turns=3, command_timeout_s=2)
    try:
        first = env.reset(g.path)
        assert "```bash" in first.obs and not first.done
        r = env.step("just words")
        assert not r.info.valid and not r.done and "No command found" in r.obs
        r = env.step(BLOCK.format("seq 1 100000"))
        assert r.info.valid and "characters elided" in r.obs and len(r.obs) < 2300
        r = env.step(BLOCK.format("sleep 20"))  # turn 3 of 3: killed at 2 s, then auto-submitted
        assert "[killed" in r.obs and "submitted automatically" in r.obs and r.done
        passing, total = map(int, re.search(r"Tests passing: (\d+)/(\d+)", r.obs).groups())
        assert passing < total and r.reward == pytest.approx(passing / total)  # the default kind: the pass ratio
    finally:
        env.close()


def test_run_details_are_masked_and_nothing_else():
    from agentrl_lib.envs.swe_tasks import mask_run_details

    out = ("<function test_x.<locals>.<lambda> at 0x7f584e3defc0>\nFAILED t.py::test_a - assert False\n"
           "1 failed, 38 passed, 1 skipped in 0.32s\n==== 2 passed, 1 warning in 61.02s (0:01:01) ====\n"
           "no tests ran in 0.01s")
    assert mask_run_details(out) == (
        "<function test_x.<locals>.<lambda> at 0x...>\nFAILED t.py::test_a - assert False\n"
        "1 failed, 38 passed, 1 skipped in <time>\n==== 2 passed, 1 warning in <time> ====\nno tests ran in <time>")
    kept = "MASK = 0xffffffff  # built in 0.32s\nreal\t0m0.012s\n"  # a constant, the agent's own timings
    assert mask_run_details(kept) == kept


@pytest.mark.subprocess
def test_an_episode_repeats_token_for_token(tasks_dir):
    """Two episodes of the same commands see the same observations (the level-2 statement too), though pytest's
    own output differs run to run: the negative control shows the raw output carries a wall time."""
    import re

    from agentrl_lib.envs.swe import walkthrough
    from agentrl_lib.envs.swe_tasks import pytest_site

    g = tasks_dir.games[0]
    t = _task(g)
    assert "<time>" in t["problem_statement"]["2"] and not re.search(r" in \d+\.\d+s", t["problem_statement"]["2"])
    command = walkthrough(t)[0]  # runs a failing test
    raw = run_sandboxed_output(command, Path(g.path) / "repo", pytest_site())
    assert re.search(r" in \d+\.\d+s", raw)  # the control: pytest printed its wall time
    seen = []
    for _ in range(2):
        env = _env()
        try:
            env.reset(g.path)
            seen.append(env.step(command).obs)
        finally:
            env.close()
    assert seen[0] == seen[1] and "failed" in seen[0] and "<time>" in seen[0]


def run_sandboxed_output(reply: str, repo: Path, site) -> str:
    import tempfile

    from agentrl_lib.envs.sandbox import run_sandboxed
    from agentrl_lib.envs.swe import parse_command

    with tempfile.TemporaryDirectory() as d:
        work = Path(d) / "repo"
        shutil.copytree(repo, work, symlinks=True)
        return run_sandboxed(parse_command(reply), work, site=site).output


@pytest.mark.subprocess
def test_the_gold_patch_and_host_are_out_of_reach(tasks_dir):
    g = tasks_dir.games[0]
    task_json = Path(g.path) / "task.json"
    env = _env()
    try:
        env.reset(g.path)
        r = env.step(BLOCK.format(f"cat {task_json}; ls {tasks_dir.root}; find / -name task.json 2>/dev/null | "
                                  "head; ls .."))
        assert "FAIL_TO_PASS" not in r.obs and '"patch"' not in r.obs and "manifest.json" not in r.obs
    finally:
        env.close()
    assert "FAIL_TO_PASS" in task_json.read_text()  # negative control: it is there on the host


@pytest.mark.subprocess
def test_walkthroughs_pass_the_game_check(tasks_dir):
    from agentrl_lib.envs.base import check_game_set
    from agentrl_lib.envs.pool import SerialPool

    with SerialPool(3, "swe", max_turns=8) as pool:
        res = check_game_set(tasks_dir, pool, cache=False)
    assert res["played"] == 3


@pytest.mark.subprocess
def test_agentrl_eval_on_two_tasks_with_a_tiny_model(tasks_dir, tiny_model_dir, tmp_path):
    from agentrl_lib.cli import main

    out = tmp_path / "eval.json"
    log = tasks_dir.root / "episodes.jsonl"
    before = log.read_text().count("\n") if log.exists() else 0
    two = tmp_path / "two"
    shutil.copytree(tasks_dir.root, two, ignore=shutil.ignore_patterns("episodes.jsonl", ".agentrl-game-check.json"))
    mf = json.loads((two / "manifest.json").read_text())
    mf["games"], mf["n_games"] = mf["games"][:2], 2
    (two / "manifest.json").write_text(json.dumps(mf))
    assert main(["eval", "--model", tiny_model_dir, "--games", str(two), "--max-turns", "2", "--device", "cpu",
                 "--out", str(out), "--no-check-games"]) == 0
    res = json.loads(out.read_text())
    assert res["n_games"] == 2 and res["env_errors"] == 0
    assert all(r["termination"] in ("done", "lost", "won") for r in res["per_game"])
    rows = [json.loads(x) for x in (two / "episodes.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all({"pass_ratio", "resolved", "relative"} <= set(r) for r in rows)
    assert all(r["submitted"] == "auto" and r["relative"] == 0.0 for r in rows)
    assert (log.read_text().count("\n") if log.exists() else 0) == before


def test_make_games_refuses_with_one_line_without_a_sandbox(monkeypatch, tmp_path, capsys):
    import agentrl_lib.envs.sandbox as sb
    from agentrl_lib.cli import main

    sb.sandbox_problem.cache_clear()
    monkeypatch.setattr(sb.shutil, "which", lambda name: None)
    try:
        assert main(["make-games", "swe", "--n", "1", "--out", str(tmp_path / "x")]) == 2
    finally:
        monkeypatch.undo()
        sb.sandbox_problem.cache_clear()
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "bwrap" in err and "Traceback" not in err


# ---------------------------------------------------------------------------------------------------- more packages

@pytest.mark.parametrize("package,source", [("mpmath", "package"), ("boltons", "generated")])
def test_tasks_from_more_packages(package, source, tmp_path):
    """A task from mpmath (its own tests) and one from boltons (tests generated from the unmutated functions): the
    gold patch resolves it, a no-op scores the recorded unpatched baseline."""
    from agentrl_lib.envs.swe_tasks import generate_tasks, score_submission

    tasks, stats = generate_tasks(tmp_path, 1, seed=0, packages=(package,), log=lambda *a: None)
    t = tasks[0]
    assert t["tests_source"] == source and t["package"]["name"] == package and stats["by_package"][package]["kept"] == 1
    repo = tmp_path / "tasks" / t["instance_id"] / "repo"
    assert all((repo / f).is_file() for f in t["test_files"])
    gold = score_submission(t, repo, _apply_gold(t, repo, tmp_path / "gold"))
    assert gold["resolved"] == 1.0 and gold["n_total"] == t["unpatched"]["n_total"]
    noop = score_submission(t, repo, repo)
    assert noop["n_pass"] == t["unpatched"]["n_pass"] == len(t["PASS_TO_PASS"]) and noop["relative"] == 0.0


def test_generated_tests_pin_the_original_and_catch_a_planted_bug(tmp_path):
    """The generated boltons.mathutils tests pass on the original and fail on a mutant (negative control)."""
    from agentrl_lib.envs.swe_generated import CALLS, generated_tests
    from agentrl_lib.envs.swe_tasks import SOURCES, copy_repo, run_tests

    src, counts = generated_tests("boltons.mathutils", "boltons", "26.2.0")
    assert set(counts) == set(CALLS["boltons.mathutils"]) and all(counts.values())
    repo = copy_repo(SOURCES["boltons"], tmp_path / "repo")
    outcomes, _ = run_tests(repo, ["tests/test_mathutils.py"])
    assert len(outcomes) == sum(counts.values()) and set(outcomes.values()) == {"passed"}
    mod = repo / "boltons" / "mathutils.py"
    mod.write_text(mod.read_text().replace("return min(max(x, lower), upper)", "return max(x, lower)"))
    assert "return max(x, lower)" in mod.read_text()
    outcomes, _ = run_tests(repo, ["tests/test_mathutils.py"])
    assert any(o != "passed" for t, o in outcomes.items() if "clamp" in t)


def test_scores_are_cached_exactly(tasks_dir, tmp_path):
    """A no-op scores the recorded baseline without a test run; a repeated fix reuses its score; both equal a run."""
    from agentrl_lib.envs.swe_tasks import score_submission

    g = tasks_dir.games[2]
    t, repo = _task(g), Path(g.path) / "repo"
    noop = score_submission(t, repo, repo)
    assert noop["cached"] == "unpatched" and noop["test_seconds"] == 0
    assert noop["n_pass"] == score_submission(t, repo, repo, cache=False)["n_pass"]
    gold = _apply_gold(t, repo, tmp_path / "gold")
    first, again = score_submission(t, repo, gold, cache=False), score_submission(t, repo, gold)
    assert again["cached"] in ("memo", "") and first["n_pass"] == again["n_pass"] == first["n_total"]
    assert score_submission(t, repo, gold)["cached"] == "memo"
    (gold / t["files"][0]).write_text((repo / t["files"][0]).read_text() + "\n# a comment\n")  # another change
    other = score_submission(t, repo, gold)
    assert other["cached"] == "" and other["n_pass"] == noop["n_pass"]  # the bug is back: a real run


# ---------------------------------------------------------------------------------------------------- run settings

def test_reward_kind_reaches_the_env_and_the_step_watchdog():
    """reward.kind, when it is one of swe's own kinds, reaches the env (EnvFamily.env_kwargs); a generic kind does
    not, and the env's default is pass_ratio; the pool's watchdog leaves a command its full 30 s."""
    from agentrl_lib.config import EnvConfig
    from agentrl_lib.envs import get_family
    from agentrl_lib.envs.swe import REWARD_KINDS

    fam = get_family("swe")
    assert fam.reward_kinds == REWARD_KINDS == ("pass_ratio", "resolved", "relative")
    kw = fam.env_kwargs(EnvConfig(), "resolved")
    assert kw["reward"] == "resolved" and "reward" not in fam.env_kwargs(EnvConfig(), "dense")
    assert _env(reward="").reward == "pass_ratio"  # the env's default: the paper's kind
    with pytest.raises(ValueError, match="pass_ratio"):
        _env(reward="binary")
    assert fam.watchdog_s(30.0) == kw["step_timeout_s"] == 70.0 and fam.watchdog_s(200.0) == 200.0
    assert get_family("bandit").watchdog_s(30.0) == 30.0  # other families keep the configured value
    env = _env(**kw)
    try:
        assert env.wall_s == 30.0 and env.reward == "resolved"
    finally:
        env.close()
    # control: the first pass's arithmetic under the configured 30 s gave a command 12.5 s
    assert _env(step_timeout_s=30.0).wall_s == 12.5


def _play(pool, game, replies) -> tuple[list[float], list[bool], bool]:
    """Slot 0 of `pool` plays `replies`, then submits: (each turn's env reward, each turn's validity, won), what
    rollout() records of an episode (Trajectory.env_rewards, valid, won)."""
    pool.reset([0], [game.path])
    incs, valid = [], []
    for reply in [*replies, BLOCK.format("submit")]:
        (res,) = pool.step([0], [reply])
        incs.append(res.reward)
        valid.append(res.info.valid)
        if res.done:
            return incs, valid, res.info.won
    raise AssertionError("the submission did not end the episode")


def _submissions(game) -> dict[str, list[str]]:
    """Real submissions to `game`: the gold walkthrough, a no-op, an invalid turn then a no-op, a broken module."""
    module = _task(game)["files"][0]
    return {"gold": list(game.walkthrough[:-1]), "no-op": [], "invalid then no-op": ["just words"],
            "broken": [BLOCK.format(f"echo 'def (' >> {module}")]}


def _new_returns(games, kind: str) -> dict[str, list[float]]:
    """Each submission's turn rewards under reward.kind `kind` as a run computes them now: the envs from open_pool
    with the run's kind (Trainer), the rewards from turn_rewards with the family's kinds (Trainer.step)."""
    from agentrl_lib.config import EnvConfig
    from agentrl_lib.envs import get_family
    from agentrl_lib.envs.pool import open_pool
    from agentrl_lib.rewards import turn_rewards

    fam = get_family("swe")
    pool = open_pool(EnvConfig(games=str(games.root), process_pool=False, check_games=False), 1, games, kind)
    try:
        out = {}
        for name, replies in _submissions(games.games[0]).items():
            incs, valid, won = _play(pool, games.games[0], replies)
            out[name] = turn_rewards(kind, incs, 1.0, won, valid, 0.1, fam.reward_kinds)
        return out
    finally:
        pool.close()


def _old_returns(games, swe_reward: str, kind: str) -> dict[str, list[float]]:
    """The same under the second selector this replaces: the env built with reward=env.swe_reward (what
    open_pool did with EnvConfig.swe_reward) and the generic reward.kind `kind` (env or sparse)."""
    from agentrl_lib.envs.pool import SerialPool
    from agentrl_lib.envs.swe import STEP_TIMEOUT_S
    from agentrl_lib.rewards import turn_rewards

    pool = SerialPool(1, family="swe", timeout_s=STEP_TIMEOUT_S, reward=swe_reward, log=False)
    try:
        out = {}
        for name, replies in _submissions(games.games[0]).items():
            incs, valid, won = _play(pool, games.games[0], replies)
            out[name] = turn_rewards(kind, incs, 1.0, won, valid, 0.1)
        return out
    finally:
        pool.close()


@pytest.mark.subprocess
def test_each_reward_kind_trains_on_what_the_setting_it_replaces_trained_on(tasks_dir, monkeypatch):
    """The equivalence behind folding env.swe_reward into reward.kind (config.fold_swe_reward), on real submissions
    (gold, no-op, an invalid turn then a no-op, a broken module), turn by turn with the format penalty: reward.kind
    K (K = pass_ratio, resolved, relative) gives exactly the turn rewards of the old reward.kind env with
    env.swe_reward K, and reward.kind resolved exactly those of the old reward.kind sparse under every
    env.swe_reward. The no-op tells the kinds apart (its pass ratio is the PASS_TO_PASS share, its resolved 0).
    Negative control: a run whose envs do not get the kind (env_kwargs dropping it, the planted bug) trains with
    reward.kind resolved on the pass ratio, and the comparison catches it."""
    from agentrl_lib.envs import EnvFamily
    from agentrl_lib.envs.swe import REWARD_KINDS

    games = tasks_dir.first(1)
    new = {k: _new_returns(games, k) for k in REWARD_KINDS}
    for k in REWARD_KINDS:
        old_env = _old_returns(games, k, "env")
        assert new[k] == old_env, k
        assert new["resolved"] == _old_returns(games, k, "sparse"), k
    t = _task(games.games[0])
    share = len(t["PASS_TO_PASS"]) / (len(t["FAIL_TO_PASS"]) + len(t["PASS_TO_PASS"]))
    assert share > 0.0 and new["pass_ratio"]["no-op"][-1] == pytest.approx(share)
    assert new["resolved"]["no-op"][-1] == 0.0
    assert new["pass_ratio"]["gold"][-1] == new["resolved"]["gold"][-1] == 1.0
    assert new["resolved"]["invalid then no-op"] == [-0.1, 0.0]  # the format penalty on the invalid turn
    # negative control: the planted bug, the env built without the run's kind (its default, pass_ratio)
    kwargs = EnvFamily.env_kwargs
    monkeypatch.setattr(EnvFamily, "env_kwargs", lambda self, cfg=None, reward_kind="", **kw: kwargs(self, cfg, **kw))
    planted = _new_returns(games, "resolved")
    assert planted["no-op"][-1] == pytest.approx(share)  # trained on the pass ratio...
    assert planted != _old_returns(games, "resolved", "sparse")  # ...which the comparison above would catch


def _copy_set(tasks_dir, dest: Path, n: int) -> Path:
    shutil.copytree(tasks_dir.root, dest, ignore=shutil.ignore_patterns("episodes.jsonl", ".agentrl-game-check.json"))
    mf = json.loads((dest / "manifest.json").read_text())
    mf["games"], mf["n_games"] = mf["games"][:n], n
    (dest / "manifest.json").write_text(json.dumps(mf))
    return dest


def test_sft_examples_start_with_the_prompt_rollout_shows_for_the_same_env_config(tasks_dir, tiny_model_dir,
                                                                                  tokenizer):
    """SFT sees what RL and evaluation show the policy: for EnvConfig(max_turns=5), the first prompt rollout() builds
    (system prompt + the problem statement, "You have 5 turns") is, token for token, the start of the walkthrough
    example of expert_examples(max_turns=5), and the expert's first reply follows it. Negative control: an example
    built with another max_turns (6; the old SFT env's default was 8) starts otherwise."""
    from agentrl_lib.config import EnvConfig
    from agentrl_lib.envs.pool import open_pool
    from agentrl_lib.generation import HFGenerator
    from agentrl_lib.models import load_policy
    from agentrl_lib.prompts import ChatFormat, system_prompt_for
    from agentrl_lib.rollout import rollout
    from agentrl_lib.sft import expert_examples

    games = tasks_dir.first(1)
    model, tok = load_policy(tiny_model_dir, "cpu", "float32")
    chat = ChatFormat(tok)
    env = EnvConfig(games=str(tasks_dir.root), max_turns=5, process_pool=False, check_games=False)
    pool = open_pool(env, 1, games)  # the pool a run or `agentrl eval` builds from its EnvConfig
    try:
        (traj,), _ = rollout(HFGenerator(model, tok), tok, pool, [games.games[0].path], max_turns=1, max_new_tokens=2,
                             temperature=0.0, chat=chat, system_prompt=system_prompt_for("swe"))
    finally:
        pool.close()
    shown = traj.ids[:traj.prompt_len]
    assert "You have 5 turns" in tok.decode(shown)
    (example,) = expert_examples(games, chat, max_turns=env.max_turns)
    n = len(shown)
    assert example["input_ids"][:n] == shown
    assert example["assistant_masks"][:n] == [0] * n and example["assistant_masks"][n] == 1
    (other,) = expert_examples(games, chat, max_turns=6)  # negative control: another turn limit, another prompt
    assert other["input_ids"][:n] != shown and "You have 6 turns" in tok.decode(other["input_ids"])


@pytest.mark.slow
@pytest.mark.trains
def test_sft_on_swe_walkthroughs_with_a_tiny_model(tasks_dir, tiny_model_dir, tokenizer, tmp_path):
    """`agentrl sft` on 3 swe tasks runs end to end; every walkthrough (a patch in a heredoc) fits the context."""
    from transformers import AutoConfig

    from agentrl_lib.cli import main
    from agentrl_lib.envs.base import load_game_set
    from agentrl_lib.prompts import ChatFormat
    from agentrl_lib.sft import expert_examples

    games = _copy_set(tasks_dir, tmp_path / "games", 3)
    examples = expert_examples(load_game_set(games), ChatFormat(tokenizer))
    assert len(examples) == 3
    context = AutoConfig.from_pretrained(tiny_model_dir).max_position_embeddings
    assert max(len(e["input_ids"]) for e in examples) < context
    assert main(["sft", "--model", tiny_model_dir, "--games", str(games), "--out", str(tmp_path / "sft"),
                 "--device", "cpu"]) == 0
    summary = json.loads((tmp_path / "sft" / "sft_summary.json").read_text())
    # the replay sees the same observations (pytest's timings masked: mask_run_details), so the same tokens
    assert summary["examples"] == 3 and summary["tokens"] == sum(len(e["input_ids"]) for e in examples)
    assert (tmp_path / "sft" / "policy").is_dir()


@pytest.mark.trains
def test_one_grpo_step_on_two_swe_tasks_with_a_tiny_model(tasks_dir, tiny_model_dir, tmp_path):
    """`agentrl train` with GRPO, 2 tasks x group 2, --reward resolved: one step completes, its envs computed the
    run's kind (episodes.jsonl), and it trained on it: nothing resolved, so every return is at most 0 (the format
    penalty alone). Control: the same episodes' pass ratios (episodes.jsonl logs all kinds) are above 0, so a run
    that trained on the pass ratio instead would fail the bound."""
    import yaml

    from agentrl_lib.cli import main

    games = _copy_set(tasks_dir, tmp_path / "games", 2)
    run = tmp_path / "run"
    assert main(["train", "--algo", "grpo", "--games", str(games), "--model", tiny_model_dir, "--out", str(run),
                 "--steps", "1", "--group-size", "2", "--games-per-step", "2", "--max-turns", "2",
                 "--max-new-tokens", "16", "--reward", "resolved", "--no-check-games", "--device", "cpu"]) == 0
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1]
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["reward"]["kind"] == "resolved" and "swe_reward" not in saved["env"]
    eps = [json.loads(x) for x in (games / "episodes.jsonl").read_text().splitlines()]
    assert len(eps) == 4 and {e["reward_kind"] for e in eps} == {"resolved"}
    assert not any(e["resolved"] for e in eps) and rows[0]["return_mean"] <= 0.0
    assert sum(e["pass_ratio"] for e in eps) / 4 - 0.1 * 2 > 0.0  # control: pass-ratio returns exceed the bound


# ---------------------------------------------------------------------------------------------------- forgeries

def _write(path: str, text: str) -> str:
    """A sandbox command that writes `text` to `path` (base64: no quoting to get wrong)."""
    import base64

    data = base64.b64encode(text.encode()).decode()
    return f"python -c \"import base64; open('{path}', 'wb').write(base64.b64decode('{data}'))\""


def _forged_line(ids: list[str], nonce_from_stdin: bool) -> str:
    """Python source that prints an all-pass result line for `ids` the way the grader's plugin does."""
    nonce = "os.read(0, 128).decode().strip()" if nonce_from_stdin else "''"
    return (f"import json, os\nN = {nonce}\n"
            f"def _forge():\n    os.write(1, ('\\n@@AGENTRL-SWE-RESULTS@@' + N + ' ' + "
            f"json.dumps({{i: 'passed' for i in {ids!r}}}) + '\\n').encode())\n")


@pytest.mark.subprocess
def test_the_grader_cannot_be_forged(tasks_dir, monkeypatch):
    """Reward hacks an agent's commands could try, each scored honestly (relative reward 0, not resolved: the bug is
    unfixed): a plugin file shadowing the grader's (it even reads the nonce), a second result line printed at exit
    by the module under test, a conftest.py that skips every test, a syntax error that hides the tests, an edited
    and a deleted test file. Planted holes (the controls): the shadow plugin wins when /repo is on sys.path and the
    name unprotected, and the line printed at exit wins with a parser that keeps the last marker line."""
    import agentrl_lib.envs.swe_tasks as st

    g = tasks_dir.games[0]
    t = _task(g)
    ids = t["FAIL_TO_PASS"] + t["PASS_TO_PASS"]
    module = t["files"][0]
    shadow = _forged_line(ids, nonce_from_stdin=True) + ("def pytest_sessionfinish(session, exitstatus):\n"
                                                          "    _forge()\n")
    at_exit = "\n" + _forged_line(ids, nonce_from_stdin=False) + "import atexit\natexit.register(_forge)\n"
    skip_all = ("import pytest\ndef pytest_collection_modifyitems(items):\n"
                "    [i.add_marker(pytest.mark.skip) for i in items]\n")
    tries = {
        "shadow plugin": [_write("agentrl_swe_report.py", shadow)],
        "second line at exit": [_write("at_exit.py", at_exit), f"cat at_exit.py >> {module}"],
        "conftest skips all": [_write(f"{Path(module).parent}/conftest.py", skip_all)],
        "syntax error": [f"echo 'def broken(:' >> {module}"],
        "edited test": [f"sed -i 's/assert /assert True or /' {t['test_files'][0]}"],
        "deleted test": [f"rm -f {t['test_files'][0]}"],
    }
    for name, commands in tries.items():
        r = _episode(g, commands, reward="relative")
        assert r.reward == 0.0 and not r.info.won, f"{name}: reward {r.reward}"

    # the controls: each hole planted back lets its forgery through
    monkeypatch.setattr(st, "PYTEST", st.PYTEST.replace("PYTHONSAFEPATH=1 ", ""))
    protected = st.is_protected
    monkeypatch.setattr(st, "is_protected", lambda path, task: protected(path, task) and not path.startswith(
        "agentrl_swe_report"))
    st._scores.clear()  # the memo of scored submissions would return the honest score of the same change
    r = _episode(g, tries["shadow plugin"], reward="relative")
    assert r.reward == 1.0 and r.info.won, "control: with /repo on sys.path the shadow plugin forges a win"
    monkeypatch.undo()
    real = st.run_sandboxed

    def last_line_wins(cmd, repo, limits, site=None, stdin=None):  # the old parser: the last marker line counts
        out = real(cmd, repo, limits, site=site, stdin=stdin)
        lines = [x for x in out.output.split("\n") if x.startswith("@@AGENTRL-SWE-RESULTS@@")]
        nonce = stdin.decode().strip()
        forged = lines[-1].replace("@@AGENTRL-SWE-RESULTS@@", "@@AGENTRL-SWE-RESULTS@@" + nonce, 1) \
            if lines and nonce not in lines[-1] else None
        kept = [x for x in out.output.split("\n") if not x.startswith("@@AGENTRL-SWE-RESULTS@@")]
        return type(out)(output="\n".join(kept + ([forged] if forged else lines[-1:])), returncode=out.returncode,
                         timed_out=out.timed_out, output_capped=out.output_capped, seconds=out.seconds)

    monkeypatch.setattr(st, "run_sandboxed", last_line_wins)
    st._scores.clear()
    r = _episode(g, tries["second line at exit"], reward="relative")
    assert r.reward == 1.0 and r.info.won, "control: a parser that keeps the last line takes the forged one"


# ---------------------------------------------------------------------------------------------------- bounded trees
DEEP_TREE = "mkdir -p deep/$(printf 'd/%.0s' $(seq 1200)) && echo deep"
"""One agent command that nests 1,200 directories (issue 52: repo_diff's rglob raised RecursionError at submit, and
every later reset of the slot failed in shutil.rmtree)."""


@pytest.mark.subprocess
def test_a_deep_tree_and_a_big_file_break_neither_the_grader_nor_the_worker(tasks_dir):
    """A real episode whose commands make 1,200 nested directories and a 5 MiB file, then apply the gold patch: the
    submission scores as the gold patch alone does (the bounded walk leaves the tree and the file out, and says
    so), and the same env resets twice more with the first working copy gone. Negative control: the old walk
    (rglob) raises RecursionError on the working copy the agent left."""
    from agentrl_lib.envs import swe_tasks

    g = tasks_dir.games[0]
    t = _task(g)
    env = _env()
    try:
        env.reset(g.path)
        first = env.work.parent
        assert env.step(BLOCK.format(DEEP_TREE)).obs.startswith("exit code 0\ndeep")
        assert env.step(BLOCK.format("head -c 5242880 /dev/zero > big.bin && echo ok")).obs.endswith("ok")
        with pytest.raises(RecursionError):  # negative control: the old _files
            list(env.work.rglob("*"))
        changes, _ = swe_tasks.repo_diff(Path(g.path) / "repo", env.work)
        assert changes == {}, "the tree and the big file are not changes"
        env.step(BLOCK.format(f"patch -p1 <<'EOF'\n{t['patch']}EOF"))
        r = env.step(BLOCK.format("submit"))
        assert r.done and r.info.won, r.obs
        # what the grader left out, each with its bound: the big file (4 MiB) and the deep tree (64 levels)
        assert re.search(r"big\.bin: [^\n]*\b4 MiB", r.obs) and re.search(r"\b64 levels", r.obs), r.obs
        assert not first.exists(), "the deep working copy was removed"
        env.reset(g.path)
        env.reset(g.path)  # the slot keeps working
    finally:
        env.close()


@pytest.mark.subprocess
def test_the_game_check_at_max_turns_1_blames_the_turn_limit_not_the_game_file(tasks_dir):
    """`--max-turns 1` on swe games: the env submits at turn 1, before the 5-command walkthrough is played out; the
    game check says so and how to fix it (issue 52). Negative control: without the env's turn limit passed to the
    check (the old call), it blames "a missing or stale game file"."""
    from agentrl_lib.config import EnvConfig
    from agentrl_lib.envs.base import GameSetError, check_game_set, load_game_set
    from agentrl_lib.envs.pool import SerialPool, open_pool

    games = load_game_set(tasks_dir.root)
    one = games.first(1)
    with pytest.raises(GameSetError) as e:
        open_pool(EnvConfig(games=str(games.root), max_turns=1, process_pool=False), 1, one)
    msg = str(e.value)
    # the cause (1 of the walkthrough's 5 commands played, the turn limit) and the fix (--max-turns at least 5)
    assert re.search(r"after 1 of .*\b5 commands", msg) and "turn limit" in msg, msg
    assert re.search(r"--max-turns \(env\.max_turns\) to at least 5\b", msg), msg
    assert "stale" not in msg
    with SerialPool(1, family="swe", max_turns=1, log=False) as pool, pytest.raises(GameSetError) as e:
        check_game_set(one, pool, cache=False)  # control
    assert "a missing or stale game file?" in str(e.value)


@pytest.mark.subprocess
def test_make_games_swe_n_past_the_possible_tasks_is_one_line_at_once(tmp_path, capsys):
    """`make-games swe --n 100000`: one line naming the most tasks the split can give, before any task is drawn
    (was 20 minutes of validation, then a failure). The bound is an upper bound: it counts mutation sites."""
    import time

    from agentrl_lib.cli import main
    from agentrl_lib.envs.swe_tasks import max_tasks

    t = time.perf_counter()
    rc = main(["make-games", "swe", "--n", "100000", "--packages", "toolz", "--out", str(tmp_path / "g")])
    err = capsys.readouterr().err.strip()
    most = max_tasks("train", ("toolz",))
    assert rc == 2 and err.startswith("agentrl make-games: error: swe ") and "\n" not in err, err
    assert numbers(err) == [100000, most, most], err  # asked for, the most the split gives, the --n to pass
    assert all(fact in err for fact in ("--n 100000", "train", "toolz", f"--n at most {most}", "--packages")), err
    assert time.perf_counter() - t < 120 and not (tmp_path / "g" / "tasks").exists()
