"""The flat-object shortcut: most tool schemas are an object of scalar properties.

For a schema like ``{"type": "object", "properties": {"path": {"type": "string"},
"limit": {"type": "integer"}}, "required": ["path"]}`` a valid call is a dict whose
keys are all declared, whose required keys are present and whose values already have
their property's JSON type. For such a call Pi's steps change nothing: cloning copies
scalars, no optional ``null`` is deleted, coercion keeps values of the right type, and
TypeBox's ``Check`` passes. :func:`compile_flat` turns a flat schema into one generated
function that checks exactly that and returns a copy of the arguments, or ``None``
for anything else (a missing or undeclared key, a value to coerce, a ``null``, an
integer-valued float, ...), which then takes the full path of :mod:`._validator` and
gets its results and its error messages.

A schema is flat when the object and each property use only the keywords below (others
would constrain or coerce values), no property is named like an ``Object.prototype``
member (``toString``, ``constructor``, ...: present in every JavaScript object) and no
property name is integer-like (JavaScript orders such keys first).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from ._jsvalues import _PROTO_VALUES

_OBJECT_KEYS: Final = frozenset(
    {"type", "properties", "required", "additionalProperties", "description", "title"}
)
_PROPERTY_KEYS: Final = frozenset({"type", "description", "title"})

# JSON type -> the test of an already valid value, in terms of its Python type ``t``.
_TESTS: Final = {
    "string": "t is not str",
    "boolean": "t is not bool",
    "integer": "t is not int",
    # A finite float is a number (``x - x`` is NaN for infinities and NaN).
    "number": "t is not int and (t is not float or {x} - {x} != 0.0)",
}


def compile_flat(schema: object) -> Callable[[dict[str, Any]], dict[str, Any] | None] | None:
    """The shortcut for a flat object schema, or ``None`` when ``schema`` is not flat."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return None
    if not _OBJECT_KEYS.issuperset(schema):
        return None
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    additional = schema.get("additionalProperties", True)
    if not isinstance(properties, dict) or not isinstance(additional, bool):
        return None
    if not isinstance(required, list) or not all(isinstance(k, str) for k in required):
        return None
    if not set(required) <= set(properties):
        return None
    lines = ["def flat(v):", "    n = 0"]
    for number, (key, sub) in enumerate(properties.items()):
        if not isinstance(key, str) or key in _PROTO_VALUES or _integer_like(key):
            return None
        if not isinstance(sub, dict) or not _PROPERTY_KEYS.issuperset(sub):
            return None
        json_type = sub.get("type")
        test = _TESTS.get(json_type) if isinstance(json_type, str) else None
        if test is None:
            return None
        x = f"x{number}"
        lines += [
            f"    {x} = v.get({key!r}, MISSING)",
            f"    if {x} is not MISSING:",
            f"        t = type({x})",
            f"        if {test.format(x=x)}:",
            "            return None",
            "        n += 1",
        ]
        if key in required:
            lines += ["    else:", "        return None"]
    lines += ["    if n != len(v):", "        return None", "    return v.copy()"]
    namespace: dict[str, Any] = {"MISSING": object()}
    # The source holds only repr() of property names and fixed tests.
    exec(compile("\n".join(lines), "<pitrio flat schema>", "exec"), namespace)
    function: Callable[[dict[str, Any]], dict[str, Any] | None] = namespace["flat"]
    return function


def _integer_like(key: str) -> bool:
    """Whether JavaScript might move the key first (the full path reorders such keys)."""
    return "0" <= key[:1] <= "9"
