"""Tool-argument validation against Pi 0.85.0 (``validateToolArguments``, TypeBox 1.3.7).

The expected texts and coerced values in ``data/validation/oracle_cases.json`` were
produced by the Pi oracle: ``tests/data/validation/build_oracle_cases.py`` runs every
case as a tool call through ``/work/shared/oracle/run`` (cases ``s07_*``, ``s08_*``,
``s45_*`` and ``s48_*`` are read from the shared conformance traces of scenarios 07,
08, 45 and 48).
"""

from __future__ import annotations

import copy
import json
import math
import pathlib
from typing import Any

import fastjsonschema
import pytest
from hypothesis import given, settings, strategies as st

from pitrio._validation import (
    ToolArgumentsError,
    ToolSchemaError,
    Validator,
    compile_validator,
    js_json_dumps,
    js_number_to_string,
    validate_tool_arguments,
)

DATA = pathlib.Path(__file__).parent / "data" / "validation" / "oracle_cases.json"
CASES: list[dict[str, Any]] = json.loads(DATA.read_text())["cases"]


def _outcome(tool: str, schema: dict[str, Any], arguments: Any) -> tuple[str, Any]:
    try:
        return "ok", validate_tool_arguments(tool, schema, arguments)
    except (ToolArgumentsError, ToolSchemaError) as exc:
        return "error", exc


# ---------------------------------------------------------------------------------------
# The oracle's outcomes


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_oracle_case(case: dict[str, Any]) -> None:
    """Each call run through the Pi oracle gives the same coerced value or error text."""
    before = copy.deepcopy(case["arguments"])
    kind, value = _outcome(case["tool"], case["schema"], case["arguments"])
    if "error" in case:
        assert kind == "error", f"passed with {value!r}"
        assert str(value) == case["error"]
    else:
        assert kind == "ok", str(value)
        if "echo" in case:
            assert js_json_dumps(value) == case["echo"]
        if "params" in case:
            assert json.dumps(value, sort_keys=True) == json.dumps(case["params"], sort_keys=True)
    assert case["arguments"] == before


def test_the_oracle_cases_cover_the_keywords() -> None:
    """The oracle data exercises every message TypeBox's en_US locale has for JSON data."""
    text = "\n".join(c.get("error", "") for c in CASES)
    for fragment in [
        "must be string", "must be either string or number", "must have required properties",
        "must not have additional properties", "must be equal to one of the allowed values",
        "must be equal to constant", "must be >= 1", "must be <= 10", "must be > 0",
        "must be < 1", "must be multiple of 5", "must not have fewer than 2 characters",
        "must not have more than 4 characters", "must not have fewer than 2 items",
        "must not have more than 3 items", 'must match pattern "', 'must match format "date"',
        "must match a schema in anyOf", "must match exactly one schema in oneOf",
        "must not have duplicate items", "must contain at least 1 valid item",
        "must not be valid", 'must match "else" schema', 'must match "then" schema',
        "when property a is present", "are invalid", "must not have fewer than 1 properties",
        "must not have more than 3 properties", "schema is false", "Unknown validation error",
        "Invalid regular expression: /", "Maximum call stack size exceeded",
        "could not be cloned.",
    ]:  # fmt: skip
        assert fragment in text, fragment


def test_scenario_48_error_lines() -> None:
    """``errors`` holds the message's lines; ``arguments`` the arguments as received."""
    (case,) = [c for c in CASES if c["id"] == "s48_v2"]
    with pytest.raises(ToolArgumentsError) as info:
        validate_tool_arguments("check", case["schema"], case["arguments"])
    assert info.value.tool_name == "check"
    assert info.value.errors == ("a: must be >= 1", "b: must be equal to one of the allowed values")
    assert info.value.arguments is case["arguments"]


def test_unknown_validation_error_has_no_lines() -> None:
    """When TypeBox's walk finds nothing, ``errors`` is empty and the text says so."""
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {"a": {}, "b": {}},
        "required": ["a", "a"],
        "additionalProperties": False,
    }
    with pytest.raises(ToolArgumentsError, match=r"\nUnknown validation error\n") as info:
        validate_tool_arguments("t", schema, {"a": 1})
    assert info.value.errors == ()


# ---------------------------------------------------------------------------------------
# Ownership, caching, fast path

SCHEMA_48: dict[str, Any] = next(c["schema"] for c in CASES if c["id"] == "s48_v1")


