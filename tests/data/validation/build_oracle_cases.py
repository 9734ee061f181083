"""Regenerate ``oracle_cases.json``: validation cases run through the Pi oracle.

Each group is one tool (``v<N>``) with one JSON schema; each case is one call of it
with the given arguments. The tool echoes its arguments (``echoArgs``), so a call that
passes shows the coerced arguments exactly as ``JSON.stringify`` wrote them, and one
that fails shows Pi's validation message. Run from the repository root::

    .venv/bin/python tests/data/validation/build_oracle_cases.py

It writes the scenarios to /tmp/pitrio-validation-oracle/, runs
``/work/shared/oracle/run`` (Pi 0.85.0, TypeBox 1.3.7) on each, and stores every
call's schema, arguments and outcome in ``oracle_cases.json``.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from typing import Any

ORACLE = "/work/shared/oracle/run"
OUT_DIR = pathlib.Path("/tmp/pitrio-validation-oracle")
HERE = pathlib.Path(__file__).parent
BATCH = 40  # tools per scenario

OBJ = "object"


def obj(props: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return {"type": OBJ, "properties": props, **kw}


GROUPS: list[tuple[str, Any, list[Any]]] = [
    # ---- type, required, additionalProperties (the messages in scenario 48 and more)
    (
        "type messages",
        obj(
            {
                "s": {"type": "string"},
                "n": {"type": "number"},
                "i": {"type": "integer"},
                "b": {"type": "boolean"},
                "z": {"type": "null"},
                "a": {"type": "array"},
                "o": {"type": "object"},
            }
        ),
        [
            {"s": {}, "n": [], "i": 1.5, "b": "maybe", "z": "x", "a": {}, "o": []},
            {"s": [1], "n": {"x": 1}, "i": "1.5", "b": 2, "z": 1, "a": "[]", "o": "{}"},
            {"s": "ok", "n": "12", "i": "7", "b": "false", "z": "", "a": [], "o": {}},
            {"n": "abc", "i": "0x10", "b": 1, "z": 0},
            {"n": " 3.5 ", "i": "1e3", "b": 0, "z": False},
            {"n": "Infinity", "i": "2.5", "s": True, "z": True},
        ],
    ),
    (
        "type unions",
        obj(
            {
                "u": {"type": ["string", "number"]},
                "v": {"type": ["integer", "null"]},
                "w": {"type": ["boolean", "string"]},
                "x": {"type": ["array", "object"]},
            }
        ),
        [
            {"u": True, "v": "x", "w": 5, "x": "s"},
            {"u": None, "v": "3", "w": None, "x": 1},
            {"u": [], "v": 2.5, "w": {}, "x": None},
            {"u": "a", "v": None, "w": "t", "x": []},
        ],
    ),
    (
        "required and additionalProperties",
        obj(
            {"a": {"type": "string"}, "b": {"type": "number"}},
            required=["a", "b", "c"],
            additionalProperties=False,
        ),
        [{}, {"a": "x"}, {"c": 1}, {"a": "x", "b": 1, "c": 2, "d": 3}, {"a": 1, "b": "x", "e": 1}],
    ),
    (
        "additionalProperties schema",
        obj({"a": {"type": "string"}}, additionalProperties={"type": "integer"}),
        [{"a": "x", "n": "5", "m": "x"}, {"a": 5, "k": True}, {"z": 1.5}, {"a": "x", "b": 2}],
    ),
    (
        "nested required",
        obj(
            {
                "user": obj(
                    {
                        "name": {"type": "string"},
                        "address": obj(
                            {"city": {"type": "string"}, "zip": {"type": "string"}},
                            required=["city", "zip"],
                        ),
                    },
                    required=["name", "address"],
                )
            },
            required=["user"],
        ),
        [
            {},
            {"user": {}},
            {"user": {"name": "n", "address": {}}},
            {"user": {"name": 1, "address": {"city": 2, "zip": 12345}}},
            {"user": {"name": "n", "address": {"city": None, "zip": None}}},
            {"user": "x"},
            {"user": {"name": None, "address": None}},
        ],
    ),
    # ---- enum, const
    (
        "enum const",
        obj(
            {
                "e": {"enum": ["a", "b", 1, None]},
                "c": {"const": "x"},
                "ce": {"const": {"k": [1, 2]}},
                "t": {"type": "string", "enum": ["x", "y"]},
            }
        ),
        [
            {"e": "c", "c": "y", "ce": {"k": [2, 1]}, "t": "z"},
            {"e": 1, "c": "x", "ce": {"k": [1, 2]}, "t": "x"},
            {"e": True, "c": 1, "ce": {"k": [1, 2], "j": 1}, "t": 5},
            {"e": None, "ce": [1, 2], "t": None},
        ],
    ),
    # ---- numbers
    (
        "numbers",
        obj(
            {
                "a": {"type": "number", "minimum": 1, "maximum": 10},
                "b": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
                "c": {"type": "integer", "multipleOf": 5},
                "d": {"type": "number", "multipleOf": 0.01},
                "e": {"type": "number", "minimum": 0.5, "maximum": 1e21, "multipleOf": 0.1},
                "f": {"minimum": 3},
            }
        ),
        [
            {"a": 0, "b": 0, "c": 7, "d": 0.005, "e": 0.25, "f": 1},
            {"a": 11, "b": 1, "c": 10, "d": 19.01, "e": 0.3, "f": "1"},
            {"a": "5", "b": "0.5", "c": "15", "d": "1.23", "e": 2e21, "f": True},
            {"a": 10.5, "b": -1, "c": 2.5, "d": 1e-9, "e": 0.7000000000000001},
            {"c": 1e20, "d": 0.1, "e": 1.5},
        ],
    ),
    # ---- strings
    (
        "strings",
        obj(
            {
                "s": {"type": "string", "minLength": 2, "maxLength": 4},
                "p": {"type": "string", "pattern": "^[a-z]+-[0-9]{2}$"},
                "q": {"type": "string", "pattern": "\\d+"},
                "g": {"type": "string", "minLength": 2},
                "m": {"maxLength": 1},
            }
        ),
        [
            {"s": "a", "p": "ab-1", "q": "x", "g": "e\u0301", "m": "xy"},
            {"s": "abcde", "p": "ab-12", "q": "a1", "g": "\U0001f600", "m": 5},
            {"s": "\U0001f600\U0001f600", "p": "AB-12", "q": "\u0661", "g": "\U0001f1eb\U0001f1f7"},
            {"s": 12, "p": 12, "q": 5, "g": "\U0001f468\u200d\U0001f469", "m": "\u00e9"},
            {"s": "abc", "p": "ab-12\n", "g": "ab"},
        ],
    ),
    (
        "pattern features",
        obj(
            {
                "a": {"type": "string", "pattern": "^\\w+$"},
                "b": {"type": "string", "pattern": "^.$"},
                "c": {"type": "string", "pattern": "^\\s$"},
                "d": {"type": "string", "pattern": "^(?<x>a)\\k<x>$"},
                "e": {"type": "string", "pattern": "^[^\\d\\s]+$"},
                "f": {"type": "string", "pattern": "^\\p{Lu}"},
                "g": {"type": "string", "pattern": "^\\u{1F600}$"},
                "h": {"type": "string", "pattern": "a$"},
            }
        ),
        [
            {
                "a": "abc_1",
                "b": "x",
                "c": " ",
                "d": "aa",
                "e": "abc",
                "f": "Ab",
                "g": "\U0001f600",
                "h": "ba",
            },
            {
                "a": "\u00e9",
                "b": "\U0001f600",
                "c": "\u00a0",
                "d": "ab",
                "e": "a1",
                "f": "\u00c9a",
                "g": "x",
                "h": "a\n",
            },
            {"a": "a b", "b": "\n", "c": "\u1680", "e": "a b", "f": "ab", "h": "ab"},
            {"b": "ab", "c": "\x1c", "e": "\u0661"},
        ],
    ),
    (
        "formats",
        obj(
            {
                k: {"type": "string", "format": k}
                for k in [
                    "date-time",
                    "date",
                    "time",
                    "duration",
                    "email",
                    "hostname",
                    "ipv4",
                    "ipv6",
                    "uri",
                    "uri-reference",
                    "uuid",
                    "url",
                    "json-pointer",
                    "relative-json-pointer",
                    "regex",
                    "uri-template",
                    "json-pointer-uri-fragment",
                    "unknown-format",
                ]
            }
        ),
        [
            {
                "date-time": "2024-02-29T12:30:00Z",
                "date": "2024-02-29",
                "time": "23:59:60Z",
                "duration": "P1Y2M3DT4H5M6S",
                "email": "a.b@c.de",
                "hostname": "a-b.example.com",
                "ipv4": "192.168.0.1",
                "ipv6": "::1",
                "uri": "https://x.y/z?q#f",
                "uri-reference": "../a/b",
                "uuid": "123e4567-e89b-12d3-a456-426614174000",
                "url": "https://example.com/x",
                "json-pointer": "/a~1b/0",
                "relative-json-pointer": "1/a",
                "regex": "^a+$",
                "uri-template": "/x/{id}",
                "json-pointer-uri-fragment": "#/a/b",
                "unknown-format": "anything",
            },
            {
                "date-time": "2023-02-29T12:30:00Z",
                "date": "2023-02-29",
                "time": "12:00:00",
                "duration": "P",
                "email": "a..b@c.de",
                "hostname": "-bad.com",
                "ipv4": "01.2.3.4",
                "ipv6": "1:2:3",
                "uri": "no scheme",
                "uri-reference": "a b",
                "uuid": "123",
                "url": "http://10.0.0.1/",
                "json-pointer": "a",
                "relative-json-pointer": "01",
                "regex": "(",
                "uri-template": "{",
                "json-pointer-uri-fragment": "/a",
            },
            {
                "date-time": "2024-01-01t00:00:00+01:00",
                "time": "23:59:59.5+02:00",
                "ipv4": "256.1.1.1",
                "ipv6": "1:2:3:4:5:6:1.2.3.4",
                "uri": "mailto:a@b",
                "hostname": "a" * 64 + ".com",
                "email": "A@B.C",
                "url": "ftp://example.org:21",
            },
        ],
    ),
    # ---- arrays
    (
        "arrays",
        obj(
            {
                "a": {"type": "array", "minItems": 2, "maxItems": 3},
                "u": {"type": "array", "uniqueItems": True},
                "t": {
                    "type": "array",
                    "items": [{"type": "integer"}, {"type": "boolean"}],
                    "additionalItems": False,
                },
                "n": {"type": "array", "items": {"type": "number"}},
                "c": {"type": "array", "contains": {"type": "string"}},
            }
        ),
        [
            {
                "a": [1],
                "u": [1, 2, 1, 2],
                "t": ["1", "false", 3, 4],
                "n": ["1", "x", None, True],
                "c": [1, 2],
            },
            {
                "a": [1, 2, 3, 4],
                "u": [{"a": 1, "b": 2}, {"b": 2, "a": 1}],
                "t": [1],
                "n": [],
                "c": [],
            },
            {"a": "x", "u": [[[1], 2], [[1, 2]]], "t": ["x", 1], "c": ["x"]},
            {"u": [1, 1.0, True, "1"], "n": [1.5, "2.5", "1e400"]},
            {"u": [{"constructor": 1}, {}]},
        ],
    ),
    (
        "arrays of objects",
        obj(
            {
                "items": {
                    "type": "array",
                    "items": obj(
                        {
                            "id": {"type": "integer"},
                            "tags": {"type": "array", "items": {"type": "string"}},
                            "opt": {"type": "string"},
                        },
                        required=["id"],
                        additionalProperties=False,
                    ),
                }
            }
        ),
        [
            {"items": [{"id": "1", "tags": [1, True]}, {"id": 2, "x": 1}, {"tags": "t"}]},
            {"items": [{"id": 1, "opt": None}, {"id": 2, "opt": 5}]},
            {"items": [{}, {}, {}, {}, {}, {}, {}, {}, {}, {}]},
            {"items": {"id": 1}},
        ],
    ),
    # ---- composition
    (
        "anyOf",
        obj(
            {
                "a": {"anyOf": [{"type": "integer"}, {"type": "boolean"}]},
                "b": {
                    "anyOf": [{"type": "string", "maxLength": 2}, {"type": "number", "minimum": 5}]
                },
                "c": {"anyOf": [{"type": "null"}, obj({"x": {"type": "integer"}}, required=["x"])]},
            }
        ),
        [
            {"a": "true", "b": "abc", "c": {"x": "1"}},
            {"a": "x", "b": 3, "c": {}},
            {"a": 1.5, "b": "5", "c": None},
            {"a": "7", "b": None, "c": 0},
        ],
    ),
    (
        "oneOf",
        obj(
            {
                "a": {
                    "oneOf": [{"type": "integer", "minimum": 5}, {"type": "string", "maxLength": 1}]
                },
                "b": {"oneOf": [{"type": "number"}, {"type": "integer"}]},
            }
        ),
        [{"a": "hello", "b": 1}, {"a": 7, "b": 1.5}, {"a": "7", "b": "x"}, {"a": 3}],
    ),
    (
        "allOf not if",
        obj(
            {
                "a": {"allOf": [{"type": "integer"}, {"minimum": 5}, {"maximum": 9}]},
                "n": {"not": {"type": "string"}},
                "i": {
                    "if": {"type": "string"},
                    "then": {"minLength": 3},
                    "else": {"type": "number", "maximum": 2},
                },
            }
        ),
        [
            {"a": "3", "n": "s", "i": 5},
            {"a": 10, "n": 1, "i": "x"},
            {"a": "x", "i": "xyz"},
            {"a": 7, "i": 1},
        ],
    ),
    # ---- objects: dependencies, propertyNames, min/maxProperties
    (
        "object keywords",
        {
            "type": "object",
            "dependencies": {"a": ["b", "c"], "d": obj({"e": {"type": "string"}}, required=["e"])},
            "propertyNames": {"maxLength": 3},
            "minProperties": 1,
            "maxProperties": 3,
        },
        [{}, {"a": 1}, {"d": 1, "toolong": 2}, {"a": 1, "b": 2, "c": 3, "d": 4}, {"d": 1, "e": 5}],
    ),
    (
        "dependentRequired",
        {"type": "object", "dependentRequired": {"a": ["b", "c"]}},
        [{"a": 1}, {"a": 1, "b": 1}, {"b": 1}],
    ),
    # ---- $ref
    (
        "refs",
        {
            "type": "object",
            "properties": {
                "a": {"$ref": "#/$defs/pos"},
                "b": {"$ref": "#/definitions/node"},
                "c": {"$ref": "#/$defs/missing"},
                "d": {"anyOf": [{"$ref": "#/$defs/pos"}, {"type": "null"}]},
                "e": {"$ref": "#/$defs/pos", "description": "annotated"},
            },
            "$defs": {"pos": {"type": "integer", "minimum": 1}},
            "definitions": {
                "node": obj(
                    {"v": {"type": "integer"}, "next": {"$ref": "#/definitions/node"}},
                    required=["v"],
                )
            },
        },
        [
            {"a": 0, "b": {"v": 1, "next": {"v": "2", "next": {}}}},
            {"a": "5", "b": {"v": 1}, "e": "3"},
            {"c": 1},
            {"d": "5"},
            {"d": 5, "a": None, "e": None},
        ],
    ),
    # ---- null normalization
    (
        "null normalization",
        obj(
            {
                "opt": {"type": "string"},
                "req": {"type": "string"},
                "nullable": {"type": ["string", "null"]},
                "anyn": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                "ref": {"$ref": "#/$defs/s"},
                "num": {"type": "number"},
                "nested": obj({"x": {"type": "integer"}}),
                "arr": {"type": "array", "items": obj({"y": {"type": "boolean"}})},
            },
            required=["req"],
            **{"$defs": {"s": {"type": "string"}}},
        ),
        [
            {"opt": None, "req": None, "nullable": None, "anyn": None, "ref": None, "num": None},
            {"req": "r", "nested": {"x": None}, "arr": [{"y": None}, None, {"y": "true"}]},
            {"req": "r", "nested": None, "arr": None},
        ],
    ),
    # ---- coercion details
    (
        "coercion details",
        obj(
            {
                "int": {"type": "integer"},
                "num": {"type": "number"},
                "str": {"type": "string"},
                "bool": {"type": "boolean"},
                "nul": {"type": "null"},
            }
        ),
        [
            {"int": "1.0", "num": "-0", "str": 1.5e-7, "bool": 1.0, "nul": 0.0},
            {"int": "  42\n", "num": ".5", "str": 1e21, "bool": "TRUE", "nul": "null"},
            {"int": "0b101", "num": "0o17", "str": -0.0, "bool": "1", "nul": []},
            {
                "int": "1_000",
                "num": "1e",
                "str": 123456789012345678901234,
                "bool": None,
                "nul": None,
            },
            {"int": True, "num": False, "str": False, "bool": 0, "nul": ""},
            {"int": "9007199254740993", "num": "0x", "str": 0.1, "bool": 2},
        ],
    ),
    # ---- JavaScript quirks
    (
        "prototype names",
        obj(
            {
                "constructor": {"type": "string"},
                "toString": {"type": "string"},
                "valueOf": {"description": "no type"},
            }
        ),
        [{}, {"constructor": "c", "toString": "t"}, {"constructor": "c", "toString": 5}],
    ),
    (
        "required prototype names",
        {"type": "object", "required": ["toString", "constructor"]},
        [{}, {"constructor": 1}],
    ),
    (
        "numeric keys",
        obj(
            {
                "b": {"type": "string"},
                "10": {"type": "string"},
                "2": {"type": "string"},
                "a": {"type": "integer"},
            }
        ),
        [
            {"a": "1", "b": 2, "10": 3, "2": 4, "z": 5, "1": 6},
            {"a": "x", "b": [], "10": {}, "2": None},
        ],
    ),
    (
        "more than eight errors",
        obj({k: {"type": "number"} for k in "abcdefghij"}, required=["z"]),
        [dict.fromkeys("abcdefghij", "x")],
    ),
    # ---- top-level non-object schemas and arguments
    (
        "top-level anyOf",
        {
            "anyOf": [
                obj({"a": {"type": "integer"}}, required=["a"]),
                obj({"b": {"type": "string"}}, required=["b"]),
            ]
        },
        [{"a": "1"}, {"b": 2}, {"c": 1}, {"a": "x", "b": 1}],
    ),
    # ---- one format per property, so every rejection shows (at most 8 errors per call)
    *[
        (
            f"format {name}",
            obj({"f": {"type": "string", "format": name}}),
            [{"f": v} for v in values],
        )
        for name, values in {
            "date-time": [
                "2024-02-29T23:59:60Z",
                "2024-02-29 12:00:00Z",
                "2024-13-01T00:00:00Z",
                "2024-01-01T00:00:00",
                "2024-01-01T24:00:00Z",
                "2024-01-01T23:59:60+01:00",
            ],
            "date": ["2000-02-29", "1900-02-29", "2024-04-31", "24-01-01", "2024-1-01"],
            "time": ["12:00:00z", "12:00:00.123+05:30", "12:00", "25:00:00Z", "12:60:00Z"],
            "duration": ["P3W", "PT1H", "P1Y2W", "PT", "P1DT"],
            "email": ["x@y", "x.y+z@a-b.c", "x@-y.c", ".x@y.c", "x y@z.c", "\u00e9@x.c"],
            "hostname": [
                "localhost",
                "a.b",
                "a..b",
                "a_b.c",
                "xn--e1afmkfd.xn--p1ai",
                "xn--zz.com",
                "-a.com",
                "a" * 63 + ".b",
            ],
            "ipv4": ["0.0.0.0", "255.255.255.255", "1.2.3", "1.2.3.04", "1.2.3.4.5", " 1.2.3.4"],
            "ipv6": [
                "::",
                "1::",
                "::ffff:1.2.3.4",
                "1:2:3:4:5:6:7:8",
                "1:2:3:4:5:6:7:8:9",
                "1::2::3",
                "12345::",
                "fe80::1%eth0",
            ],
            "uri": [
                "urn:isbn:0451450523",
                "http://[::1]:80/",
                "http://a b",
                "http://x/%zz",
                "http://user@host:8080/p?q=1#f",
                "1http://x",
                "http://h\u00e9/",
            ],
            "uri-reference": ["", "#frag", "//host/path", "a:b", "\\x", "http://x/\u00e9"],
            "uuid": [
                "00000000-0000-0000-0000-000000000000",
                "ABCDEF01-2345-6789-ABCD-EF0123456789",
                "0000000-0000-0000-0000-000000000000",
                "g0000000-0000-0000-0000-000000000000",
            ],
            "url": [
                "http://example.com",
                "http://localhost",
                "http://192.168.1.1",
                "https://8.8.8.8/x",
                "http://ex ample.com",
                "mailto:a@b.c",
                "http://\u00fcber.de/",
            ],
            "json-pointer": ["", "/", "/a~0b", "/a~2", "a/b"],
            "relative-json-pointer": ["0", "0#", "1/a/b", "-1", "1#/a"],
            "regex": ["[", "a{2,1}", "(?<n>x)\\k<n>", "\\", "a**", "", "(?=x)*"],
            "uri-template": ["http://x/{a,b}", "{+path}/x", "{a", "x}", "{a:0}"],
            "json-pointer-uri-fragment": ["#", "#/a%20b", "#/a b", "/a"],
            "iri": ["http://\u00e9.com/\u00e9", "urn:x", "nope", "http://"],
            "iri-reference": ["//a/b", "a b", "\u00e9", "http:x"],
            "idn-email": ["\u00e9@\u00e9.com", "a@b", "a..b@c.d"],
            "idn-hostname": ["\u00e9xample.com", "a\u3002b", "-x.com", "xn--bcher-kva.ch"],
        }.items()
    ],
    # ---- invalid patterns: Pi's call fails with V8's SyntaxError text
    *[
        (f"invalid pattern {p!r}", obj({"p": {"type": "string", "pattern": p}}), [{"p": "x"}])
        for p in [
            "a{",
            "{1}",
            "a{2,1}",
            "]",
            "}",
            "(",
            ")",
            "[",
            "[b-a]",
            "*",
            "a**",
            "a*+",
            "\\x",
            "\\u12",
            "\\u{110000}",
            "\\c1",
            "\\p{Foo}",
            "(?<a>x)(?<a>y)",
            "\\k<b>",
            "(?<1a>x)",
            "\\1",
            "[\\d-z]",
            "(?=a)*",
            "\\00",
            "a{,5}",
            "(?i:a)",
            "\\q",
            "[\\q]",
            "a/b\\",
            "\\b*",
            "\\b{2,1}",
            "\\B{,2}",
            "(?=a){2,1}",
            "(?=a){,2}",
            "(?<=a){2}",
            "\\1{,2}",
            "]\\1",
            "a{2,1}\\u{110000}",
        ]
    ],
    (
        "valid pattern escapes",
        obj(
            {
                "a": {"type": "string", "pattern": "^[\\-\\]\\[]+$"},
                "b": {"type": "string", "pattern": "^\\/\\.\\*$"},
                "c": {"type": "string", "pattern": "^\\cJ\\0\\x41\\u0042\\t$"},
                "d": {"type": "string", "pattern": "^[^]$"},
                "e": {"type": "string", "pattern": "^[]$"},
                "f": {"type": "string", "pattern": "^\\P{L}+$"},
                "g": {"type": "string", "pattern": "(?<=a)b"},
            }
        ),
        [
            {"a": "-][", "b": "/.*", "c": "\n\u0000AB\t", "d": "\n", "f": "12", "g": "ab"},
            {"a": "x", "b": "/.x", "c": "x", "d": "", "e": "", "f": "a", "g": "cb"},
        ],
    ),
    # ---- Pi throws outside validation: structuredClone of a function, deep recursion
    (
        "clone of a prototype function",
        obj({"toString": {"anyOf": [{"type": "string"}, {"type": "number"}]}}),
        [{}, {"toString": 5}],
    ),
    ("self reference", obj({"a": {"$ref": "#/properties/a"}}), [{}, {"a": 1}]),
    ("root self reference", {"type": "object", "$ref": "#"}, [{}]),
    (
        "recursive but consuming",
        obj({"child": {"$ref": "#"}, "v": {"type": "integer"}}),
        [{"child": {"child": {"v": "x"}}}, {"child": {"child": {"v": "3"}}}],
    ),
    # ---- top-level schemas that are not plain objects
    ("top-level string", {"type": "string", "minLength": 5}, [{"a": 1}]),
    ("top-level integer union", {"type": ["integer", "object"]}, [{"a": 1}, {}]),
    (
        "boolean sub-schemas",
        obj({"t": True, "f": False, "u": {"anyOf": [True, {"type": "integer"}]}}),
        [{"t": None, "f": None}, {"u": "5"}, {"u": "x"}, {"f": 1}],
    ),
    (
        "allOf coercion chain",
        obj(
            {
                "a": {"allOf": [{"type": "string"}, {"type": "integer"}]},
                "b": {"allOf": [{"type": "integer"}, {"minimum": 2}]},
            }
        ),
        [{"a": 5, "b": "1"}, {"a": True, "b": "3"}],
    ),
    (
        "anyOf picks the first coercible",
        obj(
            {
                "a": {"anyOf": [{"type": "boolean"}, {"type": "integer"}]},
                "b": {"oneOf": [{"type": "integer"}, {"type": "number"}]},
                "c": {
                    "anyOf": [obj({"n": {"type": "integer"}}, required=["n"]), {"type": "string"}]
                },
            }
        ),
        [
            {"a": "1", "b": "2", "c": {"n": "3"}},
            {"a": "0", "b": "2.5", "c": 7},
            {"a": "x", "b": "x", "c": {"m": 1}},
        ],
    ),
    (
        "unicode lengths",
        obj({"a": {"type": "string", "maxLength": 2}, "b": {"type": "string", "minLength": 3}}),
        [
            {"a": "\U0001f468\u200d\U0001f469\u200d\U0001f467", "b": "\u0915\u094d\u0937"},
            {"a": "\U0001f1fa\U0001f1f8\U0001f1eb", "b": "a\ufe0fb\ufe0f"},
            {"a": "e\u0301\u0302x", "b": "\U0001f600\U0001f600"},
        ],
    ),
    (
        "duplicate required (compiled check and error walk disagree)",
        obj({"a": {}, "b": {}}, required=["a", "a"], additionalProperties=False),
        [{"a": 1}, {"a": 1, "b": 2}],
    ),
    (
        "not/contains use the interpreted check (no additionalProperties shortcut)",
        obj(
            {
                "c": {"not": obj({"b": False}, required=["toString"], additionalProperties=False)},
                "d": {
                    "type": "array",
                    "contains": obj(
                        {"a": {}, "b": {}}, required=["a", "a"], additionalProperties=False
                    ),
                },
            }
        ),
        [{"c": {}}, {"c": {"x": 1}}, {"d": [{"a": 1}]}, {"d": [{"a": 1, "b": 2}]}],
    ),
    ("invalid pattern", obj({"p": {"type": "string", "pattern": "\\-"}}), [{"p": "-"}]),
    ("invalid pattern unused", {"type": "object", "$defs": {"x": {"pattern": "("}}}, [{"p": "-"}]),
]


SHARED = pathlib.Path("/work/shared/oracle")


def _prepared(tool: dict[str, Any], args: Any) -> Any:
    """The oracle's prepareArguments (SCENARIOS.md section 4)."""
    spec = tool.get("prepareArguments")
    if spec is None or not isinstance(args, dict):
        return args
    out = dict(args)
    for old, new in spec.get("rename", {}).items():
        if old in out:
            out[new] = out.pop(old)
    for key, value in spec.get("defaults", {}).items():
        out.setdefault(key, value)
    return out


