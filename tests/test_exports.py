"""The public API: what `pitrio` exports, and that private modules stay private."""

from __future__ import annotations

import importlib
import pkgutil

import pitrio
import pitrio.testing


def test_all_lists_exactly_the_public_names() -> None:
    """`__all__` is sorted, has no duplicates, and every name in it exists."""
    assert list(pitrio.__all__) == sorted(pitrio.__all__)
    assert len(set(pitrio.__all__)) == len(pitrio.__all__)
    for name in pitrio.__all__:
        assert hasattr(pitrio, name), name
    public = {n for n in dir(pitrio) if not n.startswith("_")}
    # Subpackages appear as attributes once imported (pitrio.testing, pitrio.harness, ...).
    subpackages = {
        "testing", "providers", "harness", "cli", "coding", "ui", "worker", "mcp", "web",
        "telemetry",
    }  # fmt: skip
    assert public - set(pitrio.__all__) <= {"annotations", *subpackages}


def test_testing_kit_exports() -> None:
    """pitrio.testing exports its helpers."""
    for name in pitrio.testing.__all__:
        assert hasattr(pitrio.testing, name), name


def test_every_module_imports_and_private_ones_start_with_underscore() -> None:
    """Each module imports on its own; only documented entry points lack an underscore."""
    allowed_public = {
        "pitrio.testing.conformance",
        "pitrio.testing.provider_conformance",
        "pitrio.cli",
        "pitrio.coding",
        "pitrio.harness",
        "pitrio.providers",
        "pitrio.providers.auth",
        "pitrio.ui",
        "pitrio.mcp",
        "pitrio.web",
        "pitrio.worker",
        "pitrio.telemetry",
        "pitrio.testing",
    }
    for info in pkgutil.walk_packages(pitrio.__path__, "pitrio."):
        importlib.import_module(info.name)
        leaf = info.name.rsplit(".", 1)[1]
        if not leaf.startswith("_"):
            assert info.name in allowed_public, info.name
