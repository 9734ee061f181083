"""Tool-argument validation: an exact port of pi-ai 0.85.0's ``validateToolArguments``.

Pi validates a tool call like this (``pi-ai/dist/utils/validation.js``):

1. ``args = structuredClone(toolCall.arguments)``;
2. ``normalizeOptionalNulls``: an optional property whose value is ``null`` and whose
   schema rejects ``null`` (and is not a ``$ref``) is deleted;
3. ``coerceWithJsonSchema``: primitives are converted towards the schema's ``type``
   (``"5"`` -> ``5``, ``1`` -> ``true``, ``5`` -> ``"5"``, ``null`` -> ``0``/``""``/...),
   through ``allOf``/``anyOf``/``oneOf``, nested objects, ``additionalProperties`` and
   arrays;
4. TypeBox 1.3.7's compiled ``Check``; on failure an ``Error`` listing TypeBox's
   ``Errors()`` (at most 8, TypeBox's order and English texts).

Here the check runs first through a :mod:`fastjsonschema` validator compiled once per
schema (the fast path), built from a rewritten copy of the schema whose meaning for
JSON values is exactly TypeBox's (string keywords become one custom ``format`` that
implements TypeBox's grapheme lengths, JavaScript regular expressions and formats).
Schemas using a keyword whose meaning differs and cannot be rewritten (``multipleOf``,
``uniqueItems``, ``patternProperties``, non-scalar ``enum``/``const``, ...) are checked
by the precise engine below instead. Only when the check fails does the precise engine
walk the value to reproduce TypeBox's error list.

JavaScript details that are reproduced: key order of objects (integer-like keys first),
``Number(string)``/``String(number)``, ``JSON.stringify`` number formatting, TypeBox's
grapheme counting for ``minLength``/``maxLength``, its hash-based ``uniqueItems``, its
``multipleOf`` tolerance, regular expressions compiled with the ``u`` flag (translated
to :mod:`re`; an invalid one fails every call with V8's message), the formats TypeBox
registers, ``$ref`` resolution, and the ``in`` operator seeing ``Object.prototype``
members (a property named ``toString`` or ``constructor`` is "present" in every object).

Known gaps (documented, not reproduced): ``unevaluatedProperties``/``unevaluatedItems``,
``$recursiveRef`` and ``$dynamicRef`` are ignored (more lenient than TypeBox); TypeBox
schemas carrying ``~kind`` (``Value.Convert``) are treated as plain JSON schemas;
integers beyond 2**53 are compared exactly (JavaScript would have rounded them when
parsing); the ``iri``/``iri-reference``/``idn-*`` formats approximate WHATWG URL parsing
and Unicode scripts; ``\\p{Script=...}`` and binary Unicode properties in patterns are
not supported (such a schema fails every call with a pitrio message); Python's recursion
limit is lower than V8's stack; a JavaScript function that Pi would hand to a tool (an
``Object.prototype`` member copied into the arguments by coercion) is dropped from the
returned arguments.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import struct
import sys
import threading
import unicodedata
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final, NoReturn, final

import fastjsonschema

from ._errors import PitrioError
from ._messages import JSONValue

__all__ = [
    "ToolArgumentsError",
    "ToolSchemaError",
    "Validator",
    "compile_validator",
    "validate_tool_arguments",
]

MAX_ERRORS: Final = 8
"""TypeBox's ``Settings.maxErrors``: ``Errors()`` reports at most this many."""


# ======================================================================================
# Exceptions
# ======================================================================================


class ToolArgumentsError(PitrioError):
    """The arguments of a tool call do not satisfy the tool's schema.

    ``str(exc)`` is Pi's complete message, which the agent loop puts in the error
    tool result::

        Validation failed for tool "<name>":
          - <path>: <message>

        Received arguments:
        <the arguments as JSON.stringify(arguments, null, 2)>

    Attributes:
        tool_name: The tool's name.
        errors: The ``"<path>: <message>"`` lines, in TypeBox's order (at most 8).
            Empty when TypeBox's error walk finds nothing although its compiled check
            failed; the message then says ``Unknown validation error``, as Pi's does.
        arguments: The arguments as received (before normalization and coercion).
    """

    tool_name: str
    errors: tuple[str, ...]
    arguments: JSONValue

    def __init__(self, tool_name: str, errors: tuple[str, ...], arguments: JSONValue) -> None:
        self.tool_name = tool_name
        self.errors = errors
        self.arguments = arguments
        lines = "\n".join(f"  - {e}" for e in errors) if errors else "Unknown validation error"
        super().__init__(
            f'Validation failed for tool "{tool_name}":\n{lines}\n\n'
            f"Received arguments:\n{js_json_dumps(arguments, indent=2)}"
        )


class ToolSchemaError(PitrioError):
    """The tool's schema cannot be compiled, so every call of the tool fails.

    ``str(exc)`` is the message Pi's call would fail with (for an invalid regular
    expression, V8's ``Invalid regular expression: /<source>/u: <reason>``).
    """


# ======================================================================================
# JavaScript value semantics
# ======================================================================================


@final
class _JSFunction:
    """A JavaScript function value: what ``value[key]`` yields for an
    ``Object.prototype`` member that is not an own property."""

    __slots__ = ("source",)

    def __init__(self, source: str) -> None:
        self.source = source

    def __repr__(self) -> str:
        return f"<JS {self.source}>"


@final
class _Undefined:
    __slots__ = ()

    def __repr__(self) -> str:
        return "undefined"


_UNDEF: Final = _Undefined()

_PROTO_METHODS: Final = (
    "toString",
    "valueOf",
    "hasOwnProperty",
    "isPrototypeOf",
    "propertyIsEnumerable",
    "toLocaleString",
    "__defineGetter__",
    "__defineSetter__",
    "__lookupGetter__",
    "__lookupSetter__",
)
# What `({})[key]` is for every key the `in` operator finds on Object.prototype
# (`__proto__` is left out: it behaves like an ordinary key for JSON data).
_PROTO_VALUES: Final[dict[str, _JSFunction]] = {
    **{name: _JSFunction(f"function {name}() {{ [native code] }}") for name in _PROTO_METHODS},
    "constructor": _JSFunction("function Object() { [native code] }"),
}
# TypeBox's HasPropertyKey: `key in value`, except own-only for these three.
_UNSAFE_KEYS: Final = frozenset({"__proto__", "constructor", "prototype"})
_IN_ONLY_KEYS: Final = frozenset(_PROTO_METHODS)


def _has_key(value: dict[str, Any], key: str) -> bool:
    """TypeBox ``Guard.HasPropertyKey``."""
    return key in value or key in _IN_ONLY_KEYS


def _js_in(value: dict[str, Any], key: str) -> bool:
    """The JavaScript ``key in value`` operator for a plain object."""
    return key in value or key in _PROTO_VALUES


def _js_get(value: dict[str, Any], key: str) -> Any:
    """``value[key]`` for a plain object (``_UNDEF`` when absent)."""
    try:
        return value[key]
    except KeyError:
        return _PROTO_VALUES.get(key, _UNDEF)


def _is_number(v: object) -> bool:
    """TypeBox ``IsNumber``: ``Number.isFinite``."""
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return True
    return isinstance(v, float) and math.isfinite(v)


def _is_integer(v: object) -> bool:
    """``Number.isInteger``."""
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return True
    return isinstance(v, float) and v.is_integer()


def _is_js_number(v: object) -> bool:
    """``typeof v === "number"`` (NaN and infinities included)."""
    return isinstance(v, int | float) and not isinstance(v, bool)


def _strict_equal(a: object, b: object) -> bool:
    """JavaScript ``a === b`` for JSON values."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if _is_js_number(a):
        return _is_js_number(b) and a == b
    if isinstance(a, str):
        return isinstance(b, str) and a == b
    return a is b


def _is_value_like(v: object) -> bool:
    """TypeBox ``IsValueLike``."""
    return v is None or isinstance(v, bool | str) or _is_number(v) or v is _UNDEF


def _deep_equal(left: object, right: object) -> bool:
    """TypeBox ``IsDeepEqual`` (``left`` is the value, ``right`` the schema's)."""
    if isinstance(left, list):
        return (
            isinstance(right, list)
            and len(left) == len(right)
            and all(_deep_equal(x, y) for x, y in zip(left, right, strict=True))
        )
    if isinstance(left, dict):
        if isinstance(right, dict):
            return len(left) == len(right) and all(
                _deep_equal(x, _js_get(right, k)) for k, x in left.items()
            )
        if isinstance(right, list):  # Object.getOwnPropertyNames([...]) has "length"
            if len(left) != len(right) + 1:
                return False
            for k, x in left.items():
                if k == "length":
                    y: object = len(right)
                elif _is_array_index(k) and int(k) < len(right):
                    y = right[int(k)]
                else:
                    y = _UNDEF
                if not _deep_equal(x, y):
                    return False
            return True
        return False
    return _strict_equal(left, right)


def _is_array_index(key: str) -> bool:
    """Whether a property key is an array index (JavaScript orders those first)."""
    return (
        key.isdigit() and key.isascii() and (key == "0" or key[0] != "0") and int(key) < 4294967295
    )


def _js_key_order(keys: Iterator[str] | list[str]) -> list[str]:
    """Own-property order of a JavaScript object: array indices ascending, then the
    other keys in insertion order."""
    keys = list(keys)
    indices = [k for k in keys if _is_array_index(k)]
    if not indices:
        return keys
    indices.sort(key=int)
    return indices + [k for k in keys if not _is_array_index(k)]


_JS_WHITESPACE: Final = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)
_DECIMAL_LITERAL: Final = re.compile(
    r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z", re.ASCII
)
_NON_DECIMAL_LITERAL: Final = re.compile(r"0(?:[xX][0-9a-fA-F]+|[oO][0-7]+|[bB][01]+)\Z")


def _js_string_to_number(s: str) -> float:
    """JavaScript ``Number(s)`` for a string (NaN when it is not a number)."""
    s = s.strip(_JS_WHITESPACE)
    if not s:
        return 0.0
    if _DECIMAL_LITERAL.match(s):
        return float(s)
    if _NON_DECIMAL_LITERAL.match(s):
        base = {"x": 16, "o": 8, "b": 2}[s[1].lower()]
        try:
            return float(int(s[2:], base))
        except OverflowError:
            return math.inf
    if s in ("Infinity", "+Infinity"):
        return math.inf
    if s == "-Infinity":
        return -math.inf
    return math.nan


def _from_js_number(x: float) -> int | float:
    """The Python value for a JavaScript number: an int when it is a safe integer."""
    if x.is_integer() and abs(x) <= 9007199254740992:
        return int(x)
    return x


def js_number_to_string(v: float) -> str:
    """JavaScript ``String(v)`` for a number (also ``JSON.stringify`` for finite ones)."""
    if isinstance(v, int) and not isinstance(v, bool):
        if abs(v) <= 9007199254740992:
            return str(v)
        try:
            v = float(v)
        except OverflowError:
            return "Infinity" if v > 0 else "-Infinity"
    if v != v:
        return "NaN"
    if v in (math.inf, -math.inf):
        return "Infinity" if v > 0 else "-Infinity"
    if v == 0:
        return "0"
    if v < 0:
        return "-" + js_number_to_string(-v)
    mantissa, _, exponent = repr(v).partition("e")
    whole, _, fraction = mantissa.partition(".")
    if fraction == "0":
        fraction = ""
    all_digits = whole + fraction
    digits = all_digits.lstrip("0")
    # value = 0.<digits> * 10**n
    n = len(whole) + (int(exponent) if exponent else 0) - (len(all_digits) - len(digits))
    digits = digits.rstrip("0") or "0"
    k = len(digits)
    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return "0." + "0" * (-n) + digits
    e = n - 1
    sign = "+" if e >= 0 else "-"
    if k == 1:
        return f"{digits}e{sign}{abs(e)}"
    return f"{digits[0]}.{digits[1:]}e{sign}{abs(e)}"


def _js_to_string(v: object) -> str:
    """JavaScript ``String(v)`` for a number or a boolean."""
    if isinstance(v, bool):
        return "true" if v else "false"
    assert isinstance(v, int | float)
    return js_number_to_string(v)


def _json_string(s: str) -> str:
    # JSON.stringify escapes lone surrogates; json.dumps(ensure_ascii=False) would not.
    text = json.dumps(s, ensure_ascii=False)
    if any("\ud800" <= c <= "\udfff" for c in s):
        text = "".join(f"\\u{ord(c):04x}" if "\ud800" <= c <= "\udfff" else c for c in text)
    return text


def js_json_dumps(value: JSONValue, *, indent: int | None = None) -> str:
    """``JSON.stringify(value, null, indent)`` for a decoded JSON value.

    Differs from :func:`json.dumps` where JavaScript does: number formatting
    (``1.0`` -> ``1``, ``1e-07`` -> ``1e-7``, NaN/Infinity -> ``null``), key order
    (array-index keys first), lone surrogates escaped, and function-valued
    properties left out.
    """
    parts: list[str] = []
    _dump(value, parts, "" if indent is None else "\n", " " * (indent or 0))
    return "".join(parts)


def _dump(v: Any, out: list[str], newline: str, step: str) -> None:
    if v is None:
        out.append("null")
    elif v is True:
        out.append("true")
    elif v is False:
        out.append("false")
    elif isinstance(v, str):
        out.append(_json_string(v))
    elif isinstance(v, int | float):
        out.append(js_number_to_string(v) if _is_number(v) else "null")
    elif isinstance(v, list | tuple):
        if not v:
            out.append("[]")
            return
        inner = newline + step if newline else ""
        out.append("[")
        for i, item in enumerate(v):
            if i:
                out.append(",")
            out.append(inner)
            if isinstance(item, _JSFunction | _Undefined):
                out.append("null")
            else:
                _dump(item, out, inner if newline else "", step)
        out.append(newline + "]" if newline else "]")
        if newline:
            out[-1] = newline + "]"
    elif isinstance(v, Mapping):
        keys = [k for k in _js_key_order(list(v)) if not isinstance(v[k], _JSFunction | _Undefined)]
        if not keys:
            out.append("{}")
            return
        inner = newline + step if newline else ""
        out.append("{")
        for i, k in enumerate(keys):
            if i:
                out.append(",")
            out.append(inner)
            out.append(_json_string(str(k)))
            out.append(": " if newline else ":")
            _dump(v[k], out, inner if newline else "", step)
        out.append(newline + "}" if newline else "}")
    else:
        out.append(_json_string(repr(v)))


# ======================================================================================
# TypeBox string length (grapheme clusters), hashing, multipleOf
# ======================================================================================


def _is_combining(cp: int) -> bool:
    return (
        0x0300 <= cp <= 0x036F
        or 0x1AB0 <= cp <= 0x1AFF
        or 0x1DC0 <= cp <= 0x1DFF
        or 0xFE20 <= cp <= 0xFE2F
    )


def _is_modifier(cp: int) -> bool:
    return _is_combining(cp) or 0xFE00 <= cp <= 0xFE0F


def _is_regional(cp: int) -> bool:
    return 0x1F1E6 <= cp <= 0x1F1FF


