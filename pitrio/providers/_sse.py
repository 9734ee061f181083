"""An incremental Server-Sent Events decoder for streaming model responses.

The decoder follows the SSE decoders that pi-ai's providers use (the OpenAI SDK's
``LineDecoder`` + ``SSEDecoder`` and pi-ai's own Anthropic parser), which agree on
everything the fixtures exercise:

- lines end at ``\\n``, ``\\r\\n`` or a lone ``\\r``; a ``\\r`` that ends one chunk and a
  ``\\n`` that starts the next are one line break (the Anthropic parser in pi-ai gets
  this wrong; we do not copy that);
- bytes are decoded as UTF-8 per complete line, so a multi-byte character may be split
  anywhere; invalid bytes become U+FFFD; a byte-order mark at the start of a line is
  dropped (like ``TextDecoder.decode`` in the OpenAI SDK);
- a line starting with ``:`` is a comment; ``field:value`` takes one optional space after
  the colon; a line without a colon is a field with an empty value;
- several ``data`` lines are joined with ``\\n``;
- a blank line dispatches the pending event if it has an event name or any ``data``
  line (so ``event: ping`` alone is an event with data ``""``);
- at the end of the body a pending event without its blank line is **dropped** (the
  OpenAI SDK and the SSE specification) unless the decoder was built with
  ``dispatch_at_eof=True`` (pi-ai's Anthropic parser).

``id`` and ``retry`` are decoded as the specification says (both persist from event to
event once set; ``retry`` must be all ASCII digits) though no provider uses them.

The cost is linear in the body: a line split over many chunks is kept as a list of
chunks and joined once, when its line break arrives. A line or an event longer than
``max_event_size`` (default :data:`DEFAULT_MAX_EVENT_SIZE`) raises
:class:`SSEEventTooLargeError`, so a server that never sends a line break cannot make
the client buffer without bound; providers end the stream with that error.

``httpx-sse`` was measured as an alternative (linear too: a 10 MB line in 0.02 s) and
not used: it reads ``response.aiter_lines()`` (no sync ``feed`` for the providers'
read loops, text decoding by the response charset rather than UTF-8 with replacement),
names an unnamed event ``"message"``, keeps no raw lines (pi-ai's Anthropic error text
quotes them), cannot dispatch a pending event at the end of the body, and has no size
limit.

Usage::

    async for sse in iter_sse(response.aiter_raw()):
        ...

or, to drive it by hand::

    decoder = SSEDecoder()
    for chunk in chunks:
        for sse in decoder.feed(chunk):
            ...
    for sse in decoder.flush():
        ...
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from typing import Final, final

import attrs

from .._errors import ProviderProtocolError, UsageError

__all__ = [
    "DEFAULT_MAX_EVENT_SIZE",
    "SSEDecoder",
    "SSEEventTooLargeError",
    "ServerSentEvent",
    "iter_sse",
]

DEFAULT_MAX_EVENT_SIZE: Final = 64 * 1024 * 1024
"""The default limit on one SSE line or event (64 MiB, in bytes of the line or
characters of the event's lines)."""


class SSEEventTooLargeError(ProviderProtocolError):
    """A line or an event of the SSE body is longer than the decoder's
    ``max_event_size``."""


@final
@attrs.frozen
class ServerSentEvent:
    """One dispatched SSE event.

    Attributes:
        event: the ``event`` field, ``None`` when the event had no ``event`` line.
        data: the ``data`` lines joined with ``\\n`` (``""`` when there were none).
        id: the last event id seen so far in the stream (it persists), or ``None``.
        retry: the last ``retry`` value seen so far (milliseconds), or ``None``.
        raw: every non-blank line of the event as decoded, comments included (pi-ai's
            Anthropic parser quotes them in its parse-error text).
    """

    event: str | None
    data: str
    id: str | None = None
    retry: int | None = None
    raw: tuple[str, ...] = attrs.field(default=(), eq=False, repr=False)


@final
class SSEDecoder:
    """Bytes in, :class:`ServerSentEvent` out; chunk boundaries may fall anywhere.

    Args:
        dispatch_at_eof: at :meth:`flush`, dispatch an event that was not closed by a
            blank line (pi-ai's Anthropic parser) instead of dropping it (OpenAI SDK).
        max_event_size: the longest line (bytes) or event (characters of its lines) the
            decoder accepts; beyond it :meth:`feed` raises
            :class:`SSEEventTooLargeError`.
    """

    __slots__ = (
        "_data",
        "_dispatch_at_eof",
        "_event",
        "_event_size",
        "_last_id",
        "_max_event_size",
        "_pending",
        "_pending_size",
        "_raw",
        "_retry",
        "_skip_lf",
    )

    def __init__(
        self, *, dispatch_at_eof: bool = False, max_event_size: int = DEFAULT_MAX_EVENT_SIZE
    ) -> None:
        if max_event_size < 1:
            msg = f"max_event_size must be a positive number of bytes, not {max_event_size!r}"
            raise UsageError(msg)
        self._dispatch_at_eof = dispatch_at_eof
        self._max_event_size = max_event_size
        # The bytes after the last line break seen, as chunks joined only once the
        # line ends (joining per chunk would copy a long line once per chunk).
        self._pending: list[bytes] = []
        self._pending_size = 0
        self._event_size = 0  # characters in the pending event's lines
        self._skip_lf = False  # the last chunk ended with "\r": drop a leading "\n"
        self._event: str | None = None
        self._data: list[str] = []
        self._raw: list[str] = []
        self._last_id: str | None = None
        self._retry: int | None = None

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """Decode one chunk of the body; returns the events it completed."""
        if not chunk:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if chunk[0] == 0x0A:
                chunk = chunk[1:]
                if not chunk:
                    return []
        end = max(chunk.rfind(b"\n"), chunk.rfind(b"\r"))
        if end < 0:
            self._pending.append(chunk)
            self._pending_size += len(chunk)
            if self._pending_size > self._max_event_size:
                self._too_large("a line")
            return []
        if self._pending:
            self._pending.append(chunk[: end + 1])
            complete = b"".join(self._pending)
        else:
            complete = chunk[: end + 1] if end + 1 < len(chunk) else chunk
        rest = chunk[end + 1 :]
        self._pending = [rest] if rest else []
        self._pending_size = len(rest)
        if complete[-1] == 0x0D:
            self._skip_lf = True
        # Line breaks are ASCII, so decoding the whole block before splitting it is the
        # same as decoding line by line.
        text = complete.decode("utf-8", "replace")
        if "\r" in text:
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        lines = text.split("\n")
        lines.pop()  # the block ends with a line break: the last piece is empty
        return self._lines(lines)

    def flush(self) -> list[ServerSentEvent]:
        """End of the body: decode a last unterminated line, then drop or dispatch the
        pending event (see ``dispatch_at_eof``). The decoder is reset afterwards."""
        events: list[ServerSentEvent] = []
        if self._pending:
            events = self._lines([b"".join(self._pending).decode("utf-8", "replace")])
            self._pending = []
            self._pending_size = 0
        self._skip_lf = False
        if self._dispatch_at_eof:
            event = self._dispatch()
            if event is not None:
                events.append(event)
        self._event = None
        self._data = []
        self._raw = []
        self._event_size = 0
        return events

    def _too_large(self, what: str) -> None:
        msg = (
            f"SSE stream error: {what} of the response body is longer than "
            f"max_event_size={self._max_event_size:,} bytes; the server sent an oversized "
            "or unterminated event (raise max_event_size if such events are expected)"
        )
        raise SSEEventTooLargeError(msg)

    def _lines(self, lines: list[str]) -> list[ServerSentEvent]:
        events: list[ServerSentEvent] = []
        for raw_line in lines:
            line = raw_line[1:] if raw_line[:1] == "\ufeff" else raw_line
            if not line:
                event = self._dispatch()
                if event is not None:
                    events.append(event)
                continue
            self._raw.append(line)
            self._event_size += len(line)
            if self._event_size > self._max_event_size:
                self._too_large("an event" if len(line) < self._event_size else "a line")
            if line[0] == ":":
                continue
            field, _, value = line.partition(":")
            if value and value[0] == " ":
                value = value[1:]
            if field == "data":
                self._data.append(value)
            elif field == "event":
                self._event = value
            elif field == "id":
                if "\0" not in value:
                    self._last_id = value
            elif field == "retry" and value.isascii() and value.isdigit():
                self._retry = int(value)
        return events

    def _dispatch(self) -> ServerSentEvent | None:
        if not self._event and not self._data:
            # Like both SDKs: nothing is reset, so comments before an empty event
            # stay in the next event's ``raw``.
            return None
        event = ServerSentEvent(
            self._event,
            "\n".join(self._data),
            self._last_id,
            self._retry,
            tuple(self._raw),
        )
        self._event = None
        self._data = []
        self._raw = []
        self._event_size = 0
        return event


async def iter_sse(
    chunks: AsyncIterable[bytes],
    *,
    dispatch_at_eof: bool = False,
    max_event_size: int = DEFAULT_MAX_EVENT_SIZE,
) -> AsyncIterator[ServerSentEvent]:
    """The events of an SSE body given as an async iterable of byte chunks.

    Args:
        chunks: the body, e.g. ``response.aiter_raw()`` (any chunking).
        dispatch_at_eof: see :class:`SSEDecoder`.
        max_event_size: see :class:`SSEDecoder`.
    """
    decoder = SSEDecoder(dispatch_at_eof=dispatch_at_eof, max_event_size=max_event_size)
    async for chunk in chunks:
        for event in decoder.feed(chunk):
            yield event
    for event in decoder.flush():
        yield event
