"""The exercises' checks (agentrl_lib/exercises.py): right answers in their several forms are accepted, wrong ones
rejected with what is wrong and the hint, an unanswered exercise never stops a chapter in the learner's mode, and in
solutions mode a wrong reference solution fails (the negative control CI relies on). Then every chapter: each
exercise has one folded solution, each folded solution one check, and each chapter has the three kinds of exercise."""
from __future__ import annotations

import re
from pathlib import Path

import jupytext
import pytest
import torch

from agentrl_lib import exercises
from agentrl_lib.exercises import Exercises, check, compare, judge, one_of, solution_code, solutions_on

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted(p for p in (ROOT / "notebooks").glob("0*.md"))
HINT = "subtract the mean of the other episodes"


@pytest.fixture
def learner(monkeypatch):
    monkeypatch.delenv(exercises.SOLUTIONS_ENV, raising=False)


@pytest.fixture
def solutions(monkeypatch):
    monkeypatch.setenv(exercises.SOLUTIONS_ENV, "1")


def test_solutions_mode_is_the_environment_variable(monkeypatch):
    monkeypatch.delenv(exercises.SOLUTIONS_ENV, raising=False)
    assert not solutions_on()
    monkeypatch.setenv(exercises.SOLUTIONS_ENV, "0")
    assert not solutions_on()
    monkeypatch.setenv(exercises.SOLUTIONS_ENV, "1")
    assert solutions_on()


@pytest.mark.parametrize("answer,expected,opts", [
    (0.3334, 1 / 3, {}),                                               # numbers within the tolerance
    ("1.0", 1, {}),                                                    # a number written as text
    ([1, -1 / 3, -1 / 3, -1 / 3], torch.tensor([1.0, -0.3333, -0.3333, -0.3333]), {}),   # a list against a tensor
    (torch.tensor([0.866, -0.866]), [0.8660254, -0.8660254], {}),
    ("  Group_Return_STD ", "group_return_std", {}),                  # case, spacing, underscores
    ("(B)", "b", {}),
    ("within-group std", "group_return_std", {"synonyms": ["within group std"]}),
    (["phoenix", "dragon"], {"Dragon", "Phoenix"}, {}),                # a set, in any order
    ([3, 1, 2], [1, 2, 3], {"any_order": True}),
    ({0.25: [1], 0.5: [2, 1]}, {0.25: [1], 0.5: [1, 2]}, {"any_order": True}),
    ("yes", True, {}),
])
def test_right_answers_in_their_several_forms_are_accepted(answer, expected, opts):
    assert compare(answer, expected, **opts) is None


@pytest.mark.parametrize("answer,expected,opts,says", [
    (0.35, 1 / 3, {}, "is off"),
    ([1, 0.33, 0.33, 0.33], [1, -1 / 3, -1 / 3, -1 / 3], {}, "entry 2 of 4"),
    ([1, 2], [1, 2, 3], {}, "expected 3 values"),
    ("entropy", "group_return_std", {}, "'entropy' is not it"),
    (["dragon"], {"dragon", "phoenix"}, {}, "missing"),
    (["dragon", "phoenix", "unicorn"], {"dragon", "phoenix"}, {}, "should not be there"),
    ([3, 1, 2], [1, 2, 3], {}, "entry 1 of 3"),                     # order matters unless any_order
    ({0.25: [2]}, {0.25: [1], 0.5: [1, 2]}, {}, "0.25"),
    ("many", 3, {}, "expected a number"),
    (float("nan"), 1.0, {}, "not a finite number"),
])
def test_wrong_answers_are_rejected_with_what_is_wrong(answer, expected, opts, says):
    msg = compare(answer, expected, **opts)
    assert msg is not None and says in msg, msg


def test_a_wrong_answer_prints_what_is_wrong_and_the_hint_and_does_not_raise(learner, capsys):
    verdict = check("Exercise 2", [1, 0, 0, 0], [1, -1 / 3, -1 / 3, -1 / 3], hint=HINT)
    assert not verdict and verdict.status == "wrong"
    out = capsys.readouterr().out.strip()
    assert out.startswith("Exercise 2: not yet: ") and out.endswith(f"Hint: {HINT}")
    assert re.search(r"\bentry 2 of 4\b", out), out  # which entry is off, of how many
    assert "-0.333" not in out, "the message must not give the answer away"
    assert check("Exercise 2", [1, -1 / 3, -1 / 3, -1 / 3], [1, -1 / 3, -1 / 3, -1 / 3], hint=HINT, why="RLOO.")
    assert capsys.readouterr().out.strip() == "Exercise 2: correct. RLOO."