def _needs_grapheme_scan(s: str) -> bool:
    # TypeBox's IsGraphemeCodePoint on UTF-16 units: a high surrogate (any astral
    # character), a combining mark, a variation selector or a zero-width joiner.
    for c in s:
        cp = ord(c)
        if cp >= 0x0300 and (
            cp > 0xFFFF or 0xD800 <= cp <= 0xDBFF or _is_modifier(cp) or cp == 0x200D
        ):
            return True
    return False


def _grapheme_count(s: str) -> int:
    """TypeBox ``GraphemeCount`` (its own simplified segmentation)."""
    n = len(s)
    count = 0
    i = 0
    while i < n:
        start = ord(s[i])
        j = i + 1
        while j < n and _is_modifier(ord(s[j])):
            j += 1
        while j < n - 1 and s[j] == "\u200d":
            j += 2
            while j < n and _is_modifier(ord(s[j])):
                j += 1
        if _is_regional(start) and j < n and _is_regional(ord(s[j])):
            j += 1
        i = j
        count += 1
    return count


def _string_length(s: str) -> int:
    """The length TypeBox's ``minLength``/``maxLength`` compare."""
    if s.isascii() or not _needs_grapheme_scan(s):
        # Without grapheme code points every UTF-16 unit is one cluster.
        return len(s) + sum(1 for c in s if ord(c) > 0xFFFF)
    return _grapheme_count(s)


def _hash_into(v: Any, out: bytearray) -> None:
    """TypeBox ``Hashing.Hash``'s byte stream (uniqueItems compares these)."""
    if v is None:
        out.append(6)
    elif isinstance(v, bool):
        out += b"\x02\x01" if v else b"\x02\x00"
    elif isinstance(v, int | float):
        try:
            f = float(v)
        except OverflowError:
            f = math.inf if v > 0 else -math.inf
        out.append(7)
        out += struct.pack("<d", f)
    elif isinstance(v, str):
        out.append(10)
        out += v.encode("utf-8", "surrogatepass") if v.isascii() else _utf8_js(v)
    elif isinstance(v, list):
        out.append(0)
        for item in v:
            _hash_into(item, out)
    elif isinstance(v, dict):
        out.append(8)
        for key in sorted((k for k in v if k != "constructor"), key=_utf16_key):
            _hash_into(key, out)
            _hash_into(v[key], out)
    elif isinstance(v, _JSFunction):
        out.append(5)
        _hash_into(v.source, out)
    else:
        _hash_into(repr(v), out)


def _utf8_js(s: str) -> bytes:
    # TextEncoder replaces lone surrogates with U+FFFD.
    return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in s).encode("utf-8")


def _utf16_key(s: str) -> bytes:
    return s.encode("utf-16-be", "surrogatepass")


def _is_multiple_of(value: float, divisor: float) -> bool:
    """TypeBox ``Guard.IsMultipleOf`` (with its 1e-10 tolerance)."""
    if not _is_number(value):
        return True
    try:
        if _is_integer(value) and divisor != 0 and math.fmod(1 / divisor, 1) == 0:
            return True
        mod = math.fmod(value, divisor)
    except (ZeroDivisionError, ValueError, OverflowError):
        return False
    return min(abs(mod), abs(mod - divisor), abs(mod + divisor)) < 1e-10


# ======================================================================================
# JavaScript regular expressions, translated to Python's `re`
# ======================================================================================


class _JSRegexError(Exception):
    """A pattern that ``new RegExp(pattern, flags)`` rejects; ``args[0]`` is V8's reason."""


class _UnsupportedRegex(Exception):
    """A valid JavaScript pattern that pitrio cannot evaluate with Python's ``re``."""


_WS_CLASS: Final = "".join(re.escape(c) for c in _JS_WHITESPACE)
_SYNTAX_CHARS: Final = frozenset("^$\\.*+?()[]{}|/")
_CONTROL_ESCAPES: Final = {"t": "\t", "n": "\n", "v": "\v", "f": "\f", "r": "\r"}
_LINE_TERMINATORS: Final = "\n\r\u2028\u2029"

# Character-class escapes as sets of code-point ranges.
_RANGES_DIGIT: Final = ((0x30, 0x39),)
_RANGES_WORD: Final = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
_RANGES_SPACE: Final = tuple(sorted((ord(c), ord(c)) for c in _JS_WHITESPACE))

_GC_ALIASES: Final = {
    "L": "L", "Letter": "L", "Lu": "Lu", "Uppercase_Letter": "Lu", "Ll": "Ll",
    "Lowercase_Letter": "Ll", "Lt": "Lt", "Titlecase_Letter": "Lt", "LC": "LC",
    "Cased_Letter": "LC", "Lm": "Lm", "Modifier_Letter": "Lm", "Lo": "Lo",
    "Other_Letter": "Lo", "M": "M", "Mark": "M", "Combining_Mark": "M", "Mn": "Mn",
    "Nonspacing_Mark": "Mn", "Mc": "Mc", "Spacing_Mark": "Mc", "Me": "Me",
    "Enclosing_Mark": "Me", "N": "N", "Number": "N", "Nd": "Nd", "Decimal_Number": "Nd",
    "digit": "Nd", "Nl": "Nl", "Letter_Number": "Nl", "No": "No", "Other_Number": "No",
    "P": "P", "Punctuation": "P", "punct": "P", "Pc": "Pc", "Connector_Punctuation": "Pc",
    "Pd": "Pd", "Dash_Punctuation": "Pd", "Ps": "Ps", "Open_Punctuation": "Ps", "Pe": "Pe",
    "Close_Punctuation": "Pe", "Pi": "Pi", "Initial_Punctuation": "Pi", "Pf": "Pf",
    "Final_Punctuation": "Pf", "Po": "Po", "Other_Punctuation": "Po", "S": "S",
    "Symbol": "S", "Sm": "Sm", "Math_Symbol": "Sm", "Sc": "Sc", "Currency_Symbol": "Sc",
    "Sk": "Sk", "Modifier_Symbol": "Sk", "So": "So", "Other_Symbol": "So", "Z": "Z",
    "Separator": "Z", "Zs": "Zs", "Space_Separator": "Zs", "Zl": "Zl",
    "Line_Separator": "Zl", "Zp": "Zp", "Paragraph_Separator": "Zp", "C": "C",
    "Other": "C", "Cc": "Cc", "Control": "Cc", "cntrl": "Cc", "Cf": "Cf", "Format": "Cf",
    "Cs": "Cs", "Surrogate": "Cs", "Co": "Co", "Private_Use": "Co", "Cn": "Cn",
    "Unassigned": "Cn",
}  # fmt: skip
_KNOWN_BINARY_PROPERTIES: Final = frozenset(
    [
        "ASCII",
        "ASCII_Hex_Digit",
        "AHex",
        "Alphabetic",
        "Alpha",
        "Any",
        "Assigned",
        "Bidi_Control",
        "Bidi_C",
        "Bidi_Mirrored",
        "Bidi_M",
        "Case_Ignorable",
        "CI",
        "Cased",
        "Changes_When_Casefolded",
        "CWCF",
        "Changes_When_Casemapped",
        "CWCM",
        "Changes_When_Lowercased",
        "CWL",
        "Changes_When_NFKC_Casefolded",
        "CWKCF",
        "Changes_When_Titlecased",
        "CWT",
        "Changes_When_Uppercased",
        "CWU",
        "Dash",
        "Default_Ignorable_Code_Point",
        "DI",
        "Deprecated",
        "Dep",
        "Diacritic",
        "Dia",
        "Emoji",
        "Emoji_Component",
        "EComp",
        "Emoji_Modifier",
        "EMod",
        "Emoji_Modifier_Base",
        "EBase",
        "Emoji_Presentation",
        "EPres",
        "Extended_Pictographic",
        "ExtPict",
        "Extender",
        "Ext",
        "Grapheme_Base",
        "Gr_Base",
        "Grapheme_Extend",
        "Gr_Ext",
        "Hex_Digit",
        "Hex",
        "IDS_Binary_Operator",
        "IDSB",
        "IDS_Trinary_Operator",
        "IDST",
        "ID_Continue",
        "IDC",
        "ID_Start",
        "IDS",
        "Ideographic",
        "Ideo",
        "Join_Control",
        "Join_C",
        "Logical_Order_Exception",
        "LOE",
        "Lowercase",
        "Lower",
        "Math",
        "Noncharacter_Code_Point",
        "NChar",
        "Pattern_Syntax",
        "Pat_Syn",
        "Pattern_White_Space",
        "Pat_WS",
        "Quotation_Mark",
        "QMark",
        "Radical",
        "Radical",
        "Regional_Indicator",
        "RI",
        "Sentence_Terminal",
        "STerm",
        "Soft_Dotted",
        "SD",
        "Terminal_Punctuation",
        "Term",
        "Unified_Ideograph",
        "UIdeo",
        "Uppercase",
        "Upper",
        "Variation_Selector",
        "VS",
        "White_Space",
        "space",
        "XID_Continue",
        "XIDC",
        "XID_Start",
        "XIDS",
    ]
)
_category_ranges_cache: dict[str, tuple[tuple[int, int], ...]] = {}
_category_lock = threading.Lock()


def _category_ranges(gc: str) -> tuple[tuple[int, int], ...]:
    """Code-point ranges of a Unicode general category (or group such as ``L``)."""
    with _category_lock:
        if not _category_ranges_cache:
            # One scan of all code points builds every category's ranges.
            ranges: dict[str, list[list[int]]] = {}
            category = unicodedata.category
            previous = ""
            for cp in range(sys.maxunicode + 1):
                cat = category(chr(cp))
                if cat == previous:
                    ranges[cat][-1][1] = cp
                else:
                    ranges.setdefault(cat, []).append([cp, cp])
                    previous = cat
            for cat, spans in ranges.items():
                _category_ranges_cache[cat] = tuple((lo, hi) for lo, hi in spans)
        cached = _category_ranges_cache.get(gc)
        if cached is None:
            members = (
                ("Lu", "Ll", "Lt")
                if gc == "LC"
                else tuple(
                    cat for cat in list(_category_ranges_cache) if len(cat) == 2 and cat[0] == gc
                )
            )
            merged = sorted(r for cat in members for r in _category_ranges_cache.get(cat, ()))
            union: list[list[int]] = []
            for lo, hi in merged:
                if union and lo <= union[-1][1] + 1:
                    union[-1][1] = max(union[-1][1], hi)
                else:
                    union.append([lo, hi])
            cached = tuple((lo, hi) for lo, hi in union)
            _category_ranges_cache[gc] = cached
        return cached


