"""Pi's JSON event lines (``--mode json``, and the events of ``--mode rpc``).

:class:`PiEvents` turns harness events into the ``JsonAgentSessionEvent`` lines Pi's
coding agent writes (``dist/modes/json-event.js``, ``docs/json.md``):

* ``message_update`` is delta-only: ``{"type", "usage", "assistantMessageEvent"}``,
  without the cumulative ``message`` and ``partial`` (a ``toolcall_start`` carries the
  call's ``id`` and ``toolName``), so a stream costs what its deltas cost;
* ``agent_end`` carries ``willRetry``, the harness's ``settled`` is ``agent_settled``,
  compaction is ``compaction_start`` / ``compaction_end`` with its ``reason`` (manual
  ones included), and a queued message's delivery is announced by ``queue_update``;
* an assistant ``message_start`` is written with the next event of its message, so it
  carries the ``responseId`` of the response's first chunk, as Pi's does.

:func:`dumps` writes JSON as ``JSON.stringify`` does (compact, ``1.0`` as ``1``).
"""

from __future__ import annotations

import datetime
import json
import math
import uuid
from collections.abc import Callable
from typing import Any, Final

from pitrio import (
    AgentEnd,
    AssistantMessage,
    ImageContent,
    MessageEnd,
    MessageStart,
    MessageUpdate,
    TurnEnd,
    UserMessage,
    wire,
)
from pitrio.harness import (
    AutoRetryEnd,
    AutoRetryStart,
    CompactionEnd,
    CompactionEntry,
    CompactionStart,
    Harness,
    RecoveryEnd,
    RecoveryStart,
    SavePoint,
    Session,
    SessionError,
    Settled,
    estimate_tokens,
    is_retryable,
)

from ._app import App, open_interrupts, run_once
from ._args import EXIT_INTERRUPTED, EXIT_OK

__all__ = [
    "ALREADY_COMPACTED",
    "NOTHING_TO_COMPACT",
    "PiEvents",
    "compaction_error",
    "compaction_result",
    "dumps",
    "pi_message",
    "pi_messages",
    "run_json",
    "session_header",
]

NOTHING_TO_COMPACT: Final = "Nothing to compact (session too small)"
ALREADY_COMPACTED: Final = "Already compacted"
AUTO_COMPACTION_FAILED: Final = {
    "threshold": "Auto-compaction failed: ",
    "overflow": "Context overflow recovery failed: ",
}

_USAGE_ORDER: Final = (
    "input",
    "output",
    "cacheRead",
    "cacheWrite",
    "cacheWrite1h",
    "reasoning",
    "totalTokens",
    "cost",
)


def _js_number(value: float) -> str:
    """``String(value)`` as JavaScript writes a number."""
    if math.isnan(value) or math.isinf(value):
        return "null"
    if value == int(value) and abs(value) < 1e21:
        return str(int(value))
    text = repr(value)
    mantissa, _, exponent = text.partition("e")
    if not exponent:
        return text
    digits = mantissa.replace(".", "").lstrip("-").rstrip("0") or "0"
    exp = int(exponent)
    sign = "-" if value < 0 else ""
    if -7 < exp < 0:
        return f"{sign}0.{'0' * (-exp - 1)}{digits}"
    if 0 <= exp < 21:
        whole = digits.ljust(exp + 1, "0")
        head, tail = whole[: exp + 1], whole[exp + 1 :]
        return f"{sign}{head}.{tail}" if tail else f"{sign}{head}"
    frac = digits[1:]
    return f"{sign}{digits[0]}{'.' + frac if frac else ''}e{'+' if exp > 0 else '-'}{abs(exp)}"


class _Raw(float):
    """A float already written as JavaScript writes it (see :func:`_plain`)."""

    __slots__ = ("text",)
    text: str

    def __repr__(self) -> str:
        return self.text


