"""JavaScript value semantics, as the TypeScript code Pi runs sees JSON values.

Pi's validation is JavaScript: TypeBox reads properties with the ``in`` operator (which
finds ``Object.prototype`` members such as ``toString`` in every object), compares with
``===``, converts with ``Number(string)`` and ``String(number)``, orders object keys with
integer-like keys first, and Pi echoes arguments with ``JSON.stringify``. Each of those
differs from Python's nearest built-in in cases a model can produce (``"0x10"``,
``1e21``, ``-0``, ``{"constructor": 1}``), and every difference changes a coerced value
or an error text. This module reproduces them, together with TypeBox's grapheme-based
string length (``minLength``/``maxLength``), its hash used by ``uniqueItems`` and its
``multipleOf`` tolerance. ``undefined`` is the singleton ``_UNDEF``; a JavaScript
function value is a ``_JSFunction``.
"""

from __future__ import annotations

import json
import math
import re
import struct
from collections.abc import Iterator, Mapping
from typing import Any, Final, final

from .._messages import JSONValue


@final
class _LazyRegex:
    """A regular expression compiled on its first :meth:`match`, not at import.

    Keeps ``import pitrio`` fast: the patterns of TypeBox's formats take ~45 ms to
    compile (the ``url`` one alone ~40 ms), and most programs never validate a format.
    Two threads compiling at once both get an equal pattern.
    """

    __slots__ = ("_compiled", "_flags", "_source")

    def __init__(self, source: str, flags: int = 0) -> None:
        self._source = source
        self._flags = flags
        self._compiled: re.Pattern[str] | None = None

    def match(self, s: str) -> re.Match[str] | None:
        compiled = self._compiled
        if compiled is None:
            compiled = self._compiled = re.compile(self._source, self._flags)
        return compiled.match(s)


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
_DECIMAL_LITERAL: Final = _LazyRegex(
    r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z", re.ASCII
)
_NON_DECIMAL_LITERAL: Final = _LazyRegex(r"0(?:[xX][0-9a-fA-F]+|[oO][0-7]+|[bB][01]+)\Z")


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


class _Full(Exception):
    """A :class:`_CappedParts` is over its limit."""


class _CappedParts(list[str]):
    """The output list of :func:`_dump`, which stops the dump once ``left`` characters
    have been written."""

    __slots__ = ("left",)

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.left = limit

    def append(self, part: str, /) -> None:
        super().append(part)
        self.left -= len(part)
        if self.left < 0:
            raise _Full


def js_json_dumps_capped(
    value: JSONValue, *, indent: int | None = None, limit: int
) -> tuple[str, bool]:
    """:func:`js_json_dumps` written only up to ``limit`` characters: the text (at most
    ``limit`` characters) and whether it is complete. Its cost is bounded by ``limit``,
    not by the size of the value."""
    parts = _CappedParts(limit)
    try:
        _dump(value, parts, "" if indent is None else "\n", " " * (indent or 0))
    except _Full:
        return "".join(parts)[:limit], False
    return "".join(parts), True


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
