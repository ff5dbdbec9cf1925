"""The chapters' exercises: checks that say what is wrong and give a hint, and a solutions mode in which CI checks the
solutions the reader can unfold.

An exercise cell holds the unsolved code (`my_answer = None`, a function whose body raises NotImplementedError, a copy
of a library function with a bug to find) and then one check:

    ex = Exercises("00_quickstart")                       # once per chapter
    my_answer = None                                      # your prediction: the 8 GRPO advantages
    ex.check(1, my_answer, expected=advantages.grpo_advantages(R, g),
             hint="z-score each group: (R - mean) / unbiased std; a group whose returns tie gets 0")

The check prints one line and never raises in the learner's mode, so the rest of the chapter runs whatever the
answer: "Exercise 1: not answered yet — hint: …", "Exercise 1: not yet: entry 3 of 8 is off (you wrote 0.5). Hint: …"
or "Exercise 1: correct. …". Right answers are judged, not string-matched: numbers within a tolerance, strings up to
case, spacing, underscores and listed synonyms, sets in any order, a custom `accept` for everything else (any valid
episode, any correct placement of a bug, …).

The solution sits folded in the page right after the exercise, in a markdown cell that Jupyter and the book both
render folded:

    <details>
    <summary>Solution 1</summary>

    ```python
    my_answer = [0.866, -0.866, -0.866, 0.866, 0, 0, 0, 0]
    ```
    why it is so …
    </details>

Solutions mode (`AGENTRL_SOLUTIONS=1`; `make test` runs the chapters so): every check ignores the learner's answer,
executes the python block of the chapter's "Solution N" (read from notebooks/<chapter>.md) in a copy of the notebook's
namespace, takes the answer from it, and raises AssertionError if that solution fails its own check. So the solutions
a reader unfolds are the ones CI runs, and a wrong one fails the build.

Introduced in notebooks/00_quickstart.md (Exercises).
"""
from __future__ import annotations

import ast
import math
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

SOLUTIONS_ENV = "AGENTRL_SOLUTIONS"
"""The environment variable that switches the checks to the folded solutions ("1")."""

MISSING: Any = type("Missing", (), {"__repr__": lambda self: "MISSING"})()
"""Default of `expected` and `solution`: not given."""

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"

_SOLUTION = re.compile(r"<summary>\s*Solution\s+(\d+)\b[^<]*</summary>(.*?)</details>", re.S | re.I)
_PYTHON_BLOCK = re.compile(r"```(?:python|python3|ipython3)?\s*\n(.*?)```", re.S)


def solutions_on() -> bool:
    """True when AGENTRL_SOLUTIONS=1: the checks run the folded solutions instead of the learner's answers."""
    return os.environ.get(SOLUTIONS_ENV) == "1"


class Unanswered(Exception):
    """Raised by a check's `accept` (or by the learner's function, as NotImplementedError) when there is no answer."""


def unanswered(answer: Any) -> bool:
    """None, `...`, or a list / tuple / dict whose every entry is unanswered."""
    if answer is None or answer is Ellipsis:
        return True
    if isinstance(answer, Mapping):
        return len(answer) > 0 and all(unanswered(v) for v in answer.values())
    if isinstance(answer, (list, tuple)):
        return len(answer) > 0 and all(unanswered(v) for v in answer)
    return False


def normalize_text(text: str) -> str:
    """Case, surrounding quotes / brackets / dots, underscores, hyphens and runs of spaces do not matter:
    '(B)' == 'b', 'Group_Return_Std' == 'group return std'."""
    t = text.casefold().strip().strip("\"'`()[]{}.,;: ")
    t = re.sub(r"[_\-]+", " ", t)
    return re.sub(r"\s+", " ", t).strip()


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _plain(x: Any) -> Any:
    """Tensors and arrays as Python numbers / lists (duck-typed: no torch import here)."""
    if hasattr(x, "tolist") and not isinstance(x, (str, bytes)):
        return x.tolist()
    if type(x).__name__ in ("float32", "float64", "int64", "int32") and hasattr(x, "item"):
        return x.item()
    return x


def _fmt(x: Any) -> str:
    x = _plain(x)
    if isinstance(x, float):
        return f"{x:.4g}"
    s = repr(x)
    return s if len(s) <= 60 else s[:57] + "..."


