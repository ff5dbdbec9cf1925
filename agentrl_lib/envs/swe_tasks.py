"""Software-engineering tasks from real code: one procedurally planted bug in a function of a pinned PyPI package,
validated by the package's own tests (or by tests generated from the unmutated function), and the evaluation of a
submission (the three reward kinds).

A task (SWE-Gym's fields, Pan et al. 2024, plus ours):

    instance_id        "toolz__itertoolz__groupby__flip_comparison__3f2a"
    files              ["toolz/itertoolz.py"]                 the file the bug is in (the gold patch's files)
    problem_statement  {"1": ..., "2": ..., "3": ...}         one text per difficulty level (below)
    patch              the gold patch: a unified diff (a/ b/ prefixes, `patch -p1`) that restores the original
    FAIL_TO_PASS       test node ids that pass on the original and fail with the bug
    PASS_TO_PASS       test node ids of the same test files that pass with and without the bug
    test_files         the test files that hold them (restored from the task before every evaluation)
    tests_source       "package" (the package's own tests: toolz, mpmath) or "generated" (boltons ships none:
                       swe_generated.py pins what the unmutated functions return on hand-written inputs)
    unpatched          {n_pass, n_total, fail_to_pass_passed} of the buggy repository as made (= |PASS_TO_PASS|):
                       the score of a submission that changes nothing, so evaluation skips its test run
    function, module, mutation {kind, line, before, after}, package {name, version}, split, level

Difficulty levels (issue 26): 1, the statement names the file, the function and the failing tests; 2, it shows only
the failing tests' output; 3, an issue-style text naming the public function and one failing test, no file, no
output.

Mutations (`mutations`): SWE-smith's procedural modifier kinds (Yang et al. 2025, swesmith.bug_gen.procedural),
re-implemented on the standard `ast` with text edits at the node's exact position, so the gold patch is a one-line
(or few-line) diff and the file keeps its comments and layout. `swesmith` 0.0.9 itself was not used:
`import swesmith.bug_gen.procedural` fails without tree-sitter grammars of other languages (tree_sitter_cpp) and its
Python modifiers need libcst (checked 2026-11-26).

    flip_operator     a + b -> a - b, * <-> //, ...         flip_comparison  < -> <=, == -> !=, in -> not in, ...
    flip_boolean      and <-> or                            off_by_one       an integer constant n -> n +/- 1
    invert_condition  if c: -> if not (c):                  remove_statement an assignment, call, if or loop removed

A task is kept only when its FAIL_TO_PASS is not empty and the gold patch, applied with `patch -p1` to a fresh copy,
makes every listed test pass (both checked in the sandbox). Every task of one set comes from a different (function,
mutation), the least-used functions first (so one function appears at most ceil(n / valid functions) times); train
and held-out sets never share a function: a function's split is fixed by a hash of its name
(`function_split`), 1 in 5 functions held out.

Reward kinds of a submission (`score_submission`), on a fresh copy of the buggy repository with the agent's diff
applied and the task's test files restored (edits to tests, conftest.py, pytest configuration are dropped):

    pass_ratio = passing listed tests / listed tests        (the Practitioner's Guide; a no-op earns |P2P|/N)
    resolved   = 1 if every listed test passes else 0       (SkyRL, SWE-Gym)
    relative   = max(0, (pass_ratio - b) / (1 - b)),  b = |PASS_TO_PASS| / N, the unpatched baseline:
                 a no-op or test-deleting submission earns 0, the gold patch 1.

Sources: SWE-Gym (Pan et al. 2024, arXiv 2412.21139), SWE-smith (Yang et al. 2025, arXiv 2504.21798), the
Practitioner's Guide (arXiv 2510.01132) §SWE. Introduced for issue 26 (the `swe` family).
"""
from __future__ import annotations

import ast
import difflib
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import random
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..fsio import walk_tree
from .base import GameSetError
from .sandbox import SITE, Limits, bounded_workdir, release_workdir, run_sandboxed


class TaskGenerationError(GameSetError):
    """Tasks cannot be generated (a source package missing or at another version, too few valid mutations)."""


@dataclass(frozen=True)
class SourcePackage:
    """A pinned pure-Python package whose functions become tasks."""

    name: str
    """Distribution name on PyPI (and the top-level module)."""
    version: str
    """The pinned version (pyproject.toml pins the same)."""
    roots: tuple[str, ...]
    """Top-level packages copied into a task's repository (relative to site-packages)."""
    modules: dict[str, tuple[str, ...]]
    """Source file (repository path) → the test files (repository paths) that check it."""
    tests_source: str = "package"
    """"package": the test files are the package's own (shipped in its wheel); "generated": the wheel ships none, and
    tests/test_<module>.py is written by swe_generated.generated_tests from the unmutated functions' behaviour (only
    the functions with calls in swe_generated.CALLS become tasks)."""


