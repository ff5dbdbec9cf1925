"""Helpers for the notebooks: show the library's own code next to the equation it implements.

Chapters include the ≤ 15 library lines that implement an equation from the source file itself (never pasted), so
the page cannot drift from the code: `show_source(advantages.gae, docstring=False)`. `steps_table` shows chosen
metrics of a run's rows, step by step, for the chapters' diagnosis exercises. `Text` is a string that myst-nb's
`glue` inserts into the prose without quotes (the chapters' measured numbers: `glue("x", Text("57%"))`); `span`
writes a range of measured numbers as such a string ("0.35–0.41").

`glue` records a measured number under a name and `prose` writes a paragraph with those numbers filled in, as a
Markdown output: the chapters' prose numbers render the same in the book and in JupyterLab (whose Markdown cells
know no glue role), and cannot drift from the cells that measured them. `ChapterCost` is each chapter's cost line:
shown near the top, filled in by the last cell with the run's wall and CPU time, peak memory and load.

Introduced in notebooks/00_quickstart.md §3 (show_source).
"""
from __future__ import annotations

import ast
import inspect
import json
import os
import platform
import re
import resource
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

GLUED: dict[str, object] = {}
"""The values recorded by `glue` in this kernel, by name; `prose` reads them."""


def glue(name: str, value, display: bool = True):
    """Record `value` under `name` for `prose` (the numbers a chapter's prose quotes), and show it unless
    `display=False`. Returns nothing (a cell ending in `glue(...)` shows the value once, through `display`).

    Raises: ValueError when `name` is not a lower-case identifier (prose writes it as `{name}`)."""
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
        raise ValueError(f"glue name {name!r}: use a lower-case identifier (prose writes it as {{{name}}})")
    GLUED[name] = value
    if display:
        from IPython.display import display as show

        show(value)


@dataclass
class Prose:
    """A paragraph of a chapter, with its glued numbers filled in. Displays as Markdown in the book and in
    JupyterLab (`_repr_markdown_`), as the plain text under nbval and in a terminal (`repr`)."""

    markdown: str

    def __repr__(self) -> str:
        return self.markdown

    def _repr_markdown_(self) -> str:
        return self.markdown


def prose(template: str) -> Prose:
    """`template` (Markdown) with each `{name}` replaced by the value `glue` recorded under that name (its `str`).

    Only `{lower_case_identifier}` is a placeholder; any other brace (`{PPO, GRPO}`, a dict literal) stays as it is.
    The chapters write each paragraph that quotes measured numbers as a cell `prose(\"\"\"...\"\"\")` whose input is
    hidden (`remove-input` in the book, `source_hidden` in JupyterLab), after the cells that glued them.

    Raises: KeyError naming the placeholder that no cell has glued yet, with the names that are glued."""
    def fill(m: re.Match) -> str:
        key = m.group(1)
        if key not in GLUED:
            raise KeyError(f"prose quotes {{{key}}} but no cell above glued it (glued: {', '.join(sorted(GLUED))})")
        return str(GLUED[key])

    return Prose(re.sub(r"\{([a-z_][a-z0-9_]*)\}", fill, textwrap.dedent(template).strip("\n")))


def peak_memory_gib() -> float:
    """The peak resident memory of this process and of its largest finished child process, the larger of the two,
    in GiB (`getrusage` ru_maxrss, KiB on Linux, bytes on macOS)."""
    scale = 1024 ** 3 if platform.system() == "Darwin" else 1024 ** 2
    return max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)) / scale


def cpu_name() -> str:
    """The CPU's model name (`hardware.cpu_model`) and the number of cores this process may use, e.g.
    "AMD EPYC, 2 cores"."""
    from agentrl_lib.hardware import cpu_model

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{cpu_model() or platform.machine()}, {cores} cores"


def cpu_seconds() -> float:
    """CPU time (user + system, s) of this process and of its finished child processes (`getrusage`)."""
    return sum(u.ru_utime + u.ru_stime for u in (resource.getrusage(resource.RUSAGE_SELF),
                                                 resource.getrusage(resource.RUSAGE_CHILDREN)))


COSTS_FILE = Path(__file__).resolve().parent.parent / "results" / "chapter_costs.json"
"""Each chapter's measured cost in each mode ({chapter: {"fast" | "full": {wall_seconds, cpu_seconds, peak_gib, cpu,
load_start, load_end, date, commit}}}), written by ChapterCost.finish when AGENTRL_RECORD_COST=1 (`make
chapter-costs` runs every chapter in fast mode so; `make execute-notebooks` records full mode the same way)."""