def compare(answer: Any, expected: Any, *, rtol: float = 1e-3, atol: float = 1e-3, synonyms: Iterable[str] = (),
            any_order: bool = False, where: str = "") -> str | None:
    """None when `answer` matches `expected`, else one line saying what is off (without giving the answer away).

    Numbers match within rtol / atol; strings up to `normalize_text` (and any of `synonyms`); sets in any order;
    lists, tuples, tensors entry by entry (sorted first with any_order); dicts key by key.
    """
    answer, expected = _plain(answer), _plain(expected)
    at = f" (for {where})" if where else ""
    if isinstance(expected, bool):
        if isinstance(answer, str) and normalize_text(answer) in ("yes", "true", "no", "false"):
            answer = normalize_text(answer) in ("yes", "true")
        if not isinstance(answer, bool):
            return f"answer True or False{at} (you wrote {_fmt(answer)})"
        return None if answer == expected else f"not{at}: you wrote {answer}"
    if _is_number(expected):
        if isinstance(answer, str):
            try:
                answer = float(answer)
            except ValueError:
                return f"expected a number{at}, you wrote {_fmt(answer)}"
        if not _is_number(answer):
            return f"expected a number{at}, you wrote {_fmt(answer)}"
        if isinstance(answer, float) and not math.isfinite(answer):
            return f"{answer} is not a finite number{at}"
        ok = math.isclose(answer, expected, rel_tol=rtol, abs_tol=atol)
        return None if ok else f"{_fmt(answer)} is off{at}"
    if isinstance(expected, str):
        if not isinstance(answer, str):
            return f"expected text{at}, you wrote {_fmt(answer)}"
        accepted = {normalize_text(expected)} | {normalize_text(s) for s in synonyms}
        return None if normalize_text(answer) in accepted else f"{answer!r} is not it{at}"
    if isinstance(expected, (set, frozenset)):
        if isinstance(answer, (str, bytes)) or not isinstance(answer, Iterable):
            return f"expected a collection{at} (a list or a set), you wrote {_fmt(answer)}"

        def key(v):
            v = _plain(v)
            return normalize_text(v) if isinstance(v, str) else v

        got, want = {key(v) for v in answer}, {key(v) for v in expected}
        extra, missing = got - want, want - got
        if not extra and not missing:
            return None
        parts = ([f"{len(extra)} of your {len(got)} items should not be there"] if extra else []) + \
                ([f"{len(missing)} item(s) are missing"] if missing else [])
        return "; ".join(parts) + at
    if isinstance(expected, Mapping):
        if not isinstance(answer, Mapping):
            return f"expected a dict with keys {sorted(map(str, expected))}{at}, you wrote {_fmt(answer)}"
        for k, v in expected.items():
            if k not in answer:
                return f"no answer for {k!r}{at}"
            msg = compare(answer[k], v, rtol=rtol, atol=atol, any_order=any_order, where=f"{where}[{k!r}]")
            if msg:
                return msg
        extra = [k for k in answer if k not in expected]
        return f"unexpected key(s) {extra}{at}" if extra else None
    if isinstance(expected, (list, tuple)):
        if isinstance(answer, (str, bytes)) or not isinstance(answer, Iterable):
            return f"expected {len(expected)} values{at}, you wrote {_fmt(answer)}"
        answer = [_plain(v) for v in answer]
        if len(answer) != len(expected):
            return f"expected {len(expected)} values{at}, you gave {len(answer)}"
        if any_order:
            answer, expected = sorted(answer), sorted(expected)
        for i, (a, e) in enumerate(zip(answer, expected)):
            msg = compare(a, e, rtol=rtol, atol=atol, where=f"{where}[{i}]")
            if msg:
                if isinstance(e, (list, tuple, Mapping, set, frozenset)):
                    return msg
                return f"entry {i + 1} of {len(expected)}{' in ' + where if where else ''} is off (you wrote {_fmt(a)})"
        return None
    return None if answer == expected else f"not it{at}: you wrote {_fmt(answer)}"


def judge(answer: Any, expected: Any = MISSING, accept: Callable[[Any], Any] | None = None,
          feedback: Mapping[str, str] | None = None, **opts) -> tuple[str, str]:
    """('unanswered' | 'wrong' | 'right', message). `accept(answer)` decides when given: True or None = right, False or
    a message string = wrong, AssertionError = wrong (its text), NotImplementedError / Unanswered = unanswered, any
    other exception = wrong (named). Else the answer is compared with `expected` (see `compare`)."""
    if accept is None and expected is MISSING:
        raise TypeError("a check needs `expected` or `accept`")
    if unanswered(answer):
        return "unanswered", ""
    if feedback and isinstance(answer, str):
        for k, msg in feedback.items():
            if normalize_text(k) == normalize_text(answer):
                return "wrong", msg
    try:
        if accept is not None:
            verdict = accept(answer)
            if verdict is True or verdict is None:
                return "right", ""
            return "wrong", verdict if isinstance(verdict, str) else "not it"
        msg = compare(answer, expected, **opts)
        return ("right", "") if msg is None else ("wrong", msg)
    except (NotImplementedError, Unanswered):
        return "unanswered", ""
    except AssertionError as e:
        return "wrong", str(e).strip().splitlines()[0] if str(e).strip() else "an assertion failed"
    except Exception as e:  # the learner's code crashed: say how, do not stop the chapter
        return "wrong", f"your code raised {type(e).__name__}: {e}"