SOURCES = {
    "toolz": SourcePackage("toolz", "1.2.0", ("toolz", "tlz"), {
        "toolz/itertoolz.py": ("toolz/tests/test_itertoolz.py",),
        "toolz/dicttoolz.py": ("toolz/tests/test_dicttoolz.py",),
        "toolz/functoolz.py": ("toolz/tests/test_functoolz.py",),
        "toolz/recipes.py": ("toolz/tests/test_recipes.py",),
    }),
    "mpmath": SourcePackage("mpmath", "1.3.0", ("mpmath",), {
        "mpmath/libmp/libmpf.py": ("mpmath/tests/test_bitwise.py", "mpmath/tests/test_division.py",
                                   "mpmath/tests/test_basic_ops.py"),
        "mpmath/libmp/libelefun.py": ("mpmath/tests/test_power.py", "mpmath/tests/test_functions.py"),
        "mpmath/libmp/gammazeta.py": ("mpmath/tests/test_gammazeta.py",),
        "mpmath/functions/functions.py": ("mpmath/tests/test_functions.py",),
    }),
    "boltons": SourcePackage("boltons", "26.2.0", ("boltons",), {
        "boltons/iterutils.py": ("tests/test_iterutils.py",),
        "boltons/strutils.py": ("tests/test_strutils.py",),
        "boltons/mathutils.py": ("tests/test_mathutils.py",),
    }, tests_source="generated"),
}
"""The source packages: toolz and mpmath ship their tests in the wheel (mpmath's test files were picked for a
module when they exercise its functions and run in ~1-2 s); boltons ships none, so its tests are generated."""
MAX_MUTANT_WALL_S = 10.0
"""Validation's wall-clock limit for one test run of a mutant, seconds, beyond 4x the unmutated run's time: a
mutation that makes the tests loop (an off-by-one in a convergence loop) is dropped quickly, not after TEST_WALL_S."""

TEST_WALL_S = 30.0
"""Wall-clock limit of one test run in the sandbox, seconds."""
PYTEST = (f"PYTHONSAFEPATH=1 PYTHONPATH={SITE}:/repo python -m pytest -q -p no:cacheprovider -p agentrl_swe_report "
          "-o addopts= --color=no")
"""How the sandbox runs a task's tests (the plugin agentrl_swe_report prints outcomes by node id). PYTHONSAFEPATH
(Python >= 3.11; `python -P`) keeps the working directory off the front of sys.path, and PYTHONPATH puts the read-only
site folder before /repo: the task's package still imports from /repo (tests kept outside it need that), but a file the
agent names like the grader's modules cannot replace them (is_protected drops such a file too, the guard on 3.10)."""
PROTECTED_NAMES = {"conftest.py", "pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml", "sitecustomize.py",
                   "usercustomize.py"}
"""Files an agent's diff may not add or change (tests are restored; these would change how tests run)."""
HELD_OUT_EVERY = 5
"""1 in HELD_OUT_EVERY functions (by hash) is held out (split "valid_unseen"); the others are train."""
SPLITS = ("train", "valid_seen", "valid_unseen")
"""make-games' --split values: "train" and "valid_seen" draw from the train functions (valid_seen: other seeds,
same functions), "valid_unseen" from the held-out functions."""


# ---------------------------------------------------------------------------------------------------------------
# the sandbox's Python: pytest and our report plugin, bound read-only (never the task packages' installed copies)

SITE_MODULES = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "pygments", "py", "agentrl_swe_report")
"""The grader's own modules, bound read-only into the sandbox (pytest_site): a top-level file or folder of /repo
named like one of them (`agentrl_swe_report.py`, `_pytest/`) is protected, so it can never shadow them."""


def pytest_site() -> dict[str, Path]:
    """Module name → path of pytest and its dependencies in this environment, plus the report plugin; bound
    read-only into the sandbox (sandbox.run_sandboxed's `site`). Raises TaskGenerationError when pytest is missing."""
    site: dict[str, Path] = {}
    for name in SITE_MODULES[:-1]:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            if name in ("pytest", "_pytest", "pluggy", "iniconfig"):
                raise TaskGenerationError(f"the swe family runs tests with pytest, which lacks {name!r} here: "
                                          "pip install 'pytest>=8'")
            continue
        origin = Path(spec.origin)
        if origin.name == "__init__.py":
            site[name] = origin.parent  # a package: its directory
        else:
            site[origin.name] = origin  # a one-file module (py.py)
    site["agentrl_swe_report.py"] = Path(__file__).with_name("swe_report.py")
    return site


def run_tests(repo: Path, test_files: list[str], site: dict[str, Path] | None = None,
              wall_s: float = TEST_WALL_S) -> tuple[dict[str, str], str]:
    """Run `test_files` (repository paths) with pytest in the sandbox on `repo`.

    The plugin's line is trusted only with this run's nonce (a random token passed on the sandbox's standard input,
    swe_report): exactly one line of the marker and the nonce is read; a marker line without it (printed by code under
    test) is ignored and dropped from the output; two lines with it, none, a killed run (time, output) or a line that
    is not JSON give no outcomes, and every listed test then counts as failing. A test that failed to collect (a
    syntax error in the module it imports) has no outcome, so it counts as failing too.
    Returns: ({test node id: "passed" | "failed" | "skipped"}, pytest's output without the marker lines).
    Raises: sandbox.SandboxUnavailable."""
    import secrets

    from .swe_report import MARKER

    nonce = secrets.token_hex(16)
    cmd = f"{PYTEST} {' '.join(test_files)}"
    r = run_sandboxed(cmd, repo, Limits(wall_s=wall_s), site=site if site is not None else pytest_site(),
                      stdin=(nonce + "\n").encode())
    lines = r.output.split("\n")
    ours = [x for x in lines if x.startswith(MARKER + nonce + " ")]
    outcomes: dict[str, str] = {}
    if len(ours) == 1 and not r.timed_out and not r.output_capped:
        try:
            got = json.loads(ours[0][len(MARKER + nonce) + 1:])
            outcomes = got if isinstance(got, dict) else {}
        except ValueError:
            outcomes = {}
    # pytest prints its FAILURES section after the plugin's line: keep the text on both sides of every marker line
    return outcomes, "\n".join(x for x in lines if MARKER not in x)


