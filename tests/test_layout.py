"""The repository's layout, read from its source with `ast` (nothing is imported): no import cycle between the modules
of agentrl_lib and experiments, counting every import — at module level, inside functions, under TYPE_CHECKING —, the
core library importing nothing of the experiments, the config modules on the ground floor (nothing of the library
but each other), no module of agentrl_lib over MAX_LINES lines (docstrings included)
unless LONG_MODULES says why, and every module of both packages named in the book's file-by-file tree (book/design.md)
and on its API page (book/api.md). Over the whole tree (git ls-files): no sys.path manipulation and no module loaded
from a file path, in any .py file or chapter source. Each exception must still be needed: a cycle that is gone or a
module back under the limit fails until its entry is deleted."""
from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

import agentrl_lib
import experiments

PACKAGE = Path(agentrl_lib.__file__).resolve().parent
EXPERIMENTS = Path(experiments.__file__).resolve().parent
ROOT = Path(__file__).resolve().parent.parent
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
    "agentrl_lib.advantages": "one job: the advantage estimators, each pure function beside its registry entry in the "
                              "order of the module's table, and their lookup by name (get_estimator); the shared "
                              "helpers live in advantage_base.py",
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


def repository_graph() -> dict[str, set[str]]:
    """The import graph of agentrl_lib and experiments together (a cycle through both packages counts)."""
    return import_graph({**module_files(PACKAGE), **module_files(EXPERIMENTS)})


def core_imports_of_experiments(graph: dict[str, set[str]]) -> list[str]:
    """'A → B' for every module A of agentrl_lib that imports a module B of experiments: the core library must not
    depend on what the workbook does with it."""
    return [f"{a} → {b}" for a, deps in sorted(graph.items()) if a.split(".")[0] == "agentrl_lib"
            for b in sorted(deps) if b.split(".")[0] == "experiments"]


# ------------------------------------------------------------------------------------------------------ the checks
def test_no_import_cycle_between_library_modules():
    found = cycles(repository_graph())
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
    graph = repository_graph()
    assert "agentrl_lib.config" in graph["agentrl_lib.trainer"]
    assert "agentrl_lib.parts" in graph["agentrl_lib.sweep"]  # an import inside a function (sweep.cell_config)
    assert line_count(module_files()["agentrl_lib.envs.swe_tasks"]) > MAX_LINES  # a long module is seen as long
    # the experiments' edges: report → page_numbers and both → results_lines (the cycle report ⇄ page_numbers that
    # this split removed), findings_page → regenerate inside a function, and into the core library
    assert {"experiments.benchmarks.page_numbers", "experiments.benchmarks.results_lines"} <= \
        graph["experiments.benchmarks.report"]
    assert "experiments.benchmarks.results_lines" in graph["experiments.benchmarks.page_numbers"]
    assert {"experiments.regenerate", "agentrl_lib.findings"} <= graph["experiments.findings_page"]


CONFIG_FLOOR = {"agentrl_lib.config", "agentrl_lib.config_pillars", "agentrl_lib.config_training",
                "agentrl_lib.config_values"}
"""The config modules: the ground floor of the library (a registry imports the config's values, never the reverse;
parts.run_parts looks the registry names up)."""


def above_the_ground_floor(graph: dict[str, set[str]]) -> list[str]:
    """'A → B' for every config module A that imports a library module B outside the config modules, and for
    config_values importing anything of the library."""
    out = [f"{a} → {b}" for a in sorted(CONFIG_FLOOR) for b in sorted(graph[a] - CONFIG_FLOOR)]
    return out + [f"agentrl_lib.config_values → {b}" for b in sorted(graph["agentrl_lib.config_values"])]


def test_the_config_stands_on_the_ground_floor():
    problems = above_the_ground_floor(repository_graph())
    assert not problems, "the config imports the library above it: " + "; ".join(problems)