class Verdict:
    """What a check returns: true when the answer is right ("right", "wrong" or "unanswered" in `status`). It shows
    nothing as a notebook cell's value: the check has printed its line."""

    def __init__(self, name: str, status: str):
        self.name, self.status = name, status

    def __bool__(self) -> bool:
        return self.status == "right"

    def __repr__(self) -> str:
        return f"<{self.name}: {self.status}>"

    def _ipython_display_(self) -> None:
        pass


def check(name: str, answer: Any, expected: Any = MISSING, *, hint: str, accept: Callable[[Any], Any] | None = None,
          solution: Any = MISSING, why: str = "", feedback: Mapping[str, str] | None = None, rtol: float = 1e-3,
          atol: float = 1e-3, synonyms: Iterable[str] = (), any_order: bool = False) -> Verdict:
    """Check one exercise and print one line; returns a Verdict, true when the answer is right.

    Learner's mode: an unanswered exercise (None, `...`, a function raising NotImplementedError) prints "not answered
    yet" with the hint; a wrong one what is wrong and the hint; nothing raises. Solutions mode (`solutions_on()`):
    `solution` replaces the answer and must pass, else AssertionError (so CI catches a wrong solution).

    Args:
        name: "Exercise 3", shown first on the line.
        expected: the right answer (numbers, text, lists, sets, dicts; see `compare`); or use `accept`.
        accept: a function of the answer deciding (see `judge`), for answers with many right forms.
        solution: the reference answer, used instead of `answer` in solutions mode.
        why: one line printed after "correct" (what the answer teaches).
        feedback: {wrong answer: what to say} for likely wrong text answers (matched up to `normalize_text`).
        rtol, atol, synonyms, any_order: as in `compare`.
    Raises: AssertionError in solutions mode when `solution` is missing, unanswered or wrong.
    """
    opts = dict(rtol=rtol, atol=atol, synonyms=tuple(synonyms), any_order=any_order)
    after = f" {why}" if why else ""
    if solutions_on():
        if solution is MISSING:
            raise AssertionError(f"{name}: solutions mode ({SOLUTIONS_ENV}=1) but no solution to check")
        status, msg = judge(solution, expected, accept, feedback, **opts)
        if status != "right":
            raise AssertionError(f"{name}: the reference solution fails its own check: "
                                 f"{msg or 'it is unanswered'}")
        print(f"{name}: correct (the folded solution).{after}")
        return Verdict(name, "right")
    status, msg = judge(answer, expected, accept, feedback, **opts)
    if status == "unanswered":
        print(f"{name}: not answered yet — hint: {hint}")
    elif status == "wrong":
        print(f"{name}: not yet: {msg}. Hint: {hint}")
    else:
        print(f"{name}: correct.{after}")
    return Verdict(name, status)


def one_of(options: Mapping[str, str], right: str, wrong_because: Mapping[str, str] | None = None
           ) -> Callable[[Any], Any]:
    """An `accept` for a multiple choice: the answer may be the option's letter ('b', '(B)') or its text (up to
    `normalize_text`). A wrong option gets its line of `wrong_because`."""
    wrong_because = wrong_because or {}
    keys = {normalize_text(k): k for k in options}
    keys.update({normalize_text(v): k for k, v in options.items()})

    def accept(answer):
        k = keys.get(normalize_text(str(answer)))
        if k is None:
            return f"answer with one of {', '.join(map(repr, options))}"
        return True if k == right else wrong_because.get(k, f"not ({k})")

    return accept


def agrees_with(reference: Callable, cases: Iterable[tuple], *, atol: float = 1e-5,
                show: Callable[[tuple, Any, Any], str] | None = None) -> Callable[[Callable], Any]:
    """An `accept` for a function to write or to fix: it must return what `reference` returns on every case (each
    case a tuple of arguments; tensors compared entry by entry within atol). On the first case where it does not,
    the message says which, and `show(args, yours, reference's)` can print the two side by side."""
    cases = list(cases)

    def accept(fn):
        for i, args in enumerate(cases):
            got, want = fn(*args), reference(*args)
            msg = compare(got, want, rtol=0.0, atol=atol)
            if msg:
                return f"case {i + 1} of {len(cases)}: {msg}" + (f"; {show(args, got, want)}" if show else "")
        return True

    return accept


