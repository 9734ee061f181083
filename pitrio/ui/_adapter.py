"""Agent and harness events -> webview protocol messages, and the view they build."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any, Final, final

import attrs

from pitrio import (
    AgentEnd,
    AgentStart,
    AssistantMessage,
    ImageContent,
    MessageEnd,
    MessageStart,
    MessageUpdate,
    TextContent,
    TextDeltaEvent,
    ThinkingContent,
    ThinkingDeltaEvent,
    ToolCall,
    ToolExecutionEnd,
    ToolExecutionStart,
    ToolExecutionUpdate,
    ToolResult,
    ToolResultMessage,
    UserMessage,
)

from ._protocol import (
    Append,
    AppendDelta,
    ItemKind,
    ItemState,
    Replace,
    Status,
    UiMessage,
    new_delta,
)

__all__ = ["Transcript", "UiAdapter", "tool_title"]

_TITLE_LIMIT: Final = 120
_EXIT_LINE: Final = re.compile(r"Command exited with code (-?\d+)")
_SUMMARY_LIMIT: Final = 160


@final
class UiAdapter:
    """Maps Agent (and Harness) events to webview protocol messages.

    Pure: it keeps the ids of the items it created and does no I/O. Feed it every event
    in order, :meth:`feed` returns the messages for that event::

        adapter = UiAdapter(harness=True)
        harness.subscribe(lambda event: send_all(adapter.feed(event)))

    * a user message (the prompt, a steering or follow-up message) -> ``append`` (user);
    * an assistant message -> ``append`` (a working bubble) at its start, ``appendDelta``
      per text or thinking delta, ``replace`` with its final text (state ``done``,
      ``error`` or ``aborted``, the error as the summary) at its end;
    * a tool execution -> ``append`` (a working tool block titled with the tool and its
      main argument), ``replace`` with the output so far on each update, and a final
      ``replace`` with the output and a summary (``ok · 3 lines``, ``error: ...``);
    * compaction, retries and custom messages -> ``append`` (a notice);
    * ``status`` when the agent starts and stops working.

    Args:
        harness: the events come from a :class:`pitrio.harness.Harness`: the agent is
            idle only at ``settled`` (a retry or compaction may follow ``agent_end``).
            Otherwise it is idle at ``agent_end``.
    """

    __slots__ = ("_assistant", "_counter", "_harness", "_tools")

    def __init__(self, *, harness: bool = False) -> None:
        self._harness = harness
        self._counter = 0
        self._assistant: str | None = None
        self._tools: dict[str, str] = {}

    def new_id(self) -> str:
        """A fresh item id (for items an application adds itself)."""
        self._counter += 1
        return f"i{self._counter}"

    def feed(self, event: Any) -> list[UiMessage]:
        """The messages for one Agent or Harness event (often none)."""
        if isinstance(event, MessageUpdate):
            return self._update(event)
        if isinstance(event, MessageStart):
            return self._message_start(event.message)
        if isinstance(event, MessageEnd):
            return self._message_end(event.message)
        if isinstance(event, ToolExecutionStart):
            item = self.new_id()
            self._tools[event.tool_call_id] = item
            title = tool_title(event.tool_name, event.args)
            return [Append(id=item, kind="tool", title=title, working=True)]
        if isinstance(event, ToolExecutionUpdate):
            running = self._tools.get(event.tool_call_id)
            if running is None:
                return []
            return [Replace(id=running, text=result_text(event.partial_result), state="working")]
        if isinstance(event, ToolExecutionEnd):
            ended = self._tools.pop(event.tool_call_id, None)
            opened: list[UiMessage] = []
            if ended is None:  # a call resumed after a killed run: it ends with no start
                ended = self.new_id()
                title = tool_title(event.tool_name, {})
                opened.append(Append(id=ended, kind="tool", title=title, working=True))
            text = result_text(event.result)
            return [
                *opened,
                Replace(
                    id=ended,
                    text=text,
                    state="error" if event.is_error else "done",
                    summary=tool_summary(text, is_error=event.is_error),
                    diff=None if event.is_error else result_diff(event.result),
                )
            ]
        if isinstance(event, AgentStart):
            return [Status(working=True)]
        if isinstance(event, AgentEnd):
            self._assistant = None
            self._tools.clear()
            return [] if self._harness else [Status(working=False)]
        return self._harness_event(event)

    def feed_all(self, events: Iterable[Any]) -> list[UiMessage]:
        """The messages for several events, in order."""
        out: list[UiMessage] = []
        for event in events:
            out.extend(self.feed(event))
        return out

    def history(self, messages: Iterable[Any]) -> list[UiMessage]:
        """The messages showing an existing transcript (a resumed session's context).

        Each message is shown as it was when it ended: an assistant message's tool calls
        as tool blocks completed by their results (a call without a result stays
        ``aborted`` until its end comes, as when a killed run is resumed).
        """
        out: list[UiMessage] = []
        pending: dict[str, str] = {}
        for message in messages:
            if isinstance(message, ToolResultMessage):
                item = pending.pop(message.tool_call_id, None)
                if item is None:
                    continue
                text = result_text(message)
                out.append(
                    Replace(
                        id=item,
                        text=text,
                        state="error" if message.is_error else "done",
                        summary=tool_summary(text, is_error=message.is_error),
                        diff=None if message.is_error else result_diff(message),
                    )
                )
                continue
            out.extend(self._message_start(message))
            out.extend(self._message_end(message))
            if isinstance(message, AssistantMessage):
                for block in message.content:
                    if isinstance(block, ToolCall):
                        item = self.new_id()
                        pending[block.id] = item
                        title = tool_title(block.name, block.arguments)
                        out.append(Append(id=item, kind="tool", title=title, working=True))
        out.extend(
            Replace(id=item, text="", state="aborted", summary="no result (interrupted)")
            for item in pending.values()
        )
        self._tools.update(pending)  # a resumed call's end replaces its block
        return out

    # -- events ------------------------------------------------------------------------

    def _message_start(self, message: Any) -> list[UiMessage]:
        if isinstance(message, AssistantMessage):
            self._assistant = self.new_id()
            return [Append(id=self._assistant, kind="assistant", working=True)]
        if isinstance(message, UserMessage):
            return [Append(id=self.new_id(), kind="user", text=user_text(message))]
        if isinstance(message, ToolResultMessage):
            return []  # shown by its tool block
        notice = notice_text(message)
        if notice is None:
            return []
        return [Append(id=self.new_id(), kind="notice", text=notice)]

    def _message_end(self, message: Any) -> list[UiMessage]:
        if not isinstance(message, AssistantMessage) or self._assistant is None:
            return []
        item, self._assistant = self._assistant, None
        text = "".join(b.text for b in message.content if isinstance(b, TextContent))
        thinking = "".join(b.thinking for b in message.content if isinstance(b, ThinkingContent))
        state: ItemState = "done"
        summary: str | None = None
        if message.stop_reason == "error":
            state, summary = "error", message.error_message or "the request failed"
        elif message.stop_reason == "aborted":
            state, summary = "aborted", message.error_message or "aborted"
        elif message.stop_reason == "length":
            summary = "stopped: the answer reached the output token limit"
        return [
            Replace(id=item, text=text, state=state, summary=summary, thinking=thinking or None)
        ]

    def _update(self, event: MessageUpdate) -> list[UiMessage]:
        item = self._assistant
        if item is None:
            return []
        inner = event.assistant_message_event
        if isinstance(inner, TextDeltaEvent):
            return [new_delta(item, inner.delta, "text")]
        if isinstance(inner, ThinkingDeltaEvent):
            return [new_delta(item, inner.delta, "thinking")]
        return []

    def _harness_event(self, event: Any) -> list[UiMessage]:
        kind = getattr(event, "type", None)
        if kind == "settled":
            return [Status(working=False)] if self._harness else []
        if kind == "auto_retry_start":
            text = (
                f"Retrying in {event.delay:.1f} s (attempt {event.attempt} of "
                f"{event.max_attempts}): {event.error_message}"
            )
            return [Append(id=self.new_id(), kind="notice", text=text), Status(working=True)]
        if kind == "auto_retry_end" and not event.success:
            text = f"Retrying stopped: {event.final_error or 'no retry succeeded'}"
            return [Append(id=self.new_id(), kind="notice", text=text)]
        if kind == "compaction_start":
            text = f"Compacting the conversation ({event.reason})..."
            return [Append(id=self.new_id(), kind="notice", text=text), Status(working=True)]
        if kind == "compaction_end":
            if event.status == "completed":
                before = f" from ~{event.tokens_before} tokens" if event.tokens_before else ""
                text = f"Compacted the conversation{before}."
            elif event.status == "failed":
                text = f"Compaction failed: {event.error_message}"
            else:
                text = f"Compaction {event.status}."
            return [Append(id=self.new_id(), kind="notice", text=text)]
        return []


@attrs.define
class _Item:
    """One item of the view. Streamed text is kept as chunks and joined when read, so
    a long answer costs linear time (``str +=`` on an attribute copies every time)."""

    kind: ItemKind
    title: str | None
    chunks: list[str]
    state: ItemState
    summary: str | None = None
    diff: str | None = None
    thinking_chunks: list[str] = attrs.field(factory=list)

    @property
    def text(self) -> str:
        return _joined(self.chunks)

    @property
    def thinking(self) -> str:
        return _joined(self.thinking_chunks)

    @property
    def size(self) -> int:
        """Characters it takes to show."""
        return len(self.text) + len(self.thinking) + len(self.title or "") + len(self.summary or "")


def _joined(chunks: list[str]) -> str:
    if len(chunks) > 1:
        chunks[:] = ["".join(chunks)]
    return chunks[0] if chunks else ""


@final
class Transcript:
    """The chat view that a sequence of messages builds (pure).

    A server keeps one to bring a newly connected view up to date: :meth:`apply` every
    message it sends, and send :meth:`snapshot` to a new client. A long conversation's
    snapshot can be bounded to its tail (``limit``, ``max_chars``); the client then
    asks for older items as it needs them, and :meth:`earlier` gives them.

    Attributes:
        working: whether the agent is working (the last ``status``).
        version: counts the changes; equal versions are equal views (a server can
            cache a snapshot's JSON while it stays the same).
    """

    __slots__ = ("_ids", "_items", "_position", "version", "working")

    def __init__(self) -> None:
        self._items: dict[str, _Item] = {}
        self._ids: list[str] = []  # in order of appending
        self._position: dict[str, int] = {}
        self.working = False
        self.version = 0

    def __len__(self) -> int:
        return len(self._items)

    def apply(self, message: UiMessage) -> None:
        """Update the view with one message (unknown ids are ignored, as a view would)."""
        self.version += 1
        if type(message) is AppendDelta:  # a stream's many messages: checked first
            if (streamed := self._items.get(message.id)) is not None:
                if message.channel == "thinking":
                    streamed.thinking_chunks.append(message.delta)
                else:
                    streamed.chunks.append(message.delta)
            return
        if isinstance(message, Status):
            self.working = message.working
        elif isinstance(message, Append):
            state: ItemState = "working" if message.working else "done"
            if message.id not in self._items:
                self._position[message.id] = len(self._ids)
                self._ids.append(message.id)
            self._items[message.id] = _Item(message.kind, message.title, [message.text], state)
        elif (item := self._items.get(message.id)) is None:
            return
        else:
            item.chunks = [message.text]
            item.state = message.state
            item.summary = message.summary
            item.diff = message.diff
            if message.thinking is not None:
                item.thinking_chunks = [message.thinking]

    def apply_all(self, messages: Iterable[UiMessage]) -> None:
        """:meth:`apply` each message in order."""
        for message in messages:
            self.apply(message)

    def snapshot(
        self, *, limit: int | None = None, max_chars: int | None = None
    ) -> list[UiMessage]:
        """Messages that build this view from an empty one: per item an ``append`` and
        a ``replace`` with its current state, then the ``status``.

        Args:
            limit: at most this many items, the newest (default: all).
            max_chars: stop before an older item once the items' text reaches this many
                characters (the newest item is always given, however long).
        """
        out, _ = self.earlier(None, limit=limit, max_chars=max_chars)
        out.append(Status(working=self.working))
        return out

    def earlier(
        self, before: str | None, *, limit: int | None = None, max_chars: int | None = None
    ) -> tuple[list[UiMessage], int]:
        """The items just before the item ``before`` (the view's end for ``None``), as
        :meth:`snapshot` gives them (oldest first, without the ``status``), and how many
        items come before those. An unknown ``before`` gives none.

        Args:
            before: an item's id, or ``None``.
            limit: at most this many items (default: all).
            max_chars: as for :meth:`snapshot`.
        """
        end = len(self._ids) if before is None else self._position.get(before, 0)
        start = 0 if limit is None else max(0, end - max(limit, 0))
        if max_chars is not None:
            size = 0
            first = end
            while first > start:
                size += self._items[self._ids[first - 1]].size
                if size > max_chars and first < end:
                    break
                first -= 1
            start = first
        out: list[UiMessage] = []
        for item_id in self._ids[start:end]:
            item = self._items[item_id]
            working = item.state == "working"
            out.append(Append(id=item_id, kind=item.kind, title=item.title, working=working))
            out.append(
                Replace(
                    id=item_id,
                    text=item.text,
                    state=item.state,
                    summary=item.summary,
                    thinking=item.thinking or None,
                    diff=item.diff,
                )
            )
        return out, start

    def clear(self) -> None:
        """Forget every item (a new or another session)."""
        self._items.clear()
        self._ids.clear()
        self._position.clear()
        self.working = False
        self.version += 1


# -- text helpers -------------------------------------------------------------------------


def user_text(message: UserMessage) -> str:
    """A user message's text (images as ``[image]``)."""
    if isinstance(message.content, str):
        return message.content
    return "".join(b.text if isinstance(b, TextContent) else "[image]" for b in message.content)


def result_text(result: ToolResult | ToolResultMessage) -> str:
    """A tool result's text (images as ``[image]``)."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, TextContent):
            parts.append(block.text)
        elif isinstance(block, ImageContent):
            parts.append(f"[image {block.mime_type}]")
    return "\n".join(parts)


def result_diff(result: ToolResult | ToolResultMessage) -> str | None:
    """An ``edit`` result's unified diff (``details.diff``), or ``None``."""
    details = result.details
    diff = details.get("diff") if isinstance(details, dict) else None
    return diff if isinstance(diff, str) and diff else None


_MAIN_ARGUMENT: Final = ("command", "path", "pattern", "file_path", "query", "url")


def tool_title(name: str, args: Any) -> str:
    """A tool call in one line: its name and its main argument (``bash ls -la``)."""
    detail = ""
    if isinstance(args, dict):
        for key in _MAIN_ARGUMENT:
            value = args.get(key)
            if isinstance(value, str) and value:
                detail = value
                break
        else:
            if args:
                detail = json.dumps(args, ensure_ascii=False, separators=(",", ":"))
    detail = " ".join(detail.split())
    title = f"{name} {detail}" if detail else name
    return title if len(title) <= _TITLE_LIMIT else title[: _TITLE_LIMIT - 1] + "…"


def tool_summary(text: str, *, is_error: bool) -> str:
    """A tool's outcome in one line: ``ok · 3 lines``, or ``error:`` and the output's last
    line (where a traceback says what went wrong), with the exit code of a command."""
    if is_error:
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        exit_code = ""
        if lines and (match := _EXIT_LINE.fullmatch(lines[-1])):
            exit_code = f" (exit code {match.group(1)})"
            lines.pop()
        detail = lines[-1] if lines else ""
        summary = f"error: {detail}{exit_code}" if detail else f"error{exit_code}"
        if len(summary) > _SUMMARY_LIMIT:
            summary = summary[: _SUMMARY_LIMIT - 1] + "…"
        return summary
    count = len(text.splitlines())
    if count == 0:
        return "ok · no output"
    return f"ok · {count} line{'s' if count != 1 else ''}"


def notice_text(message: Any) -> str | None:
    """A line for a message of another role (a compaction summary, a bash execution)."""
    role = getattr(message, "role", None)
    if role == "compactionSummary":
        return "Earlier conversation (compacted): " + str(getattr(message, "summary", ""))
    if role == "branchSummary":
        return "Summary of another branch: " + str(getattr(message, "summary", ""))
    if role == "bashExecution":
        return f"$ {getattr(message, 'command', '')}\n{getattr(message, 'output', '')}".rstrip()
    if role == "custom":
        if not getattr(message, "display", True):
            return None
        content = getattr(message, "content", "")
        return content if isinstance(content, str) else None
    return None
