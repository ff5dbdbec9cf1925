"""Notebooks are authored as MyST Markdown (notebooks/*.md, paired with jupytext) and committed executed (*.ipynb,
which nbval runs). These tests keep each pair in sync and check the `show_source` helper the chapters use."""
from __future__ import annotations

import copy
import inspect
import json
import re
import textwrap
import time
from pathlib import Path

import jupytext
import nbformat
import pytest

from agentrl_lib import advantages, rewards
from agentrl_lib.notebook import Text, show_source, span, steps_table

from helpers import numbers

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
FIX = "edit the .md and run `make sync-notebooks` (then re-execute the notebook and commit both)"


def cells(nb) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(c.cell_type, c.source.strip(), tuple(c.metadata.get("tags", []))) for c in nb.cells]


def drift(md_nb, ipynb_nb) -> list[str]:
    """Differences between the cells of a paired .md and .ipynb (type, source, tags), as readable lines."""
    a, b = cells(md_nb), cells(ipynb_nb)
    out = [f"{len(a)} cells in the .md, {len(b)} in the .ipynb"] if len(a) != len(b) else []
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            out.append(f"cell {i}: .md starts {x[1][:60]!r}, .ipynb starts {y[1][:60]!r}")
    return out


def pairs() -> list[tuple[Path, Path]]:
    """Each chapter's (.md, .ipynb), then each book page that is a notebook (book/benchmarks, book/widgets_without_a_
    kernel: a book/NAME.md beside a book/NAME.ipynb)."""
    return [*((md, md.with_suffix(".ipynb")) for md in sorted(NOTEBOOKS.glob("*.md")) if md.name != "README.md"),
            *((md, md.with_suffix(".ipynb")) for md in sorted((NOTEBOOKS.parent / "book").glob("*.md"))
              if md.with_suffix(".ipynb").exists())]


def test_every_notebook_has_a_myst_source_and_they_agree():
    ipynbs = sorted(NOTEBOOKS.glob("*.ipynb"))
    assert ipynbs, "no notebooks found"
    assert {p.with_suffix(".md") for p in ipynbs} <= {md for md, _ in pairs()}, \
        f"an .ipynb without its .md source; {FIX}"
    assert NOTEBOOKS.parent / "book" / "benchmarks.md" in {md for md, _ in pairs()}  # the book's notebook pages too
    for md, ipynb in pairs():
        assert ipynb.exists(), f"{md.name} has no executed {ipynb.name}; {FIX}"
        md_nb, ipynb_nb = jupytext.read(md), nbformat.read(ipynb, as_version=4)
        assert md_nb.metadata["jupytext"]["formats"] == "ipynb,md:myst", f"{md.name} is not paired; {FIX}"
        problems = drift(md_nb, ipynb_nb)
        assert not problems, f"{md.name} and {ipynb.name} differ: {problems[:3]}; {FIX}"
        assert not unexecuted(ipynb_nb), \
            f"{ipynb.name}: code cells {unexecuted(ipynb_nb)} were not run: execute it in full mode and commit it"


def unexecuted(nb) -> list[int]:
    """Indices of the code cells (with source) that the stored run did not execute: no execution count. A cell that
    ran may have no output (a hidden cell that only glues numbers for the prose)."""
    return [i for i, c in enumerate(nb.cells)
            if c.cell_type == "code" and c.source.strip() and c.execution_count is None]


def test_unexecuted_finds_a_cell_added_since_the_run():  # negative control: a cell jupytext --sync adds, not run
    nb = nbformat.read(NOTEBOOKS / "02_reward.ipynb", as_version=4)
    assert unexecuted(nb) == []
    nb.cells.insert(3, nbformat.v4.new_code_cell("x = 1"))
    assert unexecuted(nb) == [3]


