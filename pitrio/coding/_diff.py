"""The edit tool's matching and diffs, as Pi's ``edit-diff.js`` computes them.

Pi diffs with the ``diff`` package (jsdiff 8): :func:`diff_lines` is its ``diffLines``
(Myers' algorithm with jsdiff's choice among equal paths, so the same hunks come out),
:func:`unified_patch` its ``createTwoFilesPatch`` with four lines of context and file
headers only, and :func:`diff_string` Pi's ``generateDiffString`` (the numbered diff the
edit tool puts in ``details.diff``). :func:`apply_edits` is Pi's
``applyEditsToNormalizedContent``: every edit matched against the original text, exact
first, then after Pi's fuzzy normalization (trailing spaces, smart quotes, dashes,
special spaces), with Pi's error texts.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Sequence
from typing import final

import attrs

from ._errors import CodingToolError

__all__ = [
    "Change",
    "apply_edits",
    "detect_line_ending",
    "diff_lines",
    "diff_string",
    "normalize_to_lf",
    "restore_line_endings",
    "unified_patch",
]


# -- jsdiff's diffLines --------------------------------------------------------------------


@final
@attrs.define
class Change:
    """One part of a diff: ``count`` lines, added, removed or common, and their text."""

    count: int
    added: bool
    removed: bool
    value: str = ""


@final
@attrs.define
class _Component:
    count: int
    added: bool
    removed: bool
    previous: _Component | None


@final
@attrs.define
class _Path:
    old_pos: int
    last: _Component | None


def _tokenize(text: str) -> list[str]:
    """jsdiff's line tokenizer: each line with its line break (``\\n`` or ``\\r\\n``)."""
    parts = re.split(r"(\n|\r\n)", text)
    if not parts[-1]:
        parts.pop()
    lines: list[str] = []
    for i, part in enumerate(parts):
        if i % 2:
            lines[-1] += part
        else:
            lines.append(part)
    return [line for line in lines if line]


def diff_lines(old: str, new: str) -> list[Change]:
    """jsdiff's ``diffLines(old, new)``: common, removed and added runs of lines."""
    old_tokens = _tokenize(old)
    new_tokens = _tokenize(new)
    new_len = len(new_tokens)
    old_len = len(old_tokens)
    max_edit_length = new_len + old_len

    def extract_common(path: _Path, diagonal: int) -> int:
        old_pos = path.old_pos
        new_pos = old_pos - diagonal
        common = 0
        while (
            new_pos + 1 < new_len
            and old_pos + 1 < old_len
            and old_tokens[old_pos + 1] == new_tokens[new_pos + 1]
        ):
            new_pos += 1
            old_pos += 1
            common += 1
        if common:
            path.last = _Component(common, False, False, path.last)
        path.old_pos = old_pos
        return new_pos

    def add_to_path(path: _Path, added: bool, removed: bool, old_inc: int) -> _Path:
        last = path.last
        if last is not None and last.added == added and last.removed == removed:
            return _Path(
                path.old_pos + old_inc, _Component(last.count + 1, added, removed, last.previous)
            )
        return _Path(path.old_pos + old_inc, _Component(1, added, removed, last))

    best: dict[int, _Path | None] = {0: _Path(-1, None)}
    start = best[0]
    assert start is not None
    new_pos = extract_common(start, 0)
    if start.old_pos + 1 >= old_len and new_pos + 1 >= new_len:
        return _build(start.last, old_tokens, new_tokens)
    min_diagonal = -max_edit_length - 1
    max_diagonal = max_edit_length + 1
    edit_length = 1
    while edit_length <= max_edit_length:
        diagonal = max(min_diagonal, -edit_length)
        while diagonal <= min(max_diagonal, edit_length):
            remove_path = best.get(diagonal - 1)
            add_path = best.get(diagonal + 1)
            if remove_path is not None:
                best[diagonal - 1] = None
            can_add = False
            if add_path is not None:
                add_new_pos = add_path.old_pos - diagonal
                can_add = 0 <= add_new_pos < new_len
            can_remove = remove_path is not None and remove_path.old_pos + 1 < old_len
            if not can_add and not can_remove:
                best[diagonal] = None
                diagonal += 2
                continue
            if not can_remove or (
                can_add
                and remove_path is not None
                and add_path is not None
                and remove_path.old_pos < add_path.old_pos
            ):
                assert add_path is not None
                path = add_to_path(add_path, True, False, 0)
            else:
                assert remove_path is not None
                path = add_to_path(remove_path, False, True, 1)
            new_pos = extract_common(path, diagonal)
            if path.old_pos + 1 >= old_len and new_pos + 1 >= new_len:
                return _build(path.last, old_tokens, new_tokens)
            best[diagonal] = path
            if path.old_pos + 1 >= old_len:
                max_diagonal = min(max_diagonal, diagonal - 1)
            if new_pos + 1 >= new_len:
                min_diagonal = max(min_diagonal, diagonal + 1)
            diagonal += 2
        edit_length += 1
    msg = "diff did not converge"  # unreachable: D <= N + M always ends the search
    raise AssertionError(msg)


