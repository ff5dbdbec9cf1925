"""Sphinx extension of the workbook's book (book/_config.yml: local_extensions).

1. Shows the library's docstrings as they are written (plain text with aligned columns, equations in Unicode,
   shapes like `(B, T) float32`), as preformatted blocks, instead of parsing them as reStructuredText: agentrl_lib's
   docstrings follow the project's style (read in an editor and with `help()`), and parsed as RST `<|im_start|>` is
   a substitution and an indented continuation an error. Signatures, the module index and the search still come
   from autodoc.
2. Drops a script repeated in a page's head: sphinx-thebe's `const THEBE_JS_URL = ...` configuration is added twice
   under Jupyter Book 1.0.4, and the second copy is a console error ("Identifier 'THEBE_JS_URL' has already been
   declared") on every page.
"""
from __future__ import annotations


def _verbatim(app, what, name, obj, options, lines: list[str]) -> None:
    text = [line.rstrip() for line in lines]
    while text and not text[-1]:
        text.pop()
    if not text:
        return
    lines[:] = ([".. code-block:: text", "   :class: docstring", ""] + [f"   {line}" if line else "" for line in text]
                + [""])


def _dedupe_scripts(app, pagename, templatename, context, doctree) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, kept = set(), []
    for js in scripts:
        key = (str(getattr(js, "filename", js) or ""), repr(sorted(getattr(js, "attributes", {}).items())))
        if key in seen:
            continue
        seen.add(key)
        kept.append(js)
    scripts[:] = kept


def setup(app):
    app.connect("autodoc-process-docstring", _verbatim)
    app.connect("html-page-context", _dedupe_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