def test_drift_check_catches_an_edited_cell():  # negative control: plant a drift, the check must see it
    md, ipynb = pairs()[0]
    md_nb, ipynb_nb = jupytext.read(md), nbformat.read(ipynb, as_version=4)
    edited = copy.deepcopy(md_nb)
    code = next(c for c in edited.cells if c.cell_type == "code")
    code.source += "\nprint('edited in the .md only')"
    assert drift(edited, ipynb_nb) and not drift(md_nb, ipynb_nb)
    untagged = copy.deepcopy(md_nb)
    next(c for c in untagged.cells if c.metadata.get("tags")).metadata["tags"] = []
    assert drift(untagged, ipynb_nb)


def test_show_source_is_the_file_itself():
    src = show_source(advantages.gae, docstring=False)
    path, span = src.where.split(":")
    first, last = map(int, span.split("-"))
    file_lines = (NOTEBOOKS.parent / path).read_text().splitlines()[first - 1:last]
    assert path == "agentrl_lib/advantages.py"
    assert src.code.splitlines()[0].startswith("def gae(") and src.code.splitlines()[-1] == file_lines[-1]
    assert all(line in file_lines for line in src.code.splitlines()
               if not CUT_LINE.fullmatch(line))  # every shown line is a line of the file, or marks a cut
    assert '"""' not in src.code and "Generalised Advantage Estimation" not in src.code  # docstring dropped
    full = show_source(advantages.gae)
    assert "Generalised Advantage Estimation" in full.code and len(full.code) > len(src.code)
    assert repr(src).startswith("# agentrl_lib/advantages.py:") and "```python" in src._repr_markdown_()


def test_show_source_start_keeps_signature_and_the_lines_from_the_mark():
    src = show_source(advantages.top_std_groups, start="n_keep = max(1, ")
    lines = src.code.splitlines()
    assert lines[0].startswith("def top_std_groups(") and lines[2].strip().startswith("n_keep = max(1, ")
    assert lines[1] == "    # ... (9 lines not shown)"  # the docstring and the lines before the mark
    with pytest.raises(ValueError, match="does not occur"):
        show_source(rewards.turn_rewards, start="no such line")
    with pytest.raises(TypeError):
        show_source(len)
    assert inspect.getsource(advantages.top_std_groups).count("\n") > len(lines)


CUT_LINE = re.compile(r"( *)# \.\.\. \((\d+) lines? not shown\)")


def unmarked_cuts(obj, code: str) -> list[str]:
    """Read `code` (a show_source display of `obj`) against obj's source: each line must be the next source line, or
    a cut mark `# ... (N lines not shown)` standing for exactly the next N source lines, indented as the first of
    them; every source line must be accounted for. Returns the problems (empty: every cut is marked, exactly)."""
    source = textwrap.dedent(inspect.getsource(obj)).splitlines()
    i, problems = 0, []
    for line in code.splitlines():
        cut = CUT_LINE.fullmatch(line)
        if cut:
            n, first = int(cut[2]), next((x for x in source[i:i + int(cut[2])] if x.strip()), "")
            if len(cut[1]) != len(first) - len(first.lstrip()):
                problems.append(f"mark {line.strip()!r} indented {len(cut[1])}, its first line {first!r}")
            i += n
        elif i < len(source) and line == source[i]:
            i += 1
        else:
            problems.append(f"unmarked cut before {line.strip()!r} (source line {i + 1}: "
                            f"{source[i].strip() if i < len(source) else 'none'!r})")
            i = source.index(line, i) + 1 if line in source[i:] else i
    if i != len(source):
        problems.append(f"{len(source) - i} lines at the end dropped without a mark")
    return problems


@pytest.mark.parametrize("kwargs, n_marks", [
    ({}, 0), ({"docstring": False}, 1), ({"start": "for t in reversed(range(T))"}, 1),  # docstring + lines before
    ({"docstring": False, "stop": "delta = rewards"}, 2),
    ({"start": "for t in reversed(range(T))", "stop": "adv[:, t] = a * m"}, 2)])
def test_show_source_marks_every_cut(kwargs, n_marks):
    """Each run of dropped lines is one mark with its exact count, indented as its first line (unmarked_cuts)."""
    src = show_source(advantages.gae, **kwargs)
    assert unmarked_cuts(advantages.gae, src.code) == []
    assert sum(bool(CUT_LINE.fullmatch(x)) for x in src.code.splitlines()) == n_marks


