"""PEP 562 exports: a package's public names, each imported from its private module the
first time it is read (``from pkg import X``, ``pkg.X``), and listed by ``dir(pkg)``.

A package's ``__init__`` keeps its imports under ``if TYPE_CHECKING:`` for type checkers
and Sphinx, and hands the same names to :func:`exports`::

    __getattr__, __dir__ = exports(globals(), {"Harness": "_harness", ...})
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def exports(
    namespace: dict[str, Any], names: Mapping[str, str], *, modules: Mapping[str, str] = {}
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` serving ``names`` (public name ->
    private module of the package whose ``globals()`` is ``namespace``) and ``modules``
    (public name -> a private module exported as a whole, ``pitrio.wire``)."""
    package = namespace["__name__"]

    def __getattr__(name: str) -> object:
        module = names.get(name)
        value: object
        if module is not None:
            value = getattr(import_module(f"{package}.{module}"), name)
        elif name in modules:
            value = import_module(f"{package}.{modules[name]}")
        else:
            msg = f"module {package!r} has no attribute {name!r}"
            raise AttributeError(msg)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *names, *modules})

    return __getattr__, __dir__