def test_control_a_config_module_importing_a_registry_is_named():
    """A planted function-level import of a registry in config_pillars, and any import in config_values, are named."""
    graph = {name: set(deps) for name, deps in repository_graph().items()}
    graph["agentrl_lib.config_pillars"].add("agentrl_lib.advantages")
    graph["agentrl_lib.config_values"].add("agentrl_lib.config_pillars")
    files = module_files()
    planted = files["agentrl_lib.config_pillars"].read_text() + "\n\ndef f():\n    from .advantages import ESTIMATORS\n"
    assert "agentrl_lib.advantages" in imports_of("agentrl_lib.config_pillars", planted, set(files))
    assert above_the_ground_floor(graph) == ["agentrl_lib.config_pillars → agentrl_lib.advantages",
                                             "agentrl_lib.config_values → agentrl_lib.config_pillars"]


def test_the_core_library_imports_nothing_of_the_experiments():
    problems = core_imports_of_experiments(repository_graph())
    assert not problems, "agentrl_lib imports the experiments: " + "; ".join(problems)


def test_control_a_core_module_importing_the_experiments_is_named(tmp_path):
    """A planted agentrl_lib module that imports experiments.regenerate inside a function is named; the reverse edge
    (the experiments importing the core) is not."""
    core, exp = tmp_path / "agentrl_lib", tmp_path / "experiments"
    for pkg in (core, exp):
        pkg.mkdir()
        (pkg / "__init__.py").write_text("")
    (core / "plots.py").write_text("def f():\n    from experiments import regenerate\n")
    (exp / "regenerate.py").write_text("from agentrl_lib import plots\n")
    graph = import_graph({**module_files(core), **module_files(exp)})
    assert core_imports_of_experiments(graph) == ["agentrl_lib.plots → experiments.regenerate"]
    (core / "plots.py").write_text("X = 1\n")
    assert core_imports_of_experiments(import_graph({**module_files(core), **module_files(exp)})) == []


COMMAND_LINE = {"cli", "commands", "flags"}   # the `agentrl` command's internals: book/cli.md documents the command
PRIVATE = {"_forkserver_warm"}                 # imported by the env pools' forkserver only


def undocumented(modules: set[str], design: str, api: str, package: str = "agentrl_lib") -> list[str]:
    """The modules of `package` that book/design.md's file-by-file tree (`name.py`, in the text `design`) or
    book/api.md (`<package>.<dotted>`) does not name; api.md may leave out the command line's internals and private
    modules."""
    out = []
    for dotted in sorted(modules):
        name = dotted.rsplit(".", 1)[-1]
        if not re.search(rf"(?<![\w]){re.escape(name)}\.py", design):
            out.append(f"{dotted}: not in book/design.md's file-by-file tree")
        if name not in COMMAND_LINE | PRIVATE and f"`{package}.{dotted}`" not in api:
            out.append(f"{dotted}: no section in book/api.md")
    return out


def library_modules(package: Path = PACKAGE) -> set[str]:
    """The dotted names of `package`'s modules, relative to it (e.g. envs.base); no __init__.py."""
    return {str(p.relative_to(package).with_suffix("")).replace("/", ".") for p in package.rglob("*.py")
            if p.name != "__init__.py"}


def experiments_tree(design: str) -> str:
    """The lines of book/design.md's file-by-file tree from `experiments/` to the end of its code block ('' when there
    is none): the experiments' modules are looked for there only, since several share a name with a library module
    (report.py)."""
    found = re.search(r"^experiments/.*?(?=^```)", design, re.M | re.S)
    return found.group(0) if found else ""


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


def test_every_experiments_module_is_in_the_design_tree_and_the_api_page():
    """The experiments package beside the library: each module in design.md's tree under experiments/ and named on
    the API page (`experiments.<dotted>`)."""
    design = (ROOT / "book" / "design.md").read_text()
    api = (ROOT / "book" / "api.md").read_text()
    problems = undocumented(library_modules(EXPERIMENTS), experiments_tree(design), api, package="experiments")
    assert not problems, "\n".join(problems)


def test_control_an_experiments_module_only_in_the_library_tree_is_named():
    """report.py is in the library's part of the tree: an experiments module of that name missing from the
    experiments/ part is still named (and nothing is found in a page with no experiments/ tree)."""
    design = (ROOT / "book" / "design.md").read_text()
    tree = experiments_tree(design)
    assert "regenerate.py" in tree and "rundir.py" not in tree  # the library's part is left out
    api = "`experiments.benchmarks.report`"
    assert undocumented({"benchmarks.report"}, tree.replace("report.py", "tables.py"), api, package="experiments") == [
        "benchmarks.report: not in book/design.md's file-by-file tree"]
    assert experiments_tree(design.replace("\nexperiments/", "\nexp/")) == ""