def test_result_is_owned_by_the_caller() -> None:
    """The result shares no list or dict with the arguments, which are never mutated."""
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "array", "items": {"type": "object"}},
            "o": {"type": "object"},
        },
    }
    arguments = {"a": [{"x": [1]}], "o": {"k": {"j": 1}}, "extra": [[]]}
    result = validate_tool_arguments("t", schema, arguments)
    assert result == arguments
    result["a"][0]["x"].append(2)
    result["o"]["k"]["j"] = 2
    result["extra"][0].append(1)
    assert arguments == {"a": [{"x": [1]}], "o": {"k": {"j": 1}}, "extra": [[]]}


def test_cache_compiles_each_schema_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A schema is compiled once; equal schemas share the validator; order matters."""
    calls: list[object] = []
    real = fastjsonschema.compile

    def counting(definition: Any, **kwargs: Any) -> Any:
        calls.append(definition)
        return real(definition, **kwargs)

    monkeypatch.setattr(fastjsonschema, "compile", counting)
    schema = {"type": "object", "properties": {"cache-test-a": {"type": "integer"}}}
    first = compile_validator(schema)
    assert compile_validator(schema) is first
    for _ in range(3):
        first.validate("t", {"cache-test-a": "1"})
    assert validate_tool_arguments("t", schema, {"cache-test-a": 2}) == {"cache-test-a": 2}
    assert len(calls) == 1
    equal = json.loads(json.dumps(schema))
    assert compile_validator(equal) is first
    assert len(calls) == 1
    reordered = {"properties": schema["properties"], "type": "object"}
    assert compile_validator(reordered) is not first
    assert len(calls) == 2


def test_fast_path_is_used_for_common_schemas() -> None:
    """Schemas with keywords whose meaning fastjsonschema shares take the fast path."""
    assert compile_validator(SCHEMA_48).uses_fast_path
    with_strings = {
        "type": "object",
        "properties": {
            "p": {"type": "string", "pattern": "^[a-z]+$", "minLength": 2, "format": "email"},
            "r": {"$ref": "#/$defs/r"},
            "u": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        },
        "$defs": {"r": {"type": "integer", "enum": [1, 2]}},
    }
    assert compile_validator(with_strings).uses_fast_path
    assert not compile_validator({"properties": {"n": {"multipleOf": 3}}}).uses_fast_path
    assert not compile_validator({"properties": {"toString": {"type": "string"}}}).uses_fast_path


def test_schema_error_fails_every_call() -> None:
    """An invalid pattern makes every call fail with V8's text, as in Pi."""
    validator = Validator({"type": "object", "properties": {"p": {"pattern": "(?<x>"}}})
    for _ in range(2):
        with pytest.raises(ToolSchemaError, match=r"^Invalid regular expression: /\(\?<x>/u: "):
            validator.validate("t", {})


def test_non_json_values_take_the_exact_path() -> None:
    """NaN, infinities and tuples are judged like JavaScript would (numbers must be finite)."""
    schema = {"type": "object", "properties": {"n": {"type": "number"}, "t": {"type": "array"}}}
    with pytest.raises(ToolArgumentsError) as info:
        validate_tool_arguments("t", schema, {"n": math.nan})
    assert info.value.errors == ("n: must be number",)
    assert '"n": null' in str(info.value)
    assert validate_tool_arguments("t", schema, {"t": (1, "2")}) == {"t": [1, "2"]}


# ---------------------------------------------------------------------------------------
# JavaScript formatting


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.5, "0.5"), (1e21, "1e+21"), (1e20, "100000000000000000000"), (1.5e-7, "1.5e-7"),
        (1e-6, "0.000001"), (123e-20, "1.23e-18"), (100.0, "100"), (-0.0, "0"),
        (0.1 + 0.2, "0.30000000000000004"), (2**53 + 1, "9007199254740992"),
        (123456789012345678901234, "1.2345678901234569e+23"), (5e-324, "5e-324"),
        (math.inf, "Infinity"), (-math.nan, "NaN"),
    ],
)  # fmt: skip
def test_js_number_to_string(value: float, text: str) -> None:
    """``String(number)`` as V8 prints it (values checked with node)."""
    assert js_number_to_string(value) == text


def test_js_json_dumps() -> None:
    """``JSON.stringify``: array-index keys first, JS numbers, lone surrogates escaped."""
    value = {"b": 1.0, "10": [1e-7, None, math.inf], "1": {"\ud800": "x"}, "a": {}}
    assert js_json_dumps(value) == '{"1":{"\\ud800":"x"},"10":[1e-7,null,null],"b":1,"a":{}}'
    assert js_json_dumps({"a": [1, {"b": []}]}, indent=2) == (
        '{\n  "a": [\n    1,\n    {\n      "b": []\n    }\n  ]\n}'
    )