def _build(last: _Component | None, old_tokens: list[str], new_tokens: list[str]) -> list[Change]:
    components: list[_Component] = []
    while last is not None:
        components.append(last)
        last = last.previous
    components.reverse()
    changes: list[Change] = []
    new_pos = old_pos = 0
    for c in components:
        if not c.removed:
            value = "".join(new_tokens[new_pos : new_pos + c.count])
            new_pos += c.count
            if not c.added:
                old_pos += c.count
        else:
            value = "".join(old_tokens[old_pos : old_pos + c.count])
            old_pos += c.count
        changes.append(Change(c.count, c.added, c.removed, value))
    return changes


# -- Pi's generateDiffString and jsdiff's createTwoFilesPatch ------------------------------


def diff_string(old: str, new: str, context: int = 4) -> tuple[str, int | None]:
    """Pi's ``generateDiffString``: the numbered diff and the first changed line (new file)."""
    parts = diff_lines(old, new)
    output: list[str] = []
    width = len(str(max(len(old.split("\n")), len(new.split("\n")))))
    old_num = new_num = 1
    last_was_change = False
    first_changed: int | None = None
    blank = " " * width

    def number(n: int) -> str:
        return str(n).rjust(width)

    for i, part in enumerate(parts):
        raw = part.value.split("\n")
        if raw[-1] == "":
            raw.pop()
        if part.added or part.removed:
            if first_changed is None:
                first_changed = new_num
            for line in raw:
                if part.added:
                    output.append(f"+{number(new_num)} {line}")
                    new_num += 1
                else:
                    output.append(f"-{number(old_num)} {line}")
                    old_num += 1
            last_was_change = True
            continue
        next_is_change = i < len(parts) - 1 and (parts[i + 1].added or parts[i + 1].removed)
        if last_was_change and next_is_change:
            if len(raw) <= context * 2:
                shown_lead, skipped, shown_trail = raw, 0, []
            else:
                shown_lead, skipped, shown_trail = (
                    raw[:context],
                    len(raw) - 2 * context,
                    raw[len(raw) - context :],
                )
            for line in shown_lead:
                output.append(f" {number(old_num)} {line}")
                old_num += 1
                new_num += 1
            if skipped or shown_trail:
                output.append(f" {blank} ...")
                old_num += skipped
                new_num += skipped
                for line in shown_trail:
                    output.append(f" {number(old_num)} {line}")
                    old_num += 1
                    new_num += 1
        elif last_was_change:
            shown = raw[:context]
            skipped = len(raw) - len(shown)
            for line in shown:
                output.append(f" {number(old_num)} {line}")
                old_num += 1
                new_num += 1
            if skipped > 0:
                output.append(f" {blank} ...")
                old_num += skipped
                new_num += skipped
        elif next_is_change:
            skipped = max(0, len(raw) - context)
            if skipped > 0:
                output.append(f" {blank} ...")
                old_num += skipped
                new_num += skipped
            for line in raw[skipped:]:
                output.append(f" {number(old_num)} {line}")
                old_num += 1
                new_num += 1
        else:
            old_num += len(raw)
            new_num += len(raw)
        last_was_change = False
    return "\n".join(output), first_changed


def _split_patch_lines(text: str) -> list[str]:
    ends_with_newline = text.endswith("\n")
    result = [line + "\n" for line in text.split("\n")]
    if ends_with_newline:
        result.pop()
    else:
        result[-1] = result[-1][:-1]
    return result