# ---------------------------------------------------------------------------------------------------------------
# the repository: a copy of the pinned package's source and tests

def check_source(pkg: SourcePackage) -> Path:
    """The site-packages directory holding `pkg` at its pinned version.
    Raises TaskGenerationError (how to install it) when it is missing or at another version."""
    try:
        have = importlib.metadata.version(pkg.name)
    except importlib.metadata.PackageNotFoundError:
        have = None
    if have != pkg.version:
        raise TaskGenerationError(f"the swe tasks use {pkg.name}=={pkg.version} (found "
                                  f"{have or 'none'}): pip install {pkg.name}=={pkg.version}")
    spec = importlib.util.find_spec(pkg.roots[0])
    return Path(spec.origin).parent.parent


def copy_repo(pkg: SourcePackage, dest: Path) -> Path:
    """Copy the package's roots (source and tests, no __pycache__) into `dest` (created); for a package with
    generated tests, write them (swe_generated.generated_tests). Returns dest."""
    src = check_source(pkg)
    dest.mkdir(parents=True, exist_ok=True)
    for root in pkg.roots:
        shutil.copytree(src / root, dest / root, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    if pkg.tests_source == "generated":
        for module, tests in pkg.modules.items():
            (dest / tests[0]).parent.mkdir(parents=True, exist_ok=True)
            (dest / tests[0]).write_text(_generated(pkg.name, module)[0])
    return dest


@functools.lru_cache(maxsize=None)
def _generated(name: str, module: str) -> tuple[str, dict[str, int]]:
    """(test source, tests per function) generated for `module` of SOURCES[name] (once per process)."""
    from .swe_generated import generated_tests

    return generated_tests(module[:-3].replace("/", "."), name, SOURCES[name].version)


def _has_tests(pkg: SourcePackage, module: str, function: str) -> bool:
    """Whether `function` has tests to fail: always for a package's own tests (validation decides), for generated
    tests when swe_generated.CALLS has calls for it."""
    return pkg.tests_source != "generated" or _generated(pkg.name, module)[1].get(function, 0) > 0


def copy_tree(src: Path, dest: Path) -> Path:
    """A fresh copy of a repository (no __pycache__), as a new episode or an evaluation starts from."""
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"), symlinks=True)
    return dest


# ---------------------------------------------------------------------------------------------------------------
# mutations: position-exact text edits found with `ast`

@dataclass(frozen=True)
class Mutation:
    """One planted bug: replace source[start:end] (character offsets into the file) by `new`."""

    kind: str
    start: int
    end: int
    new: str
    line: int
    """1-based line of the edit."""

    def apply(self, source: str) -> str:
        return source[:self.start] + self.new + source[self.end:]


_BINOP_FLIP = {ast.Add: ("+", "-"), ast.Sub: ("-", "+"), ast.Mult: ("*", "//"), ast.FloorDiv: ("//", "*"),
               ast.Div: ("/", "*"), ast.Mod: ("%", "//"), ast.BitAnd: ("&", "|"), ast.BitOr: ("|", "&"),
               ast.LShift: ("<<", ">>"), ast.RShift: (">>", "<<")}
_CMP_FLIP = {ast.Lt: ("<", "<="), ast.LtE: ("<=", "<"), ast.Gt: (">", ">="), ast.GtE: (">=", ">"),
             ast.Eq: ("==", "!="), ast.NotEq: ("!=", "=="), ast.Is: ("is", "is not"), ast.IsNot: ("is not", "is"),
             ast.In: ("in", "not in"), ast.NotIn: ("not in", "in")}
_REMOVABLE = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.If, ast.For, ast.While)


class _Offsets:
    def __init__(self, source: str):
        self.starts = [0]
        for line in source.splitlines(keepends=True):
            self.starts.append(self.starts[-1] + len(line))

    def __call__(self, line: int, col_bytes: int, source_line: str) -> int:
        # ast columns are UTF-8 byte offsets
        return self.starts[line - 1] + len(source_line.encode()[:col_bytes].decode("utf-8", "replace"))


def _between(source: str, lines: list[str], off: _Offsets, a: ast.AST, b: ast.AST) -> tuple[int, int]:
    return (off(a.end_lineno, a.end_col_offset, lines[a.end_lineno - 1]),
            off(b.lineno, b.col_offset, lines[b.lineno - 1]))


