"""Sphinx configuration for pitrio's documentation.

``nox -s docs`` builds it; tests/test_docs.py builds it with ``-W`` (so CI does).

The Markdown pages are read by MyST as they are. The API reference is generated from
docstrings (autodoc + napoleon). Intersphinx uses only inventories committed in ``_inv/``:
the docs sites are not reachable from where the docs are built, so nothing is downloaded.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

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
autodoc_default_options = {"members": True}  # bases: see _add_bases
autodoc_preserve_defaults = True
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
python_use_unqualified_type_names = True

# Every cross-reference must resolve (tests/test_docs.py builds with -W). Names that
# annotations mention but that live in private modules resolve through
# ``_resolve_missing`` below: to the public name they are exported as, to
# reference/types.md (the aliases and classes a signature shows but no package exports), or
# to httpx's own pages. What is left has no target anywhere and is ignored here, one
# reason per entry.
nitpicky = True
nitpick_ignore_regex = [
    # Type variables (``T``, ``R``): Sphinx documents no TypeVar, so a generic signature's
    # ``EventStream[T, R]`` or ``run_virtual(...) -> T`` has nothing to link to.
    (r"py:(class|obj)", r"pitrio(\.\w+)*\.(T|R|_E|_R|OutputT|DepsT)"),
    # ... also unqualified, where a signature's annotation is a string (Agent.run's
    # overloads name types imported only for type checking)
    (r"py:(class|obj)", r"(OutputT|DepsT)"),
]

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

# -- cross-references the python domain cannot resolve by itself ---------------------------
# httpx's documentation is MkDocs and publishes no objects.inv: its classes link to its API
# page by hand, as does the one cattrs class a signature shows.
_HTTPX = "https://www.python-httpx.org/api/"
_EXTERNAL = {
    "httpx.AsyncClient": _HTTPX + "#asyncclient",
    "httpx.Response": _HTTPX + "#response",
    "httpx.Request": _HTTPX + "#request",
    # cattrs' inventory is not committed in _inv/ (its docs are not reachable from here)
    "cattrs.Converter": "https://catt.rs/en/stable/cattrs.html#cattrs.Converter",
    # nor Hypothesis' (pitrio.testing's strategies return its SearchStrategy)
    "hypothesis.strategies.SearchStrategy": "https://hypothesis.readthedocs.io/en/latest/"
    "reference/api.html#hypothesis.strategies.SearchStrategy",
    # the mcp SDK's types (pitrio.mcp) are the protocol's schema, which the spec documents
    "mcp_types._types.Tool": "https://modelcontextprotocol.io/specification/"
    "2025-11-25/schema#tool",
    "mcp_types._types.CallToolResult": "https://modelcontextprotocol.io/specification/"
    "2025-11-25/schema#calltoolresult",
    "mcp_types._types.Resource": "https://modelcontextprotocol.io/specification/"
    "2025-11-25/schema#resource",
    # OpenTelemetry's API (pitrio.telemetry.OpenTelemetryContext takes its providers; the
    # signature names them bare, as they are imported for type checking only)
    **{
        name: "https://opentelemetry-python.readthedocs.io/en/latest/api/"
        f"{module}.html#opentelemetry.{module}.{name.rsplit('.', 1)[-1]}"
        for module, names in (
            ("trace", ("TracerProvider", "opentelemetry.trace.TracerProvider")),
            ("metrics", ("MeterProvider", "opentelemetry.metrics.MeterProvider")),
        )
        for name in names
    },
}
# Names a signature shows that no package exports (type aliases, a class reached through a
# public one): each is described once in reference/types.md under its private path.
SIGNATURE_TYPES = {
    "JSONValue": "pitrio._messages.JSONValue",
    "ExecuteFn": "pitrio._tools.ExecuteFn",
    "ExecutionMode": "pitrio._tools.ExecutionMode",
    "EmitFn": "pitrio._loop_config.EmitFn",
    "AgentEventStream": "pitrio._loop.AgentEventStream",
    "Handler": "pitrio.harness._hooks.Handler",
    "FileOperations": "pitrio.harness._compaction_utils.FileOperations",
    "ToolSpec": "pitrio._model.ToolSpec",
}
PUBLIC_PACKAGES = [
    "pitrio",
    "pitrio.providers",
    "pitrio.harness",
    "pitrio.testing",
    "pitrio.coding",
    "pitrio.mcp",
    "pitrio.telemetry",
    "pitrio.ui",
    "pitrio.wire",
]


def _resolve_missing(app: Any, env: Any, node: Any, contnode: Any) -> Any:
    """Resolve what the python domain could not: httpx (and cattrs) names to their sites, a
    private module path (``pitrio._model.ToolSpec``) or a bare name used in another module's
    docstring to the public name of the same object, and the names of reference/types.md.
    Anything else stays unresolved (and fails the build)."""
    if node.get("refdomain") != "py":
        return None
    target: str = node["reftarget"]
    if target in _EXTERNAL:
        from docutils import nodes

        site = target.split(".")[0]
        link = nodes.reference(
            "", "", internal=False, refuri=_EXTERNAL[target], reftitle=f"(in {site})"
        )
        link.append(contnode)
        return link
    short = target.rsplit(".", 1)[-1]
    private_path = target.startswith("pitrio.") and "._" in target
    candidates: list[str] = []
    if short in SIGNATURE_TYPES and (
        target == short or private_path or target.endswith("." + short)
    ):
        candidates.append(SIGNATURE_TYPES[short])
    domain = env.get_domain("py")
    if private_path or "." not in target:
        # ``pitrio._model.ToolSpec`` or a bare ``CustomMessage`` in a docstring of another
        # module: the public name of that object, when exactly one package documents it
        public = [f"{package}.{short}" for package in PUBLIC_PACKAGES]
        found = [name for name in public if name in domain.objects]
        if len(found) == 1:
            candidates += found
    for name in candidates:
        if name in domain.objects:
            return domain.resolve_xref(
                env, node["refdoc"], app.builder, "obj", name, node, contnode
            )
    return None


def _public_name(cls: type) -> str | None:
    """``pitrio.harness.HarnessError`` for a class a public package exports, else ``None``."""
    import importlib

    for package in PUBLIC_PACKAGES:
        if package == "pitrio.wire":  # an attribute of pitrio, not a module
            continue
        if getattr(importlib.import_module(package), cls.__name__, None) is cls:
            return f"{package}.{cls.__name__}"
    return None


def _add_bases(app: Any, what: str, name: str, obj: object, options: Any, lines: list[str]) -> None:
    """Start a class's entry with its bases, the ones a reader can follow: not ``object``
    or typing's ``Protocol``/``Generic``, and not a pitrio base no package exports
    (``StoreBase``: shared code whose methods each store documents). Autodoc's own
    ``show-inheritance`` cannot leave these out, so it is off."""
    if what not in ("class", "exception") or not isinstance(obj, type):
        return
    shown = []
    for base in obj.__bases__:
        module = base.__module__
        if base is object or module in ("typing", "abc", "typing_extensions"):
            continue
        if module.startswith("pitrio"):
            public = _public_name(base)
            if public is not None:
                shown.append(f":class:`~{public}`")
        elif module == "builtins":
            shown.append(f":class:`{base.__name__}`")
        else:
            shown.append(f":class:`{module}.{base.__qualname__}`")
    if shown:
        lines[:0] = ["Bases: " + ", ".join(shown), ""]


def setup(app: Any) -> None:
    app.connect("missing-reference", _resolve_missing)
    app.connect("autodoc-process-docstring", _add_bases)


# -- HTML ------------------------------------------------------------------------------------
# furo, the theme attrs, pip and Black use: light and dark, a searchable sidebar, readable
# on a phone.
html_theme = "furo"
html_title = f"pitrio {release}"