def _complement(ranges: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    nxt = 0
    for lo, hi in sorted(ranges):
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = max(nxt, hi + 1)
    if nxt <= sys.maxunicode:
        out.append((nxt, sys.maxunicode))
    return tuple(out)


def _class_char(cp: int) -> str:
    c = chr(cp)
    if c.isalnum() and c.isascii():
        return c
    return f"\\U{cp:08x}" if cp > 0xFFFF else f"\\u{cp:04x}"


def _ranges_to_class_body(ranges: tuple[tuple[int, int], ...]) -> str:
    return "".join(
        _class_char(lo) if lo == hi else f"{_class_char(lo)}-{_class_char(hi)}" for lo, hi in ranges
    )


class _RegexTranslator:
    """Parses a JavaScript pattern (``u`` flag or legacy mode) and emits a Python one."""

    def __init__(self, source: str, unicode: bool) -> None:
        self.s = source
        self.u = unicode
        self.i = 0
        self.groups = 0
        self.names: list[str] = []
        self.backrefs: list[int] = []
        self.named_refs: list[str] = []
        self.total_groups = self._count_groups()

    def _count_groups(self) -> int:
        count = 0
        i = 0
        s = self.s
        in_class = False
        while i < len(s):
            c = s[i]
            if c == "\\":
                i += 2
                continue
            if in_class:
                if c == "]":
                    in_class = False
            elif c == "[":
                in_class = True
            elif (
                c == "("
                and (not s.startswith("(?", i) or s.startswith("(?<", i))
                and not (s.startswith("(?<=", i) or s.startswith("(?<!", i))
            ):
                count += 1
            i += 1
        return count

    @staticmethod
    def fail(reason: str) -> NoReturn:
        raise _JSRegexError(reason)

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.s[j] if j < len(self.s) else ""

    def translate(self) -> str:
        out = self.disjunction()
        if self.i < len(self.s):
            # Only a stray ')' stops a top-level disjunction.
            self.fail("Unmatched ')'")
        for n in self.backrefs:
            if n > self.groups:
                self.fail("Invalid escape")
        for name in self.named_refs:
            if name not in self.names:
                self.fail("Invalid named capture referenced")
        return out

    def disjunction(self) -> str:
        parts = [self.alternative()]
        while self.peek() == "|":
            self.i += 1
            parts.append(self.alternative())
        return "|".join(parts)

    def alternative(self) -> str:
        out: list[str] = []
        while self.i < len(self.s) and self.peek() not in ("|", ")"):
            out.append(self.term())
        return "".join(out)

    def term(self) -> str:
        c = self.peek()
        atom: str
        quantifiable = True
        lookaround = False
        if c == "^":
            self.i += 1
            atom, quantifiable = "^", False
        elif c == "$":
            self.i += 1
            atom, quantifiable = r"(?!(?s:.))", False
        elif c == "\\" and self.peek(1) in ("b", "B"):
            self.i += 2
            # Python's \B never matches in an empty string; JavaScript's does.
            atom = r"\b" if self.s[self.i - 1] == "b" else r"(?:\B|\A\Z)"
            quantifiable = False
        elif c == "(":
            atom, lookaround = self.group()
            if lookaround:
                # Quantified lookarounds: a SyntaxError with `u`, legal (Annex B)
                # for lookaheads without it.
                quantifiable = not self.u and not atom.startswith("(?<")
        elif c == ".":
            self.i += 1
            atom = r"[^\n\r\u2028\u2029]"
        elif c == "[":
            atom = self.char_class()
        elif c == "\\":
            atom = self.atom_escape()
        elif c in ("*", "+", "?"):
            self.fail("Nothing to repeat")
        elif c == "{":
            if self.u:
                if self._quantifier_braces() is not None:
                    self.fail("Nothing to repeat")
                self.fail("Lone quantifier brackets")
            if self._quantifier_braces() is not None:
                self.fail("Nothing to repeat")
            self.i += 1
            atom = r"\{"
        elif c in ("}", "]"):
            if self.u:
                self.fail("Lone quantifier brackets")
            self.i += 1
            atom = re.escape(c)
        else:
            self.i += 1
            atom = re.escape(c)
        if lookaround and not quantifiable:
            # V8 parses the quantifier (and its errors) before rejecting it.
            if self.quantifier() is not None:
                self.fail("Invalid quantifier")
            return atom
        if not quantifiable:  # ^ $ \b \B: a '{' after them is not a quantifier
            if self.peek() in ("*", "+", "?") or (
                self.peek() == "{" and self._quantifier_braces() is not None
            ):
                self.fail("Nothing to repeat")
            return atom
        quant = self.quantifier()
        if quant is None:
            return atom
        if lookaround:
            atom = f"(?:{atom})"
        return atom + quant

    def _quantifier_braces(self) -> tuple[int, int | None, int] | None:
        m = re.compile(r"\{([0-9]+)(?:(,)([0-9]*))?\}", re.ASCII).match(self.s, self.i)
        if m is None:
            return None
        lo = int(m.group(1))
        hi: int | None = lo
        if m.group(2):
            hi = int(m.group(3)) if m.group(3) else None
        return lo, hi, m.end()

    def quantifier(self) -> str | None:
        c = self.peek()
        if c in ("*", "+", "?"):
            self.i += 1
            q = c
        elif c == "{":
            braces = self._quantifier_braces()
            if braces is None:
                if self.u:
                    self.fail("Incomplete quantifier")
                return None
            lo, hi, end = braces
            if hi is not None and hi < lo:
                self.fail("numbers out of order in {} quantifier")
            self.i = end
            q = f"{{{lo}}}" if hi == lo else f"{{{lo},{'' if hi is None else hi}}}"
        else:
            return None
        if self.peek() == "?":
            self.i += 1
            q += "?"
        if self.peek() in ("*", "+", "?") or (
            self.peek() == "{" and self._quantifier_braces() is not None
        ):
            self.fail("Nothing to repeat")
        return q

    def group(self) -> tuple[str, bool]:
        s = self.s
        start = self.i
        if s.startswith("(?:", start):
            self.i += 3
            prefix, look = "(?:", False
        elif s.startswith("(?=", start) or s.startswith("(?!", start):
            self.i += 3
            prefix, look = s[start : start + 3], True
        elif s.startswith("(?<=", start) or s.startswith("(?<!", start):
            self.i += 4
            prefix, look = s[start : start + 4], True
        elif s.startswith("(?<", start):
            m = re.compile(r"\(\?<([A-Za-z_$][A-Za-z0-9_$]*)>").match(s, start)
            if m is None:
                self.fail("Invalid capture group name")
            name = m.group(1)
            if name in self.names:
                self.fail("Duplicate capture group name")
            self.names.append(name)
            self.groups += 1
            self.i = m.end()
            prefix, look = f"(?P<{self._py_name(name)}>", False
        elif s.startswith("(?", start):
            self.fail("Invalid group")
        else:
            self.i += 1
            self.groups += 1
            prefix, look = "(", False
        body = self.disjunction()
        if self.peek() != ")":
            self.fail("Unterminated group")
        self.i += 1
        return prefix + body + ")", look

    @staticmethod
    def _py_name(name: str) -> str:
        return "g_" + name.replace("$", "_S_")

    def atom_escape(self) -> str:
        self.i += 1  # the backslash
        c = self.peek()
        if not c:
            self.fail("\\ at end of pattern")
        if c in "123456789":
            m = re.compile(r"[0-9]+").match(self.s, self.i)
            assert m is not None
            n = int(m.group(0))
            if self.u and n > self.total_groups:
                self.fail("Invalid escape")
            if n <= self.total_groups:
                self.i = m.end()
                return f"(?:\\{n})" if n <= 99 else "(?!)"
            return self._legacy_octal()
        if c == "k":
            if self.u or self._has_named_groups():
                m = re.compile(r"k<([A-Za-z_$][A-Za-z0-9_$]*)>").match(self.s, self.i)
                if m is None:
                    self.fail("Invalid named reference")
                self.i = m.end()
                self.named_refs.append(m.group(1))
                return f"(?P={self._py_name(m.group(1))})"
            self.i += 1
            return "k"
        ranges = self._class_escape()
        if ranges is not None:
            return f"[{_ranges_to_class_body(ranges)}]"
        return re.escape(chr(self._char_escape(in_class=False)))

    def _has_named_groups(self) -> bool:
        return re.search(r"\(\?<[^=!]", self.s) is not None

    def _legacy_octal(self) -> str:
        m = re.compile(r"[0-3][0-7]{0,2}|[4-7][0-7]?").match(self.s, self.i)
        if m is None:  # \8, \9
            ch = self.s[self.i]
            self.i += 1
            return re.escape(ch)
        self.i = m.end()
        return re.escape(chr(int(m.group(0), 8)))

    def _class_escape(self) -> tuple[tuple[int, int], ...] | None:
        """``\\d \\D \\s \\S \\w \\W \\p{..} \\P{..}`` (backslash consumed)."""
        c = self.peek()
        table = {"d": _RANGES_DIGIT, "s": _RANGES_SPACE, "w": _RANGES_WORD}
        if c.lower() in table:
            self.i += 1
            ranges = table[c.lower()]
            return _complement(ranges) if c.isupper() else ranges
        if c in ("p", "P") and self.u:
            m = re.compile(r"[pP]\{([A-Za-z_]+)(?:=([A-Za-z_0-9]+))?\}").match(self.s, self.i)
            if m is None:
                self.fail("Invalid property name")
            self.i = m.end()
            ranges = self._property_ranges(m.group(1), m.group(2))
            return _complement(ranges) if c == "P" else ranges
        return None

    def _property_ranges(self, name: str, value: str | None) -> tuple[tuple[int, int], ...]:
        if value is not None:
            if name in ("General_Category", "gc") and value in _GC_ALIASES:
                return _category_ranges(_GC_ALIASES[value])
            if name in ("Script", "sc", "Script_Extensions", "scx"):
                msg = f"\\p{{{name}={value}}} (Unicode scripts)"
                raise _UnsupportedRegex(msg)
            self.fail("Invalid property name")
        if name in _GC_ALIASES:
            return _category_ranges(_GC_ALIASES[name])
        if name == "Any":
            return ((0, sys.maxunicode),)
        if name == "ASCII":
            return ((0, 0x7F),)
        if name == "Assigned":
            return _complement(_category_ranges("Cn"))
        if name in _KNOWN_BINARY_PROPERTIES:
            msg = f"\\p{{{name}}} (Unicode binary properties)"
            raise _UnsupportedRegex(msg)
        self.fail("Invalid property name")

    def _char_escape(self, *, in_class: bool) -> int:
        """A CharacterEscape (backslash consumed); returns the code point."""
        s = self.s
        c = self.peek()
        if c in _CONTROL_ESCAPES:
            self.i += 1
            return ord(_CONTROL_ESCAPES[c])
        if c == "c":
            n = self.peek(1)
            if n.isascii() and n.isalpha():
                self.i += 2
                return ord(n) % 32
            if self.u:
                self.fail("Invalid Unicode escape")
            # Legacy: `\c` is a literal backslash followed by "c".
            return ord("\\")
        if c == "0" and not self.peek(1).isdigit():
            self.i += 1
            return 0
        if c == "0" or (c.isdigit() and in_class):
            if self.u:
                self.fail("Invalid class escape" if in_class else "Invalid decimal escape")
            m = re.compile(r"[0-3][0-7]{0,2}|[4-7][0-7]?").match(s, self.i)
            if m is None:
                self.i += 1
                return ord(c)
            self.i = m.end()
            return int(m.group(0), 8)
        if c == "x":
            m = re.compile(r"x([0-9a-fA-F]{2})").match(s, self.i)
            if m is not None:
                self.i = m.end()
                return int(m.group(1), 16)
            if self.u:
                self.fail("Invalid escape")
            self.i += 1
            return ord("x")
        if c == "u":
            return self._unicode_escape()
        if self.u:
            if c in _SYNTAX_CHARS or (in_class and c == "-"):
                self.i += 1
                return ord(c)
            self.fail("Invalid escape")
        self.i += 1
        return ord(c)

    def _unicode_escape(self) -> int:
        s = self.s
        if self.u:
            m = re.compile(r"u\{([0-9a-fA-F]+)\}").match(s, self.i)
            if m is not None:
                cp = int(m.group(1), 16)
                if cp > 0x10FFFF:
                    self.fail("Invalid Unicode escape")
                self.i = m.end()
                return cp
        m = re.compile(r"u([0-9a-fA-F]{4})").match(s, self.i)
        if m is None:
            if self.u:
                self.fail("Invalid Unicode escape")
            self.i += 1
            return ord("u")
        self.i = m.end()
        cp = int(m.group(1), 16)
        if self.u and 0xD800 <= cp <= 0xDBFF:
            low = re.compile(r"\\u([dD][c-fC-F][0-9a-fA-F]{2})").match(s, self.i)
            if low is not None:
                self.i = low.end()
                return 0x10000 + ((cp - 0xD800) << 10) + (int(low.group(1), 16) - 0xDC00)
        return cp

    def char_class(self) -> str:
        self.i += 1  # '['
        negated = self.peek() == "^"
        if negated:
            self.i += 1
        items: list[tuple[int, int]] = []
        while True:
            c = self.peek()
            if not c:
                self.fail("Unterminated character class")
            if c == "]":
                self.i += 1
                break
            first = self._class_atom()
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.i += 1
                second = self._class_atom()
                if isinstance(first, int) and isinstance(second, int):
                    if second < first:
                        self.fail("Range out of order in character class")
                    items.append((first, second))
                    continue
                if self.u:
                    self.fail("Invalid character class")
                # Legacy: a class escape next to '-' makes the '-' literal.
                for atom in (first, ord("-"), second):
                    if isinstance(atom, int):
                        items.append((atom, atom))
                    else:
                        items.extend(atom)
                continue
            if isinstance(first, int):
                items.append((first, first))
            else:
                items.extend(first)
        if not items:
            return r"[\x00-\U0010ffff]" if negated else "(?!)"
        return f"[{'^' if negated else ''}{_ranges_to_class_body(tuple(items))}]"

    def _class_atom(self) -> int | tuple[tuple[int, int], ...]:
        c = self.peek()
        if c != "\\":
            self.i += 1
            return ord(c)
        self.i += 1
        n = self.peek()
        if not n:
            self.fail("\\ at end of pattern")
        if n == "b":
            self.i += 1
            return 8
        if n == "-" and self.u:
            self.i += 1
            return ord("-")
        ranges = self._class_escape()
        if ranges is not None:
            return ranges
        if self.u and n.isdigit() and n != "0":
            self.fail("Invalid class escape")
        if n == "k" and not self.u:
            self.i += 1
            return ord("k")
        return self._char_escape(in_class=True)


_regex_cache: dict[tuple[str, bool], re.Pattern[str]] = {}


def _js_regex(source: str, *, unicode: bool = True) -> re.Pattern[str]:
    """Compile a JavaScript pattern (no flags but ``u``) to an equivalent ``re`` pattern.

    Raises:
        _JSRegexError: JavaScript rejects the pattern.
        _UnsupportedRegex: valid, but not translatable.
    """
    key = (source, unicode)
    compiled = _regex_cache.get(key)
    if compiled is None:
        translated = _RegexTranslator(source, unicode).translate()
        try:
            compiled = re.compile(translated, re.ASCII)
        except re.error as exc:  # e.g. a variable-width lookbehind
            msg = f"{source!r} ({exc})"
            raise _UnsupportedRegex(msg) from exc
        _regex_cache[key] = compiled
    return compiled


def _v8_regex_message(source: str, flags: str, reason: str) -> str:
    return f"Invalid regular expression: /{source}/{flags}: {reason}"


# ======================================================================================
# TypeBox's formats (typebox/build/format)
# ======================================================================================

_DATE: Final = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})\Z")
_DAYS: Final = (0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_TIME: Final = re.compile(
    r"([0-9]{2}):([0-9]{2}):([0-9]{2}(?:\.[0-9]+)?)(?:[zZ]|([+-])([0-9]{2}):([0-9]{2}))?\Z"
)
_DURATION: Final = re.compile(
    r"P(?:(?:[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?|[0-9]+M(?:[0-9]+D)?|[0-9]+D)"
    r"(?:T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S))?"
    r"|T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)|[0-9]+W)\Z"
)
_EMAIL: Final = re.compile(
    r"(?!.*\.\.)[a-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[a-z0-9!#$%&'*+/=?^_`{|}~-]+)*@"
    r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*\Z",
    re.ASCII | re.IGNORECASE,
)
_UUID: Final = re.compile(
    r"[0-9a-f]{8}-(?:[0-9a-f]{4}-){3}[0-9a-f]{12}\Z", re.ASCII | re.IGNORECASE
)
_JSON_POINTER: Final = re.compile(r"(?:/(?:[^~/]|~0|~1)*)*\Z")
_RELATIVE_JSON_POINTER: Final = re.compile(r"(?:0|[1-9][0-9]*)(?:#|(?:/(?:[^~/]|~0|~1)*)*)\Z")
_JSON_POINTER_URI_FRAGMENT: Final = re.compile(
    r"#(?:/(?:[a-z0-9_\-.!$&'()*+,;:=@]|%[0-9a-f]{2}|~0|~1)*)*\Z", re.ASCII | re.IGNORECASE
)
_URI_TEMPLATE: Final = re.compile(
    r"(?:(?:[^\x00-\x20\"'<>%\\^`{|}]|%[0-9a-f]{2})|\{[+#./;?&=,!@|]?(?:[a-z0-9_]|%[0-9a-f]{2})+"
    r"(?::[1-9][0-9]{0,3}|\*)?(?:,(?:[a-z0-9_]|%[0-9a-f]{2})+(?::[1-9][0-9]{0,3}|\*)?)*\})*\Z",
    re.ASCII | re.IGNORECASE,
)
_URI_REFERENCE: Final = re.compile(
    r"(?!.*[^\x00-\x7F])(?!.*\\)(?:(?:[a-z][a-z0-9+\-.]*:)?(?:\/\/[^\s\[\]{}<>^`|]*)?"
    r"|[^\s\[\]{}<>^`|]*)(?:\?[^\s\[\]{}<>^`|]*)?(?:#[^\s\[\]{}<>^`|]*)?\Z",
    re.ASCII | re.IGNORECASE,
)
_NS: Final = f"[^{_WS_CLASS}]"  # JavaScript \S
_U: Final = r"[a-z0-9\u00a1-\uffff]"
_URL: Final = re.compile(
    rf"(?:https?|ftp)://(?:{_NS}+(?::{_NS}*)?@)?(?:(?!(?:10|127)(?:\.[0-9]{{1,3}}){{3}})"
    r"(?!(?:169\.254|192\.168)(?:\.[0-9]{1,3}){2})(?!172\.(?:1[6-9]|2[0-9]|3[0-1])"
    r"(?:\.[0-9]{1,3}){2})(?:[1-9][0-9]?|1[0-9][0-9]|2[01][0-9]|22[0-3])"
    r"(?:\.(?:1?[0-9]{1,2}|2[0-4][0-9]|25[0-5])){2}(?:\.(?:[1-9][0-9]?|1[0-9][0-9]|2[0-4][0-9]"
    rf"|25[0-4]))|(?:(?:{_U}+-)*{_U}+)(?:\.(?:{_U}+-)*{_U}+)*(?:\.(?:[a-z\u00a1-\uffff]{{2,}})))"
    rf"(?::[0-9]{{2,5}})?(?:/{_NS}*)?\Z",
    re.IGNORECASE,
)


def _fmt_date(v: str) -> bool:
    m = _DATE.match(v)
    if m is None:
        return False
    year, month, day = (int(g) for g in m.groups())
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    return 1 <= month <= 12 and 1 <= day <= (29 if month == 2 and leap else _DAYS[month])


def _fmt_time(v: str, strict: bool = True) -> bool:
    m = _TIME.match(v)
    if m is None:
        return False
    hr, mi, sec = int(m.group(1)), int(m.group(2)), float(m.group(3))
    sign = -1 if m.group(4) == "-" else 1
    tz_h = int(m.group(5) or 0)
    tz_m = int(m.group(6) or 0)
    if tz_h > 23 or tz_m > 59:
        return False
    if strict and not m.group(4) and "z" not in v.lower():
        return False
    if hr <= 23 and mi <= 59 and sec < 60:
        return True
    utc_min = mi - tz_m * sign
    utc_hr = hr - tz_h * sign - (1 if utc_min < 0 else 0)
    return utc_hr in (23, -1) and utc_min in (59, -1) and sec < 61


def _fmt_date_time(v: str) -> bool:
    parts = re.split("[tT]", v)
    return len(parts) == 2 and _fmt_date(parts[0]) and _fmt_time(parts[1])


def _cc(s: str, i: int) -> int:
    """``s.charCodeAt(i)`` (-1 stands for NaN past the end)."""
    return ord(s[i]) if 0 <= i < len(s) else -1


def _fmt_ipv4_range(v: str, start: int, end: int) -> bool:
    dots = num = digits = leading = 0
    for i in range(start, end):
        ch = ord(v[i])
        if ch == 46:
            if digits == 0 or num > 255 or (leading == 48 and digits > 1):
                return False
            dots += 1
            num = digits = leading = 0
        elif 48 <= ch <= 57:
            if digits == 0:
                leading = ch
            num = num * 10 + (ch - 48)
            digits += 1
        else:
            return False
    return dots == 3 and digits > 0 and num <= 255 and not (leading == 48 and digits > 1)


def _fmt_ipv4(v: str) -> bool:
    return _fmt_ipv4_range(v, 0, len(v))


def _is_hex(ch: int) -> bool:
    return 48 <= ch <= 57 or 65 <= ch <= 70 or 97 <= ch <= 102


def _fmt_ipv6(v: str) -> bool:
    length = len(v)
    if length == 0:
        return False
    groups = 0
    compressed = False
    i = 0
    if _cc(v, 0) == 58 and _cc(v, 1) == 58:
        if length == 2:
            return True
        compressed = True
        i = 2
    while i < length:
        digits = 0
        start = i
        while i < length and _is_hex(ord(v[i])):
            i += 1
            digits += 1
        if digits == 0:
            return False
        nxt = _cc(v, i)
        if nxt == 46:
            if not _fmt_ipv4_range(v, start, length):
                return False
            groups += 2
            i = length
            break
        if digits > 4:
            return False
        groups += 1
        if i == length:
            break
        if nxt != 58:
            return False
        i += 1
        if _cc(v, i) == 58:
            if compressed or _cc(v, i + 1) == 58:
                return False
            compressed = True
            i += 1
            if i == length:
                break
    return groups <= 7 if compressed else groups == 8


def _is_alpha(ch: int) -> bool:
    return 97 <= ch <= 122 or 65 <= ch <= 90


def _is_alnum(ch: int) -> bool:
    return _is_alpha(ch) or 48 <= ch <= 57


def _is_unreserved(ch: int) -> bool:
    return _is_alnum(ch) or ch in (45, 46, 95, 126)


def _is_sub_delim(ch: int) -> bool:
    return ch in (33, 36, 38, 39, 40, 41, 42, 43, 44, 59, 61)


def _fmt_uri(v: str) -> bool:
    length = len(v)
    if length == 0 or not _is_alpha(ord(v[0])):
        return False
    i = 1
    while i < length:
        ch = ord(v[i])
        if ch == 58:
            break
        if not (_is_alnum(ch) or ch in (43, 45, 46)):
            return False
        i += 1
    if _cc(v, i) != 58:
        return False
    i += 1
    if _cc(v, i) == 47 and _cc(v, i + 1) == 47:
        i += 2
        authority_start = i
        at = -1
        for j in range(i, length):
            ch = ord(v[j])
            if ch == 64:
                at = j
                break
            if ch in (47, 63, 35):
                break
        if at != -1:
            j = authority_start
            while j < at:
                ch = ord(v[j])
                if ch in (91, 93):
                    return False
                if ch == 37:
                    if j + 2 >= at or not _is_hex(_cc(v, j + 1)) or not _is_hex(_cc(v, j + 2)):
                        return False
                    j += 2
                elif not _is_unreserved(ch) and not _is_sub_delim(ch) and ch != 58:
                    return False
                j += 1
            i = at + 1
        if _cc(v, i) == 91:
            i += 1
            while i < length and ord(v[i]) != 93:
                i += 1
            if _cc(v, i) != 93:
                return False
            i += 1
        else:
            while i < length:
                ch = ord(v[i])
                if ch in (47, 63, 35, 58):
                    break
                if ch < 128 and not _is_unreserved(ch) and not _is_sub_delim(ch):
                    return False
                i += 1
        if _cc(v, i) == 58:
            i += 1
            while i < length:
                ch = ord(v[i])
                if ch in (47, 63, 35):
                    break
                if ch < 48 or ch > 57:
                    return False
                i += 1
    while i < length:
        ch = ord(v[i])
        if ch == 37:
            if i + 2 >= length or not _is_hex(_cc(v, i + 1)) or not _is_hex(_cc(v, i + 2)):
                return False
            i += 2
        elif ch > 127 or not (
            _is_unreserved(ch) or _is_sub_delim(ch) or ch in (58, 64) or ch in (47, 63, 35)
        ):
            return False
        i += 1
    return True


def _utf16_len(s: str) -> int:
    return len(s) + sum(1 for c in s if ord(c) > 0xFFFF)


def _ascii_label(v: str) -> bool:
    if v[0] == "-" or v[-1] == "-":
        return False
    if len(v) >= 4 and v[2] == "-" and v[3] == "-":
        return False
    return all(c.isascii() and (c.isalnum() or c == "-") for c in v)


_SCRIPT_RANGES: Final = {
    "Greek": ((0x0370, 0x03FF), (0x1F00, 0x1FFF), (0x1D26, 0x1D2A), (0xAB65, 0xAB65)),
    "Hebrew": ((0x0591, 0x05F4), (0xFB1D, 0xFB4F)),
    "Hiragana": ((0x3041, 0x309F), (0x1B001, 0x1B11F)),
    "Katakana": ((0x30A1, 0x30FF), (0x31F0, 0x31FF), (0xFF66, 0xFF9D), (0x32D0, 0x32FE)),
    "Han": (
        (0x2E80, 0x2FDF), (0x3005, 0x3007), (0x3021, 0x3029), (0x3038, 0x303B),
        (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0x20000, 0x3134F),
    ),
}  # fmt: skip


def _in_script(cp: int, script: str) -> bool:
    return any(lo <= cp <= hi for lo, hi in _SCRIPT_RANGES[script])


_VIRAMAS: Final = frozenset(
    (0x094D, 0x09CD, 0x0A4D, 0x0ACD, 0x0B4D, 0x0BCD, 0x0C4D, 0x0CCD, 0x0D3B, 0x0D3C, 0x0D4D,
     0x0DCA, 0x1B44, 0x1BAA, 0x1BAB, 0xA9C0, 0x11046, 0x1107F, 0x110B9, 0x11133, 0x11134,
     0x111C0, 0x11235, 0x1134D, 0x11442, 0x114C2, 0x115BF, 0x1163F, 0x116B6, 0x11C3F,
     0x11D44, 0x11D45)
)  # fmt: skip
_RFC5892_DISALLOWED: Final = frozenset(
    (0x0640, 0x07FA, 0x302E, 0x302F, 0x3031, 0x3032, 0x3033, 0x3034, 0x3035, 0x303B)
)


def _unicode_label(v: str) -> bool:
    cps = [ord(c) for c in v]
    n = len(cps)
    if not n or cps[0] == 0x2D or cps[-1] == 0x2D:
        return False
    if n >= 4 and cps[2] == 0x2D and cps[3] == 0x2D:
        return False
    if unicodedata.category(v[0]) in ("Mn", "Mc", "Me"):
        return False
    japanese = arabic = ext_arabic = False
    for i, cp in enumerate(cps):
        if cp in _RFC5892_DISALLOWED:
            return False
        if _in_script(cp, "Hiragana") or _in_script(cp, "Katakana") or _in_script(cp, "Han"):
            japanese = True
        arabic = arabic or 0x0660 <= cp <= 0x0669
        ext_arabic = ext_arabic or 0x06F0 <= cp <= 0x06F9
        prev = cps[i - 1] if i > 0 else None
        nxt = cps[i + 1] if i + 1 < n else None
        if cp == 0x00B7 and (prev != 0x6C or nxt != 0x6C):
            return False
        if cp == 0x0375 and (nxt is None or not _in_script(nxt, "Greek")):
            return False
        if cp in (0x05F3, 0x05F4) and (prev is None or not _in_script(prev, "Hebrew")):
            return False
        if cp == 0x200C and (prev is None or (prev < 0x80 and prev not in _VIRAMAS)):
            return False
        if cp == 0x200D and (prev is None or prev not in _VIRAMAS):
            return False
    if "\u30fb" in v and not japanese:
        return False
    return not (arabic and ext_arabic)


def _puny_label(v: str) -> bool:
    payload = v[4:].lower()
    if payload.rfind("-") == 0:
        return False
    try:
        decoded = payload.encode("ascii").decode("punycode")
    except (UnicodeError, ValueError):
        return False
    return bool(decoded) and _unicode_label(decoded)


def _label(v: str, *, idn: bool) -> bool:
    if not v or _utf16_len(v) > 63:
        return False
    if v.lower().startswith("xn--"):
        return _puny_label(v)
    return _unicode_label(v) if idn else _ascii_label(v)


def _fmt_hostname(v: str) -> bool:
    if not v or _utf16_len(v) > 253 or v.endswith("."):
        return False
    return all(_label(label, idn=False) for label in v.split("."))


def _fmt_idn_hostname(v: str) -> bool:
    if not v or " " in v:
        return False
    canonical = re.sub("[\u002e\u3002\uff0e\uff61]", ".", unicodedata.normalize("NFC", v))
    if _utf16_len(canonical) > 253:
        return False
    return all(_label(label, idn=True) for label in canonical.split("."))


def _is_letter_or_number(c: str) -> bool:
    return unicodedata.category(c)[0] in ("L", "N")


def _fmt_idn_email(v: str) -> bool:
    if ".." in v or v.count("@") != 1:
        return False
    local, domain = v.split("@")
    special = "!#$%&'*+/=?^_`{|}~-"

    def local_ok(part: str) -> bool:
        return bool(part) and all(_is_letter_or_number(c) or c in special for c in part)

    def label_ok(part: str) -> bool:
        return (
            0 < len(part) <= 63
            and _is_letter_or_number(part[0])
            and _is_letter_or_number(part[-1])
            and all(_is_letter_or_number(c) or c == "-" for c in part)
        )

    return all(local_ok(p) for p in local.split(".")) and all(
        label_ok(p) for p in domain.split(".")
    )


_SPECIAL_SCHEMES: Final = frozenset({"http", "https", "ftp", "ws", "wss"})
_FORBIDDEN_HOST: Final = frozenset(" #%/:<>?@[\\]^|\t\n\r\x00")


def _whatwg_url_ok(v: str, base: str | None) -> bool:
    """Approximates ``new URL(v, base)`` succeeding."""
    v = v.strip("".join(chr(c) for c in range(0x21)))
    m = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):").match(v)
    if m is None:
        return base is not None
    scheme = m.group(1).lower()
    if scheme not in _SPECIAL_SCHEMES:
        return True
    rest = v[m.end() :].lstrip("/\\")
    if not rest:
        return False
    host = re.split(r"[/\\?#]", rest, maxsplit=1)[0]
    host = host.rpartition("@")[2]
    if host.startswith("["):
        return host.endswith("]") or "]:" in host
    host, _, port = host.partition(":")
    if port and not port.isdigit():
        return False
    return bool(host) and not any(c in _FORBIDDEN_HOST for c in host)