def test_feedback_names_the_likely_wrong_answer(learner, capsys):
    fb = {"success_rate": "success reached 0 for good only at step 15"}
    assert not check("Exercise 6", "Success_Rate", "group_return_std", hint="h", feedback=fb)
    assert "step 15" in capsys.readouterr().out


def test_a_verdict_shows_nothing_as_a_cells_value(learner, capsys):
    verdict = check("Exercise 1", 2, 2, hint="h")
    assert verdict and verdict.status == "right" and repr(verdict) == "<Exercise 1: right>"
    assert verdict._ipython_display_() is None   # IPython calls this instead of printing the value


def test_an_unanswered_exercise_says_so_in_the_learners_mode(learner, capsys):
    for blank in (None, ..., {"A": None, "E": None}, [None, None]):
        assert check("Exercise 1", blank, [1.0], hint=HINT).status == "unanswered"
        assert capsys.readouterr().out.strip() == f"Exercise 1: not answered yet — hint: {HINT}"

    def my_gae(rewards):  # a function still to write
        raise NotImplementedError

    assert check("Exercise 3", my_gae, accept=lambda f: f([1.0]) == [1.0], hint="write it").status == "unanswered"
    assert "not answered yet" in capsys.readouterr().out


def test_accept_decides_for_answers_with_many_right_forms(learner, capsys):
    def won_faster(walk):   # any won episode shorter than the walkthrough: many right answers
        assert len(walk) < 5, f"{len(walk)} turns is not fewer than 5"
        return True if sum(walk) == 3 else "a won game collects all 3 points"

    assert check("Exercise 2", [1, 1, 1], accept=won_faster, hint="h")
    assert check("Exercise 2", [0, 1, 1, 1], accept=won_faster, hint="h")
    assert not check("Exercise 2", [0, 0, 1, 1, 1], accept=won_faster, hint="h")
    assert "5 turns is not fewer than 5" in capsys.readouterr().out
    assert not check("Exercise 2", [1, 1], accept=won_faster, hint="h")
    assert "all 3 points" in capsys.readouterr().out
    assert not check("Exercise 2", "three", accept=lambda w: sum(w) == 3, hint="h")   # the learner's code crashes
    assert "TypeError" in capsys.readouterr().out


def test_one_of_takes_the_letter_or_the_text():
    accept = one_of({"a": "it diverged", "b": "it never won", "c": "it overfitted"}, "b",
                    {"c": "it never won in training either"})
    assert accept("b") is True and accept("(B)") is True and accept("It never won.") is True
    assert accept("c") == "it never won in training either"
    assert "one of" in accept("d")


def test_solutions_mode_checks_the_reference_not_the_learner(solutions, capsys):
    # the learner's None is replaced by the reference, which passes
    assert check("Exercise 1", None, [1, -1 / 3, -1 / 3, -1 / 3], hint=HINT, solution=[1, -1 / 3, -1 / 3, -1 / 3])
    assert "correct (the folded solution)" in capsys.readouterr().out
    # negative controls: a planted wrong reference, an unanswered one and a missing one all fail loudly
    with pytest.raises(AssertionError, match="reference solution fails its own check: entry 2 of 4"):
        check("Exercise 1", None, [1, -1 / 3, -1 / 3, -1 / 3], hint=HINT, solution=[1, 1 / 3, -1 / 3, -1 / 3])
    with pytest.raises(AssertionError, match="unanswered"):
        check("Exercise 1", [1, 2], [1, 2], hint=HINT, solution=None)
    with pytest.raises(AssertionError, match="no solution"):
        check("Exercise 1", [1, 2], [1, 2], hint=HINT)


MD = '''# A chapter

```{code-cell} ipython3
my_answer = None
ex.check(1, my_answer, expected=R.mean().item() - 1, hint="h")
```

<details>
<summary>Solution 1</summary>

```python
my_answer = R.mean().item() - 1   # uses the notebook's R
```

Because.
</details>

<details>
<summary>Solution 2 (planted wrong)</summary>

```python
def helper(x):
    return x
my_answer = helper(42)
```
</details>
'''