def unified_patch(path: str, old: str, new: str, context: int = 4) -> str:
    """jsdiff's ``createTwoFilesPatch(path, path, old, new)`` with file headers only."""
    diff: list[tuple[Change | None, list[str]]] = [
        (change, _split_patch_lines(change.value)) for change in diff_lines(old, new)
    ]
    diff.append((None, []))
    hunks: list[tuple[int, int, int, int, list[str]]] = []
    old_start = new_start = 0
    current: list[str] = []
    old_line = new_line = 1
    for i, (change, lines) in enumerate(diff):
        if change is not None and (change.added or change.removed):
            if not old_start:
                old_start, new_start = old_line, new_line
                if i > 0:
                    previous = diff[i - 1][1]
                    current = [" " + line for line in previous[-context:]] if context > 0 else []
                    old_start -= len(current)
                    new_start -= len(current)
            current.extend(("+" if change.added else "-") + line for line in lines)
            if change.added:
                new_line += len(lines)
            else:
                old_line += len(lines)
            continue
        if old_start:
            if len(lines) <= context * 2 and i < len(diff) - 2:
                current.extend(" " + line for line in lines)
            else:
                size = min(len(lines), context)
                current.extend(" " + line for line in lines[:size])
                hunks.append(
                    (
                        old_start,
                        old_line - old_start + size,
                        new_start,
                        new_line - new_start + size,
                        current,
                    )
                )
                old_start = new_start = 0
                current = []
        old_line += len(lines)
        new_line += len(lines)
    out = [f"--- {path}", f"+++ {path}"]
    for o_start, o_lines, n_start, n_lines, hunk_lines in hunks:
        tidy: list[str] = []
        for line in hunk_lines:
            if line.endswith("\n"):
                tidy.append(line[:-1])
            else:
                tidy.extend((line, "\\ No newline at end of file"))
        out.append(
            f"@@ -{o_start - 1 if o_lines == 0 else o_start},{o_lines} "
            f"+{n_start - 1 if n_lines == 0 else n_start},{n_lines} @@"
        )
        out.extend(tidy)
    return "\n".join(out) + "\n"


# -- Pi's edit matching ---------------------------------------------------------------------

_JS_WHITESPACE = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
    "\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)
"""What JavaScript's ``trimEnd`` removes."""
_SINGLE_QUOTES = re.compile("[\u2018\u2019\u201a\u201b]")
_DOUBLE_QUOTES = re.compile("[\u201c\u201d\u201e\u201f]")
_DASHES = re.compile("[\u2010\u2011\u2012\u2013\u2014\u2015\u2212]")
_SPACES = re.compile("[\u00a0\u2002-\u200a\u202f\u205f\u3000]")


def detect_line_ending(content: str) -> str:
    """Pi's ``detectLineEnding``: ``\\r\\n`` when the first line break is one."""
    crlf = content.find("\r\n")
    lf = content.find("\n")
    if lf == -1 or crlf == -1:
        return "\n"
    return "\r\n" if crlf < lf else "\n"


def normalize_to_lf(text: str) -> str:
    """Pi's ``normalizeToLF``: ``\\r\\n`` and lone ``\\r`` become ``\\n``."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def restore_line_endings(text: str, ending: str) -> str:
    """Pi's ``restoreLineEndings``."""
    return text.replace("\n", "\r\n") if ending == "\r\n" else text


def _fuzzy(text: str) -> str:
    """Pi's ``normalizeForFuzzyMatch``."""
    text = unicodedata.normalize("NFKC", text)
    text = "\n".join(line.rstrip(_JS_WHITESPACE) for line in text.split("\n"))
    text = _SINGLE_QUOTES.sub("'", text)
    text = _DOUBLE_QUOTES.sub('"', text)
    text = _DASHES.sub("-", text)
    return _SPACES.sub(" ", text)


def _find(content: str, old: str) -> tuple[int, int, bool]:
    """Pi's ``fuzzyFindText``: (index, match length, fuzzy?), index -1 when absent."""
    exact = content.find(old)
    if exact != -1:
        return exact, len(old), False
    fuzzy_old = _fuzzy(old)
    index = _fuzzy(content).find(fuzzy_old)
    if index == -1:
        return -1, 0, False
    return index, len(fuzzy_old), True


def _count(content: str, old: str) -> int:
    """Pi's ``countOccurrences`` (``split(needle).length - 1``)."""
    haystack = _fuzzy(content)
    needle = _fuzzy(old)
    if not needle:  # JavaScript splits into single units then
        return len(haystack.encode("utf-16-le", "surrogatepass")) // 2 - 1
    return haystack.count(needle)


@final
@attrs.frozen
class _Match:
    edit_index: int
    index: int
    length: int
    new_text: str


@final
@attrs.define
class _Group:
    """Replacements touching one run of lines: lines ``start`` to ``end`` (exclusive)."""

    start: int
    end: int
    matches: list[_Match]


