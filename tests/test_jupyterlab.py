"""What a learner sees when the chapters open in JupyterLab, the workbook's first way in (`make lab`): JupyterLab 4,
started headless on copies of the stored chapters, each opened in Chromium (driven by Playwright) as `make lab`
opens it — trusted first (`jupyter trust`, as `make lab` does), so that the widgets render from the state saved in
the notebook with no cell run.

Checked on the rendered page of every chapter: no raw `{glue` role (JupyterLab's Markdown cells know no MyST glue:
the chapters write their measured numbers through `agentrl_lib.notebook.prose`, a Markdown output), no widget shown
as its text repr (`VBox(children=...`) or as an error, the cost line at the top, and a rendered widget per stored
widget output. Two planted controls show the check fails where it should: an untrusted copy of chapter 02 (its
widgets fall back to `VBox(...)` text) and a copy whose first prose cell is turned back into a Markdown cell with
glue roles (what every chapter did before): plain JupyterLab shows the role raw, jupyterlab-myst shows the glued
name in place of the number; both are caught.

MyST beyond glue (chapter 03's key-equation boxes, `:::{admonition}`) renders through the jupyterlab-myst extension
(a dependency): no raw directive text, a box per admonition and a `<details>` per solution fold; the control serves
chapter 03 with the extension disabled.

Skips with one line where no Chromium or Playwright is found (as tests/test_book.py does). Screenshots of what it saw:
book/_build/screenshots/jupyterlab_<chapter>.png (at the first widget, else the top) and
jupyterlab_03_policy_admonition.png.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest
from test_book import CHROMIUM_ARGS, chromium_path

pytestmark = [pytest.mark.slow, pytest.mark.subprocess]

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
SHOTS = ROOT / "book" / "_build" / "screenshots"   # beside tests/test_book.py's (ignored by git)
PROBLEMS = {
    "{glue": "a raw glue role (JupyterLab renders no MyST glue: write the paragraph as a prose() cell)",
    "VBox(": "a widget shown as its text repr (the notebook is not trusted, or has no saved widget state)",
    "HBox(": "a widget shown as its text repr (the notebook is not trusted, or has no saved widget state)",
    "Error displaying widget": "a widget whose saved state is missing",
    ":::{admonition": "a raw MyST directive (JupyterLab renders MyST Markdown with the jupyterlab-myst extension)",
}


GLUE_ROLE = re.compile(r"\{glue(?::\w+)?\}`([^`]+)`")
"""A MyST glue role in a Markdown cell; group 1 the glued name."""


def problems(text: str, nb=None) -> list[str]:
    """What in a rendered notebook's text would show a learner something unrendered (PROBLEMS' reasons); with the
    notebook `nb`, also a glue role of its Markdown cells shown as its bare name, which is what jupyterlab-myst draws
    for a glue it has no value for (the number silently replaced by its key)."""
    found = {reason for needle, reason in PROBLEMS.items() if needle in text}
    names = {m.group(1) for c in (nb.cells if nb is not None else []) if c.cell_type == "markdown"
             for m in GLUE_ROLE.finditer(c.source)}
    if any(re.search(rf"\b{re.escape(name)}\b", text) for name in names):
        found.add("a glue role shown as its bare name (JupyterLab has no glue store: write the paragraph as a prose() "
                  "cell)")
    return sorted(found)


def widget_views(nb) -> int:
    return sum(WIDGET_VIEW in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server on copies of the chapters (and the two controls), with its own config, data, settings and
    runtime dirs; yields (base URL with token, the dir it serves)."""
    with serve(tmp_path_factory.mktemp("lab"), CHAPTERS, controls=True) as got:
        yield got


@pytest.fixture(scope="module")
def lab_without_myst(tmp_path_factory):
    """The control for the MyST check: chapter 03 served with the jupyterlab-myst extension disabled (JupyterLab's
    page_config, what `jupyter labextension disable jupyterlab-myst` writes)."""
    with serve(tmp_path_factory.mktemp("plain"), [ROOT / "notebooks" / "03_policy.ipynb"], controls=False,
               disabled=("jupyterlab-myst",)) as got:
        yield got


