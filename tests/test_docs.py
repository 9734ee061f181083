"""The documentation site builds with warnings as errors, and its reference is complete.

This is ``nox -s docs`` run by the test suite (so CI builds the docs): Sphinx in a subprocess
with ``-W``, into a temporary directory. The built site's inventory must then hold every
public name of every public package, so a name added to an ``__all__`` without a place in
docs/reference/ fails here.
"""

from __future__ import annotations

import importlib
import re
import runpy
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PUBLIC_PACKAGES = [
    "pitrio",
    "pitrio.providers",
    "pitrio.providers.auth",
    "pitrio.harness",
    "pitrio.testing",
    "pitrio.coding",
    "pitrio.mcp",
    "pitrio.telemetry",
    "pitrio.worker",
    "pitrio.ui",
]


@pytest.fixture(scope="module")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("docs_html")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-W",
            "--keep-going",
            "-q",
            "-b",
            "html",
            "-d",
            str(out / ".doctrees"),
            str(DOCS),
            str(out),
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert result.returncode == 0, f"sphinx failed:\n{result.stdout}\n{result.stderr}"
    return out


def documented_names(site: Path) -> set[str]:
    """The Python objects in the site's ``objects.inv`` (four header lines, then zlib)."""
    raw = (site / "objects.inv").read_bytes()
    header, marker, compressed = raw.partition(b"compressed using zlib.\n")
    assert header.startswith(b"# Sphinx inventory version 2"), header[:80]
    assert marker, "objects.inv has no compressed part"
    body = zlib.decompress(compressed)
    names: set[str] = set()
    for line in body.decode("utf-8").splitlines():
        name, role, *_rest = line.split(" ", 2)
        if role.startswith("py:"):
            names.add(name)
    return names


def test_site_builds_without_warnings(built_site: Path) -> None:
    assert (built_site / "index.html").is_file()
    assert (built_site / "reference" / "pitrio.html").is_file()


def public_names() -> dict[int, set[str]]:
    """Every public name, grouped by the object it names (re-exports share an object)."""
    names: dict[int, set[str]] = {}
    for package in PUBLIC_PACKAGES:
        module = importlib.import_module(package)
        for name in module.__all__:
            names.setdefault(id(getattr(module, name)), set()).add(f"{package}.{name}")
    return names


@pytest.mark.parametrize("package", PUBLIC_PACKAGES)
def test_every_public_name_is_in_the_reference(built_site: Path, package: str) -> None:
    """A name counts as documented when it, or the same object exported by another public
    package (documented once, so Sphinx sees no duplicate), is in the inventory."""
    documented = documented_names(built_site)
    aliases = public_names()
    module = importlib.import_module(package)
    missing = [
        name for name in module.__all__ if not aliases[id(getattr(module, name))] & documented
    ]
    assert not missing, f"{package}: not in docs/reference/: {missing}"


def test_every_reference_must_resolve() -> None:
    """``nitpicky`` makes an unresolved cross-reference a warning (so, with -W, an error);
    what it lets through is only the ignore list, which must stay short and explained."""
    conf = runpy.run_path(str(DOCS / "conf.py"))
    assert conf["nitpicky"] is True
    ignores = [*conf.get("nitpick_ignore", []), *conf.get("nitpick_ignore_regex", [])]
    assert len(ignores) <= 3, f"nitpick ignores are growing: {ignores}"


def test_signature_types_point_at_documented_names(built_site: Path) -> None:
    """Each private name a signature shows resolves to an entry of reference/types.md."""
    conf = runpy.run_path(str(DOCS / "conf.py"))
    documented = documented_names(built_site)
    missing = {
        short: full for short, full in conf["SIGNATURE_TYPES"].items() if full not in documented
    }
    assert not missing, f"docs/conf.py SIGNATURE_TYPES name undocumented targets: {missing}"


def test_front_page_gets_a_newcomer_to_an_agent_with_a_tool() -> None:
    """Install, a runnable agent with a tool, then a real model, in under five minutes of
    reading: at most 1,000 words (code included) before "Where next" (~230 words a minute)."""
    page = (DOCS / "index.md").read_text(encoding="utf-8")
    start, _, _ = page.partition("## Where next")
    sections = re.findall(r"^## (.+)$", start, flags=re.MULTILINE)
    assert sections[:3] == ["Install", "An agent with a tool", "The same agent on a real model"]
    include = "```{literalinclude} examples/first_agent.py"
    assert include in start, "the front page no longer shows the runnable first agent"
    example = (DOCS / "examples" / "first_agent.py").read_text(encoding="utf-8")
    assert "@tool" in example, "the first agent's tool is no longer a decorated function"
    words = len(re.findall(r"\S+", start.replace(include, example)))
    assert words <= 1000, f"docs/index.md: {words} words before 'Where next' (at most 1,000)"


def test_readme_links_the_sites_pages() -> None:
    """The README links each part of the site, and every docs/ link in it exists."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    links = set(re.findall(r"\]\(((?:docs|benchmarks)/[^)#\s]*)\)", readme))
    missing = sorted(link for link in links if not (ROOT / link).exists())
    assert not missing, f"README links to missing files: {missing}"
    parts = [
        "docs/index.md",
        "docs/tutorial/index.md",
        "docs/concepts/index.md",
        "docs/recipes/index.md",
        "docs/reference/index.md",
        "docs/testing.md",
        "docs/conformance.md",
    ]
    unlinked = [part for part in parts if part not in links]
    assert not unlinked, f"README does not link: {unlinked}"