def _plain(value: Any) -> Any:
    """``value`` with floats as JavaScript writes them: whole ones become ints, the
    few others that Python writes differently (``1e-05``) are kept as :class:`_Raw`."""
    if isinstance(value, float):
        if value == value and not math.isinf(value) and value == int(value):
            return int(value) if abs(value) < 1e21 else value
        text = repr(value)
        if "e" in text or math.isnan(value) or math.isinf(value):
            raw = _Raw(value)
            raw.text = _js_number(value)
            return raw
        return value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _has_raw(value: Any) -> bool:
    if isinstance(value, _Raw):
        return True
    if isinstance(value, dict):
        return any(_has_raw(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_raw(v) for v in value)
    return False


class _RawEncoder(json.JSONEncoder):
    """The pure-Python encoder, which writes a float with ``repr`` (so :class:`_Raw`
    keeps its JavaScript text)."""

    def iterencode(self, o: Any, _one_shot: bool = False) -> Any:
        return json.encoder._make_iterencode(  # type: ignore[attr-defined]  # stable private helper
            {},
            self.default,
            json.encoder.py_encode_basestring,
            None,
            repr,
            ":",
            ",",
            False,
            False,
            True,
        )(o, 0)


def dumps(value: Any) -> str:
    """``JSON.stringify(value)``: compact, keys in order, non-ASCII kept, numbers as
    JavaScript writes them."""
    value = _plain(value)
    if _has_raw(value):
        return "".join(_RawEncoder().iterencode(value))
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _usage(data: Any) -> Any:
    """A usage object in Pi's key order (``reasoning`` before ``totalTokens``)."""
    if not isinstance(data, dict) or ("reasoning" not in data and "cacheWrite1h" not in data):
        return data
    ordered = {k: data[k] for k in _USAGE_ORDER if k in data}
    ordered.update((k, v) for k, v in data.items() if k not in ordered)
    return ordered


_BASH_ORDER: Final = (
    "role",
    "command",
    "output",
    "exitCode",
    "cancelled",
    "truncated",
    "fullOutputPath",
    "timestamp",
    "excludeFromContext",
)


def pi_message(message: Any) -> dict[str, Any]:
    """A message in Pi's wire form, its keys in the order Pi's objects get them
    (``usage.reasoning`` before ``totalTokens``; ``errorMessage``, set last, after
    ``responseId``)."""
    data: dict[str, Any] = wire.unstructure(message)
    if "usage" in data:
        data["usage"] = _usage(data["usage"])
    if "errorMessage" in data and "responseId" in data:
        data["errorMessage"] = data.pop("errorMessage")
    if data.get("role") == "bashExecution":
        data = {k: data[k] for k in _BASH_ORDER if k in data} | data
    return data


def pi_messages(messages: Any) -> list[dict[str, Any]]:
    return [pi_message(m) for m in messages]


def _iso(ms: int) -> str:
    when = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def session_header(session: Session | None, cwd: str) -> dict[str, Any]:
    """The header line Pi's json mode starts with (``sessionManager.getHeader()``):
    Pi's session format 3, also for ``--no-session`` (an in-memory session's)."""
    if session is not None:
        session_id, created = session.id, session.created_at
    else:
        session_id = _uuid7()
        created = int(datetime.datetime.now(datetime.UTC).timestamp() * 1000)
    return {
        "type": "session",
        "version": 3,
        "id": session_id,
        "timestamp": _iso(created),
        "cwd": cwd,
    }


def _uuid7() -> str:
    """A UUID v7 (time-ordered), as Pi's session ids are."""
    ms = int(datetime.datetime.now(datetime.UTC).timestamp() * 1000)
    rand = uuid.uuid4().int & ((1 << 74) - 1)
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | (rand >> 62) << 64 | 0b10 << 62
    value |= rand & ((1 << 62) - 1)
    return str(uuid.UUID(int=value))


def first_kept_entry_id(session: Session | None, entry_id: str | None) -> str | None:
    """Pi's ``firstKeptEntryId`` of a compaction: the entry whose message starts the
    retained tail (pitrio keeps the tail's messages in the compaction entry)."""
    if session is None or entry_id is None:
        return None
    try:
        entry = session.get_entry(entry_id)
    except SessionError:  # a vanished entry: no id to report
        return None
    if not isinstance(entry, CompactionEntry) or not entry.retained_tail:
        return None
    first = entry.retained_tail[0]
    for candidate in session.get_branch(entry.parent_id):
        if getattr(candidate, "message", None) == first:
            return candidate.id
    return None


def compaction_result(session: Session | None, end: CompactionEnd) -> dict[str, Any]:
    """Pi's ``CompactionResult`` of a completed compaction."""
    entry = None
    if session is not None and end.entry_id is not None:
        try:
            entry = session.get_entry(end.entry_id)
        except SessionError:  # a vanished entry: no usage to report
            entry = None
    result: dict[str, Any] = {
        "summary": end.summary,
        "firstKeptEntryId": first_kept_entry_id(session, end.entry_id),
        "tokensBefore": end.tokens_before,
    }
    if session is not None:
        messages = session.build_context().messages
        result["estimatedTokensAfter"] = sum(estimate_tokens(m) for m in messages)
    usage = getattr(entry, "usage", None)
    if usage is not None:
        result["usage"] = _usage(wire.unstructure(usage))
    if end.details is not None:
        result["details"] = end.details
    return result


def compaction_error(end: CompactionEnd, session: Session | None) -> str:
    """The error Pi's manual ``compact`` throws for a compaction that did not complete."""
    if end.status == "declined":
        # The branch's last entry (structured at the open), not the branch read back.
        leaf = session.leaf_id if session is not None else None
        if (
            session is not None
            and leaf is not None
            and isinstance(session.get_entry(leaf), CompactionEntry)
        ):
            return ALREADY_COMPACTED
        return NOTHING_TO_COMPACT
    if end.status == "aborted":
        return "Compaction cancelled"
    return end.error_message or f"compaction {end.status}"


class PiEvents:
    """Harness events to Pi's JSON event lines, for one output stream.

    ``write`` gets each line's object. The queue lists (``steering``, ``follow_up``)
    mirror what was queued by text, for ``queue_update`` (Pi's ``_steeringMessages``).
    """

    def __init__(
        self,
        write: Callable[[dict[str, Any]], None],
        *,
        harness: Callable[[], Harness],
        session: Callable[[], Session | None],
    ) -> None:
        self._write = write
        self._harness = harness
        self._session = session
        self.steering: list[str] = []
        self.follow_up: list[str] = []
        self.retry_attempt = 0
        self.retrying = False  # in a retry's back-off (abort_retry)
        self.compacting = False
        self.settling = False
        """The run has ended (``agent_end`` without a retry) and is not yet settled: its
        last writes and hooks are finishing, no turn will follow."""
        self._held: dict[str, Any] | None = None

    def queue_update(self) -> None:
        steering, follow_up = list(self.steering), list(self.follow_up)
        self._write({"type": "queue_update", "steering": steering, "followUp": follow_up})

    def __call__(self, event: Any) -> None:
        held = self._held
        if held is not None:
            self._held = None
            response_id = getattr(getattr(event, "message", None), "response_id", None)
            if response_id is not None and "responseId" not in held["message"]:
                held["message"]["responseId"] = response_id
            self._write(held)
        if isinstance(event, MessageUpdate):
            self._write(self._update(event))
            return
        if isinstance(event, MessageStart):
            message = event.message
            if isinstance(message, UserMessage):
                self._delivered(message)
            start: dict[str, Any] = {"type": "message_start", "message": pi_message(message)}
            if isinstance(message, AssistantMessage) and message.stop_reason == "pending":
                self._held = start
                return
            self._write(start)
            return
        data = self._convert(event)
        if data is not None:
            self._write(data)

    def _delivered(self, message: UserMessage) -> None:
        """A queued message arrived: drop it from its queue list (Pi matches by text)."""
        text = "".join(getattr(block, "text", "") for block in message.content)
        if not text:
            return
        if text in self.steering:
            self.steering.remove(text)
            self.queue_update()
        elif text in self.follow_up:
            self.follow_up.remove(text)
            self.queue_update()

    def _update(self, event: MessageUpdate) -> dict[str, Any]:
        inner = event.assistant_message_event
        partial = inner.partial
        data: dict[str, Any] = {"type": inner.type, "contentIndex": inner.content_index}
        kind = inner.type
        if kind.endswith("_delta"):
            data["delta"] = inner.delta  # type: ignore[union-attr]  # every *_delta has one
        elif kind in ("text_end", "thinking_end"):
            data["content"] = inner.content  # type: ignore[union-attr]  # both have one
        elif kind == "toolcall_end":
            data["toolCall"] = wire.unstructure(inner.tool_call)  # type: ignore[union-attr]
        elif kind == "toolcall_start":
            call = partial.content[inner.content_index]
            data["id"] = getattr(call, "id", "")
            data["toolName"] = getattr(call, "name", "")
        return {
            "type": "message_update",
            "usage": _usage(wire.unstructure(partial.usage)),
            "assistantMessageEvent": data,
        }

    def _convert(self, event: Any) -> dict[str, Any] | None:
        if isinstance(event, AgentEnd):
            will_retry = self._will_retry(event)
            self.settling = not will_retry
            return {
                "type": "agent_end",
                "messages": pi_messages(event.messages),
                "willRetry": will_retry,
            }
        if isinstance(event, Settled):
            self.retrying = False
            self.settling = False
            return {"type": "agent_settled"}
        if isinstance(event, (SavePoint, RecoveryStart, RecoveryEnd)):
            return None  # Pi's coding agent has no recovery frame (its lanes recover silently)
        if isinstance(event, CompactionStart):
            self.compacting = True
            return {"type": "compaction_start", "reason": event.reason}
        if isinstance(event, CompactionEnd):
            self.compacting = False
            data: dict[str, Any] = {"type": "compaction_end", "reason": event.reason}
            if event.status == "completed":
                data["result"] = compaction_result(self._session(), event)
            data["aborted"] = event.status == "aborted"
            data["willRetry"] = event.will_retry
            if event.status in ("declined", "failed") and event.reason == "manual":
                data["errorMessage"] = (
                    f"Compaction failed: {compaction_error(event, self._session())}"
                )
            elif event.status == "failed":
                # Pi's coding agent's texts for a compaction it started on its own
                prefix = AUTO_COMPACTION_FAILED.get(event.reason, "")
                data["errorMessage"] = prefix + (event.error_message or "compaction failed")
            return data
        if isinstance(event, AutoRetryStart):
            self.retry_attempt = event.attempt
            self.retrying = True
            return {
                "type": "auto_retry_start",
                "attempt": event.attempt,
                "maxAttempts": event.max_attempts,
                "delayMs": round(event.delay * 1000),
                "errorMessage": event.error_message,
            }
        if isinstance(event, AutoRetryEnd):
            self.retry_attempt = 0
            self.retrying = False
            data = {"type": "auto_retry_end", "success": event.success, "attempt": event.attempt}
            if event.final_error is not None:
                data["finalError"] = event.final_error
            return data
        if getattr(event, "type", None) == "agent_start":
            self.retrying = False
        if isinstance(event, MessageEnd):
            return {"type": "message_end", "message": pi_message(event.message)}
        if isinstance(event, TurnEnd):
            return {
                "type": "turn_end",
                "message": pi_message(event.message),
                "toolResults": pi_messages(event.tool_results),
            }
        out: dict[str, Any] = wire.unstructure(event)
        kind = getattr(event, "type", None)
        if isinstance(kind, str) and "type" not in out:
            out = {"type": kind, **out}
        return out

    def _will_retry(self, event: AgentEnd) -> bool:
        """Pi's ``_willRetryAfterAgentEnd``: an automatic retry follows this run."""
        harness = self._harness()
        settings = harness.retry
        if not settings.enabled or self.retry_attempt >= settings.max_retries:
            return False
        for message in reversed(event.messages):
            if isinstance(message, AssistantMessage):
                return is_retryable(message, harness.model.context_window)
        return False


async def run_json(app: App, prompt: str, images: tuple[ImageContent, ...] = ()) -> int:
    """``--mode json``: the session header, then every event of the prompt (with the
    ``@file`` images) and of the further command-line messages, one line each.

    The exit status is 0 whatever the run ended in (Pi's json mode), 130 when
    interrupted.
    """
    out = app.out

    def write(data: dict[str, Any]) -> None:
        out.write(dumps(data) + "\n")
        out.flush()

    write(session_header(app.session, app.cwd))
    app.subscribe(PiEvents(write, harness=lambda: app.harness, session=lambda: app.session))
    async with open_interrupts() as interrupts:
        status = await run_once(app, prompt, interrupts, images)
        for message in app.settings.messages:  # Pi's further messages, one after another
            if status == EXIT_INTERRUPTED:
                break
            status = await run_once(app, message, interrupts)
    return EXIT_INTERRUPTED if status == EXIT_INTERRUPTED else EXIT_OK