def _op_in(source: str, lo: int, hi: int, symbol: str) -> tuple[int, int] | None:
    """The position of operator `symbol` in source[lo:hi], where only parentheses, whitespace, line continuations
    and that one operator may lie (else None: a comment or something unexpected; skip the site)."""
    seg = source[lo:hi]
    words = symbol.split()
    rest = seg
    for ch in "()\\\n\t ":
        rest = rest.replace(ch, " ")
    if rest.split() != words:
        return None
    i = seg.find(words[0])
    j = seg.find(words[-1], i) + len(words[-1])
    return lo + i, lo + j


def mutations(source: str, func: ast.FunctionDef) -> list[Mutation]:
    """Every mutation site of `func` (a top-level def of `source`), in source order (module docstring: kinds)."""
    lines = source.splitlines(keepends=True)
    off = _Offsets(source)
    pos = lambda n: off(n.lineno, n.col_offset, lines[n.lineno - 1])  # noqa: E731
    end = lambda n: off(n.end_lineno, n.end_col_offset, lines[n.end_lineno - 1])  # noqa: E731
    out: list[Mutation] = []
    for node in ast.walk(func):
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOP_FLIP:
            sym, new = _BINOP_FLIP[type(node.op)]
            where = _op_in(source, *_between(source, lines, off, node.left, node.right), sym)
            if where:
                out.append(Mutation("flip_operator", *where, new, node.left.end_lineno))
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _CMP_FLIP:
            sym, new = _CMP_FLIP[type(node.ops[0])]
            where = _op_in(source, *_between(source, lines, off, node.left, node.comparators[0]), sym)
            if where:
                out.append(Mutation("flip_comparison", *where, new, node.left.end_lineno))
        elif isinstance(node, ast.BoolOp) and len(node.values) == 2:
            sym, new = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
            where = _op_in(source, *_between(source, lines, off, node.values[0], node.values[1]), sym)
            if where:
                out.append(Mutation("flip_boolean", *where, new, node.values[0].end_lineno))
        elif (isinstance(node, ast.Constant) and type(node.value) is int and -10 <= node.value <= 10
              and source[pos(node):end(node)] == str(node.value)):
            out.append(Mutation("off_by_one", pos(node), end(node), str(node.value + 1), node.lineno))
            if node.value > 0:
                out.append(Mutation("off_by_one", pos(node), end(node), str(node.value - 1), node.lineno))
        if isinstance(node, (ast.If, ast.While, ast.IfExp)):
            t = node.test
            out.append(Mutation("invert_condition", pos(t), end(t), f"not ({source[pos(t):end(t)]})", t.lineno))
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if not isinstance(block, list) or len(block) < 2:
                continue
            for stmt in block:
                if not isinstance(stmt, _REMOVABLE) and not (isinstance(stmt, ast.Expr)
                                                             and isinstance(stmt.value, ast.Call)):
                    continue
                first, last = lines[stmt.lineno - 1], lines[stmt.end_lineno - 1]
                s, e = pos(stmt), end(stmt)
                whole = (first[:len(first) - len(first.lstrip())].strip() == ""
                         and s == off.starts[stmt.lineno - 1] + len(first) - len(first.lstrip())
                         and last[e - off.starts[stmt.end_lineno - 1]:].strip() == "")
                if whole:
                    out.append(Mutation("remove_statement", off.starts[stmt.lineno - 1],
                                        off.starts[stmt.end_lineno], "", stmt.lineno))
    out.sort(key=lambda m: (m.start, m.kind, m.new))
    return out


def functions(source: str) -> list[ast.FunctionDef]:
    """The public top-level functions of a module's source (name not starting with "_"), in source order."""
    tree = ast.parse(source)
    return [n for n in tree.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")]


def function_split(package: str, module: str, function: str) -> str:
    """"valid_unseen" for 1 in HELD_OUT_EVERY functions (by a hash of package:module:function), else "train":
    a function is in one split only, so train and held-out tasks never share a function."""
    h = int(hashlib.sha1(f"{package}:{module}:{function}".encode()).hexdigest(), 16)
    return "valid_unseen" if h % HELD_OUT_EVERY == 0 else "train"


def unified_diff(path: str, before: str, after: str) -> str:
    """A unified diff of one file with a/ b/ prefixes (applies with `patch -p1` or `git apply`)."""
    return "".join(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                        f"a/{path}", f"b/{path}"))


# ---------------------------------------------------------------------------------------------------------------
# problem statements

_PYTEST_TIME = re.compile(r"(\b(?:passed|failed|errors?|skipped|xfailed|xpassed|warnings?|deselected|no tests ran)"
                          r" in )\d+(?:\.\d+)?s(?: \(\d+:\d\d:\d\d\))?")
_ADDRESS = re.compile(r"( at )0x[0-9a-f]{4,}>")


def mask_run_details(output: str) -> str:
    """`output` with the two details of a test run that change from one run to the next replaced: pytest's
    wall time on its summary line ("1 failed, 38 passed in 0.32s" becomes "... in <time>") and CPython's object
    addresses in reprs ("<function f at 0x7f584e3defc0>" becomes "<function f at 0x...>"). With them, a problem
    statement and an episode's observations (SweEnv.step) are a function of the repository and the commands alone,
    so one seed's rollouts repeat token for token (with the sandbox's ASLR off, sandbox.NO_ASLR, for the addresses
    pytest's repr limit cuts: "....x7f58...>"). Anything else (a hex constant in a file, a time the agent's own
    command prints) is kept, unless it reads as pytest's summary ("3 passed in 0.5s" from an `echo` is masked too)."""
    return _ADDRESS.sub(r"\g<1>0x...>", _PYTEST_TIME.sub(r"\g<1><time>", output))


