"""The book in a real browser: build it (book/build.py, from the notebooks' stored outputs), open every page in
headless Chromium with the network cut off (only file:// loads), and check what a reader would see.

Per page: no console error, no request to any outside host, math typeset by the vendored MathJax where the page has
math, every <img> decoded. On the policy chapter (notebooks/03_policy, or the book's own widgets page while that
chapter is missing) clicking another algorithm and then another reward of the sweep explorer changes the shown
figure: no kernel runs behind a static page. Screenshots: book/_build/screenshots/index.png, policy.png (and
policy_explorer.png).

Chromium: $CHROMIUM, Debian's `chromium` (`make test` installs it with apt-get when missing and run as root),
`chromium-browser`, `google-chrome`, or Playwright's own download; driven by Playwright's Python package. Without any
of them the browser tests skip with one message.
"""
from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "book" / "_build"
SKIP_PAGES = ("_static", "_sources", "_images")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run", "--disable-default-apps", "--disable-gpu"]


def _build_module():
    from experiments import book_build

    return book_build


def chromium_path() -> str | None:
    """The Chromium binary to drive: $CHROMIUM, else the first on PATH; None (Playwright's own, if installed)."""
    if os.environ.get("CHROMIUM"):
        return os.environ["CHROMIUM"]
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if shutil.which(name):
            return shutil.which(name)
    return None


class NetworkGuard:
    """A Playwright route handler: lets file:// (and data:/blob:) load, aborts every other request and records it.
    Attach with `context.route("**/*", guard)`."""

    def __init__(self):
        self.blocked: list[str] = []

    @staticmethod
    def allowed(url: str) -> bool:
        return url.split(":", 1)[0].lower() in ("file", "data", "blob", "about")

    def __call__(self, route, request=None) -> None:
        url = route.request.url
        if self.allowed(url):
            route.continue_()
        else:
            self.blocked.append(url)
            route.abort()


def test_network_guard_blocks_outside_requests():
    class Route:
        def __init__(self, url):
            self.request = type("R", (), {"url": url})()
            self.done = None

        def continue_(self):
            self.done = "continue"

        def abort(self):
            self.done = "abort"

    guard = NetworkGuard()
    routes = {u: Route(u) for u in ("file:///x/index.html", "https://cdn.jsdelivr.net/npm/x.js",
                                    "http://localhost:8000/a", "data:image/png;base64,AAA", "wss://h/s")}
    for r in routes.values():
        guard(r)
    assert {u: r.done for u, r in routes.items()} == {
        "file:///x/index.html": "continue", "https://cdn.jsdelivr.net/npm/x.js": "abort",
        "http://localhost:8000/a": "abort", "data:image/png;base64,AAA": "continue", "wss://h/s": "abort"}
    assert guard.blocked == ["https://cdn.jsdelivr.net/npm/x.js", "http://localhost:8000/a", "wss://h/s"]


@pytest.fixture(scope="module")
def site() -> Path:
    """The book built now into book/_build (html/, and screenshots/ by the tests)."""
    pytest.importorskip("jupyter_book", reason="jupyter-book<2 is not installed: make test installs it (.[dev])")
    index = _build_module().build(BUILD)
    return index.parent


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="playwright is not installed: make test installs it (.[dev])")
    exe = chromium_path()
    with sync_api.sync_playwright() as p:
        try:
            b = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS, headless=True)
        except Exception as e:  # no binary at all, or one that does not start
            pytest.skip(f"no Chromium could be started ({str(e).splitlines()[0]}): install Debian's chromium "
                        "(apt-get install -y chromium; make test does it as root) or set CHROMIUM=/path/to/chrome")
        yield b
        b.close()


def pages(html: Path) -> list[Path]:
    return sorted(p for p in html.rglob("*.html") if p.relative_to(html).parts[0] not in SKIP_PAGES)


def policy_page(html: Path) -> Path:
    p = html / "notebooks" / "03_policy.html"
    return p if p.exists() else html / "widgets_without_a_kernel.html"


UNRENDERED = ("Array.from(document.querySelectorAll('script[type=\"application/vnd.jupyter.widget-view+json\"]'))"
              ".filter(s => !s.parentElement.querySelector('.widget-subarea .lm-Widget')).length")