def _fmt_iri(v: str) -> bool:
    return _whatwg_url_ok(v, None)


def _fmt_iri_reference(v: str) -> bool:
    if " " in v or "\\" in v or re.search("[\x00-\x1f\x7f]", v):
        return False
    if re.search("%(?![0-9a-fA-F]{2})", v):
        return False
    if v == "":
        return True
    colon = v.find(":")
    if colon > 0 and re.fullmatch(r"[a-zA-Z][a-zA-Z0-9+\-.]*", v[:colon]):
        return _whatwg_url_ok(v, None)
    if re.match(r"[a-zA-Z][a-zA-Z0-9+\-.]*//", v) and colon == -1:
        return False
    return _whatwg_url_ok(v, "http://example.com")


def _fmt_regex(v: str) -> bool:
    if not v:
        return False
    try:
        _RegexTranslator(v, unicode=False).translate()
    except _JSRegexError:
        return False
    return True


_FORMATS: Final[dict[str, Callable[[str], bool]]] = {
    "date-time": _fmt_date_time,
    "date": _fmt_date,
    "duration": lambda v: _DURATION.match(v) is not None,
    "email": lambda v: _EMAIL.match(v) is not None,
    "hostname": _fmt_hostname,
    "idn-email": _fmt_idn_email,
    "idn-hostname": _fmt_idn_hostname,
    "ipv4": _fmt_ipv4,
    "ipv6": _fmt_ipv6,
    "iri-reference": _fmt_iri_reference,
    "iri": _fmt_iri,
    "json-pointer-uri-fragment": lambda v: _JSON_POINTER_URI_FRAGMENT.match(v) is not None,
    "json-pointer": lambda v: _JSON_POINTER.match(v) is not None,
    "regex": _fmt_regex,
    "relative-json-pointer": lambda v: _RELATIVE_JSON_POINTER.match(v) is not None,
    "time": _fmt_time,
    "uri-reference": lambda v: _URI_REFERENCE.match(v) is not None,
    "uri-template": lambda v: _URI_TEMPLATE.match(v) is not None,
    "uri": _fmt_uri,
    "url": lambda v: _URL.match(v) is not None,
    "uuid": lambda v: _UUID.match(v) is not None,
}
"""TypeBox's default format registry; an unknown format accepts everything."""


def _format_test(name: str, value: str) -> bool:
    check = _FORMATS.get(name)
    return True if check is None else check(value)


# ======================================================================================
# The precise engine: TypeBox's Check (compiled) and Errors (interpreted)
# ======================================================================================


def _is_schema(v: object) -> bool:
    return isinstance(v, dict | bool)


def _all_schemas(v: object) -> bool:
    return isinstance(v, list) and all(_is_schema(x) for x in v)


def _str_list(v: object) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _num_kw(schema: dict[str, Any], key: str) -> float | None:
    v = schema.get(key, _UNDEF)
    return v if _is_number(v) else None


_TYPE_CHECKS: Final[dict[str, Callable[[Any], bool]]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "boolean": lambda v: isinstance(v, bool),
    "integer": _is_integer,
    "number": _is_number,
    "null": lambda v: v is None,
    "string": lambda v: isinstance(v, str),
    "bigint": lambda v: False,
    "symbol": lambda v: False,
    "constructor": lambda v: isinstance(v, _JSFunction),
    "function": lambda v: isinstance(v, _JSFunction),
    "undefined": lambda v: v is _UNDEF,
    "void": lambda v: v is _UNDEF,
}


def _type_ok(name: str, v: object) -> bool:
    check = _TYPE_CHECKS.get(name)
    return True if check is None else check(v)


