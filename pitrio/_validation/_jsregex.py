"""JavaScript regular expressions (V8, ``u`` flag), translated to Python's :mod:`re`.

TypeBox compiles ``pattern`` and ``patternProperties`` keys with ``new RegExp(pattern,
"u")``; the ``regex`` format uses ``new RegExp(value)`` without flags. The syntax and
meaning differ from :mod:`re` (``\\d``/``\\w``/``\\s`` classes, ``$`` never matching
before a final newline, ``\\p{...}`` properties, ``[^]``, named groups, what is an
error), so a translator parses the JavaScript pattern and emits an equivalent Python
one, and reports V8's exact ``SyntaxError`` reason for a pattern V8 rejects (Pi's
call then fails with that text). Patterns it cannot express in :mod:`re`
(``\\p{Script=...}``, binary properties) raise ``_UnsupportedRegex``. Translations
are cached per source; Unicode category tables are built on first use.

Patterns come from tool schemas but are applied to model-produced strings: a
backtracking pattern is a denial-of-service risk (see ``docs/validation.md``).
"""

from __future__ import annotations

import re
import sys
import threading
import unicodedata
from typing import Final, NoReturn

from ._jsvalues import _JS_WHITESPACE


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