def test_control_an_unmarked_or_miscounted_cut_is_caught():
    code = show_source(advantages.gae, docstring=False, start="for t in reversed(range(T))",
                       stop="adv[:, t] = a * m").code.splitlines()
    assert unmarked_cuts(advantages.gae, "\n".join(code)) == []
    no_marks = [x for x in code if not CUT_LINE.fullmatch(x)]  # what show_source showed before marks
    assert len(unmarked_cuts(advantages.gae, "\n".join(no_marks))) == 2  # the start cut and the stop cut
    miscounted = [x.replace("(27 lines", "(26 lines") for x in code]
    assert miscounted != code
    assert unmarked_cuts(advantages.gae, "\n".join(miscounted))
    shallow = [x.replace("    # ...", "# ...") for x in code]
    assert any("indented 0" in p for p in unmarked_cuts(advantages.gae, "\n".join(shallow)))
    assert not any(CUT_LINE.fullmatch(x) for x in show_source(advantages.gae).code.splitlines())  # whole: no mark


def test_show_source_stop_keeps_the_lines_up_to_the_mark_and_steps_table_reads_rows():
    src = show_source(advantages.gae, docstring=False, start="for t in reversed(range(T))", stop="adv[:, t] = a * m")
    lines = src.code.splitlines()
    assert lines[0].startswith("def gae(") and lines[-2].strip() == "adv[:, t] = a * m"
    assert lines[-1] == "        # ... (5 lines not shown)"  # the rest of the loop and the return, marked
    assert "returns = " not in src.code and "for t in reversed(range(T)):" in [x.strip() for x in lines]
    with pytest.raises(ValueError, match="does not occur"):
        show_source(advantages.gae, stop="no such line")
    table = steps_table([{"step": 1, "entropy": 0.41234, "success_rate": None}, {"step": 2, "entropy": 0.1}],
                        ["success_rate", "entropy"], steps_shown=[1])
    assert repr(table).splitlines() == ["  step  success_rate  entropy", "     1             —    0.412"]
    assert table._repr_markdown_().splitlines()[2] == "| 1 | — | 0.412 |"


def test_span_writes_a_range_for_glue_without_quotes():
    assert repr(span([0.409, 0.351, 0.38])) == "0.35–0.41"                # min–max, in any order; no quotes
    assert span([0.981, 0.984]) == "0.98" and span([0.25], "{:.0%}") == "25%"   # one number when both ends agree
    with pytest.raises(ValueError):
        span([])


def test_every_stored_output_has_an_execution_count():
    """nbval fails a cell that has outputs but no execution count ("Unrun reference cell has outputs"): a cell whose
    outputs were filled in by hand, not by running it."""
    for _, ipynb in pairs():
        nb = nbformat.read(ipynb, as_version=4)
        unrun = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.outputs and c.execution_count is None]
        assert not unrun, f"{ipynb.name}: cells {unrun} have outputs and no execution count; {FIX}"


def test_prose_fills_in_glued_numbers_and_refuses_an_unglued_one():
    from agentrl_lib import notebook

    notebook.GLUED.clear()
    notebook.glue("n_won", Text("12 of 16"), display=False)
    out = notebook.prose("""
        Won {n_won} games of {PPO, GRPO}; a dict {"A": 1} stays.
    """)
    assert out._repr_markdown_() == 'Won 12 of 16 games of {PPO, GRPO}; a dict {"A": 1} stays.'
    assert repr(out) == out._repr_markdown_()
    with pytest.raises(KeyError, match=r"\{n_lost\}.*glued: n_won"):   # control: a name no cell glued
        notebook.prose("Lost {n_lost}.")
    with pytest.raises(ValueError, match="lower-case identifier"):
        notebook.glue("Won-Games", 1, display=False)