class _Error:
    __slots__ = ("keyword", "params", "path")

    def __init__(self, keyword: str, path: str, params: dict[str, Any]) -> None:
        self.keyword = keyword
        self.path = path
        self.params = params

    def message(self) -> str:
        """TypeBox's ``en_US`` locale."""
        p = self.params
        match self.keyword:
            case "additionalProperties":
                return "must not have additional properties"
            case "anyOf":
                return "must match a schema in anyOf"
            case "boolean":
                return "schema is false"
            case "const":
                return "must be equal to constant"
            case "contains":
                return "must contain at least 1 valid item"
            case "dependencies" | "dependentRequired":
                return (
                    f"must have properties {', '.join(p['dependencies'])} "
                    f"when property {p['property']} is present"
                )
            case "enum":
                return "must be equal to one of the allowed values"
            case "exclusiveMaximum" | "exclusiveMinimum" | "maximum" | "minimum":
                return f"must be {p['comparison']} {js_number_to_string(p['limit'])}"
            case "format":
                return f'must match format "{p["format"]}"'
            case "if":
                return f'must match "{p["failingKeyword"]}" schema'
            case "maxItems":
                return f"must not have more than {js_number_to_string(p['limit'])} items"
            case "maxLength":
                return f"must not have more than {js_number_to_string(p['limit'])} characters"
            case "maxProperties":
                return f"must not have more than {js_number_to_string(p['limit'])} properties"
            case "minItems":
                return f"must not have fewer than {js_number_to_string(p['limit'])} items"
            case "minLength":
                return f"must not have fewer than {js_number_to_string(p['limit'])} characters"
            case "minProperties":
                return f"must not have fewer than {js_number_to_string(p['limit'])} properties"
            case "multipleOf":
                return f"must be multiple of {js_number_to_string(p['multipleOf'])}"
            case "not":
                return "must not be valid"
            case "oneOf":
                return "must match exactly one schema in oneOf"
            case "pattern":
                return f'must match pattern "{p["pattern"]}"'
            case "propertyNames":
                return f"property names {', '.join(p['propertyNames'])} are invalid"
            case "required":
                return f"must have required properties {', '.join(p['requiredProperties'])}"
            case "type":
                t = p["type"]
                return f"must be {t}" if isinstance(t, str) else f"must be either {' or '.join(t)}"
            case "uniqueItems":
                return "must not have duplicate items"
            case _:  # pragma: no cover - every keyword above is the complete set
                return "an unknown validation error occurred"

    def line(self) -> str:
        """Pi's ``formatValidationPath(error): message``."""
        base = self.path[1:] if self.path.startswith("/") else self.path
        base = base.replace("/", ".")
        if self.keyword == "required":
            missing = self.params["requiredProperties"]
            if missing and missing[0]:
                return f"{f'{base}.' if base else ''}{missing[0]}: {self.message()}"
        return f"{base or 'root'}: {self.message()}"


class _Sink:
    """An error context: the root one keeps at most ``MAX_ERRORS``, nested ones all."""

    __slots__ = ("cap", "errors")

    def __init__(self, cap: int | None = None) -> None:
        self.errors: list[_Error] = []
        self.cap = cap

    def add(self, error: _Error) -> bool:
        if self.cap is None or len(self.errors) < self.cap:
            self.errors.append(error)
        return False

    def add_new(self, keyword: str, path: str, params: dict[str, Any]) -> bool:
        return self.add(_Error(keyword, path, params))


class _Compiler:
    """Compiles the schema nodes reachable from one root (TypeBox ``Compile(root)``)."""

    def __init__(self, root: object) -> None:
        self.root = root
        self.nodes: dict[tuple[int, int], _Node] = {}
        self.error: str | None = None  # V8's message for the first invalid pattern
        self.unsupported: str | None = None
        self.top = self.node(root, root)

    def node(self, schema: object, base: object) -> _Node:
        if schema is True:
            return _TRUE
        if schema is False:
            return _FALSE
        key = (id(schema), id(base))
        node = self.nodes.get(key)
        if node is None:
            node = _Node.__new__(_Node)
            self.nodes[key] = node
            node.setup(self, schema, base)
        return node

    def regex(self, pattern: str, *, unicode: bool) -> re.Pattern[str] | None:
        try:
            return _js_regex(pattern, unicode=unicode)
        except _JSRegexError as exc:
            if self.error is None:
                self.error = _v8_regex_message(pattern, "u" if unicode else "", exc.args[0])
        except _UnsupportedRegex as exc:
            if self.unsupported is None:
                self.unsupported = (
                    f"pitrio cannot evaluate the JavaScript regular expression {pattern!r}: "
                    f"{exc.args[0]} is not supported"
                )
        return None