def scenario_cases() -> list[dict[str, Any]]:
    """The validation outcomes in the shared conformance scenarios 07, 08, 45 and 48."""
    out = []
    for number in ("07", "08", "45", "48"):
        (scenario_path,) = SHARED.glob(f"scenarios/{number}-*.json")
        (expected_path,) = SHARED.glob(f"expected/{number}-*.json")
        scenario_doc = json.loads(scenario_path.read_text())
        tools = {t["name"]: t for t in scenario_doc["tools"]}
        calls = {
            block["id"]: block
            for response in scenario_doc["model"]["responses"]
            for block in response.get("content", [])
            if block.get("type") == "toolCall"
        }
        params: dict[str, Any] = {}
        for record in json.loads(expected_path.read_text()):
            if record["type"] == "tool_execute":
                params[record["toolCallId"]] = record["params"]
            elif record["type"] == "tool_execution_end":
                call = calls[record["toolCallId"]]
                tool = tools[call["name"]]
                text = record["result"]["content"][0]["text"]
                case: dict[str, Any] = {
                    "id": f"s{number}_{call['id']}",
                    "group": f"scenario {scenario_path.name}",
                    "tool": tool["name"],
                    "schema": tool["parameters"],
                    "arguments": _prepared(tool, call["arguments"]),
                }
                if record["isError"]:
                    case["error"] = text
                else:
                    case["params"] = params[record["toolCallId"]]
                    if tool.get("default", {}).get("echoArgs"):
                        case["echo"] = text
                out.append(case)
    return out


