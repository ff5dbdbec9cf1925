"""The library's layout, read from its source with `ast` (nothing is imported): no import cycle between agentrl_lib's
modules, counting every import — at module level, inside functions, under TYPE_CHECKING —, no module over
MAX_LINES lines (docstrings included) unless LONG_MODULES says why, and every module named in the book's
file-by-file tree (book/design.md) and on its API page (book/api.md). Each exception must still be needed: a cycle that
is gone or a module back under the limit fails until its entry is deleted."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import agentrl_lib

PACKAGE = Path(agentrl_lib.__file__).resolve().parent
ROOT = PACKAGE.parent
MAX_LINES = 450

KNOWN_CYCLES: list[tuple[str, ...]] = []
"""Import cycles still present, each as the modules in import order (A imports B, ..., the last imports A), starting
at the smallest name."""

LONG_MODULES = {
    "agentrl_lib.envs.swe_tasks": "one job: the swe family's tasks, each a bug planted in a pinned package's function "
                                  "and the tests that catch it: making them (mutations, problem statements, "
                                  "validation) and scoring a submission on the same tests in the same sandboxed pytest "
                                  "(the three reward kinds); the env that serves them is swe.py",
    "agentrl_lib.envs.alfworld_gen": "one job: ALFWorld games generated offline, an ALFRED floor plan and task type → "
                                     "a PDDL problem and goal → a game kept only when the planner solves it and its "
                                     "walkthrough wins; the env that plays them is alfworld.py",
    "agentrl_lib.trainer": "one job: the RL loop, Trainer.step's seven stages top to bottom, and what one run holds "
                           "around them (resume, checkpoints, precision, the collapse and divergence guards)",
    "agentrl_lib.findings": "one job: the papers' findings as a table (each row's paper number, why ours may differ "
                            "and the few lines that compute it) and what the table says (verdict tables, lessons); "
                            "the statistics live in stats.py, the verdict words in judge.py",
}
"""Modules allowed over MAX_LINES, with the reason."""


def module_files(root: Path = PACKAGE) -> dict[str, Path]:
    """Dotted module name → source file, for every .py file of the package (a package is its __init__.py)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports_of(name: str, source: str, modules: set[str], is_package: bool = False) -> set[str]:
    """The modules of `modules` that module `name` imports anywhere in `source` (every Import / ImportFrom node:
    module level, functions, TYPE_CHECKING blocks). `from P import x` counts as importing P.x when that is a module,
    else P."""
    package = name if is_package else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.update(f"{target}.{a.name}" if f"{target}.{a.name}" in modules else target for a in node.names)
    return (found & modules) - {name}


def import_graph(files: dict[str, Path]) -> dict[str, set[str]]:
    return {name: imports_of(name, path.read_text(), set(files), path.name == "__init__.py")
            for name, path in files.items()}


def cycles(graph: dict[str, set[str]]) -> set[tuple[str, ...]]:
    """Every elementary cycle of `graph`, each as a tuple starting at its smallest module (a DFS from each module
    through larger ones only finds each cycle once; the package's graph is small)."""
    found = set()

    def walk(start: str, node: str, path: list[str]) -> None:
        for nxt in sorted(graph.get(node, ())):
            if nxt == start:
                found.add(tuple(path))
            elif nxt > start and nxt not in path:
                walk(start, nxt, path + [nxt])

    for start in sorted(graph):
        walk(start, start, [start])
    return found


def line_count(path: Path) -> int:
    return len(path.read_text().splitlines())


# ------------------------------------------------------------------------------------------------------ the checks
def test_no_import_cycle_between_library_modules():
    found = cycles(import_graph(module_files()))
    new = sorted(found - set(KNOWN_CYCLES))
    assert not new, "import cycles (each module imports the next, the last the first): " + "; ".join(
        " → ".join(c + (c[0],)) for c in new)
    gone = sorted(set(KNOWN_CYCLES) - found)
    assert not gone, f"KNOWN_CYCLES lists cycles that are gone: delete {gone}"


