"""The webview protocol's messages: what a chat view needs to show an agent at work.

A chat view is a list of items (user, assistant, tool and notice bubbles), each with an
``id``. Three messages change it (the seeds' protocol):

* :class:`Append` adds an item (a new assistant bubble starts ``working``);
* :class:`AppendDelta` appends streamed text (or thinking) to an item;
* :class:`Replace` sets an item's final text, its state and, for a tool, its summary.

A fourth, :class:`Status`, says whether the agent is working (to show a stop button).
Each message is a frozen attrs class with :meth:`to_json`, a JSON object whose ``type``
is the message's wire name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Final, Literal, TypeAlias, final

import attrs

__all__ = [
    "Append",
    "AppendDelta",
    "ItemKind",
    "ItemState",
    "Replace",
    "Status",
    "UiMessage",
]

ItemKind: TypeAlias = Literal["user", "assistant", "tool", "notice"]
"""What an item of the chat view shows."""

ItemState: TypeAlias = Literal["working", "done", "error", "aborted"]
"""Where an item is: still streaming or running, or finished (well or not)."""


@final
@attrs.frozen(kw_only=True)
class Append:
    """A new item at the end of the view.

    Attributes:
        id: the item's id, unique within one :class:`~pitrio.ui.UiAdapter`.
        kind: ``user``, ``assistant``, ``tool`` or ``notice``.
        text: its text so far (empty for a new assistant bubble).
        title: a tool's name and main argument (``bash ls -la``); ``None`` otherwise.
        working: the item is still streaming (an assistant bubble) or running (a tool).
    """

    type: ClassVar[Literal["append"]] = "append"
    id: str
    kind: ItemKind
    text: str = ""
    title: str | None = None
    working: bool = False

    def to_json(self) -> dict[str, Any]:
        """The message as a JSON object."""
        data: dict[str, Any] = {"type": self.type, "id": self.id, "kind": self.kind}
        data["text"] = self.text
        if self.title is not None:
            data["title"] = self.title
        data["working"] = self.working
        return data


@final
@attrs.frozen(kw_only=True)
class AppendDelta:
    """Streamed text for an item.

    Attributes:
        id: the item.
        delta: the text to append.
        channel: ``text`` (the answer) or ``thinking`` (the model's reasoning).
    """

    type: ClassVar[Literal["appendDelta"]] = "appendDelta"
    id: str
    delta: str
    channel: Literal["text", "thinking"] = "text"

    def to_json(self) -> dict[str, Any]:
        """The message as a JSON object."""
        return {"type": self.type, "id": self.id, "delta": self.delta, "channel": self.channel}


_SLOT: Final = AppendDelta.__dict__
_SET_ID: Final[Callable[[AppendDelta, str], None]] = _SLOT["id"].__set__
_SET_DELTA: Final[Callable[[AppendDelta, str], None]] = _SLOT["delta"].__set__
_SET_CHANNEL: Final[Callable[[AppendDelta, str], None]] = _SLOT["channel"].__set__


def new_delta(item: str, delta: str, channel: Literal["text", "thinking"]) -> AppendDelta:
    """``AppendDelta(id=item, delta=delta, channel=channel)``, built by setting its slots
    directly: a stream makes one per delta, and the frozen class's ``__init__`` sets each
    field through ``object.__setattr__`` (about 2.5x the time). It has no validators or
    converters to skip; the value is the same (``tests/web/test_broadcast.py``)."""
    message = object.__new__(AppendDelta)
    _SET_ID(message, item)
    _SET_DELTA(message, delta)
    _SET_CHANNEL(message, channel)
    return message


@final
@attrs.frozen(kw_only=True)
class Replace:
    """An item's whole text and state, replacing what it showed.

    Sent when an assistant message ends (its final text), while a tool runs (its output
    so far) and when it ends (its output and a one-line summary).

    Attributes:
        id: the item.
        text: the item's full text.
        state: ``working`` (a tool's partial output), ``done``, ``error`` or ``aborted``.
        summary: a one-line summary: a tool's outcome, an error's message.
        thinking: an assistant message's full reasoning text, if it had any.
        diff: an ``edit`` tool's unified diff (its result's ``details.diff``), if any.
    """

    type: ClassVar[Literal["replace"]] = "replace"
    id: str
    text: str
    state: ItemState = "done"
    summary: str | None = None
    thinking: str | None = None
    diff: str | None = None

    @property
    def working(self) -> bool:
        """The item is still streaming or running."""
        return self.state == "working"

    def to_json(self) -> dict[str, Any]:
        """The message as a JSON object."""
        data: dict[str, Any] = {
            "type": self.type,
            "id": self.id,
            "text": self.text,
            "state": self.state,
            "working": self.working,
        }
        if self.summary is not None:
            data["summary"] = self.summary
        if self.thinking is not None:
            data["thinking"] = self.thinking
        if self.diff is not None:
            data["diff"] = self.diff
        return data


@final
@attrs.frozen(kw_only=True)
class Status:
    """Whether the agent is working (a prompt is running, retrying or compacting)."""

    type: ClassVar[Literal["status"]] = "status"
    working: bool

    def to_json(self) -> dict[str, Any]:
        """The message as a JSON object."""
        return {"type": self.type, "working": self.working}


UiMessage: TypeAlias = Append | AppendDelta | Replace | Status
"""Any message of the protocol."""