@contextlib.contextmanager
def serve(tmp: Path, chapters: list[Path], controls: bool, disabled: tuple[str, ...] = ()):
    served = tmp / "notebooks"
    served.mkdir()
    for nb in chapters:
        shutil.copy(nb, served / nb.name)
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(tmp / "config"), JUPYTER_DATA_DIR=str(tmp / "data"),
               JUPYTERLAB_SETTINGS_DIR=str(tmp / "settings"), JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp / "workspaces"))
    # every cell in the DOM (JupyterLab 4 renders only the cells in view by default), no news pop-up
    tracker = tmp / "settings" / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
    tracker.parent.mkdir(parents=True)
    tracker.write_text(json.dumps({"windowingMode": "none"}))
    news = tmp / "settings" / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    news.parent.mkdir(parents=True)
    news.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    if disabled:
        labconfig = tmp / "config" / "labconfig"
        labconfig.mkdir(parents=True)
        (labconfig / "page_config.json").write_text(json.dumps({"disabledExtensions": dict.fromkeys(disabled, True)}))
    jupyter = str(Path(sys.executable).parent / "jupyter")
    subprocess.run([jupyter, "trust", *map(str, served.glob("*.ipynb"))], env=env, check=True,
                   capture_output=True)   # what `make lab` does before it starts JupyterLab
    if controls:   # after the trust: an untrusted copy of chapter 02, and a trusted copy with a raw glue role
        add_controls(served, env, jupyter)

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = "agentrl-test"
    log = open(tmp / "lab.log", "w")
    server = subprocess.Popen([jupyter, "lab", "--no-browser", f"--port={port}", f"--IdentityProvider.token={token}",
                               f"--ServerApp.root_dir={served}", "--allow-root"], env=env, stdout=log,
                              stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while True:
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5)
                break
            except OSError:
                if server.poll() is not None or time.time() > deadline:
                    pytest.fail(f"JupyterLab did not start; its log: {tmp / 'lab.log'}")
                time.sleep(1)
        yield base, token, served
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def add_controls(served: Path, env: dict, jupyter: str) -> None:
    """Write the two planted controls beside the chapters: an untrusted copy of chapter 02 and a trusted copy whose
    first prose cell is a Markdown cell with a raw glue role."""
    ch02 = nbformat.read(served / "02_reward.ipynb", as_version=4)
    ch02.metadata["agentrl_control"] = "not trusted"           # another content, so not covered by the trust
    nbformat.write(ch02, served / "control_untrusted.ipynb")
    planted = nbformat.read(served / "02_reward.ipynb", as_version=4)
    i = next(i for i, c in enumerate(planted.cells) if c.cell_type == "code" and c.source.startswith("prose("))
    planted.cells[i] = nbformat.v4.new_markdown_cell("{glue:text}`first_choice` (a paragraph as it was written "
                                                     "before the prose cells)")
    nbformat.write(planted, served / "control_glue.ipynb")
    subprocess.run([jupyter, "trust", str(served / "control_glue.ipynb")], env=env, check=True, capture_output=True)


@pytest.fixture(scope="module")
def page(lab):
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="playwright is not installed: make test installs it (.[dev])")
    with sync_api.sync_playwright() as p:
        try:
            browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS, headless=True)
        except Exception as e:  # no binary at all, or one that does not start
            pytest.skip(f"no Chromium could be started ({str(e).splitlines()[0]}): install Debian's chromium "
                        "(apt-get install -y chromium; make test does it as root) or set CHROMIUM=/path/to/chrome")
        yield browser.new_page(viewport={"width": 1400, "height": 1000})
        browser.close()


