"""The flat-object shortcut of tool-argument validation gives exactly the full path's
results and error messages (``pitrio._validation._flat``)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import example, given, settings, strategies as st

from pitrio._validation import ToolArgumentsError, Validator
from pitrio._validation._flat import compile_flat

TYPES = ("string", "integer", "number", "boolean")
PLAIN_NAMES = ["a", "b", "path", "limit", "Ab_c", "x y", "é"]
ODD_NAMES = ["toString", "constructor", "1", "0a"]  # schemas with these take the full path
NAMES = st.sampled_from(PLAIN_NAMES + ODD_NAMES)


@st.composite
def flat_schemas(draw: st.DrawFn) -> dict[str, Any]:
    names = draw(st.lists(st.sampled_from(PLAIN_NAMES), unique=True, max_size=5))
    if draw(st.integers(0, 9)) == 0:
        odd: str = draw(st.sampled_from(ODD_NAMES))
        names.append(odd)
    properties: dict[str, Any] = {}
    for name in names:
        sub: dict[str, Any] = {"type": draw(st.sampled_from(TYPES))}
        if draw(st.booleans()):
            sub["description"] = "what it is"
        properties[name] = sub
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    required = [n for n in names if draw(st.booleans())]
    empty_required: bool = draw(st.booleans())
    if required or empty_required:
        schema["required"] = required
    if draw(st.booleans()):
        schema["additionalProperties"] = draw(st.booleans())
    return schema


scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**60), 2**60)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([0.0, -0.0, 2.0, 1.5, 1e300])
    | st.text(max_size=4)
    | st.sampled_from(["1", "1.5", "true", "false", "", " 2 ", "null", "abc"])
)
values = scalars | st.lists(scalars, max_size=2) | st.dictionaries(NAMES, scalars, max_size=2)
# Values of another JSON type, or that Pi would coerce or reject, for a declared key.
AWKWARD: list[Any] = [
    None, True, False, 0, 1, -1, 2**60, 2.0, -0.0, 1.5, 1e300, math.inf, -math.inf, math.nan,
    "1", "1.5", "-0", "true", "false", "null", "", " ", "x", [], [1], {}, {"a": 1},
]  # fmt: skip
awkward = st.sampled_from(AWKWARD)


def _full_path(schema: dict[str, Any]) -> Validator:
    validator = Validator(schema)
    validator._flat = None  # the reference: the path without the shortcut
    return validator


def _outcome(validator: Validator, arguments: Any) -> tuple[str, str]:
    try:
        return "ok", repr(validator.validate("tool", arguments))
    except ToolArgumentsError as exc:
        return "error", str(exc)


@settings(max_examples=400, deadline=None)
@given(schema=flat_schemas(), arguments=st.dictionaries(NAMES, values, max_size=6), data=st.data())
@example(
    schema={"type": "object", "properties": {"n": {"type": "number"}}, "required": ["n"]},
    arguments={"n": -0.0},
    data=None,
)
def test_shortcut_matches_the_full_path(
    schema: dict[str, Any], arguments: dict[str, Any], data: st.DataObject | None
) -> None:
    if data is not None and data.draw(st.integers(0, 3)) > 0:
        # Mostly declared keys, each with a value of its type or any value.
        arguments = {}
        for name, sub in schema["properties"].items():
            if name in schema.get("required", []) or data.draw(st.booleans()):
                typed = {
                    "string": st.text(max_size=5),
                    "integer": st.integers(),
                    "number": st.integers() | st.floats(),
                    "boolean": st.booleans(),
                }[sub["type"]]
                arguments[name] = data.draw(typed | awkward)
        if data.draw(st.integers(0, 9)) == 0:
            arguments[data.draw(NAMES)] = data.draw(values)
    fast = Validator(schema)
    assert _outcome(fast, arguments) == _outcome(_full_path(schema), arguments)


@pytest.mark.parametrize("required", [False, True])
@pytest.mark.parametrize("json_type", TYPES)
def test_every_awkward_value_matches_the_full_path(json_type: str, required: bool) -> None:
    schema: dict[str, Any] = {"type": "object", "properties": {"v": {"type": json_type}}}
    if required:
        schema["required"] = ["v"]
    fast, full = Validator(schema), _full_path(schema)
    assert fast._flat is not None
    for value in AWKWARD:
        for arguments in ({"v": value}, {"v": value, "w": 1}, {}):
            assert _outcome(fast, arguments) == _outcome(full, arguments), arguments


def test_common_schemas_take_the_shortcut() -> None:
    schema = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "file"},
            "limit": {"type": "integer"},
            "ratio": {"type": "number"},
            "all": {"type": "boolean"},
        },
        "required": ["path"],
        "additionalProperties": False,
    }
    flat = compile_flat(schema)
    assert flat is not None
    arguments = {"path": "a", "limit": 3, "ratio": 0.5, "all": True}
    result = flat(arguments)
    assert result == arguments
    assert result is not arguments  # the caller owns the result, as on the full path
    assert flat({"path": "a", "limit": "3"}) is None  # to coerce: the full path
    assert flat({"limit": 3}) is None  # missing required key
    assert flat({"path": "a", "other": 1}) is None  # undeclared key
    assert flat({"path": "a", "ratio": math.inf}) is None
    assert flat({"path": "a", "all": 1}) is None
    assert Validator(schema).validate("t", {"path": "a", "limit": "3"}) == {"path": "a", "limit": 3}


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"type": "string", "minLength": 2}}},
        {"type": "object", "properties": {"a": {"type": ["string", "null"]}}},
        {"type": "object", "properties": {"a": {"type": "array"}}},
        {"type": "object", "properties": {"toString": {"type": "string"}}},
        {"type": "object", "properties": {"1": {"type": "string"}}},
        {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]},
        {"type": "object", "properties": {}, "additionalProperties": {"type": "string"}},
        {"type": "object", "properties": {"a": {"type": "string"}}, "minProperties": 1},
        {"type": "array"},
        {"properties": {"a": {"type": "string"}}},
    ],
)
def test_other_schemas_take_the_full_path(schema: dict[str, Any]) -> None:
    assert compile_flat(schema) is None


async def test_validate_async_takes_the_shortcut_with_the_same_results() -> None:
    schema = {"type": "object", "properties": {"s": {"type": "string"}, "n": {"type": "integer"}}}
    fast, full = Validator(schema), _full_path(schema)
    big = "x" * 5_000_000  # above the inline size: the full path would use a worker thread
    for arguments in ({"s": "a", "n": 1}, {"s": big}, {"s": 5, "n": "7"}):
        assert await fast.validate_async("tool", arguments) == await full.validate_async(
            "tool", arguments
        )
    with pytest.raises(ToolArgumentsError) as fast_error:
        await fast.validate_async("tool", {"n": "x"})
    with pytest.raises(ToolArgumentsError) as full_error:
        await full.validate_async("tool", {"n": "x"})
    assert str(fast_error.value) == str(full_error.value)