# ---------------------------------------------------------------------------------------
# Properties

_KEYS = st.sampled_from(["a", "b", "c", "d", "e", "f", "g", "h", "10", "x"])
_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(["", "1", "2.5", "true", "false", "x", "ab", "abc", " 7 ", "0x10", "1e3"])
    | st.text(max_size=4)
)
JSON_VALUES = st.recursive(
    _SCALARS,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(_KEYS | st.text(max_size=3), children, max_size=5)
    ),
    max_leaves=12,
)
ARGUMENTS = st.dictionaries(_KEYS, JSON_VALUES, max_size=6) | JSON_VALUES

# Schemas whose meaning is the same for fastjsonschema and TypeBox (no string lengths,
# patterns, formats, multipleOf or uniqueItems), so fastjsonschema can judge the result.
PROPERTY_SCHEMAS: list[dict[str, Any]] = [
    SCHEMA_48,
    {
        "type": "object",
        "properties": {
            "a": {"type": ["integer", "null"]},
            "b": {"type": "array", "items": {"type": "object", "properties": {
                "x": {"type": "number", "minimum": 0}}, "required": ["x"]}},
            "c": {"anyOf": [{"type": "boolean"}, {"type": "integer", "maximum": 3}]},
            "d": {"oneOf": [{"type": "string"}, {"type": "array", "maxItems": 2}]},
            "e": {"allOf": [{"type": "number"}, {"exclusiveMinimum": -1}]},
            "f": {"enum": ["x", 1, None, True]},
            "g": {"const": "ab"},
            "h": {"type": "object", "additionalProperties": {"type": "string"}},
        },
        "required": ["a"],
    },
    {"type": "object", "properties": {"10": {"$ref": "#/$defs/n"}, "x": {"not": {"type": "null"}}},
     "$defs": {"n": {"type": "array", "items": [{"type": "boolean"}, {"type": "string"}],
                     "additionalItems": False}}},
]  # fmt: skip


@settings(max_examples=100, deadline=None)
@given(schema_index=st.integers(0, len(PROPERTY_SCHEMAS) - 1), arguments=ARGUMENTS)
def test_validate_returns_an_accepted_value_or_pi_error(schema_index: int, arguments: Any) -> None:
    """validate() returns a value fastjsonschema accepts, or raises Pi's error; nothing else."""
    schema = PROPERTY_SCHEMAS[schema_index]
    before = copy.deepcopy(arguments)
    kind, outcome = _outcome("t", schema, arguments)
    if kind == "ok":
        _plain_validator(schema_index)(outcome)
    else:
        assert isinstance(outcome, ToolArgumentsError)
        text = str(outcome)
        assert text.startswith('Validation failed for tool "t":\n')
        assert text.endswith("\n\nReceived arguments:\n" + js_json_dumps(arguments, indent=2))
    assert arguments == before


_PLAIN: dict[int, Any] = {}


def _plain_validator(index: int) -> Any:
    if index not in _PLAIN:
        _PLAIN[index] = fastjsonschema.compile(PROPERTY_SCHEMAS[index], use_default=False)
    return _PLAIN[index]


STRING_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "s": {"type": "string", "minLength": 2, "maxLength": 3, "pattern": "^\\w"},
        "e": {"type": "string", "format": "email"},
        "d": {"type": ["string", "integer"], "format": "date", "minimum": 2},
        "m": {"type": "array", "items": {"type": "string", "maxLength": 1}, "minItems": 1},
    },
}
TEXT = st.text(alphabet=st.sampled_from("aé\u0301\u200d😀-@.1 _"), max_size=5)


@settings(max_examples=100, deadline=None)
@given(
    schema=st.sampled_from([SCHEMA_48, STRING_SCHEMA, *PROPERTY_SCHEMAS[1:]]),
    value=st.dictionaries(st.sampled_from(["s", "e", "d", "m", "a", "b", "c", "f", "10"]),
                          TEXT | JSON_VALUES | st.lists(TEXT, max_size=3), max_size=5)
    | JSON_VALUES,
)  # fmt: skip
def test_fast_path_agrees_with_the_engine(schema: dict[str, Any], value: Any) -> None:
    """The rewritten fastjsonschema validator accepts exactly what TypeBox's check does."""
    validator = compile_validator(schema)
    assert validator.uses_fast_path
    engine = validator._engine.check(value)
    fast = validator._fast
    assert fast is not None
    try:
        fast(value)
    except fastjsonschema.JsonSchemaException:
        assert not engine
    else:
        assert engine
