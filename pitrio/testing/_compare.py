"""Trace comparison with the oracle's rules (its ``compare.py``, SCENARIOS.md §8-9)."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["trace_difference"]


def _same(a: Any, b: Any) -> bool:
    # JSON semantics: 1 == 1.0, but a boolean is never a number; a missing key differs
    # from a key holding null.
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def trace_difference(expected: list[dict[str, Any]], actual: list[dict[str, Any]]) -> str | None:
    """Describe the first difference between two traces, or return ``None`` if equal.

    Records tagged ``"side": "loop"`` and the others are compared as two sequences.
    """
    for side in (False, True):
        exp = [r for r in expected if (r.get("side") == "loop") is side]
        act = [r for r in actual if (r.get("side") == "loop") is side]
        for i in range(max(len(exp), len(act))):
            e = exp[i] if i < len(exp) else None
            a = act[i] if i < len(act) else None
            if e is not None and a is not None and _same(e, a):
                continue
            label = "loop-side record" if side else "record"
            return (
                f"{label} #{i} differs (expected {len(exp)}, got {len(act)}):\n"
                f"  expected: {json.dumps(e, sort_keys=True)[:600]}\n"
                f"  actual:   {json.dumps(a, sort_keys=True)[:600]}"
            )
    return None
