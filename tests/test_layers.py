"""The layering CONTRIBUTING.md describes, read from the source: no import circle between
the modules of one package, and layers that point down only.

Every import counts: at the top of a module, inside a function (a lazy import) and under
``if TYPE_CHECKING:`` (a circle of types is a circle of meaning too).
"""

from __future__ import annotations

import ast
import pathlib
from collections.abc import Iterator

import pitrio

ROOT = pathlib.Path(pitrio.__file__).parent


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, pathlib.Path]:
    return {_module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


MODULES = _modules()


def _imported(name: str, path: pathlib.Path) -> Iterator[str]:
    """The pitrio modules that module ``name`` (at ``path``) imports, anywhere in it."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            # ``from . import _x`` and ``from .pkg import _y`` import modules too
            targets = [module, *(f"{module}.{alias.name}" for alias in node.names)]
        else:
            continue
        for target in targets:
            if target in MODULES and target != name:
                yield target


GRAPH: dict[str, set[str]] = {name: set(_imported(name, path)) for name, path in MODULES.items()}

DISPATCH = {("pitrio.cli._main", "pitrio.web"), ("pitrio.cli._main", "pitrio.web._serve")}
"""The one import against the layers (``from pitrio.web import _serve``): ``pitrio serve``
hands its arguments to the web server (lazily, in ``pitrio.cli._main._serve``)."""


def _child(package: str, module: str) -> str | None:
    """The module or subpackage directly in ``package`` that ``module`` is or is in."""
    prefix = package + "."
    if not module.startswith(prefix):
        return None
    return prefix + module[len(prefix) :].split(".")[0]


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One circle of ``edges`` (its nodes, the first repeated at the end), if any."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def _packages() -> list[str]:
    return sorted(name for name, path in MODULES.items() if path.name == "__init__.py")


def test_the_graph_sees_lazy_and_relative_imports() -> None:
    # the scanner itself: a lazy relative import in a function, and a package's own
    # ``from . import _x``
    assert "pitrio.cli._run" in GRAPH["pitrio.cli._main"]  # imported inside main()
    assert "pitrio.cli._interactive" in GRAPH["pitrio.cli._run"]  # inside run_app()
    assert "pitrio.cli._app" in GRAPH["pitrio.cli._interactive"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_no_import_circle_between_the_modules_of_a_package() -> None:
    """Within each package, its modules and subpackages (the package's own
    ``__init__``, its front door, aside) import each other in one direction only."""
    circles = {}
    for package in _packages():
        edges: dict[str, set[str]] = {}
        for module, targets in GRAPH.items():
            source = _child(package, module)
            if source is None:
                continue
            edges.setdefault(source, set())
            for target in targets:
                if (module, target) in DISPATCH:
                    continue
                child = _child(package, target)
                if child is not None and child != source:
                    edges[source].add(child)
        if (found := _cycle(edges)) is not None:
            circles[package] = " -> ".join(found)
    assert circles == {}


def _imports_of(prefix: str) -> dict[str, set[str]]:
    return {
        name: targets
        for name, targets in GRAPH.items()
        if name == prefix or name.startswith(prefix + ".")
    }


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _violations(modules: dict[str, set[str]], forbidden: set[str]) -> list[str]:
    return sorted(
        f"{name} imports {target}"
        for name, targets in modules.items()
        for target in targets
        if _layer(target) in forbidden
    )


APPLICATIONS = {"providers", "harness", "cli", "web", "ui", "coding", "mcp", "worker", "testing"}


def test_the_kernel_imports_no_layer_above_it() -> None:
    """``pitrio`` and its private modules and packages (``__main__``, the ``python -m
    pitrio`` door to the CLI, aside)."""
    kernel = {
        name: targets
        for name, targets in GRAPH.items()
        if name == "pitrio" or (_layer(name).startswith("_") and name != "pitrio.__main__")
    }
    assert "pitrio._agent" in kernel
    assert "pitrio._validation" in kernel
    assert _violations(kernel, APPLICATIONS) == []


def test_the_harness_imports_no_application() -> None:
    harness = _imports_of("pitrio.harness")
    assert harness
    assert _violations(harness, {"cli", "web", "ui", "worker", "testing"}) == []


def test_the_ui_adapter_imports_no_server_and_no_cli() -> None:
    ui = _imports_of("pitrio.ui")
    assert ui
    assert _violations(ui, {"cli", "web", "worker", "testing"}) == []


def test_the_cli_imports_the_web_server_only_to_dispatch_serve() -> None:
    cli = _imports_of("pitrio.cli")
    edges = {(name, target) for name, targets in cli.items() for target in targets}
    assert edges >= DISPATCH  # ``pitrio serve``
    others = {name: {t for t in ts if (name, t) not in DISPATCH} for name, ts in cli.items()}
    assert _violations(others, {"web", "testing"}) == []


def test_what_ships_never_imports_the_test_kit() -> None:
    shipped = {name: t for name, t in GRAPH.items() if _layer(name) != "testing"}
    assert _violations(shipped, {"testing"}) == []