def _first_failure(output: str, max_lines: int = 40) -> str:
    """The failing tests' section of pytest's output (mask_run_details), at most `max_lines` lines (head kept)."""
    lines = mask_run_details(output).strip().splitlines()
    start = next((i for i, ln in enumerate(lines) if "FAILURES" in ln), 0)
    part = lines[start:]
    if len(part) > max_lines:
        part = part[:max_lines] + [f"... ({len(lines) - start - max_lines} more lines)"]
    return "\n".join(part)


def statements(module: str, func: ast.FunctionDef, pkg: SourcePackage, f2p: list[str], output: str) -> dict:
    """The problem statement at each difficulty level (module docstring)."""
    shown = ", ".join(f2p[:5]) + (f" and {len(f2p) - 5} more" if len(f2p) > 5 else "")
    doc = (ast.get_docstring(func) or "").strip().splitlines()
    summary = doc[0].strip() if doc else ""
    top = importlib.import_module(pkg.roots[0])
    public = (f"{pkg.roots[0]}.{func.name}" if getattr(top, func.name, None) is not None
              else f"{module[:-3].replace('/', '.')}.{func.name}")
    return {
        "1": (f"There is a bug in the function `{func.name}` in `{module}`: these tests fail: {shown}. "
              "Fix the function; do not edit the tests."),
        "2": ("Some tests of this repository fail. Their output:\n\n" + _first_failure(output)
              + "\n\nFix the code; do not edit the tests."),
        "3": (f"`{public}` no longer works as documented"
              + (f" (\"{summary}\")" if summary else "") + f". For example, the test `{f2p[0]}` fails. "
              "Please fix it."),
    }


# ---------------------------------------------------------------------------------------------------------------
# generation and validation

def _candidates(split: str, packages: tuple[str, ...]) -> list[tuple[SourcePackage, str, tuple[str, ...], str]]:
    """(package, module path, test files, function name) of every function of `packages` in `split` ("valid_seen"
    = "train") that has a mutation site and tests (`_has_tests`)."""
    want = "valid_unseen" if split == "valid_unseen" else "train"
    out = []
    for name in packages:
        pkg = SOURCES[name]
        root = check_source(pkg)
        for module, test_files in pkg.modules.items():
            source = (root / module).read_text()
            for f in functions(source):
                if (function_split(pkg.name, module, f.name) == want and mutations(source, f)
                        and _has_tests(pkg, module, f.name)):
                    out.append((pkg, module, test_files, f.name))
    return out


def max_tasks(split: str, packages: tuple[str, ...]) -> int:
    """The most tasks `generate_tasks` can make for `split` from `packages`: tasks differ in (function, mutation), so
    at most one per mutation site of a candidate function (fewer validate). Checked before generation starts (issue
    52: `make-games swe --n 100000` drew and validated mutants for 20 minutes before failing)."""
    total = 0
    for pkg, module, _, fname in _candidates(split, packages):
        source = (check_source(pkg) / module).read_text()
        total += len(mutations(source, next(f for f in functions(source) if f.name == fname)))
    return total


def validate(repo: Path, module: str, mutated: str, original: str, test_files: list[str], baseline: dict[str, str],
             site: dict[str, Path], scratch: Path, wall_s: float = TEST_WALL_S) -> dict | None:
    """Run the tests with the bug planted and after the gold patch; the task's test lists, or None to drop it.

    FAIL_TO_PASS: tests passing on the original (`baseline`) and not with the bug; PASS_TO_PASS: passing on both.
    Kept only if FAIL_TO_PASS is not empty and the gold patch, applied with `patch -p1` in the sandbox to a fresh
    copy of the buggy repository, makes every one of them pass. `wall_s` limits each test run."""
    (repo / module).write_text(mutated)
    buggy, output = run_tests(repo, test_files, site, wall_s)
    f2p = sorted(t for t, o in baseline.items() if o == "passed" and buggy.get(t) != "passed")
    p2p = sorted(t for t, o in baseline.items() if o == "passed" and buggy.get(t) == "passed")
    if not f2p or not buggy:
        return None
    gold = unified_diff(module, mutated, original)
    fresh = copy_tree(repo, scratch / "gold")
    try:
        (fresh / ".gold.diff").write_text(gold)
        r = run_sandboxed("patch -p1 --batch --quiet < .gold.diff && rm .gold.diff", fresh, Limits(wall_s=20))
        if r.returncode != 0:
            return None
        fixed, _ = run_tests(fresh, test_files, site, wall_s)
    finally:
        shutil.rmtree(fresh, ignore_errors=True)
    if any(fixed.get(t) != "passed" for t in f2p + p2p):
        return None
    return {"FAIL_TO_PASS": f2p, "PASS_TO_PASS": p2p, "patch": gold, "output": output}