# ------------------------------------------------------------------------- sys.path and modules loaded by path
PATH_HACKS = re.compile(r"sys\.path\.(?:insert|append|extend)\s*\(|sys\.path\s*(?:\[[^\]\n]*\])?\s*\+?=(?!=)"
                        r"|syspath_prepend\s*\(|spec_from_file_location\s*\(|SourceFileLoader\s*\(|run_path\s*\("
                        r"|addsitedir\s*\(")
"""A line that changes sys.path (insert, append, extend, assignment, pytest's syspath_prepend, site.addsitedir) or
loads a module from its file (importlib's spec_from_file_location, SourceFileLoader, runpy.run_path): the code is
imported by name instead, from the installed packages (agentrl_lib, experiments). Prose that names such a call without
its parenthesis (agentrl_lib/envs/process_pool.py) is not a call."""


def tracked(patterns: list[str], root: Path = ROOT) -> dict[str, str]:
    """{path: text} of the files `git ls-files` lists under `root` for `patterns`; skips the test outside a git
    checkout (a copy without .git)."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--", *patterns], cwd=root, capture_output=True, text=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"git ls-files failed in {root} ({e}): not a git checkout")
    return {p: (root / p).read_text() for p in out.split("\0") if p and (root / p).is_file()}


def path_hacks(files: dict[str, str]) -> list[str]:
    """'path:line: text' for every line of `files` ({path: text}) that PATH_HACKS matches."""
    return [f"{path}:{i}: {line.strip()}" for path, text in sorted(files.items())
            for i, line in enumerate(text.splitlines(), 1) if PATH_HACKS.search(line)]


def test_no_sys_path_change_or_load_by_path_in_any_python_file():
    files = tracked(["*.py"])
    assert "experiments/regenerate.py" in files and "tests/test_layout.py" in files  # the tree was read
    found = path_hacks(files)
    assert not found, "import these by name (installed packages; a child process gets PYTHONPATH):\n" + \
        "\n".join(found)


def test_no_sys_path_change_in_the_chapters():
    """The chapters' sources (notebooks/*.md; the paired .ipynb follow them): a chapter imports tests/helpers.py's
    and the library's code by name too."""
    files = tracked(["notebooks/*.md"])
    assert "notebooks/00_quickstart.md" in files
    found = path_hacks(files)
    assert not found, "\n".join(found)


def test_control_planted_sys_path_changes_and_loads_by_path_are_named(tmp_path):
    """Each form PATH_HACKS stands for, planted in a tracked .py file and a chapter of a throwaway git repository, is
    named with its line; prose naming a call, a comparison with sys.path and an untracked file are not."""
    sp = "sys" + ".path"  # not written whole here, or this file would hold what it forbids
    planted = {"a.py": f"import sys\n{sp}.insert(0, 'x')\n{sp}.append('y')\n{sp}[:0] = ['z']\n"
                       f"{sp} += ['w']\nprint({sp} == [])\n# a notebook's {sp}.insert would be lost\n",
               "tests/b.py": "import importlib.util\nspec = importlib.util.spec_" + "from_file_location('m', 'm.py')\n"
                             "def t(monkeypatch):\n    monkeypatch.syspath_" + "prepend('x')\n",
               "notebooks/01_x.md": f"```{{code-cell}}\n{sp}.insert(0, str(REPO / 'tests'))\n```\n",
               "untracked.py": f"{sp}.insert(0, 'u')\n"}
    for name, text in planted.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "add", "a.py", "tests/b.py", "notebooks/01_x.md"], cwd=tmp_path, check=True)
    assert [x.split(": ", 1)[0] for x in path_hacks(tracked(["*.py"], tmp_path))] == [
        "a.py:2", "a.py:3", "a.py:4", "a.py:5", "tests/b.py:2", "tests/b.py:4"]
    assert path_hacks(tracked(["notebooks/*.md"], tmp_path)) == [
        f"notebooks/01_x.md:2: {sp}.insert(0, str(REPO / 'tests'))"]
