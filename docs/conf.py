"""Sphinx configuration for pitrio's documentation.

``nox -s docs`` builds it; tests/test_docs.py builds it with ``-W`` (so CI does).

The Markdown pages are read by MyST as they are. The API reference is generated from
docstrings (autodoc + napoleon). Intersphinx uses only inventories committed in ``_inv/``:
the docs sites are not reachable from where the docs are built, so nothing is downloaded.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import pitrio  # noqa: E402

project = "pitrio"
author = "the pitrio authors"
copyright = "2026, the pitrio authors"
release = pitrio.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.intersphinx",
    "sphinx.ext.viewcode",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "examples", "_inv", "Thumbs.db", ".DS_Store"]

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# -- API reference ---------------------------------------------------------------------------
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_format = "short"
autodoc_class_signature = "separated"
autodoc_default_options = {"members": True, "show-inheritance": False}
autodoc_preserve_defaults = True
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
python_use_unqualified_type_names = True

# Annotations naming things no page documents (private modules, third-party types without an
# inventory) would each be a "reference target not found" warning: they are not checked.
nitpicky = False

# -- intersphinx: offline, from committed inventories only -----------------------------------
# docs/_inv/ holds objects.inv files: Python 3.11 and attrs 22.2 from Debian's documentation
# packages (python3.11-doc, python-attr-doc); trio 0.35.0 built from the docs sources in trio's
# sdist (its intersphinx pointed at the Python inventory here). A site with no file there is
# not linked: nothing is downloaded at build time. httpx's documentation is MkDocs and
# publishes no Sphinx inventory, so httpx names are not linked.
_INVENTORIES = {
    "python": "https://docs.python.org/3.11",
    "attrs": "https://www.attrs.org/en/stable",
    "trio": "https://trio.readthedocs.io/en/stable",
}
intersphinx_mapping = {
    name: (url, str(HERE / "_inv" / f"{name}.inv"))
    for name, url in _INVENTORIES.items()
    if (HERE / "_inv" / f"{name}.inv").is_file()
}
intersphinx_timeout = 1

# -- HTML ------------------------------------------------------------------------------------
html_theme = "alabaster"
html_title = f"pitrio {release}"
html_theme_options = {
    "description": "Trio-native agents: a faithful port of Pi's agent runtime",
    "fixed_sidebar": True,
    "page_width": "1160px",
    "body_max_width": "none",
}
