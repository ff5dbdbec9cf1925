"""Build the workbook as a Jupyter Book (1.x) that works opened from disk, with no network and no kernel.

    python book/build.py                 # HTML from the notebooks' stored outputs → book/_build/html/index.html
    python book/build.py --execute       # re-execute every chapter first (AGENTRL_FAST=1 for the fast mode)
    python book/build.py --out DIR       # build elsewhere (DIR/html/index.html); the browser test does this
    python book/build.py --readme-figure # README's picture from chapter 00's stored output (after re-executing it)

What it does:
1. Vendors MathJax 3, require.js and the ipywidgets embed manager: the npm tarballs are downloaded once from the
   npm registry into a cache ($AGENTRL_HOME/npm, default ~/.cache/agentrl/npm), checked against the sha512 pinned
   below, and the few files a page needs are unpacked into the site's `_static/vendor/`. Nothing is loaded from a
   CDN, nothing large is committed. (Not under the book's `_static`: Jupyter Book 1 would inject every .js there into
   every page.)
2. Assembles the sources in DIR/src: book/*.md (the guides moved from the README, and the findings page, whose
   generated tables — results/findings.py — are refreshed), book/*.ipynb (the pages that are notebooks, the
   benchmarks among them: their committed outputs, as the chapters'), notebooks/NN_*.ipynb (in order of their
   number; a chapter that does not exist yet is simply absent), the page generated from the library (the metrics
   glossary of agentrl_lib.metrics) and the table of contents.
3. Runs `jupyter-book build` with Sphinx warnings as errors (-W; a broken internal link is a warning), then checks
   every relative href/src of the built HTML points to a file of the site.
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path

from experiments import ROOT  # the checkout: experiments.checkout_root

BOOK = ROOT / "book"

# npm packages the static pages need: (name, version, sha512 integrity from the registry, files to unpack
# {path in the tarball (prefix) → path under _static/vendor/})
VENDOR = [
    ("mathjax", "3.2.2",
     "sha512-Bt+SSVU8eBG27zChVewOicYs7Xsdt40qm4+UpHyX7k0/O9NliPc+x77k1/FEsPsjKPZGJvtRZM1vO+geW0OhGw==",
     {"package/es5/tex-chtml.js": "mathjax/tex-chtml.js",
      "package/es5/output/chtml/fonts/": "mathjax/output/chtml/fonts/",
      "package/es5/input/tex/extensions/": "mathjax/input/tex/extensions/",  # autoloaded macros (\boldsymbol, ...)
      "package/es5/a11y/": "mathjax/a11y/",
      "package/es5/ui/": "mathjax/ui/",
      "package/LICENSE": "mathjax/LICENSE"}),
    ("requirejs", "2.3.8",
     "sha512-7/cTSLOdYkNBNJcDMWf+luFvMriVm7eYxp4BcFCsAX0wF421Vyce5SXP17c+Jd5otXKGNehIonFlyQXSowL6Mw==",
     {"package/require.js": "require.js", "package/README.md": "requirejs-README.md"}),
    ("@jupyter-widgets/html-manager", "1.0.15",
     "sha512-5thBIV6ymNgmPVOHvzx+gGy8ZSKmSazhtGw4/c4xJDVzRhG9PTeQsRjF3FUTopvFi//SABeNz1yp47bCrJ3CQA==",
     {"package/dist/embed-amd.js": "html-manager/embed-amd.js",
      "package/LICENSE": "html-manager/LICENSE",
      # the Font Awesome fonts the bundle's CSS refers to, next to it (webpack emits them by content hash)
      "package/dist/": "html-manager/"}),
]
FONT_SUFFIXES = (".woff2", ".woff", ".ttf")  # what the bundled CSS offers a current browser
REGISTRY = os.environ.get("NPM_REGISTRY", "https://registry.npmjs.org").rstrip("/")

# the guides after the chapters (the reference that used to be the README), then the results and reference pages,
# in order (book/NAME.md or .ipynb, or generated below)
GUIDES = ["demo", "install", "command_line", "design", "environments", "extending", "scaling", "vllm",
          "when_things_go_wrong"]
BACK_MATTER = ["findings", "benchmarks", "glossary", "papers", "the_book", "widgets_without_a_kernel", "api"]


README_FIGURE = BOOK / "figures" / "quickstart_learning_curves.png"
"""README's picture: the learning curves chapter 00 stored (tests/test_packaging.py checks it is that output)."""