class _Node:
    """One schema object, its keywords read once (TypeBox's guards decide which count)."""

    __slots__ = (
        "addl",
        "addl_fast",
        "addl_keys",
        "addl_patterns",
        "all_of",
        "any_of",
        "arr",
        "const",
        "contains",
        "contains_valid",
        "dep_req",
        "dep_schemas",
        "deps",
        "else_",
        "enum",
        "excl_max",
        "excl_min",
        "fixed",
        "fmt",
        "if_",
        "items",
        "items_sized",
        "max_contains",
        "max_items",
        "max_len",
        "max_props",
        "maximum",
        "min_contains",
        "min_items",
        "min_len",
        "min_props",
        "minimum",
        "multiple_of",
        "not_",
        "num",
        "obj",
        "one_of",
        "pat_props",
        "pattern",
        "pattern_re",
        "prefix",
        "prop_names",
        "props",
        "ref",
        "ref_base",
        "ref_target",
        "required",
        "required_set",
        "schema",
        "str_",
        "then",
        "type_names",
        "type_param",
        "unique",
    )  # fmt: skip

    fixed: bool | None  # a boolean schema
    schema: Any

    def setup(self, comp: _Compiler, s: Any, base: object) -> None:
        self.fixed = None
        self.schema = s
        if not isinstance(s, dict):  # not a schema: TypeBox finds no keyword in it
            s = {}
        child_base = s if isinstance(s.get("$id"), str) else base
        node = comp.node
        t = s.get("type", _UNDEF)
        if isinstance(t, str):
            self.type_names: tuple[str, ...] | None = (t,)
        elif _str_list(t):
            self.type_names = tuple(t)
        else:
            self.type_names = None
        self.type_param = t
        # ---- object keywords, in TypeBox's order
        self.required = s["required"] if _str_list(s.get("required")) else None
        self.required_set = frozenset(self.required or ())
        addl = s.get("additionalProperties", _UNDEF)
        props = s.get("properties", _UNDEF)
        props_valid = isinstance(props, dict) and all(_is_schema(v) for v in props.values())
        pat_props = s.get("patternProperties", _UNDEF)
        pat_valid = isinstance(pat_props, dict) and all(_is_schema(v) for v in pat_props.values())
        self.addl = None
        self.addl_fast = False
        self.addl_keys: frozenset[str] = frozenset()
        self.addl_patterns: list[re.Pattern[str]] = []
        if _is_schema(addl):
            self.addl_fast = (
                self.required is not None
                and props_valid
                and not pat_valid
                and addl is False
                and len(props) == len(self.required)
            )
            if self.addl_fast:
                self.addl = node(addl, child_base)
            else:
                if pat_valid:
                    combined = (
                        "|".join([*pat_props, *(_escape_js(k) for k in props)])
                        if (props_valid)
                        else "|".join(pat_props)
                    )
                    comp.regex(f"({combined})" if combined else "(?!)", unicode=False)
                    for p in pat_props:
                        # A pattern that does not compile fails below, with the `u` flag.
                        with contextlib.suppress(_JSRegexError, _UnsupportedRegex):
                            self.addl_patterns.append(_js_regex(p, unicode=False))
                self.addl = node(addl, child_base)
            if props_valid:
                self.addl_keys = frozenset(props)
        deps = s.get("dependencies", _UNDEF)
        self.deps: list[tuple[str, list[str] | _Node]] | None = None
        if isinstance(deps, dict) and all(_is_schema(v) or _str_list(v) for v in deps.values()):
            self.deps = [
                (k, v if isinstance(v, list) else node(v, child_base)) for k, v in _js_items(deps)
            ]
        dep_req = s.get("dependentRequired", _UNDEF)
        self.dep_req: list[tuple[str, list[str]]] | None = None
        if isinstance(dep_req, dict) and all(_str_list(v) for v in dep_req.values()):
            self.dep_req = _js_items(dep_req)
        dep_schemas = s.get("dependentSchemas", _UNDEF)
        self.dep_schemas: list[tuple[str, _Node]] | None = None
        if isinstance(dep_schemas, dict) and all(_is_schema(v) for v in dep_schemas.values()):
            self.dep_schemas = [(k, node(v, child_base)) for k, v in _js_items(dep_schemas)]
        self.pat_props: list[tuple[str, re.Pattern[str] | None, _Node]] | None = None
        if pat_valid:
            self.pat_props = []
            for p, sub in _js_items(pat_props):
                compiled = comp.regex(p, unicode=True)
                self.pat_props.append((p, compiled, node(sub, child_base)))
        self.props: list[tuple[str, _Node]] | None = None
        if props_valid:
            self.props = [(k, node(v, child_base)) for k, v in _js_items(props)]
        prop_names = s.get("propertyNames", _UNDEF)
        self.prop_names = node(prop_names, child_base) if _is_schema(prop_names) else None
        self.min_props = _num_kw(s, "minProperties")
        self.max_props = _num_kw(s, "maxProperties")
        self.obj = any(
            x is not None
            for x in (
                self.required, self.deps, self.dep_req, self.dep_schemas, self.pat_props,
                self.props, self.prop_names, self.min_props, self.max_props,
            )
        ) or _is_schema(addl)  # fmt: skip
        # ---- array keywords
        items = s.get("items", _UNDEF)
        self.items_sized: list[_Node] | None = None
        self.items: _Node | None = None
        addl_items = s.get("additionalItems", _UNDEF)
        arr_addl = None
        if _all_schemas(items) and _is_schema(addl_items):
            arr_addl = addl_items
        self.contains = None
        contains = s.get("contains", _UNDEF)
        self.min_contains = _num_kw(s, "minContains")
        self.max_contains = _num_kw(s, "maxContains")
        self.contains_valid = not (self.min_contains is not None and self.min_contains == 0)
        # additionalItems is built before contains and items
        self.arr: tuple[Any, ...] = ()
        addl_items_node = node(arr_addl, child_base) if arr_addl is not None else None
        if _is_schema(contains):
            self.contains = node(contains, child_base)
        if _all_schemas(items):
            self.items_sized = [node(x, child_base) for x in items]
        elif _is_schema(items):
            self.items = node(items, child_base)
        self.max_items = _num_kw(s, "maxItems")
        self.min_items = _num_kw(s, "minItems")
        prefix = s.get("prefixItems", _UNDEF)
        self.prefix = [node(x, child_base) for x in prefix] if _all_schemas(prefix) else None
        self.unique = s.get("uniqueItems") is True
        self.arr = (addl_items_node,)
        has_arr = any(
            x is not None
            for x in (
                addl_items_node, self.contains, self.items_sized, self.items, self.max_items,
                self.min_items, self.prefix, self.max_contains, self.min_contains,
            )
        ) or isinstance(s.get("uniqueItems"), bool)  # fmt: skip
        if not has_arr:
            self.arr = ()
        # ---- string keywords
        self.max_len = _num_kw(s, "maxLength")
        self.min_len = _num_kw(s, "minLength")
        fmt = s.get("format", _UNDEF)
        self.fmt = fmt if isinstance(fmt, str) else None
        pattern = s.get("pattern", _UNDEF)
        self.pattern = pattern if isinstance(pattern, str) else None
        self.pattern_re = comp.regex(pattern, unicode=True) if self.pattern is not None else None
        self.str_ = any(x is not None for x in (self.max_len, self.min_len, self.fmt, self.pattern))
        # ---- number keywords
        self.excl_max = _num_kw(s, "exclusiveMaximum")
        self.excl_min = _num_kw(s, "exclusiveMinimum")
        self.maximum = _num_kw(s, "maximum")
        self.minimum = _num_kw(s, "minimum")
        self.multiple_of = _num_kw(s, "multipleOf")
        self.num = any(
            x is not None
            for x in (self.excl_max, self.excl_min, self.maximum, self.minimum, self.multiple_of)
        )
        # ---- the rest
        ref = s.get("$ref", _UNDEF)
        self.ref = ref if isinstance(ref, str) else None
        self.ref_base = child_base
        self.ref_target: _Node | None = None
        if self.ref is not None:
            target = _stack_ref(comp.root, child_base, self.ref)
            if target is None or target is _UNDEF:
                target = False
            self.ref_target = node(target, child_base) if _is_schema(target) else None
        self.const = (s["const"],) if "const" in s else None
        self.enum = s["enum"] if isinstance(s.get("enum"), list) else None
        if_ = s.get("if", _UNDEF)
        self.if_ = self.then = self.else_ = None
        if _is_schema(if_):
            self.if_ = node(if_, child_base)
            then = s.get("then", True)
            else_ = s.get("else", True)
            self.then = node(then if _is_schema(then) else True, child_base)
            self.else_ = node(else_ if _is_schema(else_) else True, child_base)
        not_ = s.get("not", _UNDEF)
        self.not_ = node(not_, child_base) if _is_schema(not_) else None
        self.all_of = (
            [node(x, child_base) for x in s["allOf"]] if _all_schemas(s.get("allOf")) else None
        )
        self.any_of = (
            [node(x, child_base) for x in s["anyOf"]] if _all_schemas(s.get("anyOf")) else None
        )
        self.one_of = (
            [node(x, child_base) for x in s["oneOf"]] if _all_schemas(s.get("oneOf")) else None
        )

    # ------------------------------------------------------------------ Check
    def check(self, v: Any, jit: bool = True) -> bool:
        """TypeBox's check: the compiled one (``jit``, what ``validator.Check`` runs) or
        the interpreted one that ``Errors()`` uses inside ``not`` and ``contains``; they
        differ in the compiled shortcut for ``additionalProperties: false``."""
        if self.fixed is not None:
            return self.fixed
        if self.type_names is not None and not any(_type_ok(t, v) for t in self.type_names):
            return False
        if self.obj and isinstance(v, dict) and not self._check_object(v, jit):
            return False
        if self.arr and isinstance(v, list) and not self._check_array(v, jit):
            return False
        if self.str_ and isinstance(v, str) and not self._check_string(v):
            return False
        if self.num and _is_number(v) and not self._check_number(v):
            return False
        if self.ref is not None and (self.ref_target is None or not self.ref_target.check(v, jit)):
            return False
        if self.const is not None and not _const_ok(self.const[0], v):
            return False
        if self.enum is not None and not any(_const_ok(o, v) for o in self.enum):
            return False
        if self.if_ is not None:
            assert self.then is not None
            assert self.else_ is not None
            branch = self.then if self.if_.check(v, jit) else self.else_
            if not branch.check(v, jit):
                return False
        if self.not_ is not None and self.not_.check(v, jit):
            return False
        if self.all_of is not None and not all(n.check(v, jit) for n in self.all_of):
            return False
        if self.any_of is not None and not any(n.check(v, jit) for n in self.any_of):
            return False
        return self.one_of is None or sum(1 for n in self.one_of if n.check(v, jit)) == 1

    def _check_object(self, v: dict[str, Any], jit: bool) -> bool:
        if self.required is not None and not all(_has_key(v, k) for k in self.required):
            return False
        if self.addl_fast and jit:
            assert self.required is not None
            if len(v) != len(self.required):
                return False
        elif self.addl is not None:
            for k, x in v.items():
                if k in self.addl_keys or any(p.search(k) for p in self.addl_patterns):
                    continue
                if not self.addl.check(x, jit):
                    return False
        if self.deps is not None and v:
            for k, dep in self.deps:
                if _has_key(v, k) and not (
                    all(_has_key(v, d) for d in dep) if isinstance(dep, list) else dep.check(v, jit)
                ):
                    return False
        if self.dep_req is not None and v:
            for k, needed in self.dep_req:
                if _has_key(v, k) and not all(_has_key(v, d) for d in needed):
                    return False
        if self.dep_schemas is not None and v:
            for k, n in self.dep_schemas:
                if _has_key(v, k) and not n.check(v, jit):
                    return False
        if self.pat_props is not None:
            for _, regex, n in self.pat_props:
                for k, x in v.items():
                    if regex is not None and regex.search(k) and not n.check(x, jit):
                        return False
        if self.props is not None:
            required = self.required_set
            for k, n in self.props:
                if k in required:
                    if not n.check(_js_get(v, k), jit):
                        return False
                    continue
                x = _js_get(v, k)
                if x is _UNDEF or not _has_key(v, k):
                    continue
                if not n.check(x, jit):
                    return False
        if self.prop_names is not None and not all(self.prop_names.check(k, jit) for k in v):
            return False
        if self.min_props is not None and not len(v) >= self.min_props:
            return False
        return self.max_props is None or len(v) <= self.max_props

    def _check_array(self, v: list[Any], jit: bool) -> bool:
        addl_items = self.arr[0]
        if addl_items is not None:
            assert self.items_sized is not None
            start = len(self.items_sized)
            if not all(addl_items.check(x, jit) for x in v[start:]):
                return False
        if self.contains is not None:
            if self.contains_valid and not (v and any(self.contains.check(x, jit) for x in v)):
                return False
            if self.max_contains is not None or self.min_contains is not None:
                count = sum(1 for x in v if self.contains.check(x, jit))
                if self.max_contains is not None and not count <= self.max_contains:
                    return False
                if self.min_contains is not None and not count >= self.min_contains:
                    return False
        if self.items_sized is not None:
            if not all(n.check(x, jit) for n, x in zip(self.items_sized, v, strict=False)):
                return False
        elif self.items is not None:
            offset = len(self.prefix) if self.prefix is not None else 0
            if not all(self.items.check(x, jit) for x in v[offset:]):
                return False
        if self.max_items is not None and not len(v) <= self.max_items:
            return False
        if self.min_items is not None and not len(v) >= self.min_items:
            return False
        if (
            self.prefix is not None
            and v
            and not all(n.check(x, jit) for n, x in zip(self.prefix, v, strict=False))
        ):
            return False
        return not self.unique or not _duplicates(v)

    def _check_string(self, v: str) -> bool:
        if self.max_len is not None and not _string_length(v) <= self.max_len:
            return False
        if self.min_len is not None and self.min_len != 0 and not _string_length(v) >= self.min_len:
            return False
        if self.fmt is not None and not _format_test(self.fmt, v):
            return False
        return self.pattern_re is None or self.pattern_re.search(v) is not None

    def _check_number(self, v: float) -> bool:
        if self.excl_max is not None and not v < self.excl_max:
            return False
        if self.excl_min is not None and not v > self.excl_min:
            return False
        if self.maximum is not None and not v <= self.maximum:
            return False
        if self.minimum is not None and not v >= self.minimum:
            return False
        return self.multiple_of is None or _is_multiple_of(v, self.multiple_of)

    # ------------------------------------------------------------------ Errors
    def errors(self, v: Any, path: str, sink: _Sink) -> bool:
        if self.fixed is not None:
            return self.fixed or sink.add_new("boolean", path, {})
        ok = True
        if self.type_names is not None and not any(_type_ok(t, v) for t in self.type_names):
            ok = sink.add_new("type", path, {"type": self.type_param})
        if self.obj and isinstance(v, dict):
            ok = self._errors_object(v, path, sink) and ok
        if self.arr and isinstance(v, list):
            ok = self._errors_array(v, path, sink) and ok
        if self.str_ and isinstance(v, str):
            ok = self._errors_string(v, path, sink) and ok
        if self.num and _is_number(v):
            ok = self._errors_number(v, path, sink) and ok
        if self.ref is not None:
            nested = _Sink()
            result = self.ref_target is not None and self.ref_target.errors(v, path, nested)
            if not result:
                for e in nested.errors:
                    sink.add(e)
            ok = result and ok
        if self.const is not None and not _const_ok(self.const[0], v):
            ok = sink.add_new("const", path, {"allowedValue": self.const[0]})
        if self.enum is not None and not any(_const_ok(o, v) for o in self.enum):
            ok = sink.add_new("enum", path, {"allowedValues": self.enum})
        if self.if_ is not None:
            assert self.then is not None
            assert self.else_ is not None
            if self.if_.errors(v, path, _Sink()):
                res = self.then.errors(v, path, _Sink()) or sink.add_new(
                    "if", path, {"failingKeyword": "then"}
                )
            else:
                res = self.else_.errors(v, path, sink) or sink.add_new(
                    "if", path, {"failingKeyword": "else"}
                )
            ok = res and ok
        if self.not_ is not None and self.not_.check(v, jit=False):
            ok = sink.add_new("not", path, {})
        if self.all_of is not None:
            failed = [s for s in (self._member_errors(n, v, path) for n in self.all_of) if s]
            if failed:
                for nested_sink in failed:
                    for e in nested_sink.errors:
                        sink.add(e)
                ok = False
        if self.any_of is not None:
            results = [self._member_errors(n, v, path) for n in self.any_of]
            if all(r is not None for r in results):
                for r in results:
                    assert r is not None
                    for e in r.errors:
                        sink.add(e)
                ok = sink.add_new("anyOf", path, {})
        if self.one_of is not None:
            results = [self._member_errors(n, v, path) for n in self.one_of]
            passing = [i for i, r in enumerate(results) if r is None]
            if len(passing) != 1:
                if not passing:
                    for r in results:
                        assert r is not None
                        for e in r.errors:
                            sink.add(e)
                ok = sink.add_new("oneOf", path, {"passingSchemas": passing})
        return ok

    @staticmethod
    def _member_errors(node: _Node, v: Any, path: str) -> _Sink | None:
        """A member's errors, or None when it passes."""
        nested = _Sink()
        return None if node.errors(v, path, nested) else nested

    def _errors_object(self, v: dict[str, Any], path: str, sink: _Sink) -> bool:
        ok = True
        if self.required is not None:
            missing = [k for k in self.required if not _has_key(v, k)]
            if missing:
                ok = sink.add_new("required", path, {"requiredProperties": missing})
        if self.addl is not None:
            extra: list[str] = []
            for k, x in v.items():
                if k in self.addl_keys or any(p.search(k) for p in self.addl_patterns):
                    continue
                if not self.addl.errors(x, f"{path}/{k}", _Sink()):
                    extra.append(k)
            if extra:
                ok = sink.add_new("additionalProperties", path, {"additionalProperties": extra})
        if self.deps is not None:
            for k, dep in self.deps:
                if not _has_key(v, k):
                    continue
                if isinstance(dep, list):
                    for d in dep:
                        if not _has_key(v, d):
                            ok = sink.add_new(
                                "dependencies", path, {"property": k, "dependencies": dep}
                            )
                            break
                else:
                    ok = dep.errors(v, path, sink) and ok
        if self.dep_req is not None:
            for k, needed in self.dep_req:
                if _has_key(v, k):
                    for d in needed:
                        if not _has_key(v, d):
                            ok = sink.add_new(
                                "dependentRequired", path, {"property": k, "dependencies": needed}
                            )
        if self.dep_schemas is not None:
            for k, n in self.dep_schemas:
                if _has_key(v, k):
                    ok = n.errors(v, path, sink) and ok
        if self.pat_props is not None:
            for _, regex, n in self.pat_props:
                for k, x in list(v.items()):
                    if regex is not None and regex.search(k):
                        ok = n.errors(x, f"{path}/{k}", sink) and ok
        if self.props is not None:
            for k, n in self.props:
                x = _js_get(v, k)
                if k not in self.required_set and x is _UNDEF:
                    continue
                if not _has_key(v, k):
                    continue
                ok = n.errors(x, f"{path}/{k}", sink) and ok
        if self.prop_names is not None:
            bad = [k for k in v if not self.prop_names.errors(k, f"{path}/{k}", _Sink())]
            if bad:
                ok = sink.add_new("propertyNames", path, {"propertyNames": bad})
        if self.min_props is not None and not len(v) >= self.min_props:
            ok = sink.add_new("minProperties", path, {"limit": self.min_props})
        if self.max_props is not None and not len(v) <= self.max_props:
            ok = sink.add_new("maxProperties", path, {"limit": self.max_props})
        return ok

    def _errors_array(self, v: list[Any], path: str, sink: _Sink) -> bool:
        ok = True
        addl_items = self.arr[0]
        if addl_items is not None:
            assert self.items_sized is not None
            for i in range(len(self.items_sized), len(v)):
                if not addl_items.errors(v[i], f"{path}/{i}", sink):
                    ok = False
                    break  # Array.prototype.every
        if (
            self.contains is not None
            and self.contains_valid
            and not (v and any(self.contains.check(x, jit=False) for x in v))
        ):
            ok = sink.add_new("contains", path, {"minContains": 1})
        if self.items_sized is not None:
            for i, n in enumerate(self.items_sized[: len(v)]):
                ok = n.errors(v[i], f"{path}/{i}", sink) and ok
        elif self.items is not None:
            offset = len(self.prefix) if self.prefix is not None else 0
            for i in range(offset, len(v)):
                ok = self.items.errors(v[i], f"{path}/{i}", sink) and ok
        if self.contains is not None and self.max_contains is not None:
            count = sum(1 for x in v if self.contains.check(x, jit=False))
            if not count <= self.max_contains:
                min_contains = self.min_contains if self.min_contains is not None else 1
                ok = sink.add_new(
                    "contains",
                    path,
                    {"minContains": min_contains, "maxContains": self.max_contains},
                )
        if self.max_items is not None and not len(v) <= self.max_items:
            ok = sink.add_new("maxItems", path, {"limit": self.max_items})
        if self.contains is not None and self.min_contains is not None:
            count = sum(1 for x in v if self.contains.check(x, jit=False))
            if not count >= self.min_contains:
                ok = sink.add_new("contains", path, {"minContains": self.min_contains})
        if self.min_items is not None and not len(v) >= self.min_items:
            ok = sink.add_new("minItems", path, {"limit": self.min_items})
        if self.prefix is not None and v:
            for i, n in enumerate(self.prefix[: len(v)]):
                ok = n.errors(v[i], f"{path}/{i}", sink) and ok
        if self.unique:
            dups = _duplicates(v)
            if dups:
                ok = sink.add_new("uniqueItems", path, {"duplicateItems": dups})
        return ok

    def _errors_string(self, v: str, path: str, sink: _Sink) -> bool:
        ok = True
        if self.max_len is not None and not _string_length(v) <= self.max_len:
            ok = sink.add_new("maxLength", path, {"limit": self.max_len})
        if self.min_len is not None and self.min_len != 0 and not _string_length(v) >= self.min_len:
            ok = sink.add_new("minLength", path, {"limit": self.min_len})
        if self.fmt is not None and not _format_test(self.fmt, v):
            ok = sink.add_new("format", path, {"format": self.fmt})
        if self.pattern is not None and (
            self.pattern_re is None or self.pattern_re.search(v) is None
        ):
            ok = sink.add_new("pattern", path, {"pattern": self.pattern})
        return ok

    def _errors_number(self, v: float, path: str, sink: _Sink) -> bool:
        ok = True
        if self.excl_max is not None and not v < self.excl_max:
            ok = sink.add_new("exclusiveMaximum", path, {"comparison": "<", "limit": self.excl_max})
        if self.excl_min is not None and not v > self.excl_min:
            ok = sink.add_new("exclusiveMinimum", path, {"comparison": ">", "limit": self.excl_min})
        if self.maximum is not None and not v <= self.maximum:
            ok = sink.add_new("maximum", path, {"comparison": "<=", "limit": self.maximum})
        if self.minimum is not None and not v >= self.minimum:
            ok = sink.add_new("minimum", path, {"comparison": ">=", "limit": self.minimum})
        if self.multiple_of is not None and not _is_multiple_of(v, self.multiple_of):
            ok = sink.add_new("multipleOf", path, {"multipleOf": self.multiple_of})
        return ok


_TRUE: Final = _Node.__new__(_Node)
_TRUE.fixed = True
_FALSE: Final = _Node.__new__(_Node)
_FALSE.fixed = False


def _const_ok(expected: object, v: object) -> bool:
    if _is_value_like(expected):
        return _strict_equal(v, expected)
    return _deep_equal(v, expected)


def _duplicates(v: list[Any]) -> list[int]:
    seen: set[bytes] = set()
    dups: list[int] = []
    for i, x in enumerate(v):
        buf = bytearray()
        _hash_into(x, buf)
        h = bytes(buf)
        if h in seen:
            dups.append(i)
        seen.add(h)
    return dups


def _js_items(d: dict[str, Any]) -> list[tuple[str, Any]]:
    """``Object.entries(d)`` (JavaScript key order)."""
    return [(k, d[k]) for k in _js_key_order(list(d))]


def _escape_js(key: str) -> str:
    return "^" + re.sub(r"[.*+?^${}()|\[\]\\]", lambda m: "\\" + m.group(0), key) + "$"


# ---- $ref resolution (TypeBox Stack.Ref / Resolve.Ref / Pointer.Get)

_DEFAULT_BASE: Final = "http://unknown/"


def _url_join(base: str, ref: str) -> str:
    if ref.startswith("#"):
        return base.partition("#")[0] + ref
    return urllib.parse.urljoin(base, ref)


def _url_hash(url: str) -> str:
    _, sep, fragment = url.partition("#")
    return "#" + fragment if sep and fragment else ""


def _url_path(url: str) -> str:
    parts = urllib.parse.urlsplit(url.partition("#")[0])
    return parts.path or "/"


def _stack_ref(root: object, base: object, ref: str) -> object:
    """TypeBox ``Stack.Ref``: the schema a ``$ref`` names, or ``_UNDEF``."""
    return _resolve_ref(root if not ref.startswith("#") else base, ref)


def _resolve_ref(schema: object, ref: str) -> object:
    initial = _DEFAULT_BASE
    if isinstance(schema, dict) and isinstance(schema.get("$id"), str):
        initial = _url_join(initial, schema["$id"])
    return _from_value(schema, initial, _url_join(initial, ref))


def _from_value(schema: object, base: str, ref: str) -> object:
    if isinstance(schema, dict):
        if isinstance(schema.get("$id"), str):
            base = _url_join(base, schema["$id"])
        found = _match(schema, base, ref)
        if found is not _UNDEF:
            return found
        children: Iterator[object] = iter([schema[k] for k in _js_key_order(list(schema))])
    elif isinstance(schema, list):
        children = iter(schema)
    else:
        return _UNDEF
    result: object = _UNDEF
    for child in children:
        found = _from_value(child, base, ref)
        if found is not _UNDEF:
            result = found
    return result


