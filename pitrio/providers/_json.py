"""JavaScript's JSON for the providers: what pi-ai gets from ``JSON`` and its JSON helpers.

Request bodies and event data must be byte-identical to what pi-ai 0.85.0 sends and
reads, so this module reproduces:

- :func:`json_stringify` (``JSON.stringify``: compact, numbers written as JavaScript
  writes them), :func:`json_parse` (``JSON.parse``: strict, no ``NaN``),
  :func:`js_length` (a string's UTF-16 ``length``), :func:`js_truthy` (truthiness of a
  decoded value) and :data:`JS_WHITESPACE` (what ``String.prototype.trim`` strips);
- the whole-string parse of streamed tool arguments: :func:`parse_streaming_json`
  (``parseStreamingJson`` of pi-ai's ``utils/json-parse.js``), :func:`repair_json`,
  :func:`parse_json_with_repair` and :func:`parse_partial_json` (a port of the
  ``partial-json`` 0.1.7 package). :mod:`._partial_json` is the incremental parser the
  providers use; it falls back to these and is tested against them.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Final

from .._messages import JSONValue

__all__ = [
    "JS_WHITESPACE",
    "js_length",
    "js_truthy",
    "json_parse",
    "json_stringify",
    "parse_json_with_repair",
    "parse_partial_json",
    "parse_streaming_json",
    "repair_json",
]

JS_WHITESPACE: Final = (
    " \t\n\r\v\f\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
    "\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)
"""What JavaScript's ``trim()`` strips (Python's ``str.strip()`` strips a different set)."""


def js_length(text: str) -> int:
    """The length of ``text`` in UTF-16 code units (JavaScript's ``string.length``)."""
    if text.isascii():
        return len(text)
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def js_truthy(value: object) -> bool:
    """JavaScript truthiness of a decoded JSON value (``{}`` and ``[]`` are truthy)."""
    if value is None or value is False:
        return False
    if isinstance(value, bool):
        return True
    if isinstance(value, int | float):
        return value != 0 and not (isinstance(value, float) and math.isnan(value))
    if isinstance(value, str):
        return value != ""
    return True


def _js_number(value: float) -> str:
    if math.isnan(value) or math.isinf(value):
        return "null"
    if value == int(value) and abs(value) < 1e21:
        return str(int(value))
    text = repr(value)
    mantissa, _, exponent = text.partition("e")
    if not exponent:
        return text
    digits = mantissa.replace(".", "").lstrip("-")
    exp = int(exponent)
    sign = "-" if value < 0 else ""
    digits = digits.rstrip("0") or "0"
    # repr gives d.ddd e±x; JavaScript uses plain notation for 1e-7 <= |x| < 1e21.
    if -7 < exp < 0:
        return f"{sign}0.{'0' * (-exp - 1)}{digits}"
    if 0 <= exp < 21:
        whole = digits.ljust(exp + 1, "0")
        head, tail = whole[: exp + 1], whole[exp + 1 :]
        return f"{sign}{head}.{tail}" if tail else f"{sign}{head}"
    frac = digits[1:]
    return f"{sign}{digits[0]}{'.' + frac if frac else ''}e{'+' if exp > 0 else '-'}{abs(exp)}"


def _has_float(value: Any) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, dict):
        return any(_has_float(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_has_float(v) for v in value)
    return False


def json_stringify(value: JSONValue) -> str:
    """``JSON.stringify(value)``: compact, keys in insertion order, non-ASCII kept,
    numbers written as JavaScript writes them (``1.0`` as ``1``, ``1e-7``)."""
    if _has_float(value):
        return "".join(_FloatReprEncoder().iterencode(value))
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class _FloatReprEncoder(json.JSONEncoder):
    """A compact encoder that writes floats as JavaScript does."""

    def iterencode(self, o: Any, _one_shot: bool = False) -> Any:
        # The pure-Python iterencode takes the float formatter as an argument.
        return json.encoder._make_iterencode(  # type: ignore[attr-defined]  # private helper, stable since 2.7
            {},
            self.default,
            json.encoder.py_encode_basestring,
            None,
            _js_number,
            ":",
            ",",
            False,
            False,
            True,
        )(o, 0)


def _reject_constant(name: str) -> Any:
    msg = f"Unexpected token '{name[0]}', \"{name}\" is not valid JSON"
    raise ValueError(msg)


_DECODER: Final = json.JSONDecoder(parse_constant=_reject_constant)


def json_parse(text: str) -> JSONValue:
    """``JSON.parse(text)``: strict JSON (no ``NaN``/``Infinity``).

    Raises:
        ValueError: the text is not valid JSON (``json.JSONDecodeError`` included).
    """
    return _DECODER.decode(text)


# ---------------------------------------------------------------------------------------
# Partial JSON (pi-ai's utils/json-parse.js and partial-json 0.1.7)

_VALID_JSON_ESCAPES: Final = frozenset('"\\/bfnrtu')
_HEX4: Final = re.compile(r"[0-9a-fA-F]{4}")
_CONTROL_ESCAPES: Final = {"\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def repair_json(text: str) -> str:
    """Repair string literals: escape raw control characters, double a backslash that
    does not start a valid escape (``repairJson``)."""
    out: list[str] = []
    in_string = False
    index = 0
    length = len(text)
    while index < length:
        char = text[index]
        if not in_string:
            out.append(char)
            if char == '"':
                in_string = True
            index += 1
            continue
        if char == '"':
            out.append(char)
            in_string = False
            index += 1
            continue
        if char == "\\":
            if index + 1 >= length:
                out.append("\\\\")
                index += 1
                continue
            next_char = text[index + 1]
            if next_char == "u":
                digits = text[index + 2 : index + 6]
                if len(digits) == 4 and _HEX4.fullmatch(digits):
                    out.append("\\u" + digits)
                    index += 6
                    continue
            if next_char in _VALID_JSON_ESCAPES:
                out.append("\\" + next_char)
                index += 2
                continue
            out.append("\\\\")
            index += 1
            continue
        if ord(char) <= 0x1F:
            out.append(_CONTROL_ESCAPES.get(char, f"\\u{ord(char):04x}"))
        else:
            out.append(char)
        index += 1
    return "".join(out)


def parse_json_with_repair(text: str) -> JSONValue:
    """``JSON.parse``, retried once on :func:`repair_json`'s output if that changed
    anything (``parseJsonWithRepair``). Raises ``ValueError`` like :func:`json_parse`."""
    try:
        return json_parse(text)
    except ValueError:
        repaired = repair_json(text)
        if repaired != text:
            return json_parse(repaired)
        raise


def parse_streaming_json(text: str | None) -> JSONValue:
    """Best-effort parse of a possibly incomplete JSON text (``parseStreamingJson``).

    Never raises: returns ``{}`` for empty text or when nothing can be recovered. The
    result is usually a dict but may be any JSON value the text starts with.
    """
    if not text or not text.strip(JS_WHITESPACE):
        return {}
    try:
        result = parse_json_with_repair(text)
    except (ValueError, RecursionError):
        pass
    else:
        return {} if result is None else result
    for candidate in (text, None):
        try:
            source = text if candidate is not None else repair_json(text)
            result = parse_partial_json(source)
        except (_PartialJSONError, ValueError, RecursionError):
            continue
        return {} if result is None else result
    return {}


class _PartialJSONError(Exception):
    """partial-json's ``PartialJSON`` / ``MalformedJSON``."""


def _js_substring(text: str, start: int, end: int) -> str:
    length = len(text)
    start = min(max(start, 0), length)
    end = min(max(end, 0), length)
    if start > end:
        start, end = end, start
    return text[start:end]


def parse_partial_json(text: str) -> JSONValue:
    """A line-by-line port of ``partial-json`` 0.1.7's ``parse(text, Allow.ALL)``.

    Raises:
        ValueError: the text is empty or malformed beyond repair.
    """
    if not text.strip(JS_WHITESPACE):
        msg = f"{text} is empty"
        raise ValueError(msg)
    return _PartialParser(text.strip(JS_WHITESPACE)).parse_any()


class _PartialParser:
    __slots__ = ("index", "length", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.length = len(text)
        self.index = 0

    def _char(self, index: int) -> str:
        return self.text[index] if 0 <= index < self.length else ""

    def _fail(self, message: str) -> _PartialJSONError:
        return _PartialJSONError(f"{message} at position {self.index}")

    def parse_any(self) -> JSONValue:
        self.skip_blank()
        text, index, length = self.text, self.index, self.length
        if index >= length:
            msg = "Unexpected end of input"
            raise self._fail(msg)
        char = text[index]
        if char == '"':
            return self.parse_str()
        if char == "{":
            return self.parse_obj()
        if char == "[":
            return self.parse_arr()
        rest = text[index:]
        for word, value in (
            ("null", None),
            ("true", True),
            ("false", False),
            ("Infinity", math.inf),
        ):
            if rest[: len(word)] == word or (length - index < len(word) and word.startswith(rest)):
                self.index += len(word)
                return value
        if rest[:9] == "-Infinity" or (1 < length - index < 9 and "-Infinity".startswith(rest)):
            self.index += 9
            return -math.inf
        if rest[:3] == "NaN" or (length - index < 3 and "NaN".startswith(rest)):
            self.index += 3
            return math.nan
        return self.parse_num()

    def parse_str(self) -> str:
        text, length = self.text, self.length
        start = self.index
        escape = False
        self.index += 1
        while self.index < length and (
            text[self.index] != '"' or (escape and text[self.index - 1] == "\\")
        ):
            escape = (not escape) if text[self.index] == "\\" else False
            self.index += 1
        if self._char(self.index) == '"':
            self.index += 1
            try:
                value = json_parse(_js_substring(text, start, self.index - int(escape)))
            except ValueError as exc:
                raise self._fail(str(exc)) from None
            return str(value)
        try:
            value = json_parse(_js_substring(text, start, self.index - int(escape)) + '"')
        except ValueError:
            value = json_parse(_js_substring(text, start, text.rfind("\\")) + '"')
        return str(value)

    def parse_obj(self) -> dict[str, JSONValue]:
        self.index += 1
        self.skip_blank()
        obj: dict[str, JSONValue] = {}
        try:
            while self._char(self.index) != "}":
                self.skip_blank()
                if self.index >= self.length:
                    return obj
                key = self.parse_str()
                self.skip_blank()
                self.index += 1
                try:
                    value = self.parse_any()
                except (_PartialJSONError, ValueError, RecursionError):
                    return obj
                obj[key] = value
                self.skip_blank()
                if self._char(self.index) == ",":
                    self.index += 1
        except (_PartialJSONError, ValueError, RecursionError):
            return obj
        self.index += 1
        return obj

    def parse_arr(self) -> list[JSONValue]:
        self.index += 1
        arr: list[JSONValue] = []
        try:
            while self._char(self.index) != "]":
                arr.append(self.parse_any())
                self.skip_blank()
                if self._char(self.index) == ",":
                    self.index += 1
        except (_PartialJSONError, ValueError, RecursionError):
            return arr
        self.index += 1
        return arr

    def parse_num(self) -> JSONValue:
        text = self.text
        if self.index == 0:
            if text == "-":
                msg = "Not sure what '-' is"
                raise self._fail(msg)
            try:
                return json_parse(text)
            except ValueError as exc:
                try:
                    return json_parse(_js_substring(text, 0, text.rfind("e")))
                except ValueError:
                    pass
                raise self._fail(str(exc)) from None
        start = self.index
        if self._char(self.index) == "-":
            self.index += 1
        while self._char(self.index) and self._char(self.index) not in ",]}":
            self.index += 1
        try:
            return json_parse(_js_substring(text, start, self.index))
        except ValueError:
            if _js_substring(text, start, self.index) == "-":
                msg = "Not sure what '-' is"
                raise self._fail(msg) from None
            try:
                return json_parse(_js_substring(text, start, text.rfind("e")))
            except ValueError as exc:
                raise self._fail(str(exc)) from None

    def skip_blank(self) -> None:
        text, length = self.text, self.length
        while self.index < length and text[self.index] in " \n\r\t":
            self.index += 1