def test_chapter_cost_fills_in_the_line_it_showed(monkeypatch):
    from agentrl_lib import notebook

    shown = []

    class Handle:
        def update(self, obj):
            shown.append(obj._repr_markdown_())

    monkeypatch.setattr("IPython.display.display", lambda obj, display_id=None: shown.append(obj._repr_markdown_())
                        or Handle())
    cost = notebook.ChapterCost(fast=False, start=0.0)
    assert "measured by the chapter's last cell" in shown[0]
    monkeypatch.setattr(notebook.time, "time", lambda: 150.0)
    wall, peak = cost.finish()
    assert wall == 150.0 and 0 < peak < 1024   # GiB: this process, not KiB read as GiB
    assert shown[1].startswith("**Cost of this run**") and "(full mode)" in shown[1]
    assert numbers(shown[1])[0] == 2.5 and " 2.5 min " in shown[1]  # 150 s of wall time, in minutes
    assert f"{peak:.1f} GiB" in shown[1] and notebook.cpu_name() in shown[1] and "min of CPU time" in shown[1]
    assert "is not measured yet" not in shown[1]   # no chapter named: no other-mode sentence


def test_chapter_cost_records_its_mode_and_quotes_the_other(monkeypatch, tmp_path):
    """With AGENTRL_RECORD_COST=1 finish() writes chapter × mode into the costs file, keeping other entries; the
    other mode's line then quotes it. Control: before any fast-mode record the full-mode line says it is not measured;
    without the variable nothing is written."""
    from agentrl_lib import notebook

    shown = []

    class Handle:
        def update(self, obj):
            shown.append(obj._repr_markdown_())

    monkeypatch.setattr("IPython.display.display", lambda obj, display_id=None: Handle())
    costs = tmp_path / "chapter_costs.json"
    costs.write_text('{"00_quickstart": {"fast": {"wall_seconds": 1}}}')
    monkeypatch.delenv("AGENTRL_RECORD_COST", raising=False)
    notebook.ChapterCost(fast=False, chapter="02_reward", costs=costs).finish()
    assert re.search(r"fast mode \(`AGENTRL_FAST=1`[^)]*\) is not measured", shown[-1]), shown[-1]  # the other mode
    assert "02_reward" not in costs.read_text()   # not asked to record
    monkeypatch.setenv("AGENTRL_RECORD_COST", "1")
    notebook.ChapterCost(fast=True, chapter="02_reward", start=time.time() - 90, costs=costs).finish()
    data = json.loads(costs.read_text())
    assert data["00_quickstart"] == {"fast": {"wall_seconds": 1}}
    assert 89 < data["02_reward"]["fast"]["wall_seconds"] < 120
    assert set(data["02_reward"]["fast"]) == {"wall_seconds", "cpu_seconds", "peak_gib", "cpu", "load_start",
                                              "load_end", "date", "commit"}
    notebook.ChapterCost(fast=False, chapter="02_reward", costs=costs).finish()
    assert re.search(r"In fast mode \(`AGENTRL_FAST=1`[^)]*\)[^.]* 1\.5 min\b", shown[-1]), shown[-1]  # its 90 s
    assert set(json.loads(costs.read_text())["02_reward"]) == {"fast", "full"}
    with pytest.raises(ValueError, match="chapter=..."):
        notebook.ChapterCost(fast=True).record(1.0, 1.0, 1.0)


def test_every_chapter_names_itself_in_its_cost_line_and_has_a_fast_mode_cost():
    """Each chapter passes its own name to ChapterCost (the costs file's key), and results/chapter_costs.json holds
    each chapter's fast-mode cost (`make chapter-costs`), which the stored full-mode cost lines quote."""
    from agentrl_lib.notebook import COSTS_FILE

    costs = json.loads(COSTS_FILE.read_text())
    for md in sorted(NOTEBOOKS.glob("0*.md")):
        assert f'chapter="{md.stem}")' in md.read_text(), f"{md.name}: ChapterCost(..., chapter=\"{md.stem}\")"
        assert "fast" in costs.get(md.stem, {}), f"results/chapter_costs.json has no fast-mode cost of {md.stem}: " \
            "run `make chapter-costs`"