def _match(schema: dict[str, Any], base: str, ref: str) -> object:
    if isinstance(schema.get("$id"), str):
        if schema["$id"] == _url_hash(ref):
            return schema
        if _url_path(_url_join(base, schema["$id"])) == _url_path(ref):
            return _match_hash(schema, ref) if _url_hash(ref).startswith("#") else schema
    for key in ("$anchor", "$dynamicAnchor"):
        anchor = schema.get(key)
        if isinstance(anchor, str) and _url_join(base, "#" + anchor) == ref:
            return schema
    return _match_hash(schema, ref)


def _match_hash(schema: dict[str, Any], ref: str) -> object:
    if ref.endswith("#"):
        return schema
    fragment = _url_hash(ref)
    if not fragment.startswith("#"):
        return _UNDEF
    pointer = urllib.parse.unquote(fragment[1:])
    if not pointer.startswith("/"):
        return _UNDEF
    return _pointer_get(schema, pointer)


def _pointer_get(value: object, pointer: str) -> object:
    indices = [p.replace("~1", "/").replace("~0", "~") for p in pointer.split("/")]
    if indices and indices[0] == "":
        indices = indices[1:]
    for index in indices:
        if index in _UNSAFE_KEYS:
            return _UNDEF
        if isinstance(value, dict):
            value = value.get(index, _UNDEF)
        elif isinstance(value, list) and _is_array_index(index) and int(index) < len(value):
            value = value[int(index)]
        else:
            return _UNDEF
    return value


# ======================================================================================
# The fast path: a fastjsonschema validator equivalent to TypeBox's Check
# ======================================================================================

_FAST_NUMBER_KEYWORDS: Final = (
    "minItems", "maxItems", "minProperties", "maxProperties",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
)  # fmt: skip
_FAST_UNSUPPORTED: Final = frozenset(
    [
        "prefixItems",
        "dependentRequired",
        "dependentSchemas",
        "unevaluatedItems",
        "unevaluatedProperties",
        "$recursiveRef",
        "$dynamicRef",
        "$id",
        "$anchor",
        "$dynamicAnchor",
        "$recursiveAnchor",
        "minContains",
        "maxContains",
        "patternProperties",
        "multipleOf",
        "~kind",
        "~refine",
    ]
)


class _NotFast(Exception):
    pass


class _FastRewriter:
    """Rewrites a schema for fastjsonschema (draft-07) so that, for JSON values with
    finite numbers, it accepts exactly what TypeBox's Check accepts; raises
    :class:`_NotFast` when that is not possible."""

    def __init__(self, root: dict[str, Any] | bool) -> None:
        self.root = root
        self.formats: dict[str, Callable[[str], bool]] = {}
        self.memo: dict[int, Any] = {}
        self.refs: list[tuple[str, object]] = []

    def run(self) -> Any:
        out = self.rewrite(self.root)
        for pointer, target in self.refs:
            if _pointer_get(out, pointer) is not self.memo.get(id(target), _UNDEF):
                raise _NotFast
        return out

    def rewrite(self, s: object) -> Any:
        if isinstance(s, bool):
            return s
        if not isinstance(s, dict):
            raise _NotFast
        done = self.memo.get(id(s))
        if done is not None:
            return done
        out: dict[str, Any] = {}
        self.memo[id(s)] = out
        if any(k in s for k in _FAST_UNSUPPORTED):
            raise _NotFast
        if "$ref" in s and isinstance(s["$ref"], str):
            self._ref(s, out)
        t = s.get("type", _UNDEF)
        if isinstance(t, str) or _str_list(t):
            names = [t] if isinstance(t, str) else t
            if not all(n in ("object", "array", "boolean", "integer", "number", "null", "string")
                       for n in names):  # fmt: skip
                raise _NotFast
            out["type"] = t
        props = s.get("properties", _UNDEF)
        if isinstance(props, dict) and all(_is_schema(v) for v in props.values()):
            if any(k in _PROTO_VALUES for k in props):
                raise _NotFast
            out["properties"] = {k: self.rewrite(v) for k, v in props.items()}
        required = s.get("required", _UNDEF)
        if _str_list(required):
            if len(set(required)) != len(required):
                raise _NotFast
            out["required"] = list(required)
        for key in ("additionalProperties", "not", "propertyNames", "contains"):
            sub = s.get(key, _UNDEF)
            if _is_schema(sub):
                out[key] = self.rewrite(sub)
            elif key == "propertyNames" and isinstance(sub, list):
                raise _NotFast
        items = s.get("items", _UNDEF)
        if _all_schemas(items):
            out["items"] = [self.rewrite(x) for x in items]
            if _is_schema(s.get("additionalItems", _UNDEF)):
                out["additionalItems"] = self.rewrite(s["additionalItems"])
        elif _is_schema(items):
            out["items"] = self.rewrite(items)
        for key in _FAST_NUMBER_KEYWORDS:
            if _num_kw(s, key) is not None:
                out[key] = s[key]
        if s.get("uniqueItems") is True:
            raise _NotFast
        for key in ("enum", "const"):
            if key not in s:
                continue
            values = s[key]
            if key == "enum" and not isinstance(values, list):
                continue
            for value in values if key == "enum" else [values]:
                if not (value is None or isinstance(value, bool | str) or _is_number(value)):
                    raise _NotFast
            out[key] = values
        for key in ("allOf", "anyOf", "oneOf"):
            if _all_schemas(s.get(key)):
                out[key] = [self.rewrite(x) for x in s[key]]
        if _is_schema(s.get("if", _UNDEF)):
            out["if"] = self.rewrite(s["if"])
            for key in ("then", "else"):
                if _is_schema(s.get(key, _UNDEF)):
                    out[key] = self.rewrite(s[key])
        deps = s.get("dependencies", _UNDEF)
        if isinstance(deps, dict) and all(_is_schema(v) or _str_list(v) for v in deps.values()):
            out["dependencies"] = {
                k: list(v) if isinstance(v, list) else self.rewrite(v) for k, v in deps.items()
            }
        for key in ("definitions", "$defs"):
            defs = s.get(key, _UNDEF)
            if isinstance(defs, dict):
                out[key] = {k: self.rewrite(v) for k, v in defs.items() if _is_schema(v)}
        self._strings(s, out)
        return out

    def _ref(self, s: dict[str, Any], out: dict[str, Any]) -> None:
        ref = s["$ref"]
        validating = set(s) & {
            "type", "properties", "required", "additionalProperties", "not", "propertyNames",
            "contains", "items", "additionalItems", "uniqueItems", "enum", "const", "allOf",
            "anyOf", "oneOf", "if", "dependencies", "minLength", "maxLength", "pattern", "format",
            *_FAST_NUMBER_KEYWORDS,
        }  # fmt: skip
        if validating or not ref.startswith("#") or "%" in ref:
            raise _NotFast
        target: object = self.root
        if ref != "#":
            if not ref.startswith("#/"):
                raise _NotFast
            target = _pointer_get(self.root, ref[1:])
            if not _is_schema(target):
                raise _NotFast
        out["$ref"] = ref
        self.refs.append((ref[1:], target))

    def _strings(self, s: dict[str, Any], out: dict[str, Any]) -> None:
        max_len = _num_kw(s, "maxLength")
        min_len = _num_kw(s, "minLength")
        fmt = s.get("format") if isinstance(s.get("format"), str) else None
        pattern = s.get("pattern") if isinstance(s.get("pattern"), str) else None
        if max_len is None and min_len is None and fmt is None and pattern is None:
            return
        regex = None
        if pattern is not None:
            try:
                regex = _js_regex(pattern)
            except (_JSRegexError, _UnsupportedRegex) as exc:
                raise _NotFast from exc

        def check(v: str) -> bool:
            if max_len is not None and not _string_length(v) <= max_len:
                return False
            if min_len is not None and min_len != 0 and not _string_length(v) >= min_len:
                return False
            if fmt is not None and not _format_test(fmt, v):
                return False
            return regex is None or regex.search(v) is not None

        name = f"pitrio-string-{len(self.formats)}"
        self.formats[name] = check
        out["format"] = name


def _compile_fast(schema: object) -> Callable[[Any], Any] | None:
    if not isinstance(schema, dict | bool):
        return None
    rewriter = _FastRewriter(schema)
    try:
        rewritten = rewriter.run()
        return fastjsonschema.compile(
            rewritten,
            formats=rewriter.formats,
            use_default=False,  # never write defaults into the arguments
        )
    except _NotFast:
        return None
    except Exception:  # fastjsonschema rejected the rewritten schema: use the engine
        return None


# ======================================================================================
# Pi's normalization and coercion
# ======================================================================================


class _NotCloneable(Exception):
    """``structuredClone`` met a function (DataCloneError)."""


def _js_key(k: object) -> str:
    """The property key JavaScript makes of a Python dict key."""
    if isinstance(k, str):
        return k
    if isinstance(k, bool) or _is_js_number(k):
        return _js_to_string(k)
    return "null" if k is None else str(k)


def _clone(v: Any) -> Any:
    """``structuredClone`` of a decoded JSON value (tuples become lists, and object keys
    take JavaScript's order)."""
    t = type(v)
    if t is dict:
        out = {_js_key(k): _clone(x) for k, x in v.items()}
        for k in out:
            if "0" <= k[:1] <= "9":
                return {k: out[k] for k in _js_key_order(list(out))}
        return out
    if t is list or t is tuple:
        return [_clone(x) for x in v]
    if t is _JSFunction:
        msg = f"{v.source} could not be cloned."
        raise _NotCloneable(msg)
    if isinstance(v, Mapping):
        return _clone(dict(v))
    return v


def _get_types(schema: dict[str, Any]) -> tuple[str, ...]:
    t = schema.get("type")
    if isinstance(t, str):
        return (t,)
    if isinstance(t, list):
        return tuple(x for x in t if isinstance(x, str))
    return ()


def _matches_json_type(v: object, t: str) -> bool:
    if t == "number":
        return _is_js_number(v)
    if t == "integer":
        return _is_integer(v)
    if t == "boolean":
        return isinstance(v, bool)
    if t == "string":
        return isinstance(v, str)
    if t == "null":
        return v is None
    if t == "array":
        return isinstance(v, list)
    if t == "object":
        return isinstance(v, dict)
    return False


def _coerce_primitive(v: Any, t: str) -> Any:
    if t in ("number", "integer"):
        if v is None:
            return 0
        if isinstance(v, str) and v.strip(_JS_WHITESPACE):
            parsed = _js_string_to_number(v)
            if math.isfinite(parsed) if t == "number" else parsed.is_integer():
                return _from_js_number(parsed)
        if isinstance(v, bool):
            return 1 if v else 0
        return v
    if t == "boolean":
        if v is None:
            return False
        if v == "true" and isinstance(v, str):
            return True
        if v == "false" and isinstance(v, str):
            return False
        if _is_js_number(v):
            if v == 1:
                return True
            if v == 0:
                return False
        return v
    if t == "string":
        if v is None:
            return ""
        if isinstance(v, bool) or _is_js_number(v):
            return _js_to_string(v)
        return v
    if t == "null":
        if (isinstance(v, str) and v == "") or v is False or (_is_js_number(v) and v == 0):
            return None
        return v
    return v


class _Coercer:
    """Pi's ``normalizeOptionalNulls`` and ``coerceWithJsonSchema`` for one tool schema.

    Sub-schema checks (``getSubSchemaValidator(s).Check(v)``) compile the sub-schema on
    its own, as Pi does: a ``$ref`` inside it resolves against the sub-schema, not the
    tool schema.
    """

    def __init__(self) -> None:
        self._sub: dict[int, tuple[object, _Node | None]] = {}
        self._nullable: dict[int, bool | None] = {}

    def sub_check(self, schema: object, v: Any) -> bool | None:
        """``getSubSchemaValidator(schema)?.Check(v)``: None when Pi has no validator,
        which is the case for a schema that is not an object (its ``WeakMap`` cache
        throws on a primitive key) or that does not compile."""
        if not isinstance(schema, dict | list):
            return None
        entry = self._sub.get(id(schema))
        if entry is None:
            comp = _Compiler(schema)
            node = None if comp.error is not None or comp.unsupported is not None else comp.top
            entry = (schema, node)
            self._sub[id(schema)] = entry
        node = entry[1]
        return None if node is None else node.check(v)

    def accepts_null(self, schema: object) -> bool | None:
        key = id(schema)
        if key not in self._nullable:
            self._nullable[key] = self.sub_check(schema, None)
        return self._nullable[key]

    # ---- normalizeOptionalNulls (in place on the clone)
    def normalize(self, v: Any, schema: Any) -> None:
        if isinstance(v, list):
            items = schema.get("items") if isinstance(schema, dict) else None
            if isinstance(items, list):
                for x, item_schema in zip(v, items, strict=False):
                    if item_schema:
                        self.normalize(x, item_schema)
            elif items:
                for x in v:
                    self.normalize(x, items)
            return
        if not isinstance(v, dict) or not isinstance(schema, dict):
            return
        props = schema.get("properties")
        if not props or not isinstance(props, dict):
            return
        required = schema.get("required")
        required_set = set(required) if isinstance(required, list | str) else set()
        for key, prop_schema in _js_items(props):
            if not _js_in(v, key):
                continue
            x = _js_get(v, key)
            if (
                x is None
                and key not in required_set
                and not (isinstance(prop_schema, dict) and isinstance(prop_schema.get("$ref"), str))
                and self.accepts_null(prop_schema) is False
            ):
                del v[key]
            else:
                self.normalize(x, prop_schema)

    # ---- coerceWithJsonSchema (in place for objects and arrays)
    def coerce(self, v: Any, schema: Any) -> Any:
        if not isinstance(schema, dict):
            return v
        nxt = v
        all_of = schema.get("allOf")
        if isinstance(all_of, list):
            for nested in all_of:
                nxt = self.coerce(nxt, nested)
        for key in ("anyOf", "oneOf"):
            members = schema.get(key)
            if isinstance(members, list):
                nxt = self._union(nxt, members)
        types = _get_types(schema)
        if types and not (len(types) > 1 and any(_matches_json_type(nxt, t) for t in types)):
            for t in types:
                candidate = _coerce_primitive(nxt, t)
                if candidate is not nxt or (isinstance(nxt, float) and nxt != nxt):
                    nxt = candidate
                    break
        if "object" in types and isinstance(nxt, dict):
            self._coerce_object(nxt, schema)
        if "array" in types and isinstance(nxt, list):
            items = schema.get("items")
            if isinstance(items, list):
                for i in range(min(len(nxt), len(items))):
                    if items[i]:
                        nxt[i] = self.coerce(nxt[i], items[i])
            elif items and isinstance(items, dict):
                for i in range(len(nxt)):
                    nxt[i] = self.coerce(nxt[i], items)
        return nxt

    def _coerce_object(self, v: dict[str, Any], schema: dict[str, Any]) -> None:
        props = schema.get("properties")
        defined: frozenset[str] = frozenset()
        if isinstance(props, dict):
            defined = frozenset(props)
            for key, prop_schema in _js_items(props):
                if _js_in(v, key):
                    v[key] = self.coerce(_js_get(v, key), prop_schema)
        addl = schema.get("additionalProperties")
        if addl and isinstance(addl, dict | list):
            for key, x in list(v.items()):
                if key not in defined:
                    v[key] = self.coerce(x, addl)

    def _union(self, v: Any, members: list[Any]) -> Any:
        for member in members:
            if self.sub_check(member, v):
                return v
        for member in members:
            candidate = self.coerce(_clone(v), member)
            if self.sub_check(member, candidate):
                return candidate
        return v