def solution_code(markdown: str, n: int) -> str:
    """The python block of "Solution n" in a chapter's MyST source (`<details><summary>Solution n</summary>`)."""
    blocks = [m.group(2) for m in _SOLUTION.finditer(markdown) if int(m.group(1)) == n]
    if len(blocks) != 1:
        raise LookupError(f"{len(blocks)} folded 'Solution {n}' blocks (need exactly one)")
    code = _PYTHON_BLOCK.search(blocks[0])
    if code is None:
        raise LookupError(f"'Solution {n}' has no python code block")
    return code.group(1)


def solution_numbers(markdown: str) -> list[int]:
    """The numbers of every folded solution of a chapter, in page order."""
    return [int(m.group(1)) for m in _SOLUTION.finditer(markdown)]


def assigned_names(code: str) -> list[str]:
    """Top-level names a piece of code binds (assignments, defs, classes), in order."""
    names = []
    for node in ast.parse(code).body:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
        for t in targets:
            names += [x.id for x in ast.walk(t) if isinstance(x, ast.Name)]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
    return list(dict.fromkeys(names))


class Exercises:
    """A chapter's exercises: `check(n, answer, ...)` in the learner's mode, the folded "Solution n" in solutions mode.

    Args:
        chapter: the notebook's name, e.g. "00_quickstart" (its source notebooks/00_quickstart.md holds the
            solutions).
        source: the MyST file to read the solutions from (default: notebooks/<chapter>.md beside the package, else
            <chapter>.md in the working directory, where a notebook runs).
    """

    def __init__(self, chapter: str, source: str | Path | None = None):
        self.chapter = chapter
        if source is None:
            beside = NOTEBOOKS / f"{chapter}.md"
            source = beside if beside.exists() else Path.cwd() / f"{chapter}.md"
        self.source = Path(source)

    def __repr__(self) -> str:
        mode = f"solutions mode ({SOLUTIONS_ENV}=1)" if solutions_on() else "learner's mode"
        return f"Exercises({self.chapter!r}): {mode}"

    def solution(self, n: int, namespace: Mapping[str, Any], name: str | None = None, answer: Any = MISSING) -> Any:
        """Run the folded "Solution n" in a copy of `namespace` and return the value it binds to `name`. Default: the
        one name it binds; else the one whose value in `namespace` is `answer` (the learner's variable); else the
        one whose name starts with "my_"."""
        code = solution_code(self.source.read_text(), n)
        names = assigned_names(code)
        if name is None:
            rules = [names,
                     [x for x in names if x in namespace and answer is not MISSING and namespace[x] is answer],
                     [x for x in names if x.startswith("my_")]]
            pick = next((r for r in rules if len(r) == 1), None)
            if pick is None:
                raise LookupError(f"{self.chapter} Solution {n} binds {names}: say which is the answer (name=...)")
            name = pick[0]
        ns = dict(namespace)
        exec(compile(code, f"<{self.chapter} Solution {n}>", "exec"), ns)  # the chapter's own folded text
        if name not in ns:
            raise LookupError(f"{self.chapter} Solution {n} does not bind {name!r}")
        return ns[name]

    def check(self, n: int, answer: Any, expected: Any = MISSING, *, name: str | None = None,
              namespace: Mapping[str, Any] | None = None, **kwargs) -> Verdict:
        """`check(f"Exercise {n}", answer, expected, ...)`; in solutions mode with this chapter's "Solution n" (run in
        the caller's namespace, or `namespace`) as the reference. Other arguments: see `check`."""
        solution = MISSING
        if solutions_on():
            ns = namespace if namespace is not None else sys._getframe(1).f_globals
            solution = self.solution(n, ns, name, answer)
        return check(f"Exercise {n}", answer, expected, solution=solution, **kwargs)

    def predict(self, n: int, answer: Any) -> None:
        """For a prediction made before the cell that reveals it: says whether one is written (the check comes
        after that cell)."""
        if solutions_on():
            print(f"Exercise {n}: solutions mode: checked after the cell that reveals it, with the folded solution")
        elif unanswered(answer):
            print(f"Exercise {n}: no prediction yet: write one above before you run on (the check comes after the "
                  "cell that reveals it)")
        else:
            print(f"Exercise {n}: your prediction {_fmt(answer)} is noted; run on, the check comes after the cell "
                  "that reveals it")