def test_no_module_over_the_line_limit_without_a_reason():
    files = module_files()
    long = {name: line_count(path) for name, path in files.items() if line_count(path) > MAX_LINES}
    unexplained = {name: n for name, n in long.items() if name not in LONG_MODULES}
    assert not unexplained, (f"modules over {MAX_LINES} lines: {unexplained}; split them along a seam, or add them "
                             "to LONG_MODULES with the reason")
    stale = sorted(set(LONG_MODULES) - set(long))
    assert not stale, f"LONG_MODULES lists modules that are within {MAX_LINES} lines (or gone): delete {stale}"


# ------------------------------------------------------------------------------------------ negative controls
def test_control_a_planted_cycle_is_reported(tmp_path):
    """A synthetic package whose modules import each other through a function-level import, a TYPE_CHECKING import
    and a `from . import` of a submodule: the checker sees the cycle (and no cycle where the imports form a chain)."""
    pkg = tmp_path / "toy"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from .sub import c\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..a import X\n")
    (pkg / "d.py").write_text("import toy.a\n")
    graph = import_graph(module_files(pkg))
    assert graph["toy.a"] == {"toy.b"} and graph["toy.b"] == {"toy.sub.c"} and graph["toy.d"] == {"toy.a"}
    assert cycles(graph) == {("toy.a", "toy.b", "toy.sub.c")}
    (pkg / "sub" / "c.py").write_text("X = 1\n")
    assert cycles(import_graph(module_files(pkg))) == set()


def test_control_the_library_graph_is_read():
    """The checks see real edges: a module known to import another does, so an empty graph cannot pass silently."""
    graph = import_graph(module_files())
    assert "agentrl_lib.config" in graph["agentrl_lib.trainer"]
    assert "agentrl_lib.advantages" in graph["agentrl_lib.config_pillars"]  # an import inside a method
    assert line_count(module_files()["agentrl_lib.envs.swe_tasks"]) > MAX_LINES  # a long module is seen as long


COMMAND_LINE = {"cli", "commands", "flags"}   # the `agentrl` command's internals: book/cli.md documents the command
PRIVATE = {"_forkserver_warm"}                 # imported by the env pools' forkserver only


def undocumented(modules: set[str], design: str, api: str) -> list[str]:
    """The modules that book/design.md's file-by-file tree (`name.py`) or book/api.md (`agentrl_lib.<dotted>`) does
    not name; api.md may leave out the command line's internals and private modules."""
    out = []
    for dotted in sorted(modules):
        name = dotted.rsplit(".", 1)[-1]
        if not re.search(rf"(?<![\w]){re.escape(name)}\.py", design):
            out.append(f"{dotted}: not in book/design.md's file-by-file tree")
        if name not in COMMAND_LINE | PRIVATE and f"`agentrl_lib.{dotted}`" not in api:
            out.append(f"{dotted}: no section in book/api.md")
    return out


def library_modules() -> set[str]:
    return {str(p.relative_to(PACKAGE).with_suffix("")).replace("/", ".") for p in PACKAGE.rglob("*.py")
            if p.name != "__init__.py"}


def test_every_library_module_is_in_the_design_tree_and_the_api_page():
    """A newcomer finds every module in the book's file-by-file tree and its docstrings on the API page."""
    problems = undocumented(library_modules(), (ROOT / "book" / "design.md").read_text(),
                            (ROOT / "book" / "api.md").read_text())
    assert not problems, "\n".join(problems)


def test_control_a_module_missing_from_the_pages_is_named():
    design = (ROOT / "book" / "design.md").read_text().replace("hardware.py", "hw.py")
    assert undocumented({"hardware", "brand_new"}, design, "`agentrl_lib.hardware`") == [
        "brand_new: not in book/design.md's file-by-file tree", "brand_new: no section in book/api.md",
        "hardware: not in book/design.md's file-by-file tree"]