def _strip_functions(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _strip_functions(x) for k, x in v.items() if not isinstance(x, _JSFunction)}
    if isinstance(v, list):
        return [_strip_functions(x) for x in v]
    return v


def _has_function(v: Any) -> bool:
    if isinstance(v, _JSFunction):
        return True
    if isinstance(v, dict):
        return any(_has_function(x) for x in v.values())
    if isinstance(v, list):
        return any(_has_function(x) for x in v)
    return False


class _Odd(Exception):
    """A value the fused preparer leaves to the exact, slower path (NaN, infinities,
    tuples, non-JSON objects, ...)."""


def _clone_fast(v: Any) -> Any:
    """:func:`_clone` for plain decoded JSON; raises :class:`_Odd` for anything else."""
    t = type(v)
    if t is str or t is int or t is bool or v is None:
        return v
    if t is dict:
        out = {k: _clone_fast(x) for k, x in v.items()}
        for k in out:
            if "0" <= k[:1] <= "9":
                return {k: out[k] for k in _js_key_order(list(out))}
        return out
    if t is list:
        return [_clone_fast(x) for x in v]
    if t is float and not v - v:
        return v
    raise _Odd


_Prep = Callable[[Any], Any]


class _Preparer:
    """Compiles, per schema node, one function doing Pi's ``structuredClone``,
    ``normalizeOptionalNulls`` and ``coerceWithJsonSchema`` in a single pass.

    Normalization and coercion both only look at the sub-tree below a node, so doing
    both node by node gives what Pi gets by normalizing the whole value first. A node
    with ``allOf``/``anyOf``/``oneOf`` (whose coercion checks whole sub-values) is
    handed to the interpreted :class:`_Coercer`. Values the fast functions do not
    handle raise :class:`_Odd`.
    """

    def __init__(self, coercer: _Coercer) -> None:
        self._coercer = coercer
        self._memo: dict[tuple[int, bool, bool], _Prep | None] = {}
        # The one Python type a node's function returns unchanged (a shortcut that
        # saves a call per property in the common flat object schema).
        self._keep: dict[tuple[int, bool, bool], type | None] = {}
        self.dict_preps: dict[tuple[int, bool, bool], _Prep] = {}
        self.may_insert_functions = False

    def keep(self, s: Any, norm: bool, coerce: bool) -> type | None:
        if not isinstance(s, dict) or not (norm or coerce):
            return str
        return self._keep.get((id(s), norm, coerce))

    def get(self, s: Any, norm: bool, coerce: bool) -> _Prep:
        if not isinstance(s, dict) or not (norm or coerce):
            return _clone_fast
        key = (id(s), norm, coerce)
        if key in self._memo:
            prep = self._memo[key]
            return prep if prep is not None else self._interpreted(s, norm, coerce)
        self._memo[key] = None  # a cycle gets the interpreted version
        prep, keep = self._build(s, norm, coerce)
        self._memo[key] = prep
        self._keep[key] = keep
        return prep

    def _interpreted(self, s: dict[str, Any], norm: bool, coerce: bool) -> _Prep:
        coercer = self._coercer

        def prep(v: Any) -> Any:
            c = _clone_fast(v)
            if norm:
                coercer.normalize(c, s)
            return coercer.coerce(c, s) if coerce else c

        return prep

    def _build(self, s: dict[str, Any], norm: bool, coerce: bool) -> tuple[_Prep, type | None]:
        if coerce and any(isinstance(s.get(k), list) for k in ("allOf", "anyOf", "oneOf")):
            return self._interpreted(s, norm, coerce), None
        types = _get_types(s) if coerce else ()
        is_object = "object" in types
        is_array = "array" in types
        coerce_primitive = _primitive_coercion(types)
        props = s.get("properties")
        # key -> (function, the schema when a null value may be deleted, kept type)
        table: dict[str, tuple[_Prep, Any, type | None]] | None = None
        inserts: list[tuple[str, Any]] = []
        if isinstance(props, dict) and props and (norm or is_object):
            required = s.get("required")
            required_set = set(required) if isinstance(required, list | str) else set()
            table = {}
            for key, sub in props.items():
                deletable = (
                    norm
                    and key not in required_set
                    and not (isinstance(sub, dict) and isinstance(sub.get("$ref"), str))
                )
                table[key] = (
                    self.get(sub, norm, is_object),
                    sub if deletable else _UNDEF,
                    self.keep(sub, norm, is_object),
                )
                if is_object and key in _PROTO_VALUES:
                    inserts.append((key, sub))
            if inserts:
                self.may_insert_functions = True
        addl = s.get("additionalProperties")
        addl_prep = self.get(addl, False, True) if is_object and isinstance(addl, dict) else None
        items = s.get("items")
        item_preps: list[_Prep | None] | None = None
        item_prep: _Prep | None = None
        if norm or is_array:
            if isinstance(items, list):
                item_preps = [self.get(x, norm, is_array) if x else None for x in items]
            elif items and (isinstance(items, dict) or norm):
                item_prep = self.get(items, norm, is_array and isinstance(items, dict))
        coercer = self._coercer

        lookup = (table or {}).get

        def prep_dict(v: dict[str, Any]) -> dict[str, Any]:
            out: dict[str, Any] = {}
            reorder = False
            for k, x in v.items():
                if k < ":" and k >= "0":
                    reorder = True
                entry = lookup(k)
                if entry is not None:
                    if type(x) is entry[2]:
                        out[k] = x
                    elif (
                        x is None
                        and entry[1] is not _UNDEF
                        and coercer.accepts_null(entry[1]) is False
                    ):
                        continue
                    else:
                        out[k] = entry[0](x)
                elif addl_prep is not None:
                    out[k] = addl_prep(x)
                else:
                    out[k] = _clone_fast(x)
            if reorder:
                out = {k: out[k] for k in _js_key_order(list(out))}
            for k, sub in inserts:
                if k not in out:  # `k in value` is true through Object.prototype
                    out[k] = coercer.coerce(_PROTO_VALUES[k], sub)
            return out

        def prep_list(v: list[Any]) -> list[Any]:
            if item_prep is not None:
                return [item_prep(x) for x in v]
            if item_preps is not None:
                n = len(item_preps)
                return [
                    (item_preps[i] or _clone_fast)(x) if i < n else _clone_fast(x)
                    for i, x in enumerate(v)
                ]
            return [_clone_fast(x) for x in v]

        has_dict = table is not None or addl_prep is not None
        if has_dict:
            self.dict_preps[(id(s), norm, coerce)] = prep_dict
        has_list = item_prep is not None or item_preps is not None

        def prep(v: Any) -> Any:
            t = type(v)
            if t is dict:
                return prep_dict(v) if has_dict else _clone_fast(v)
            if t is list:
                return prep_list(v) if has_list else _clone_fast(v)
            if coerce_primitive is not None:
                if t is float and v - v:
                    raise _Odd
                if t is str or t is int or t is bool or t is float or v is None:
                    return coerce_primitive(v)
                raise _Odd
            return _clone_fast(v)

        keep: type | None = str
        if coerce_primitive is not None:
            keep = {
                "string": str, "integer": int, "number": int, "boolean": bool, "object": str,
                "array": str,
            }.get(types[0]) if len(types) == 1 else None  # fmt: skip
            if len(types) > 1:
                keep = next(
                    (
                        py
                        for name, py in (("string", str), ("integer", int), ("boolean", bool))
                        if name in types
                    ),
                    None,
                )
        return prep, keep


def _primitive_coercion(types: tuple[str, ...]) -> Callable[[Any], Any] | None:
    """Pi's type step of ``coerceWithJsonSchema`` for a non-container value."""
    if not types:
        return None
    if len(types) == 1:
        only = types[0]
        if only == "string":
            return _to_string
        if only == "number" or only == "integer":
            return _to_integer if only == "integer" else _to_number
        if only in ("object", "array"):
            return _identity

    def coerce(v: Any) -> Any:
        if len(types) > 1 and any(_matches_json_type(v, t) for t in types):
            return v
        for t in types:
            candidate = _coerce_primitive(v, t)
            if candidate is not v:
                return candidate
        return v

    return coerce


def _identity(v: Any) -> Any:
    return v


def _to_string(v: Any) -> Any:
    t = type(v)
    if t is str:
        return v
    return _coerce_primitive(v, "string")


def _to_number(v: Any) -> Any:
    t = type(v)
    if t is int or t is float:
        return v
    return _coerce_primitive(v, "number")


def _to_integer(v: Any) -> Any:
    if type(v) is int:
        return v
    return _coerce_primitive(v, "integer")


# ======================================================================================
# Validator
# ======================================================================================


@final
class Validator:
    """The compiled validation of one tool schema; build with :func:`compile_validator`.

    Thread-safe for concurrent :meth:`validate` calls once built.
    """

    __slots__ = (
        "_coercer", "_engine", "_fast", "_prep", "_prep_dict", "_schema", "_schema_error", "_strip"
    )  # fmt: skip

    def __init__(self, schema: Mapping[str, Any] | bool) -> None:
        self._schema: Any = schema if isinstance(schema, dict | bool) else _clone(schema)
        engine = _Compiler(self._schema)
        self._engine = engine.top
        self._schema_error = engine.error or engine.unsupported
        self._fast = None if self._schema_error else _compile_fast(self._schema)
        self._coercer = _Coercer()
        preparer = _Preparer(self._coercer)
        self._prep = preparer.get(self._schema, True, True)
        # For a dict, the top node's dict function directly (one call less).
        self._prep_dict = preparer.dict_preps.get((id(self._schema), True, True), self._prep)
        self._strip = preparer.may_insert_functions

    @property
    def schema(self) -> Any:
        """The schema this validator was compiled from."""
        return self._schema

    @property
    def uses_fast_path(self) -> bool:
        """Whether acceptance is decided by the compiled fastjsonschema validator."""
        return self._fast is not None

    def is_valid(self, value: JSONValue) -> bool:
        """TypeBox's ``Check`` of an already coerced value (Pi's compiled validator)."""
        fast = self._fast
        if fast is not None:
            try:
                _clone_fast(value)  # only plain JSON with finite numbers
                fast(value)
            except _Odd:
                pass
            except Exception:
                return self._engine.check(value)
            else:
                return True
        return self._engine.check(value)

    def errors(self, value: JSONValue) -> tuple[str, ...]:
        """TypeBox's ``Errors`` as Pi formats them (``"<path>: <message>"``, at most 8)."""
        sink = _Sink(MAX_ERRORS)
        self._engine.errors(value, "", sink)
        return tuple(e.line() for e in sink.errors)

    def validate(self, tool_name: str, arguments: JSONValue) -> JSONValue:
        """Validate and coerce a tool call's arguments exactly as Pi does.

        Args:
            tool_name: The tool's name (used in the error message).
            arguments: The call's arguments (after the tool's ``prepare_arguments``).
                Never mutated.

        Returns:
            The normalized and coerced arguments, a new value the caller owns.

        Raises:
            ToolArgumentsError: The arguments do not satisfy the schema.
            ToolSchemaError: The schema cannot be compiled, or Pi's call would throw
                (V8's ``Maximum call stack size exceeded`` for a ``$ref`` cycle that
                never consumes the value, ``DataCloneError`` texts, ...).
        """
        try:
            return self._validate(tool_name, arguments)
        except RecursionError:
            msg = "Maximum call stack size exceeded"  # V8's RangeError
            raise ToolSchemaError(msg) from None

    def _validate(self, tool_name: str, arguments: JSONValue) -> JSONValue:
        if self._schema_error is not None:
            raise ToolSchemaError(self._schema_error)
        if type(arguments) is dict:
            try:
                args = self._prep_dict(arguments)
            except (_Odd, TypeError):  # TypeError: a key that is not a string
                pass
            except _NotCloneable as exc:
                raise ToolSchemaError(str(exc)) from None
            else:
                fast = self._fast
                if fast is not None:
                    try:
                        fast(args)
                    except Exception:
                        pass
                    else:
                        return args
                return self._finish(tool_name, arguments, args)
        return self._validate_exactly(tool_name, arguments)

    def _finish(self, tool_name: str, arguments: JSONValue, args: Any) -> Any:
        if self._engine.check(args):
            return _strip_functions(args) if self._strip else args
        raise ToolArgumentsError(tool_name, self.errors(args), arguments)

    def _validate_exactly(self, tool_name: str, arguments: JSONValue) -> JSONValue:
        """Pi's steps one after the other, for any value."""
        try:
            args = _clone(arguments)
            self._coercer.normalize(args, self._schema)
            coerced = self._coercer.coerce(args, self._schema)
        except _NotCloneable as exc:
            raise ToolSchemaError(str(exc)) from None
        if coerced is not args and not (
            # `coerced !== args` compares primitives by value
            not isinstance(args, dict | list) and _strict_equal(coerced, args)
        ):
            if isinstance(args, dict | list) and isinstance(coerced, dict | list):
                args = coerced
            else:
                # Pi returns a coerced primitive without reporting errors either way.
                return coerced if self.is_valid(coerced) else args
        if self.is_valid(args):
            return _strip_functions(args) if _has_function(args) else args
        raise ToolArgumentsError(tool_name, self.errors(args), arguments)


_cache_lock = threading.Lock()
_cache_by_id: dict[int, tuple[Mapping[str, Any], Validator]] = {}
_cache_by_text: dict[str, Validator] = {}
_CACHE_LIMIT: Final = 2048


def compile_validator(schema: Mapping[str, Any]) -> Validator:
    """The validator of a tool schema, compiled once.

    Cached by the schema object's identity (the object is kept alive by the cache) and
    by its JSON text, so equal schemas built separately share one validator. The schema
    must not be mutated afterwards.
    """
    key = id(schema)
    entry = _cache_by_id.get(key)
    if entry is not None and entry[0] is schema:
        return entry[1]
    with _cache_lock:
        entry = _cache_by_id.get(key)
        if entry is not None and entry[0] is schema:
            return entry[1]
        try:
            text: str | None = json.dumps(schema, sort_keys=False, separators=(",", ":"))
        except (TypeError, ValueError):
            text = None
        validator = _cache_by_text.get(text) if text is not None else None
        if validator is None:
            validator = Validator(schema)
            if text is not None:
                if len(_cache_by_text) >= _CACHE_LIMIT:
                    _cache_by_text.clear()
                _cache_by_text[text] = validator
        # Entries keep their schema alive (so its id stays unique); bound them for
        # callers that build a new schema object per call.
        if len(_cache_by_id) >= _CACHE_LIMIT:
            _cache_by_id.clear()
        _cache_by_id[key] = (schema, validator)
        return validator


def validate_tool_arguments(
    tool_name: str, schema: Mapping[str, Any], arguments: JSONValue
) -> JSONValue:
    """Pi's ``validateToolArguments``: :meth:`Validator.validate` with the cached
    validator of ``schema``."""
    return compile_validator(schema).validate(tool_name, arguments)