def scenario(batch: list[tuple[int, Any, list[Any]]]) -> dict[str, Any]:
    tools = []
    calls = []
    for index, schema, cases in batch:
        name = f"v{index}"
        tools.append({"name": name, "parameters": schema, "default": {"echoArgs": True}})
        for k, args in enumerate(cases):
            calls.append({"type": "toolCall", "id": f"{name}_{k}", "name": name, "arguments": args})
    return {
        "name": "validation cases",
        "mode": "agent",
        "config": {"toolExecution": "sequential"},
        "tools": tools,
        "model": {
            "responses": [
                {"content": calls, "stream": {"blocks": False}},
                {"text": "done", "stream": {"blocks": False}},
            ]
        },
        "script": [{"op": "prompt", "text": "validate"}],
    }


def run() -> list[dict[str, Any]]:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    numbered = [(i, schema, cases) for i, (_, schema, cases) in enumerate(GROUPS)]
    results: dict[str, dict[str, Any]] = {}
    for b in range(0, len(numbered), BATCH):
        path = OUT_DIR / f"batch{b // BATCH}.json"
        path.write_text(json.dumps(scenario(numbered[b : b + BATCH]), indent=1))
        proc = subprocess.run([ORACLE, str(path)], capture_output=True, text=True, check=True)
        for record in json.loads(proc.stdout):
            if record["type"] == "tool_execution_end":
                result = record["result"]
                results[record["toolCallId"]] = {
                    "isError": record["isError"],
                    "text": result["content"][0]["text"],
                }
    out = []
    for index, (title, schema, cases) in enumerate(GROUPS):
        for k, args in enumerate(cases):
            r = results[f"v{index}_{k}"]
            expect = {"error": r["text"]} if r["isError"] else {"echo": r["text"]}
            out.append(
                {
                    "id": f"v{index}_{k}",
                    "group": title,
                    "tool": f"v{index}",
                    "schema": schema,
                    "arguments": args,
                    **expect,
                }
            )
    return out


if __name__ == "__main__":
    cases = scenario_cases() + run()
    doc = {
        "note": "Generated by tests/data/validation/build_oracle_cases.py with the Pi oracle "
        "(/work/shared/oracle/run: pi-agent-core/pi-ai 0.85.0, typebox 1.3.7). 'echo' is the "
        "tool's JSON.stringify(validated args); 'error' is the error tool result's text; "
        "cases s07_*, s08_*, s45_*, s48_* come from the shared conformance traces "
        "(expected/07, 08, 45, 48; 'params' is the tool_execute record).",
        "cases": cases,
    }
    (HERE / "oracle_cases.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(cases)} cases", file=sys.stderr)
