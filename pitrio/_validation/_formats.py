"""The string formats TypeBox 1.3.7 registers (``typebox/build/format``).

TypeBox accepts ``format`` values with its own checks, not RFC-complete ones: its
``date``/``time``/``date-time`` patterns and calendar check, ``email``, ``ipv4``,
``ipv6``, ``uri`` (a hand-written RFC 3986 parser), ``url`` (a large regular
expression), ``hostname``/``idn-hostname``, ``json-pointer``, ``uuid``, ``regex``
(compiles the value as a JavaScript pattern), and ``iri``/``iri-reference`` through
WHATWG URL parsing (approximated here). A value accepted by one and rejected by the
other changes whether a call runs, so each check is ported. The large patterns are
compiled on first use, not at import (the ``url`` one takes ~50 ms to compile).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from typing import Final

from ._jsregex import _WS_CLASS, _JSRegexError, _RegexTranslator
from ._jsvalues import _LazyRegex

_DATE: Final = _LazyRegex(r"([0-9]{4})-([0-9]{2})-([0-9]{2})\Z")
_DAYS: Final = (0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_TIME: Final = _LazyRegex(
    r"([0-9]{2}):([0-9]{2}):([0-9]{2}(?:\.[0-9]+)?)(?:[zZ]|([+-])([0-9]{2}):([0-9]{2}))?\Z"
)
_DURATION: Final = _LazyRegex(
    r"P(?:(?:[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?|[0-9]+M(?:[0-9]+D)?|[0-9]+D)"
    r"(?:T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S))?"
    r"|T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)|[0-9]+W)\Z"
)
_EMAIL: Final = _LazyRegex(
    r"(?!.*\.\.)[a-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[a-z0-9!#$%&'*+/=?^_`{|}~-]+)*@"
    r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*\Z",
    re.ASCII | re.IGNORECASE,
)
_UUID: Final = _LazyRegex(
    r"[0-9a-f]{8}-(?:[0-9a-f]{4}-){3}[0-9a-f]{12}\Z", re.ASCII | re.IGNORECASE
)
_JSON_POINTER: Final = _LazyRegex(r"(?:/(?:[^~/]|~0|~1)*)*\Z")
_RELATIVE_JSON_POINTER: Final = _LazyRegex(r"(?:0|[1-9][0-9]*)(?:#|(?:/(?:[^~/]|~0|~1)*)*)\Z")
_JSON_POINTER_URI_FRAGMENT: Final = _LazyRegex(
    r"#(?:/(?:[a-z0-9_\-.!$&'()*+,;:=@]|%[0-9a-f]{2}|~0|~1)*)*\Z", re.ASCII | re.IGNORECASE
)
_URI_TEMPLATE: Final = _LazyRegex(
    r"(?:(?:[^\x00-\x20\"'<>%\\^`{|}]|%[0-9a-f]{2})|\{[+#./;?&=,!@|]?(?:[a-z0-9_]|%[0-9a-f]{2})+"
    r"(?::[1-9][0-9]{0,3}|\*)?(?:,(?:[a-z0-9_]|%[0-9a-f]{2})+(?::[1-9][0-9]{0,3}|\*)?)*\})*\Z",
    re.ASCII | re.IGNORECASE,
)
_URI_REFERENCE: Final = _LazyRegex(
    r"(?!.*[^\x00-\x7F])(?!.*\\)(?:(?:[a-z][a-z0-9+\-.]*:)?(?:\/\/[^\s\[\]{}<>^`|]*)?"
    r"|[^\s\[\]{}<>^`|]*)(?:\?[^\s\[\]{}<>^`|]*)?(?:#[^\s\[\]{}<>^`|]*)?\Z",
    re.ASCII | re.IGNORECASE,
)
_NS: Final = f"[^{_WS_CLASS}]"  # JavaScript \S
_U: Final = r"[a-z0-9\u00a1-\uffff]"
_URL: Final = _LazyRegex(
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