class Visit:
    """One page opened in a fresh context with the network guard; collects console errors and page errors."""

    def __init__(self, browser, path: Path):
        self.guard = NetworkGuard()
        self.errors: list[str] = []
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        self.context.route("**/*", self.guard)
        self.page = self.context.new_page()
        self.page.on("console", lambda m: self.errors.append(f"console.{m.type}: {m.text}") if m.type == "error"
                     else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
        self.page.on("requestfailed", lambda r: None if r.url in self.guard.blocked
                     else self.errors.append(f"failed to load {r.url}: {r.failure}"))
        self.page.goto(path.as_uri(), wait_until="load")
        html = path.read_text(errors="replace")
        self.has_math = 'class="math' in html
        self.has_widgets = "application/vnd.jupyter.widget-view+json" in html
        if self.has_math:  # MathJax 3 resolves startup.promise once the page is typeset
            try:
                self.page.wait_for_function("window.MathJax && window.MathJax.startup && "
                                            "window.MathJax.startup.promise", timeout=15_000)
                self.page.evaluate("() => window.MathJax.startup.promise.then(() => true)")
            except Exception as e:  # reported by the tests: no mjx-container, and why (blocked request, error)
                self.errors.append(f"MathJax did not start: {str(e).splitlines()[0]}")
        self.unrendered = 0
        if self.has_widgets:  # the embed manager renders each view next to its <script> tag, in a .widget-subarea
            try:
                self.page.wait_for_function(f"() => {UNRENDERED} === 0", timeout=30_000)
            except Exception:
                pass
            self.unrendered = self.page.evaluate(f"() => {UNRENDERED}")
        self.page.wait_for_timeout(300)

    def close(self):
        self.context.close()


@pytest.mark.slow
@pytest.mark.subprocess
def test_every_page_offline(site, browser):
    """Every page: no console error, no outside request, math typeset, every image decoded."""
    problems, checked = [], {"pages": 0, "math": 0, "widgets": 0, "images": 0}
    for path in pages(site):
        name = str(path.relative_to(site))
        v = Visit(browser, path)
        try:
            checked["pages"] += 1
            problems += [f"{name}: {e}" for e in v.errors]
            problems += [f"{name}: request to an outside host: {u}" for u in v.guard.blocked]
            if v.has_math:
                checked["math"] += 1
                n = v.page.locator("mjx-container").count()
                if n == 0:
                    problems.append(f"{name}: has math but no MathJax output (mjx-container)")
            if v.has_widgets:
                checked["widgets"] += 1
                if v.unrendered:
                    problems.append(f"{name}: {v.unrendered} widget output(s) not rendered (no widget state saved "
                                    "with the notebook, or the embed manager failed: see the console errors)")
            images = v.page.evaluate("() => Array.from(document.images).map(i => [i.src.slice(0, 80), "
                                     "i.complete, i.naturalWidth])")
            checked["images"] += len(images)
            problems += [f"{name}: image not decoded: {src}" for src, done, w in images if not done or w == 0]
            if path.name == "index.html":
                (BUILD / "screenshots").mkdir(exist_ok=True)
                v.page.screenshot(path=str(BUILD / "screenshots" / "index.png"))
        finally:
            v.close()
    print(f"checked {checked}")
    assert checked["pages"] >= 5 and checked["math"] >= 1 and checked["widgets"] >= 1, checked
    assert not problems, "\n".join(problems)


TABLES_IN_OUTPUTS = """() => {
  const outs = Array.from(document.querySelectorAll('.cell_output'));
  const tables = outs.reduce((n, o) => n + o.querySelectorAll('table').length, 0);
  // a Markdown table left as text: a paragraph of pipes with a |:-- or |--- separator row
  const raw = outs.flatMap(o => Array.from(o.querySelectorAll('p')))
    .filter(p => /^\\s*\\|/.test(p.textContent) && /\\|\\s*:?-{2,}/.test(p.textContent)).length;
  return [tables, raw];
}"""


def markdown_tables(notebook: Path) -> int:
    """The pipe tables in a notebook's stored Markdown outputs (text/markdown): a separator row `|:--|...` or
    `|---|...` after a header row."""
    import json
    import re

    n = 0
    for cell in json.loads(notebook.read_text())["cells"]:
        for out in cell.get("outputs", []):
            text = out.get("data", {}).get("text/markdown")
            if text:
                text = "".join(text) if isinstance(text, list) else text
                n += len(re.findall(r"^\|[^\n]*\|\s*\n\|\s*:?-{2,}", text, flags=re.M))
    return n


@pytest.mark.slow
@pytest.mark.subprocess
def test_results_tables_render_as_tables(site, browser):
    """Every results table a chapter or the benchmarks page displays (a Markdown output: verdicts, hyperparameters,
    sweep reports, per-run tables, the benchmarks) is an HTML <table> in the book, not a paragraph of pipes: myst-nb
    renders Markdown outputs as MyST (book/_config.yml nb_render_markdown_format), where CommonMark, its default, has
    no tables. Control: the same count on a planted page whose output holds a table as raw text (what the book showed
    before) finds it."""
    checked = {}
    for nb in [*sorted((ROOT / "notebooks").glob("0*.ipynb")), ROOT / "book" / "benchmarks.ipynb"]:
        page = site / nb.relative_to(ROOT).with_suffix(".html") if nb.parent.name == "notebooks" \
            else site / f"{nb.stem}.html"  # the book's pages that are notebooks sit at the site's top
        want = markdown_tables(nb)
        v = Visit(browser, page)
        try:
            tables, raw = v.page.evaluate(TABLES_IN_OUTPUTS)
        finally:
            v.close()
        checked[nb.stem] = (want, tables)
        assert raw == 0, f"{nb.stem}: {raw} results table(s) shown as raw pipe text"
        assert tables >= want, f"{nb.stem}: {want} Markdown tables in its outputs, {tables} <table> in the book"
    assert sum(w for w, _ in checked.values()) >= 20, checked  # the chapters hold their results tables
    planted = BUILD / "planted_raw_table.html"
    planted.write_text('<div class="cell_output"><p>| finding | verdict |\n|:--|:--|\n| a | agrees |</p></div>')
    v = Visit(browser, planted)
    try:
        assert v.page.evaluate(TABLES_IN_OUTPUTS) == [0, 1]
    finally:
        v.close()
        planted.unlink()


VISIBLE_FIGURES = """el => Array.from(el.querySelectorAll('img'))
  .filter(i => i.offsetParent !== null && i.getBoundingClientRect().width > 0).map(i => i.src)"""


MARK_EXPLORERS = """() => {
  const roots = [];
  for (const g of document.querySelectorAll('.widget-toggle-buttons')) {
    const root = g.closest('.widget-vbox');
    if (root && root.querySelector('img') && !roots.includes(root)) roots.push(root);  // toggles over figures
  }
  // a partial grid's explorer carries a toggle on each page of its outer Stack: one explorer, the outermost box
  const outer = roots.filter(r => !roots.some(o => o !== r && o.contains(r)));
  outer.forEach((r, i) => r.setAttribute('data-explorer', String(i)));
  return outer.length;
}"""


MAIN_SWEEP = ROOT / "results" / "algo_reward.jsonl"
"""The records chapters 02 and 03's explorers show; absent while the findings' main sweep runs (results/incoming/)."""


def required_explorer_pages(site: Path) -> list[Path]:
    """Pages that must show a working algorithm × reward explorer: the book's widgets page, and the policy page and
    the reward chapter (when it exists) once the main sweep's results file is committed; before that those two
    chapters print why they show none (test_chapters_say_why_their_explorer_is_missing)."""
    chapters = [policy_page(site), site / "notebooks" / "02_reward.html"] if MAIN_SWEEP.exists() else []
    pages_ = [*chapters, site / "widgets_without_a_kernel.html"]
    return list(dict.fromkeys(p for p in pages_ if p.exists() or p == policy_page(site)))


@pytest.mark.slow
@pytest.mark.subprocess
def test_chapters_say_why_their_explorer_is_missing(site):
    """Without results/algo_reward.jsonl chapters 02 and 03 show no explorer, and each says which file is missing and
    the command that writes it (the stored output of their explorer cell), instead of an empty space."""
    if MAIN_SWEEP.exists():
        pytest.skip("results/algo_reward.jsonl is committed: test_sweep_explorers_switch_without_kernel checks them")
    for name in ("02_reward", "03_policy"):
        text = (site / "notebooks" / f"{name}.html").read_text(errors="replace")
        assert "results/algo_reward.jsonl is not in this checkout yet" in text, name
        assert "python results/regenerate.py main" in text, name


def check_explorers(browser, site: Path, path: Path, required: bool, screenshot: Path | None) -> tuple[list[str], int]:
    """Click the second button of every toggle group of every sweep explorer on the page (an explorer: a VBox of
    ToggleButtons over nested Stacks of figures); each click must change the one visible figure. A required page must
    have an explorer with two toggle groups (algorithm and reward). Returns (problems, clicks checked)."""
    name = str(path.relative_to(site))
    if not path.exists():
        return [f"{name} is missing from the book"], 0
    v = Visit(browser, path)
    try:
        page = v.page
        n = page.evaluate(MARK_EXPLORERS)
        groups_per = [page.locator(f"[data-explorer='{i}'] .widget-toggle-buttons:visible").count() for i in range(n)]
        problems, clicks = [], 0
        if required and not any(g >= 2 for g in groups_per):
            return [f"{name}: no algorithm × reward sweep explorer rendered (toggle groups per explorer: "
                    f"{groups_per}; {v.unrendered} widget outputs not rendered). Its notebook must be executed with "
                    "the results present and saved with the widget state: jupyter nbconvert --to notebook --execute "
                    "--inplace --ExecutePreprocessor.store_widget_state=True NOTEBOOK"], 0
        for i in range(n):
            explorer = page.locator(f"[data-explorer='{i}']")
            explorer.scroll_into_view_if_needed()

            def shown() -> tuple[str, str]:
                srcs = explorer.evaluate(VISIBLE_FIGURES)
                assert len(srcs) == 1, f"{name}: {len(srcs)} figures visible in explorer {i}, expected 1"
                shot = [im for im in explorer.locator("img").all() if im.is_visible()][0].screenshot()
                return srcs[0], hashlib.sha256(shot).hexdigest()

            before = shown()
            for k in range(groups_per[i]):
                group = explorer.locator(".widget-toggle-buttons:visible").nth(k)  # a page's own toggle: the shown
                buttons = group.locator("button")
                if buttons.count() < 2:
                    continue
                label = buttons.nth(1).inner_text()
                buttons.nth(1).click()
                page.wait_for_timeout(300)
                after = shown()
                clicks += 1
                if after[0] == before[0] or after[1] == before[1]:
                    problems.append(f"{name}: explorer {i}: clicking {label!r} did not change the figure")
                before = after
            if screenshot and i == 0:  # the page around the explorer, and the explorer alone
                screenshot.parent.mkdir(exist_ok=True)
                explorer.scroll_into_view_if_needed()
                page.screenshot(path=str(screenshot))
                explorer.screenshot(path=str(screenshot.with_name(screenshot.stem + "_explorer.png")))
        problems += [f"{name}: {e}" for e in v.errors] + [f"{name}: outside request {u}" for u in v.guard.blocked]
        return problems, clicks
    finally:
        v.close()


@pytest.mark.slow
@pytest.mark.subprocess
def test_sweep_explorers_switch_without_kernel(site, browser):
    """On the policy page (and the reward chapter, the widgets page, every page with a rendered sweep explorer),
    clicking another algorithm, then another reward, shows another figure. The policy page's explorer is saved as
    book/_build/screenshots/policy.png."""
    required = required_explorer_pages(site)
    others = [p for p in pages(site) if p not in required
              and "application/vnd.jupyter.widget-view+json" in p.read_text(errors="replace")]
    problems, checked = [], {}
    for path in required + others:
        shot = BUILD / "screenshots" / "policy.png" if path == required[0] else None
        found, clicks = check_explorers(browser, site, path, path in required, shot)
        problems += found
        checked[str(path.relative_to(site))] = clicks
    print("toggle clicks checked per page:", checked)
    assert not problems, "\n".join(problems)