def rendered(page, lab, name: str) -> tuple[str, int]:
    """Open `name` in JupyterLab, wait until its kernel is idle and no widget is still loading; returns the text the
    notebook shows (innerText: what is visible, collapsed inputs excluded) and the number of rendered widgets."""
    base, token, _ = lab
    page.goto(f"{base}/lab/tree/{name}?reset&token={token}")   # reset: no tab of the last page
    panel = ".jp-NotebookPanel:not(.lm-mod-hidden)"
    page.wait_for_selector(f"{panel} .jp-Cell", timeout=120_000)
    page.wait_for_function(
        f"""() => {{
            const nb = document.querySelector('{panel} .jp-Notebook');
            return nb && !nb.innerText.includes('Loading widget...')
                   && [...document.querySelectorAll('.jp-StatusBar-TextItem')].some(e => e.innerText.includes('Idle'));
        }}""", timeout=120_000)
    page.wait_for_timeout(2000)   # the widget manager restores the saved state once the kernel is ready
    text = page.evaluate(f"() => document.querySelector('{panel} .jp-Notebook').innerText")
    found = page.locator(f"{panel} .jp-OutputArea-output .jupyter-widgets.widget-container, "
                         f"{panel} .jp-OutputArea-output .widget-toggle-buttons")
    widgets = found.count()
    folds = page.locator(f"{panel} .jp-MarkdownCell details").count()   # the exercises' solution folds, <details>
    boxes = page.locator(f"{panel} .jp-MarkdownCell aside")   # MyST admonitions, as jupyterlab-myst draws them
    SHOTS.mkdir(parents=True, exist_ok=True)   # what the test saw: the first widget, else the top of the chapter
    if widgets:
        found.first.scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / f"jupyterlab_{Path(name).stem}.png"))
    if boxes.count():   # chapter 03's key-equation boxes
        boxes.first.scroll_into_view_if_needed()
        boxes.first.screenshot(path=str(SHOTS / f"jupyterlab_{Path(name).stem}_admonition.png"))
    n_boxes = boxes.count()
    shut_down_kernels(base, token)
    return text, widgets, folds, n_boxes


def shut_down_kernels(base: str, token: str) -> None:
    """Delete every session of the server (each opened notebook starts a kernel of ~150 MB)."""
    with urllib.request.urlopen(f"{base}/api/sessions?token={token}", timeout=30) as r:
        sessions = json.load(r)
    for s in sessions:
        req = urllib.request.Request(f"{base}/api/sessions/{s['id']}?token={token}", method="DELETE")
        urllib.request.urlopen(req, timeout=30).close()


def expected_markup(nb) -> tuple[int, int]:
    """(<details> folds, MyST admonitions) written in a notebook's Markdown cells."""
    md = [c.source for c in nb.cells if c.cell_type == "markdown"]
    return sum(m.count("<details") for m in md), sum(m.count(":::{admonition}") for m in md)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_a_chapter_renders_its_numbers_and_widgets_in_jupyterlab(page, lab, chapter):
    text, widgets, folds, boxes = rendered(page, lab, chapter.name)
    nb = nbformat.read(chapter, as_version=4)
    assert not problems(text, nb), f"{chapter.name} in JupyterLab shows {problems(text, nb)}"
    assert "Cost of this run" in text, f"{chapter.name}: no cost line at the top (agentrl_lib.notebook.ChapterCost)"
    views = widget_views(nb)
    assert widgets >= min(views, 1), f"{chapter.name}: {views} widget outputs stored, {widgets} rendered"
    want_folds, want_boxes = expected_markup(nb)
    assert folds >= want_folds, f"{chapter.name}: {want_folds} <details> folds written, {folds} rendered"
    assert boxes >= want_boxes, f"{chapter.name}: {want_boxes} MyST admonitions written, {boxes} rendered as boxes"


def test_the_check_fails_on_an_untrusted_chapter_and_on_a_raw_glue_role(page, lab):
    text, widgets, _, _ = rendered(page, lab, "control_untrusted.ipynb")
    assert "VBox(" in text and problems(text) and widgets == 0   # an untrusted notebook's widgets stay text
    text, _, _, _ = rendered(page, lab, "control_glue.ipynb")
    planted = nbformat.read(lab[2] / "control_glue.ipynb", as_version=4)
    assert any("glue role" in p for p in problems(text, planted))


def test_the_check_fails_on_chapter_03_without_jupyterlab_myst(page, lab_without_myst):
    """Control: JupyterLab's own Markdown renderer shows chapter 03's key-equation boxes as raw `:::{admonition}`
    text, and draws no box."""
    text, _, _, boxes = rendered(page, lab_without_myst, "03_policy.ipynb")
    assert any("raw MyST directive" in p for p in problems(text)) and boxes == 0