def test_exercises_run_the_folded_solution_in_a_copy_of_the_namespace(tmp_path, solutions, capsys):
    src = tmp_path / "99_test.md"
    src.write_text(MD)
    ex = Exercises("99_test", source=src)
    ns = {"R": torch.tensor([1.0, 0.0]), "my_answer": None}
    assert ex.check(1, None, expected=-0.5, namespace=ns, hint="h")
    assert ns["my_answer"] is None, "the solution must not change the notebook's namespace"
    assert ex.solution(2, ns) == 42                      # two names bound; the answer is the one named my_...
    ns_busy = {**ns, "helper": len}                          # a notebook that has both names: the learner's variable
    assert ex.solution(2, ns_busy, answer=ns_busy["my_answer"]) == 42
    with pytest.raises(AssertionError, match="fails its own check"):   # negative control: a wrong folded solution
        ex.check(2, None, expected=-0.5, namespace=ns, hint="h")
    with pytest.raises(LookupError, match="0 folded 'Solution 3'"):
        ex.check(3, None, expected=0, namespace=ns, hint="h")
    assert "my_answer = R.mean()" in solution_code(MD, 1)


def test_exercises_in_the_learners_mode_never_read_the_solutions(tmp_path, learner, capsys):
    ex = Exercises("99_missing", source=tmp_path / "does_not_exist.md")
    assert not ex.check(1, None, expected=1, hint="h")
    ex.predict(1, None)
    ex.predict(1, "phoenix")
    out = capsys.readouterr().out
    assert "not answered yet" in out and "no prediction yet" in out and "'phoenix' is noted" in out


def test_judge_needs_something_to_judge_by():
    with pytest.raises(TypeError):
        judge(1)


# ------------------------------------------------------------------------------------------------ the chapters
KINDS = {"predict": r"Predict", "plant": r"Plant a bug|Find the bug", "diagnose": r"Diagnose"}


def chapter_exercises(md: Path):
    nb = jupytext.read(md)
    checks, solutions, kinds, created = {}, {}, set(), None
    for i, c in enumerate(nb.cells):
        if c.cell_type == "code":
            for n in re.findall(r"\bex\.check\(\s*(\d+)", c.source):
                checks.setdefault(int(n), []).append((i, tuple(c.metadata.get("tags", []))))
            m = re.search(r"Exercises\(\"([^\"]+)\"\)", c.source)
            created = m.group(1) if m else created
        else:
            for n in exercises.solution_numbers(c.source):
                solutions.setdefault(n, []).append(i)
            for m in re.finditer(r"\*\*Exercise (\d+) · ([^.*]+)", c.source):
                kinds |= {k for k, pat in KINDS.items() if re.match(pat, m.group(2))}
    return checks, solutions, kinds, created, nb


@pytest.mark.parametrize("md", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_every_exercise_has_one_folded_solution_after_its_check(md):
    checks, solutions, kinds, created, _ = chapter_exercises(md)
    assert created == md.stem, f"{md.name} must create Exercises({md.stem!r})"
    assert checks, f"{md.name} has no exercise"
    assert sorted(checks) == list(range(1, len(checks) + 1)), f"{md.name}: exercises numbered {sorted(checks)}"
    assert sorted(solutions) == sorted(checks), \
        f"{md.name}: checks {sorted(checks)} but folded solutions {sorted(solutions)}"
    for n, cells in checks.items():
        assert len(cells) == 1 and len(solutions[n]) == 1, f"{md.name}: exercise {n} checked or solved twice"
        (cell, tags), = cells
        assert "nbval-ignore-output" in tags, f"{md.name}: exercise {n}'s check cell prints per mode: tag it"
        assert solutions[n][0] > cell, f"{md.name}: Solution {n} must come after its check, folded"
        compile(solution_code(md.read_text(), n), f"{md.name} Solution {n}", "exec")
    assert kinds == set(KINDS), f"{md.name} lacks a kind of exercise: has {sorted(kinds)}, needs {sorted(KINDS)}"


def test_make_test_runs_the_notebooks_with_the_solutions():
    make = (ROOT / "Makefile").read_text()
    line = next(x for x in make.splitlines() if "pytest" in x and "NBVAL" in x)
    assert "AGENTRL_SOLUTIONS=1" in line and "AGENTRL_FAST=1" in line
