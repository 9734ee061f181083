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
from typing import final

import attrs

__all__ = ["SSEDecoder", "ServerSentEvent", "iter_sse"]


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
    """

    __slots__ = (
        "_buffer",
        "_data",
        "_dispatch_at_eof",
        "_event",
        "_last_id",
        "_raw",
        "_retry",
        "_skip_lf",
    )

    def __init__(self, *, dispatch_at_eof: bool = False) -> None:
        self._dispatch_at_eof = dispatch_at_eof
        self._buffer = b""  # bytes after the last line break seen
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
        buffer = self._buffer + chunk if self._buffer else chunk
        end = max(buffer.rfind(b"\n"), buffer.rfind(b"\r"))
        if end < 0:
            self._buffer = buffer
            return []
        complete = buffer[: end + 1]
        self._buffer = buffer[end + 1 :]
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
        if self._buffer:
            events = self._lines([self._buffer.decode("utf-8", "replace")])
            self._buffer = b""
        self._skip_lf = False
        if self._dispatch_at_eof:
            event = self._dispatch()
            if event is not None:
                events.append(event)
        self._event = None
        self._data = []
        self._raw = []
        return events

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
        return event


async def iter_sse(
    chunks: AsyncIterable[bytes], *, dispatch_at_eof: bool = False
) -> AsyncIterator[ServerSentEvent]:
    """The events of an SSE body given as an async iterable of byte chunks.

    Args:
        chunks: the body, e.g. ``response.aiter_raw()`` (any chunking).
        dispatch_at_eof: see :class:`SSEDecoder`.
    """
    decoder = SSEDecoder(dispatch_at_eof=dispatch_at_eof)
    async for chunk in chunks:
        for event in decoder.feed(chunk):
            yield event
    for event in decoder.flush():
        yield event
