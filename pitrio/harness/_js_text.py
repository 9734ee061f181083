"""JavaScript string arithmetic: what Pi's length limits and token estimates count.

Pi measures text with ``String.length`` (UTF-16 code units), cuts it with ``slice`` and
serialises with ``JSON.stringify``; compaction's token estimates, the summary prompt's
truncation and the skill name/description limits (``_resources``) count the same way,
so the same text gives the same numbers as in Pi. Also pi-ai's ``contentText``.
"""

from __future__ import annotations

import json
from typing import Any

from pitrio import TextContent

__all__ = ["content_text", "js_len", "js_slice", "json_stringify"]


def js_len(text: str) -> int:
    """``String.length``: UTF-16 code units."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le")) // 2


def js_slice(text: str, end: int) -> str:
    """``text.slice(0, end)`` in UTF-16 code units, except that a surrogate pair cut in
    half is dropped rather than left as a lone surrogate (which cannot be sent as UTF-8)."""
    if text.isascii():
        return text[:end]
    return text.encode("utf-16-le", "surrogatepass")[: 2 * end].decode("utf-16-le", "ignore")


def json_stringify(value: Any) -> str:
    """``JSON.stringify`` (compact, non-ASCII kept), or ``"[unserializable]"``."""
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        return "[unserializable]"


def content_text(content: Any, separator: str = "\n") -> str:
    """pi-ai's ``contentText``: the text blocks joined."""
    if isinstance(content, str):
        return content
    return separator.join(b.text for b in content if isinstance(b, TextContent))