def generate_tasks(out: Path, n: int, seed: int = 0, split: str = "train", max_tries: int | None = None,
                   log=print, packages: tuple[str, ...] | None = None) -> tuple[list[dict], dict]:
    """Make `n` validated tasks under out/tasks/<instance_id>/ ({task.json, repo/}), drawn with `seed` from the
    functions of `packages` (default: every SOURCES package) in `split` (SPLITS). Task i is drawn from (seed, i):
    the functions used least often by tasks 0..i-1 come first (in a seeded random order), so a set spreads over as
    many functions as validate (a function appears at most ceil(n / valid functions) times) and the packages mix in
    proportion to their functions; a task differs from tasks 0..i-1 in (function, mutation). The first k tasks of
    a set are the set made with n = k.

    Returns: (task records, stats {tried, kept, by_kind_tried, by_kind_kept, seconds, tests_per_task,
        functions (distinct), max_per_function, by_package: {name: the same counts for that package}}).
    Raises: TaskGenerationError (a source package missing, or no valid task in `max_tries` draws, default 40 n);
        sandbox.SandboxUnavailable; ValueError for a bad n, split or package."""
    if n < 1:
        raise ValueError(f"n must be >= 1 (got {n})")
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS} (got {split!r})")
    packages = tuple(packages or SOURCES)
    if unknown := [p for p in packages if p not in SOURCES]:
        raise ValueError(f"unknown swe source package(s) {unknown}; known: {', '.join(SOURCES)}")
    t0 = time.perf_counter()
    site = pytest_site()
    cands = _candidates(split, packages)
    if not cands:
        raise TaskGenerationError(f"no function of the source packages {packages} is in split {split!r}")
    max_tries = max_tries or 40 * n
    tasks, used, uses = [], set(), {}
    stats = {"tried": 0, "kept": 0, "by_kind_tried": {}, "by_kind_kept": {}}
    by_pkg = {p: {"tried": 0, "kept": 0, "by_kind_tried": {}, "by_kind_kept": {}, "seconds": 0.0} for p in packages}
    baselines: dict[tuple, tuple[dict[str, str], float]] = {}
    (out / "tasks").mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="agentrl-swe-gen-") as tmp:
        scratch = Path(tmp)
        for i in range(n):
            rng = random.Random(f"swe:{seed}:{split}:{i}")
            order = rng.sample(cands, len(cands))
            order.sort(key=lambda c: uses.get((c[0].name, c[1], c[3]), 0))  # stable: least used first
            task = None
            for pkg, module, test_files, fname in order:
                if stats["tried"] >= max_tries:
                    break
                root = check_source(pkg)
                original = (root / module).read_text()
                func = next(f for f in functions(original) if f.name == fname)
                muts = [m for m in mutations(original, func) if (pkg.name, module, fname, m.start, m.new) not in used]
                if not muts:
                    continue
                kind = rng.choice(sorted({m.kind for m in muts}))  # a kind first, so no kind crowds out the rest
                m = rng.choice([m for m in muts if m.kind == kind])
                used.add((pkg.name, module, fname, m.start, m.new))
                mutated = m.apply(original)
                try:
                    ast.parse(mutated)
                except SyntaxError:
                    continue
                t_try = time.perf_counter()
                ps = by_pkg[pkg.name]
                for st in (stats, ps):
                    st["tried"] += 1
                    st["by_kind_tried"][m.kind] = st["by_kind_tried"].get(m.kind, 0) + 1
                repo = scratch / "repo"
                shutil.rmtree(repo, ignore_errors=True)
                copy_repo(pkg, repo)
                key = (pkg.name, test_files)
                if key not in baselines:
                    t = time.perf_counter()
                    outcomes, _ = run_tests(repo, list(test_files), site)
                    baselines[key] = outcomes, time.perf_counter() - t
                baseline, base_s = baselines[key]
                result = validate(repo, module, mutated, original, list(test_files), baseline, site, scratch,
                                  wall_s=min(TEST_WALL_S, 4 * base_s + MAX_MUTANT_WALL_S))
                ps["seconds"] += time.perf_counter() - t_try
                if result is None:
                    continue
                before = original[m.start:m.end]
                digest = hashlib.sha1(f"{module}:{m.start}:{m.new}".encode()).hexdigest()[:6]
                iid = f"{pkg.name}__{Path(module).stem}__{fname}__{m.kind}__{digest}"
                f2p, p2p = result["FAIL_TO_PASS"], result["PASS_TO_PASS"]
                task = {"instance_id": iid, "repo": f"{pkg.name}=={pkg.version}", "files": [module],
                        "problem_statement": statements(module, func, pkg, f2p, result["output"]),
                        "patch": result["patch"], "FAIL_TO_PASS": f2p, "PASS_TO_PASS": p2p,
                        "test_files": list(test_files), "tests_source": pkg.tests_source,
                        "unpatched": {"n_pass": len(p2p), "n_total": len(f2p) + len(p2p), "fail_to_pass_passed": 0},
                        "package": {"name": pkg.name, "version": pkg.version}, "module": module, "function": fname,
                        "function_lines": [func.lineno, func.end_lineno],
                        "mutation": {"kind": m.kind, "line": m.line, "before": before, "after": m.new},
                        "split": split, "seed": seed, "index": i}
                dest = out / "tasks" / iid
                shutil.rmtree(dest, ignore_errors=True)
                dest.mkdir(parents=True)
                shutil.move(str(repo), dest / "repo")
                (dest / "task.json").write_text(json.dumps(task, indent=1))
                for st in (stats, ps):
                    st["kept"] += 1
                    st["by_kind_kept"][m.kind] = st["by_kind_kept"].get(m.kind, 0) + 1
                uses[(pkg.name, module, fname)] = uses.get((pkg.name, module, fname), 0) + 1
                log(f"  task {i + 1}/{n}: {iid} ({len(f2p)} failing, {len(p2p)} passing tests)")
                break
            if task is None:
                raise TaskGenerationError(f"no valid swe task for index {i} after {stats['tried']} mutations tried "
                                          f"(split {split!r}); ask for fewer tasks or raise max_tries")
            tasks.append(task)
    stats["seconds"] = round(time.perf_counter() - t0, 1)
    stats.update(_sizes(tasks))
    for name, ps in by_pkg.items():
        ps["seconds"] = round(ps["seconds"], 1)
        ps.update(_sizes([t for t in tasks if t["package"]["name"] == name]))
    stats["by_package"] = by_pkg
    return tasks, stats


