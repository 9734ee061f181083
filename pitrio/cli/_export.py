"""A session as one HTML page: ``pitrio --export FILE [OUT]`` and ``/export [OUT]``.

Pi writes its own viewer (``core/export-html/``: the session's JSON inside a page of
Pi's scripts, markdown and highlighting, a tree view); pitrio writes a static page, no
scripts, of the current branch: user messages, answers (text, thinking, tool calls), tool
results, compaction summaries, every text HTML-escaped. The file name is Pi's
(``pitrio-session-<file name>.html`` in the current directory unless OUT is given).
"""

from __future__ import annotations

import datetime
import html
import json
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Final, TextIO

import trio

from pitrio import (
    AgentMessage,
    AssistantMessage,
    ImageContent,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from pitrio.harness import JsonlSessionStore, PiSessionStore, Session, SessionError

from ._args import EXIT_OK
from ._errors import CliUsageError

if TYPE_CHECKING:
    from ._setup import AppSettings

__all__ = ["default_export_path", "export_session", "render_html", "write_export"]

_STYLE: Final = """
body { font: 15px/1.5 system-ui, sans-serif; max-width: 60rem; margin: 2rem auto;
       padding: 0 1rem; color: #1d1d1f; background: #fafafa; }
header { border-bottom: 1px solid #ddd; margin-bottom: 1rem; color: #555; }
.msg { border-radius: 6px; padding: .6rem .9rem; margin: .7rem 0; background: #fff;
       border: 1px solid #e3e3e3; }
.user { background: #eef4ff; }
.role { font-size: 12px; color: #777; text-transform: uppercase; letter-spacing: .05em; }
pre { white-space: pre-wrap; word-break: break-word; margin: .3rem 0;
      font: 13px/1.4 ui-monospace, monospace; }
.thinking pre { color: #777; font-style: italic; }
.tool { border-left: 3px solid #c8a; }
.error { border-left: 3px solid #d33; }
.summary { background: #f6f6e8; }
"""


def default_export_path(session_file: str | None, session_id: str) -> str:
    """Pi's default: ``<app>-session-<session file name without .jsonl>.html``."""
    base = os.path.basename(session_file or "").removesuffix(".jsonl") or session_id
    return f"pitrio-session-{base}.html"


def _text_blocks(content: str | Iterable[object]) -> str:
    if isinstance(content, str):
        return f"<pre>{html.escape(content)}</pre>"
    parts = []
    for block in content:
        if isinstance(block, TextContent):
            parts.append(f"<pre>{html.escape(block.text)}</pre>")
        elif isinstance(block, ImageContent):
            mime = html.escape(block.mime_type, quote=True)
            if mime in ("image/png", "image/jpeg", "image/gif", "image/webp"):
                data = html.escape(block.data, quote=True)
                parts.append(
                    f'<img alt="image" style="max-width:100%" src="data:{mime};base64,{data}">'
                )
    return "".join(parts)


def _box(kind: str, who: str, inner: str) -> str:
    return f'<div class="{kind}"><div class="role">{html.escape(who)}</div>{inner}</div>'


def _message(message: AgentMessage) -> str:
    if isinstance(message, UserMessage):
        return _box("msg user", "user", _text_blocks(message.content))
    if isinstance(message, AssistantMessage):
        parts = []
        for block in message.content:
            if isinstance(block, TextContent):
                parts.append(f"<pre>{html.escape(block.text)}</pre>")
            elif isinstance(block, ThinkingContent):
                parts.append(
                    f'<div class="thinking"><pre>{html.escape(block.thinking)}</pre></div>'
                )
            elif isinstance(block, ToolCall):
                args = json.dumps(block.arguments, ensure_ascii=False, indent=1)
                call = html.escape(f"{block.name} {args}")
                parts.append(f'<div class="tool"><pre>{call}</pre></div>')
        if message.error_message:
            parts.append(
                f'<div class="error"><pre>{html.escape(message.error_message)}</pre></div>'
            )
        return _box("msg", f"assistant · {message.provider}/{message.model}", "".join(parts))
    if isinstance(message, ToolResultMessage):
        kind = "msg tool error" if message.is_error else "msg tool"
        return _box(kind, f"{message.tool_name} result", _text_blocks(message.content))
    summary = getattr(message, "summary", None)
    role = str(getattr(message, "role", "message"))
    if isinstance(summary, str):
        return _box("msg summary", role, f"<pre>{html.escape(summary)}</pre>")
    return _box("msg", role, "")


def render_html(session: Session) -> str:
    """The page for ``session``'s current branch."""
    created = datetime.datetime.fromtimestamp(session.created_at / 1000, datetime.UTC)
    title = session.name or f"Session {session.id}"
    body = "\n".join(_message(m) for m in session.build_context().messages)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>\n"
        f"<header><h1>{html.escape(title)}</h1><p>{html.escape(session.id)} · "
        f"{created:%Y-%m-%d %H:%M} UTC · {html.escape(session.cwd)}</p></header>\n"
        f"{body}\n</body></html>\n"
    )


async def write_export(session: Session, path: str) -> str:
    """Write the page to ``path``; returns it."""
    await trio.Path(path).write_text(render_html(session), encoding="utf-8")
    return path


async def export_session(settings: AppSettings, out: TextIO) -> int:
    """``--export FILE [OUT]``: Pi's ``exportFromFile``, then ``Exported to: OUT``.

    Raises:
        CliUsageError: the file is missing or is no session file.
    """
    source = os.path.abspath(settings.export or "")  # noqa: ASYNC240  # no I/O
    if not await trio.Path(source).is_file():
        msg = f"--export: File not found: {source}"
        raise CliUsageError(msg)
    try:
        try:
            session = await PiSessionStore(os.path.dirname(source)).open(source, read_only=True)
        except SessionError:
            session = await JsonlSessionStore(os.path.dirname(source)).open(source, read_only=True)
    except SessionError as exc:
        msg = f"--export {source}: not a session file ({exc})"
        raise CliUsageError(msg) from None
    try:
        target = settings.prompt or default_export_path(source, session.id)
        await write_export(session, target)
    finally:
        await session.close()
    out.write(f"Exported to: {target}\n")
    return EXIT_OK