class ChapterCost:
    """A chapter's cost line. Created near the top, it shows "measured by the chapter's last cell"; `finish()` in the
    chapter's last cell replaces that output in place (IPython's display_id, which nbconvert also applies to the
    stored notebook) with the run's wall time (s → min), its CPU time (`cpu_seconds`: on an idle machine up to the
    wall time × the cores torch uses; far below it when other work shared the CPU), its peak memory (GiB,
    `peak_memory_gib`), the mode, the CPU, the 1-minute load average at the start and at the end, and the date, so a
    stored chapter opens with what its run cost and how busy the machine was; and, from `costs` (COSTS_FILE), what
    the chapter's other mode cost when it was last measured (a learner reading the full-mode page learns what fast
    mode would take).

    chapter: the notebook's name without suffix ("02_reward"), the key in `costs`. With AGENTRL_RECORD_COST=1 in the
    environment, finish() also writes this run's measurement into `costs` (under a file lock: `make chapter-costs`
    may run chapters side by side)."""

    def __init__(self, fast: bool, chapter: str | None = None, start: float | None = None,
                 costs: Path = COSTS_FILE):
        from IPython.display import display

        self.fast, self.chapter, self.costs = fast, chapter, Path(costs)
        self.start = time.time() if start is None else start
        self.cpu0 = cpu_seconds()
        self.load0 = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        self.handle = display(Prose(self._line(None)), display_id=True)

    @property
    def mode(self) -> str:
        return "fast" if self.fast else "full"

    def _other(self) -> str:
        """The other mode's last measured cost, as a sentence ('' without a chapter name)."""
        if self.chapter is None:
            return ""
        other = "full" if self.fast else "fast"
        name = "fast mode (`AGENTRL_FAST=1`, what CI runs under nbval)" if other == "fast" else "full mode"
        try:
            got = json.loads(self.costs.read_text())[self.chapter][other]
        except (OSError, ValueError, KeyError):
            return f" This chapter's cost in {name} is not measured yet (`make chapter-costs`)."
        return (f" In {name} it took {got['wall_seconds'] / 60:.1f} min, peak memory {got['peak_gib']:.1f} GiB "
                f"(on {got['cpu']}, load {got['load_start']:.1f}, {got['date']}; `results/{self.costs.name}`).")

    def _line(self, measured: tuple[float, float, float] | None) -> str:
        mode = "fast mode (`AGENTRL_FAST=1`)" if self.fast else "full mode"
        if measured is None:
            return f"**Cost of this run** ({mode}): measured by the chapter's last cell, which fills in this line."
        wall, peak, cpu = measured
        load = (f", 1-minute load average {self.load0:.1f} at the start and {os.getloadavg()[0]:.1f} at the end"
                if self.load0 is not None else "")
        return (f"**Cost of this run** ({mode}): {wall / 60:.1f} min of wall time and {cpu / 60:.1f} min of CPU time, "
                f"peak memory {peak:.1f} GiB (the kernel or its largest child process), on {cpu_name()}{load}, "
                f"{time.strftime('%Y-%m-%d')}.{self._other()}")

    def record(self, wall: float, peak: float, cpu: float) -> None:
        """Write this run's cost into `costs` under chapter and mode (keeping every other entry)."""
        from filelock import FileLock

        from agentrl_lib.fsio import atomic_write_text
        from agentrl_lib.paths import git_commit

        if self.chapter is None:
            raise ValueError("ChapterCost(chapter=...) is needed to record a cost: the chapter's name, e.g. "
                             "'02_reward'")
        with FileLock(str(self.costs) + ".lock"):
            data = json.loads(self.costs.read_text()) if self.costs.exists() else {}
            data.setdefault(self.chapter, {})[self.mode] = {
                "wall_seconds": round(wall, 1), "cpu_seconds": round(cpu, 1), "peak_gib": round(peak, 2),
                "cpu": cpu_name(), "load_start": round(self.load0 or 0.0, 2),
                "load_end": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else 0.0,
                "date": time.strftime("%Y-%m-%d"), "commit": git_commit()}
            atomic_write_text(self.costs, json.dumps(dict(sorted(data.items())), indent=1) + "\n")

    def finish(self) -> tuple[float, float]:
        """Measure and show the cost (and record it with AGENTRL_RECORD_COST=1); returns (wall time in s, peak memory
        in GiB)."""
        wall, peak, cpu = time.time() - self.start, peak_memory_gib(), cpu_seconds() - self.cpu0
        if self.handle is not None:
            self.handle.update(Prose(self._line((wall, peak, cpu))))
        if os.environ.get("AGENTRL_RECORD_COST") == "1":
            self.record(wall, peak, cpu)
        return wall, peak


class Text(str):
    """A string that myst-nb's `glue` shows without quotes: `{glue:text}` inserts an object's repr, and a plain
    str's repr carries its quotes."""

    def __repr__(self) -> str:
        return str(self)


def span(values, fmt: str = "{:.2f}") -> Text:
    """The range of `values` as prose, each end formatted with `fmt`: "0.35–0.41", or one number when both ends
    format alike ("0.98"). For glue: `glue("x", span(rates, "{:.0%}"))`.

    Raises: ValueError when `values` is empty (min of an empty sequence)."""
    lo, hi = fmt.format(min(values)), fmt.format(max(values))
    return Text(lo if lo == hi else f"{lo}–{hi}")


@dataclass
class Source:
    """A piece of the library's source. Displays as highlighted code in Jupyter (Markdown) and as plain text in a
    terminal or under nbval (`repr`)."""

    code: str
    """The source lines, dedented."""
    where: str
    """'agentrl_lib/advantages.py:19-58' (path relative to the package's parent, first-last line)."""

    def __repr__(self) -> str:
        return f"# {self.where}\n{self.code}"

    def _repr_markdown_(self) -> str:
        return f"`{self.where}`\n\n```python\n{self.code}\n```"