def quickstart_figure() -> bytes:
    """The PNG of chapter 00's learning curves: the first image output of its cells that train (`run_rl(`) or plot
    the curves (`plot_learning_curves(`). Raises LookupError when the chapter has no such stored output."""
    nb = json.loads((ROOT / "notebooks" / "00_quickstart.ipynb").read_text())
    for cell in nb["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and ("run_rl(" in source or "plot_learning_curves(" in source):
            for out in cell.get("outputs", []):
                if "image/png" in out.get("data", {}):
                    return base64.b64decode(out["data"]["image/png"])
    raise LookupError("notebooks/00_quickstart.ipynb stores no learning-curve image: execute it first")


def log(msg: str) -> None:
    print(f"[book] {msg}", flush=True)


def npm_cache() -> Path:
    return Path(os.environ.get("AGENTRL_HOME", Path.home() / ".cache" / "agentrl")) / "npm"


def fetch_tarball(name: str, version: str, integrity: str) -> bytes:
    """The package's npm tarball, from the cache or the registry; raises RuntimeError when its sha512 differs."""
    path = npm_cache() / f"{name.replace('/', '+')}-{version}.tgz"
    algo, want = integrity.split("-", 1)
    if path.exists():
        data = path.read_bytes()
    else:
        url = f"{REGISTRY}/{name}/-/{name.split('/')[-1]}-{version}.tgz"
        log(f"downloading {url}")
        try:
            with urllib.request.urlopen(url, timeout=120) as r:
                data = r.read()
        except OSError as e:
            raise RuntimeError(f"cannot download {url} ({e}); the book vendors it once into {path.parent}: "
                               f"copy the tarball there by hand on a machine without the npm registry") from None
    got = base64.b64encode(hashlib.new(algo, data).digest()).decode()
    if got != want:
        raise RuntimeError(f"{name}@{version}: {algo} {got} differs from the pinned {want}; delete {path}")
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    return data


def vendor(dest: Path) -> None:
    """Unpack the files of VENDOR into dest (becomes the site's _static/vendor/)."""
    stamp = dest / ".versions"
    want = json.dumps([(n, v) for n, v, _, _ in VENDOR])
    if stamp.exists() and stamp.read_text() == want:
        return
    shutil.rmtree(dest, ignore_errors=True)
    for name, version, integrity, files in VENDOR:
        with tarfile.open(fileobj=io.BytesIO(fetch_tarball(name, version, integrity)), mode="r:gz") as tar:
            for member in tar.getmembers():
                if not member.isfile():
                    continue
                for src, out in files.items():
                    if src.endswith("/"):
                        if not member.name.startswith(src):
                            continue
                        rel = member.name[len(src):]
                        if src == "package/dist/" and not rel.endswith(FONT_SUFFIXES):
                            continue
                        target = dest / out / rel
                    elif member.name == src:
                        target = dest / out
                    else:
                        continue
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(tar.extractfile(member).read())
                    break
    stamp.write_text(want)


def chapters() -> list[Path]:
    """notebooks/NN_name.ipynb in the order of NN."""
    return sorted(p for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def book_page(name: str, text: str, present: set[str], numbers: dict[str, str] | None = None) -> str:
    """A book/NAME.md page as the book shows it: its generated tables refreshed (findings.md: results/findings.py),
    the benchmark numbers its prose marks rewritten (experiments/benchmarks/page_numbers.py, from `numbers` when
    given; the committed copies are kept current by tests) and its links to chapters (`../notebooks/NN_x.ipynb`, right
    on GitHub) made relative to the book's sources (`notebooks/NN_x.ipynb`), or dropped for a chapter that is not in
    the book yet. The benchmarks page is a notebook (book/benchmarks.ipynb): the book shows its committed outputs."""
    if name == "findings":
        from experiments import findings_page as findings

        text = findings.with_block(text, findings.findings_table())
        text = findings.with_block(text, findings.cost_table(), findings.COST_START, findings.COST_END)
    elif "<!-- n:" in text:  # prose that quotes benchmark numbers (page_numbers.MARK)
        from experiments.benchmarks.page_numbers import with_numbers

        text = with_numbers(text, numbers)

    def link(m: re.Match) -> str:
        return f"[{m.group(1)}](notebooks/{m.group(2)}.ipynb)" if m.group(2) in present \
            else f"{m.group(1)} (not written yet)"

    return re.sub(r"\[([^\]]+)\]\(\.\./notebooks/([0-9][0-9]_[A-Za-z0-9_]+)\.ipynb\)", link, text)


def generated_pages(present: set[str]) -> dict[str, str]:
    """The pages written from the library at build time: {name: MyST Markdown}."""
    from agentrl_lib import metrics

    glossary = f"""# Glossary of the logged metrics

Every key the trainer writes to `metrics.jsonl`, one row per key, rendered when the book is built from
`agentrl_lib.metrics.METRICS` (`glossary_markdown()`; the library refuses to log a key it does not declare). Each
chapter shows the rows it reads.

{metrics.glossary_markdown()}
"""
    return {"glossary": glossary}


def toc(chapter_names: list[str], guides: list[str], back: list[str]) -> str:
    lines = ["# Generated by book/build.py from notebooks/NN_*.ipynb and the book's pages", "format: jb-book",
             "root: intro", "parts:", "  - caption: Chapters", "    numbered: false", "    chapters:"]
    lines += [f"      - file: notebooks/{c}" for c in chapter_names]
    lines += ["  - caption: Using the library", "    chapters:"]
    lines += [f"      - file: {g}" for g in guides]
    lines += ["  - caption: Results and reference", "    chapters:"]
    lines += [f"      - file: {b}" for b in back]
    return "\n".join(lines) + "\n"


def execute(nb: Path, out: Path) -> None:
    """Run one notebook (cwd = its folder, as in JupyterLab) and write it with outputs and widget state to out."""
    log(f"executing {nb.relative_to(ROOT)} (AGENTRL_FAST={os.environ.get('AGENTRL_FAST', '0')})")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, "-m", "nbconvert", "--to", "notebook", "--execute",
                    "--ExecutePreprocessor.timeout=3000", "--ExecutePreprocessor.store_widget_state=True",
                    "--output-dir", str(out.parent), "--output", out.name, str(nb)], check=True, env=env)


def assemble(src: Path, run_notebooks: bool) -> list[str]:
    """Write the book's sources into src; returns the chapter names."""
    vendor_dir = src / "_vendor" / "vendor"
    keep = src / "_vendor"
    if src.exists():  # keep the unpacked vendor files and unchanged sources (Sphinx rebuilds what changed)
        for p in src.iterdir():
            if p != keep:
                shutil.rmtree(p) if p.is_dir() else p.unlink()
    src.mkdir(parents=True, exist_ok=True)
    vendor(vendor_dir)
    for f in (BOOK / "_assets").iterdir():  # the book's own small scripts and CSS, beside the vendored ones
        shutil.copy2(f, vendor_dir / f.name)
    for p in BOOK.iterdir():
        if p.suffix == ".md" and p.with_suffix(".ipynb").exists():
            continue  # a jupytext source: the executed .ipynb (outputs, widget state) is the page
        if p.suffix in (".md", ".ipynb", ".yml", ".bib") and p.name != "_toc.yml":
            shutil.copy2(p, src / p.name)
    shutil.copytree(BOOK / "_ext", src / "_ext", ignore=shutil.ignore_patterns("__pycache__"))
    (src / "notebooks").mkdir()
    names = []
    for nb in chapters():
        names.append(nb.stem)
        out = src / "notebooks" / nb.name
        if run_notebooks:
            execute(nb, out)
        else:
            shutil.copy2(nb, out)
    if run_notebooks:
        for nb in BOOK.glob("*.ipynb"):
            execute(nb, src / nb.name)
    for name, text in generated_pages(set(names)).items():
        (src / f"{name}.md").write_text(text)
    from experiments.benchmarks.page_numbers import numbers as page_numbers

    numbers = page_numbers()  # every results file read once for all pages
    for page in src.glob("*.md"):
        page.write_text(book_page(page.stem, page.read_text(), set(names), numbers))
    guides, back = ([b for b in part if (src / f"{b}.md").exists() or (src / f"{b}.ipynb").exists()]
                    for part in (GUIDES, BACK_MATTER))
    (src / "_toc.yml").write_text(toc(names, guides, back))
    return names


LINK = re.compile(r"""(?:href|src)=["']([^"'#?]+)(?:[#?][^"']*)?["']""")


def check_links(html: Path) -> list[str]:
    """Relative href/src of every built page whose target file is missing: ["page: target", ...]."""
    bad = []
    for page in html.rglob("*.html"):
        if page.relative_to(html).parts[0] in ("_static", "_sources"):
            continue  # the theme's template macros, not pages
        for target in LINK.findall(page.read_text(errors="replace")):
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("//"):
                continue  # http(s):, mailto:, data:, javascript: — not a file of the site
            path = (html / target.lstrip("/")) if target.startswith("/") else (page.parent / target)
            if not path.exists():
                bad.append(f"{page.relative_to(html)}: {target}")
    return bad


def build(out: Path, run_notebooks: bool = False) -> Path:
    """Build the book into out/html; returns the path of index.html. Raises RuntimeError on a failed build."""
    t0 = time.time()
    out = out.resolve()
    src = out / "src"
    names = assemble(src, run_notebooks)
    log(f"{len(names)} chapters: {', '.join(names)}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "PYDEVD_DISABLE_FILE_VALIDATION": "1", "MPLBACKEND": "Agg"}
    shutil.rmtree(out / "jb", ignore_errors=True)  # a full build: no page of a removed chapter left behind
    jb = [sys.executable, "-c", "from jupyter_book.cli.main import main; main()"]
    # JB writes to <path-output>/_build/html: build into out/jb, then move html to out/html
    cmd = [*jb, "build", str(src), "--path-output", str(out / "jb"), "--builder", "html", "-W", "--keep-going", "--all"]
    r = subprocess.run(cmd, env=env, cwd=ROOT)
    if r.returncode:
        raise RuntimeError(f"jupyter-book build failed (exit {r.returncode}): see the warnings above")
    html = out / "html"
    if html.is_symlink() or html.is_file():
        html.unlink()
    elif html.exists():
        shutil.rmtree(html)
    shutil.copytree(out / "jb" / "_build" / "html", html)
    (html / ".nojekyll").touch()  # GitHub Pages from a branch: serve _static/ as it is (no Jekyll)
    bad = check_links(html)
    if bad:
        raise RuntimeError("broken internal links:\n  " + "\n  ".join(bad))
    size = sum(p.stat().st_size for p in html.rglob("*") if p.is_file())
    log(f"built {html / 'index.html'} in {time.time() - t0:.0f} s; {size / 2**20:.1f} MiB, "
        f"{sum(1 for p in html.rglob('*.html') if not p.relative_to(html).parts[0].startswith('_'))} pages; "
        f"open it from disk: file://{html / 'index.html'}")
    return html / "index.html"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=BOOK / "_build", help="build folder (default book/_build)")
    p.add_argument("--execute", action="store_true",
                   help="re-execute every notebook first (slow; AGENTRL_FAST=1 for the fast mode)")
    p.add_argument("--readme-figure", action="store_true",
                   help=f"only write README's picture ({README_FIGURE.relative_to(ROOT)}) from chapter 00's output")
    a = p.parse_args()
    if a.readme_figure:
        README_FIGURE.parent.mkdir(exist_ok=True)
        README_FIGURE.write_bytes(quickstart_figure())
        log(f"wrote {README_FIGURE.relative_to(ROOT)}")
        return
    try:
        build(a.out, a.execute)
    except RuntimeError as e:
        sys.exit(f"book/build.py: error: {e}")


if __name__ == "__main__":
    main()