def _apply(content: str, matches: Sequence[_Match], offset: int = 0) -> str:
    result = content
    for m in reversed(matches):
        start = m.index - offset
        result = result[:start] + m.new_text + result[start + m.length :]
    return result


def _lines_with_endings(content: str) -> list[str]:
    return re.findall(r"[^\n]*\n|[^\n]+", content)


def _apply_preserving_lines(original: str, base: str, matches: Sequence[_Match]) -> str:
    """Pi's ``applyReplacementsPreservingUnchangedLines``."""
    original_lines = _lines_with_endings(original)
    spans: list[tuple[int, int]] = []
    offset = 0
    for line in _lines_with_endings(base):
        spans.append((offset, offset + len(line)))
        offset += len(line)
    if len(original_lines) != len(spans):
        msg = "Cannot preserve unchanged lines because the base content has a different line count."
        raise CodingToolError(msg)
    groups: list[_Group] = []
    for m in sorted(matches, key=lambda m: m.index):
        start_line, end_line = _line_range(spans, m)
        if groups and start_line < groups[-1].end:
            groups[-1].end = max(groups[-1].end, end_line)
            groups[-1].matches.append(m)
            continue
        groups.append(_Group(start_line, end_line, [m]))
    result = ""
    index = 0
    for group in groups:
        result += "".join(original_lines[index : group.start])
        begin = spans[group.start][0]
        end = spans[group.end - 1][1]
        result += _apply(base[begin:end], group.matches, begin)
        index = group.end
    return result + "".join(original_lines[index:])


def _line_range(spans: list[tuple[int, int]], m: _Match) -> tuple[int, int]:
    start = m.index
    end = m.index + m.length
    start_line = next((i for i, (s, e) in enumerate(spans) if s <= start < e), -1)
    if start_line == -1:
        msg = "Replacement range is outside the base content."
        raise CodingToolError(msg)
    end_line = start_line
    while end_line < len(spans) and spans[end_line][1] < end:
        end_line += 1
    if end_line >= len(spans):
        msg = "Replacement range is outside the base content."
        raise CodingToolError(msg)
    return start_line, end_line + 1


def apply_edits(content: str, edits: Sequence[tuple[str, str]], path: str) -> str:
    """Pi's ``applyEditsToNormalizedContent`` on LF text: the new text.

    Raises:
        CodingToolError: an edit that cannot be applied, with Pi's text.
    """
    normalized = [(normalize_to_lf(old), normalize_to_lf(new)) for old, new in edits]
    total = len(normalized)
    for i, (old, _new) in enumerate(normalized):
        if not old:
            msg = (
                f"oldText must not be empty in {path}."
                if total == 1
                else f"edits[{i}].oldText must not be empty in {path}."
            )
            raise CodingToolError(msg)
    used_fuzzy = any(_find(content, old)[2] for old, _new in normalized)
    base = _fuzzy(content) if used_fuzzy else content
    matches: list[_Match] = []
    for i, (old, new) in enumerate(normalized):
        index, length, _fuzzy_used = _find(base, old)
        if index == -1:
            msg = (
                f"Could not find the exact text in {path}. The old text must match exactly "
                "including all whitespace and newlines."
                if total == 1
                else f"Could not find edits[{i}] in {path}. The oldText must match exactly "
                "including all whitespace and newlines."
            )
            raise CodingToolError(msg)
        occurrences = _count(base, old)
        if occurrences > 1:
            msg = (
                f"Found {occurrences} occurrences of the text in {path}. The text must be "
                "unique. Please provide more context to make it unique."
                if total == 1
                else f"Found {occurrences} occurrences of edits[{i}] in {path}. Each oldText "
                "must be unique. Please provide more context to make it unique."
            )
            raise CodingToolError(msg)
        matches.append(_Match(i, index, length, new))
    matches.sort(key=lambda m: m.index)
    for previous, current in itertools.pairwise(matches):
        if previous.index + previous.length > current.index:
            msg = (
                f"edits[{previous.edit_index}] and edits[{current.edit_index}] overlap in "
                f"{path}. Merge them into one edit or target disjoint regions."
            )
            raise CodingToolError(msg)
    updated = (
        _apply_preserving_lines(content, base, matches) if used_fuzzy else _apply(base, matches)
    )
    if updated == content:
        msg = (
            f"No changes made to {path}. The replacement produced identical content. This "
            "might indicate an issue with special characters or the text not existing as "
            "expected."
            if total == 1
            else f"No changes made to {path}. The replacements produced identical content."
        )
        raise CodingToolError(msg)
    return updated