CUT = "# ... ({n} line{s} not shown)"
"""The comment show_source puts where it drops lines, at the indentation of the first line dropped."""


def _mark_cuts(lines: list[str], keep: list[int]) -> list[str]:
    """`lines` at the indices `keep` (ascending), with a CUT comment in place of each run of dropped lines (between
    two kept lines, or after the last one)."""
    out: list[str] = []
    for a, b in zip(keep, keep[1:] + [len(lines)]):
        out.append(lines[a])
        if b > a + 1:
            dropped = lines[a + 1:b]
            first = next((x for x in dropped if x.strip()), "")
            indent = first[:len(first) - len(first.lstrip())]
            out.append(indent + CUT.format(n=len(dropped), s="" if len(dropped) == 1 else "s"))
    return out


def show_source(obj, docstring: bool = True, start: str | None = None, stop: str | None = None) -> Source:
    """The source of a library function, class or method, for display in a notebook.

    Args:
        obj: a function, class or method (anything `inspect.getsource` takes).
        docstring: False drops the docstring of `obj` (the signature and the body remain).
        start: keep only the lines from the first one containing this text (e.g. a `# ALGO:` mark), after the
            signature; the signature line(s) stay.
        stop: keep only the lines up to and including the first one containing this text (after `start`).
    Every cut is marked: each run of dropped lines shows as one comment, `# ... (N lines not shown)` (CUT), at the
    indentation of its first line, so the code shown never reads as if it were whole.
    Returns: Source (text/plain: `# path:first-last` then the code; text/markdown: a highlighted block).
    Raises:
        TypeError: `obj` has no Python source (a builtin, a C extension).
        ValueError: `start` or `stop` does not occur in the source (says which text to look for).
    """
    lines, first = inspect.getsourcelines(obj)
    src = textwrap.dedent("".join(lines))
    keep = list(range(len(src.splitlines())))
    node = ast.parse(src).body[0]
    body_start = node.body[0].lineno - 1  # 0-based index of the first body line (the docstring if there is one)
    head = list(range(body_start))
    if not docstring and ast.get_docstring(node, clean=False) is not None:
        doc = node.body[0]
        keep = head + [i for i in keep if i > doc.end_lineno - 1]
    if start is not None:
        text = src.splitlines()
        hits = [i for i in keep if i >= body_start and start in text[i]]
        if not hits:
            raise ValueError(f"{start!r} does not occur in the body of {getattr(obj, '__qualname__', obj)}")
        keep = head + [i for i in keep if i >= hits[0]]
    if stop is not None:
        text = src.splitlines()
        hits = [i for i in keep if i >= body_start and stop in text[i]]
        if not hits:
            raise ValueError(f"{stop!r} does not occur in the body of {getattr(obj, '__qualname__', obj)}")
        keep = [i for i in keep if i <= hits[0]]
    code = "\n".join(_mark_cuts(src.splitlines(), keep))
    path = Path(inspect.getsourcefile(obj))
    pkg_parent = Path(__file__).resolve().parent.parent
    try:
        shown = path.resolve().relative_to(pkg_parent)
    except ValueError:
        shown = path.name
    return Source(code, f"{Path(shown).as_posix()}:{first + keep[0]}-{first + keep[-1]}")


@dataclass
class StepsTable:
    """Chosen keys of a run's metrics rows (`metrics.jsonl`, or a sweep record's `steps`), one line per step. Displays
    as a Markdown table in Jupyter and as aligned text in a terminal or under nbval."""

    keys: list[str]
    rows: list[dict]

    def _cell(self, row: dict, key: str) -> str:
        v = row.get(key)
        return "—" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)

    def __repr__(self) -> str:
        width = [max(len(k), 6) for k in self.keys]
        lines = ["  ".join(k.rjust(w) for k, w in zip(self.keys, width))]
        lines += ["  ".join(self._cell(r, k).rjust(w) for k, w in zip(self.keys, width)) for r in self.rows]
        return "\n".join(lines)

    def _repr_markdown_(self) -> str:
        head = "| " + " | ".join(f"`{k}`" for k in self.keys) + " |\n|" + "---:|" * len(self.keys)
        return head + "\n" + "\n".join("| " + " | ".join(self._cell(r, k) for k in self.keys) + " |"
                                        for r in self.rows)


def steps_table(steps: list[dict], keys: list[str], steps_shown: list[int] | None = None) -> StepsTable:
    """A run's metrics rows as a table of `keys` (the `step` column first), for reading a run in a chapter.

    Args:
        steps: metrics rows (dicts with a "step" key), e.g. `record["steps"]` of a sweep record.
        keys: the metrics to show (missing ones show as —).
        steps_shown: only these step numbers (default: every row).
    """
    rows = [r for r in steps if steps_shown is None or r.get("step") in steps_shown]
    return StepsTable(["step", *[k for k in keys if k != "step"]], rows)
