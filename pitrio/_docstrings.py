"""Docstrings to tool descriptions: the summary, and one description per parameter.

Three styles are read, as griffe (pydantic-ai's parser) and ``docstring_parser`` read
them: Google (``Args:`` / ``Arguments:`` / ``Parameters:`` sections of ``name (type):
text`` entries), NumPy (a ``Parameters`` header underlined with dashes, ``name : type``
entries with indented text) and Sphinx (``:param name: text`` or ``:param type name:
text`` fields). The description is the text before the first section or field;
sections other than parameters (``Returns:``, ``Raises:``, ``Example:`` ...) are left
out. A small parser instead of a dependency: these three forms are all that tool
docstrings use, and the kernel keeps its dependency list short.
"""

from __future__ import annotations

import inspect
import re
from typing import Final

__all__ = ["parse_docstring"]

_GOOGLE_PARAMS: Final = frozenset(
    {"args", "arguments", "parameters", "params", "keyword args", "keyword arguments"}
)
_GOOGLE_SECTION = re.compile(r"^([A-Za-z][A-Za-z ]*):\s*$")
_GOOGLE_ENTRY = re.compile(r"^(\*{0,2}\w+)\s*(?:\(([^)]*)\))?\s*:\s*(.*)$")
_NUMPY_ENTRY = re.compile(r"^(\*{0,2}\w+)\s*(?::\s*(.*))?$")
_SPHINX_FIELD = re.compile(r"^:(\w+)(?:\s+([^:]*?))?\s*:\s*(.*)$")
_KNOWN_GOOGLE: Final = frozenset(
    {
        *_GOOGLE_PARAMS,
        "returns",
        "return",
        "yields",
        "yield",
        "raises",
        "raise",
        "example",
        "examples",
        "note",
        "notes",
        "attributes",
        "see also",
        "warning",
        "warnings",
        "todo",
        "references",
    }
)


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """``(description, {parameter: description})`` of a docstring (empty when none)."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    params: dict[str, str] = {}
    description_end = len(lines)
    index = 0
    while index < len(lines):
        line = lines[index]
        stripped = line.strip()
        header = _GOOGLE_SECTION.match(line)
        if header is not None and header.group(1).lower() in _KNOWN_GOOGLE:
            description_end = min(description_end, index)
            index = _google_section(lines, index, header.group(1).lower(), params)
            continue
        if (
            stripped
            and index + 1 < len(lines)
            and set(lines[index + 1].strip()) == {"-"}
            and not line.startswith((" ", "\t"))
        ):
            description_end = min(description_end, index)
            index = _numpy_section(lines, index, params)
            continue
        field = _SPHINX_FIELD.match(stripped)
        if field is not None and not line.startswith((" ", "\t")):
            description_end = min(description_end, index)
            index = _sphinx_field(lines, index, field, params)
            continue
        index += 1
    description = "\n".join(lines[:description_end]).strip()
    return description, params


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _join(parts: list[str]) -> str:
    return "\n".join(part.strip() for part in parts if part.strip())


def _google_section(lines: list[str], start: int, name: str, params: dict[str, str]) -> int:
    """Read one Google section from its header; returns the index after it."""
    index = start + 1
    entry_indent: int | None = None
    current: list[str] | None = None
    current_name = ""
    while index < len(lines):
        line = lines[index]
        if line.strip() and _indent(line) == 0:
            break  # the next section (or text) at the margin
        if not line.strip():
            index += 1
            continue
        if entry_indent is None:
            entry_indent = _indent(line)
        if _indent(line) <= entry_indent:
            match = _GOOGLE_ENTRY.match(line.strip())
            if current is not None and current_name:
                params[current_name] = _join(current)
            current, current_name = None, ""
            if match is not None and name in _GOOGLE_PARAMS:
                current_name = match.group(1).lstrip("*")
                current = [match.group(3)]
        elif current is not None:
            current.append(line)
        index += 1
    if current is not None and current_name:
        params[current_name] = _join(current)
    return index


def _numpy_section(lines: list[str], start: int, params: dict[str, str]) -> int:
    """Read one NumPy section (header, dashes, entries); returns the index after it."""
    is_params = lines[start].strip().lower() in {"parameters", "other parameters"}
    index = start + 2
    current: list[str] | None = None
    current_name = ""
    while index < len(lines):
        line = lines[index]
        if (
            line.strip()
            and index + 1 < len(lines)
            and set(lines[index + 1].strip()) == {"-"}
            and _indent(line) == 0
        ):
            break  # the next section's header
        if line.strip() and _indent(line) == 0:
            if current is not None and current_name:
                params[current_name] = _join(current)
            current, current_name = None, ""
            match = _NUMPY_ENTRY.match(line.strip())
            if match is not None and is_params:
                current_name, current = match.group(1).lstrip("*"), []
        elif current is not None:
            current.append(line)
        index += 1
    if current is not None and current_name:
        params[current_name] = _join(current)
    return index


def _sphinx_field(
    lines: list[str], start: int, field: re.Match[str], params: dict[str, str]
) -> int:
    """Read one ``:field ...: text`` (with indented continuation lines)."""
    index = start + 1
    parts = [field.group(3)]
    while index < len(lines) and lines[index].strip() and _indent(lines[index]) > 0:
        parts.append(lines[index])
        index += 1
    kind, argument = field.group(1), field.group(2) or ""
    if kind in {"param", "parameter", "arg", "argument", "key", "keyword"} and argument:
        params[argument.split()[-1].lstrip("*")] = _join(parts)
    return index