def _sizes(tasks: list[dict]) -> dict:
    """Tests per task (min / max / mean), distinct functions and the most tasks one function has."""
    if not tasks:
        return {"tests_per_task": None, "functions": 0, "max_per_function": 0}
    sizes = [len(t["FAIL_TO_PASS"]) + len(t["PASS_TO_PASS"]) for t in tasks]
    per_fn: dict[str, int] = {}
    for t in tasks:
        per_fn[f"{t['module']}:{t['function']}"] = per_fn.get(f"{t['module']}:{t['function']}", 0) + 1
    return {"tests_per_task": {"min": min(sizes), "max": max(sizes), "mean": round(sum(sizes) / len(sizes), 1)},
            "functions": len(per_fn), "max_per_function": max(per_fn.values())}


# ---------------------------------------------------------------------------------------------------------------
# evaluation of a submission

def is_protected(path: str, task: dict) -> bool:
    """Whether an agent may not change `path` (repository path): the task's test files, any test file, a file that
    changes how tests run (PROTECTED_NAMES, *.pth), or a top-level file or folder named like one of the grader's
    modules (SITE_MODULES)."""
    p = Path(path)
    return (path in task["test_files"] or p.name in PROTECTED_NAMES or p.suffix == ".pth"
            or Path(p.parts[0]).stem in SITE_MODULES
            or p.name.startswith("test_") or p.name.endswith("_test.py") or "tests" in p.parts)


def _files(root: Path) -> tuple[dict[str, Path], list[str]]:
    """The regular files and symlinks under `root` (no __pycache__, no .pyc) and notes on what was left out: an
    iterative walk with bounds on depth, entries and file size (fsio.walk_tree), so that no tree an agent makes
    (1,200 nested directories, a million files, a 64 MiB file) can raise or hold the grader (issue 52)."""
    entries, notes = walk_tree(root)
    out = {rel: Path(e.path) for rel, e in entries.items()
           if "__pycache__" not in rel.split("/") and not rel.endswith(".pyc")}
    return out, notes


def repo_diff(base: Path, work: Path) -> tuple[dict[str, str | None], str]:
    """The agent's changes: ({repository path: new text, or None when deleted}, a unified diff of them).
    Binary or unreadable files count as changed text '' (they are copied by bytes in `apply_submission`). What the
    bounded walk of `work` left out (`_files`: too deep, too many entries, too large) is not a change: a path of
    the task's repository under it keeps its original (`skipped_in_work`)."""
    changes, diff, _ = repo_changes(base, work)
    return changes, diff


def repo_changes(base: Path, work: Path) -> tuple[dict[str, str | None], str, list[str]]:
    """repo_diff's (changes, diff) and the notes of what the walk of `work` left out (fsio.walk_tree's)."""
    (a, _), (b, notes) = _files(base), _files(work)
    changes: dict[str, str | None] = {}
    diff = []
    for path in sorted(set(a) | set(b)):
        if path not in b and _left_out(path, notes):
            continue  # not looked at (a larger version, or under a skipped directory): not a deletion
        old = a[path].read_bytes() if path in a and not a[path].is_symlink() else None
        new = b[path].read_bytes() if path in b and not b[path].is_symlink() else None
        if path in b and b[path].is_symlink():
            new = b"<symlink>"
        if old == new:
            continue
        changes[path] = None if new is None else new.decode("utf-8", "replace")
        diff.append(unified_diff(path, (old or b"").decode("utf-8", "replace"),
                                 (new or b"").decode("utf-8", "replace")))
    return changes, "".join(diff), notes


def _left_out(path: str, notes: list[str]) -> bool:
    """Whether the walk's `notes` cover `path`: the path itself, a directory above it, or a walk that stopped."""
    for note in notes:
        where = note.split(": ", 1)[0]
        if where.startswith("more than ") or where == path or (where.endswith("/") and path.startswith(where)) \
                or where == "./":
            return True
    return False


