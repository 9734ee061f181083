"""What compaction and branch summaries share: the files a conversation touched, and
the conversation as the summary prompt quotes it.

Reproduces Pi's ``harness/compaction/utils.js`` (pi-agent-core 0.85.0): the file
operations (``createFileOps``, ``extractFileOpsFromMessage``, ``computeFileLists``,
``formatFileOperations``) and ``serializeConversation``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, final

import attrs

from pitrio import AgentMessage, AssistantMessage, TextContent, ThinkingContent, ToolCall

from ._js_text import content_text, js_len, js_slice, json_stringify

__all__ = ["FileOperations", "format_file_operations", "serialize_conversation"]


# -- file operations ----------------------------------------------------------------------


@final
@attrs.define
class FileOperations:
    """Paths touched by ``read``, ``write`` and ``edit`` tool calls."""

    read: set[str] = attrs.field(factory=set)
    written: set[str] = attrs.field(factory=set)
    edited: set[str] = attrs.field(factory=set)

    def add_from(self, message: AgentMessage) -> None:
        """Record the paths of an assistant message's tool calls."""
        if not isinstance(message, AssistantMessage):
            return
        for block in message.content:
            if not isinstance(block, ToolCall) or not isinstance(block.arguments, Mapping):
                continue
            path = block.arguments.get("path")
            if not isinstance(path, str) or not path:
                continue
            if block.name == "read":
                self.read.add(path)
            elif block.name == "write":
                self.written.add(path)
            elif block.name == "edit":
                self.edited.add(path)

    def add_details(self, details: Any) -> None:
        """Carry over the lists of an earlier compaction's or branch summary's details."""
        if not isinstance(details, Mapping):
            return
        for key, target in (("readFiles", self.read), ("modifiedFiles", self.edited)):
            paths = details.get(key)
            if isinstance(paths, list):
                target.update(p for p in paths if isinstance(p, str))

    def file_lists(self) -> tuple[list[str], list[str]]:
        """``(read_only, modified)``, each sorted; a modified file is not listed as read."""
        modified = self.edited | self.written
        return sorted(self.read - modified), sorted(modified)


def format_file_operations(read_files: list[str], modified_files: list[str]) -> str:
    sections = []
    if read_files:
        sections.append("<read-files>\n" + "\n".join(read_files) + "\n</read-files>")
    if modified_files:
        sections.append("<modified-files>\n" + "\n".join(modified_files) + "\n</modified-files>")
    if not sections:
        return ""
    return "\n\n" + "\n\n".join(sections)


# -- serialising a conversation for the summary prompt ------------------------------------

_TOOL_RESULT_MAX_CHARS: Final = 2000


def _truncate_for_summary(text: str, max_chars: int) -> str:
    length = js_len(text)
    if length <= max_chars:
        return text
    return f"{js_slice(text, max_chars)}\n\n[... {length - max_chars} more characters truncated]"


def serialize_conversation(messages: Iterable[AgentMessage]) -> str:
    """LLM messages as the plain text the summary prompt quotes (Pi's format:
    ``[User]: ...``, ``[Assistant thinking]: ...``, ``[Assistant]: ...``,
    ``[Assistant tool calls]: name(k=json, ...)``, ``[Tool result]: ...`` cut at 2,000
    characters)."""
    parts: list[str] = []
    for message in messages:
        role = message.role
        if role == "user":
            text = content_text(message.content, "")
            if text:
                parts.append(f"[User]: {text}")
        elif role == "assistant":
            thinking = [b.thinking for b in message.content if isinstance(b, ThinkingContent)]
            calls = [
                f"{b.name}("
                + ", ".join(f"{k}={json_stringify(v)}" for k, v in b.arguments.items())
                + ")"
                for b in message.content
                if isinstance(b, ToolCall)
            ]
            if thinking:
                parts.append("[Assistant thinking]: " + "\n".join(thinking))
            if any(isinstance(b, TextContent) for b in message.content):
                parts.append(f"[Assistant]: {content_text(message.content)}")
            if calls:
                parts.append("[Assistant tool calls]: " + "; ".join(calls))
        elif role == "toolResult":
            text = content_text(message.content, "")
            if text:
                parts.append(
                    f"[Tool result]: {_truncate_for_summary(text, _TOOL_RESULT_MAX_CHARS)}"
                )
    return "\n\n".join(parts)