def apply_submission(task: dict, base: Path, work: Path, dest: Path,
                     changes: dict[str, str | None] | None = None) -> tuple[Path, list[str]]:
    """A fresh copy of the buggy repository `base` at `dest` with the agent's changes in `work` applied, except to
    protected paths (`is_protected`): the task's tests are the task's. Symlinks the agent made are not copied.
    `changes`: repo_diff(base, work)[0] when the caller has it.
    Returns: (dest, the protected paths whose changes were dropped)."""
    copy_tree(base, dest)
    if changes is None:
        changes, _ = repo_diff(base, work)
    dropped = []
    for path, text in changes.items():
        if is_protected(path, task):
            dropped.append(path)
            continue
        target = dest / path
        if text is None:
            target.unlink(missing_ok=True)
        elif not (work / path).is_symlink():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(work / path, target)
    return dest, dropped


def reward_kinds(n_pass: int, n_total: int, n_baseline: int) -> dict[str, float]:
    """The three reward kinds (module docstring) from passing, listed and baseline-passing test counts.

    pass_ratio = n_pass / n_total; resolved = 1.0 iff n_pass == n_total; relative = max(0, (pass_ratio - b) /
    (1 - b)) with b = n_baseline / n_total (1.0 when b = 1, which a valid task never has: FAIL_TO_PASS is not empty).
    Raises ValueError when n_total < 1."""
    if n_total < 1:
        raise ValueError(f"a task lists at least one test (got {n_total})")
    ratio = n_pass / n_total
    base = n_baseline / n_total
    rel = 1.0 if base >= 1.0 else max(0.0, (ratio - base) / (1.0 - base))
    return {"pass_ratio": ratio, "resolved": float(n_pass == n_total), "relative": rel}


SCORE_CACHE_SIZE = 256
"""Scores remembered per process (`score_submission`): the (task, effective change) pairs last scored."""
_scores: dict[tuple[str, str], tuple[int, int]] = {}


def score_submission(task: dict, base: Path, work: Path, site: dict[str, Path] | None = None,
                     cache: bool = True) -> dict[str, Any]:
    """Evaluate the agent's working copy `work` of task `task` (buggy repository `base`): apply its diff to a fresh
    copy with the tests restored, run the test files in the sandbox, count the listed tests that pass.

    Cached (`cache`): a submission whose effective change (its changes to unprotected paths) is empty scores the
    task's recorded unpatched baseline (task["unpatched"], measured at validation) with no test run; one whose
    effective change was scored before in this process (the last SCORE_CACHE_SIZE: a group of episodes that submit
    the same fix) reuses that score. Both are exact: the tests are deterministic and run on the same files.
    Returns: {"pass_ratio", "resolved", "relative"} (reward_kinds) plus n_pass, n_total, fail_to_pass_passed,
    dropped (protected paths whose changes were ignored), diff (the agent's unified diff), test_seconds (0 when
    cached), cached ("unpatched", "memo" or ""), skipped (what the bounded walk of `work` left out, 'path: why':
    fsio.walk_tree; not part of the submission).
    Raises: sandbox.SandboxUnavailable; OSError when the copies cannot be made (an env fault)."""
    listed = task["FAIL_TO_PASS"] + task["PASS_TO_PASS"]
    changes, diff, skipped = repo_changes(base, work)
    effective = {p: t for p, t in changes.items() if not is_protected(p, task)}
    dropped = [p for p in changes if is_protected(p, task)]
    key = (task["instance_id"], hashlib.sha1(json.dumps(effective, sort_keys=True).encode()).hexdigest())
    seconds, how = 0.0, ""
    if cache and not effective and "unpatched" in task:
        n_pass, f2p, how = task["unpatched"]["n_pass"], task["unpatched"]["fail_to_pass_passed"], "unpatched"
    elif cache and key in _scores:
        (n_pass, f2p), how = _scores[key], "memo"
    else:
        tmp = bounded_workdir("agentrl-swe-eval-")  # a size-capped tmpfs where one can be mounted
        try:  # the submitted code runs in this copy and may leave any tree: release_workdir, not TemporaryDirectory
            fresh, _ = apply_submission(task, base, work, tmp / "repo", changes)
            t = time.perf_counter()
            outcomes, _ = run_tests(fresh, task["test_files"], site)
            seconds = time.perf_counter() - t
        finally:
            release_workdir(tmp)
        n_pass = sum(outcomes.get(tid) == "passed" for tid in listed)
        f2p = sum(outcomes.get(tid) == "passed" for tid in task["FAIL_TO_PASS"])
        if outcomes:  # a killed run (time, output) is not remembered
            _scores[key] = (n_pass, f2p)
            while len(_scores) > SCORE_CACHE_SIZE:
                _scores.pop(next(iter(_scores)))
    return {**reward_kinds(n_pass, len(listed), len(task["PASS_TO_PASS"])), "n_pass": n_pass,
            "n_total": len(listed), "fail_to_pass_passed": f2p, "dropped": dropped, "diff": diff,
            "test_seconds": round(seconds, 3), "cached": how, "skipped": skipped}
