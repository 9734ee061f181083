"""The incremental SSE decoder: line ends, splits anywhere, fields, end of body."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from hypothesis import given, strategies as st

from pitrio.providers._sse import ServerSentEvent, SSEDecoder, SSEEventTooLargeError, iter_sse


def decode(chunks: list[bytes], *, dispatch_at_eof: bool = False) -> list[ServerSentEvent]:
    decoder = SSEDecoder(dispatch_at_eof=dispatch_at_eof)
    events: list[ServerSentEvent] = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    events.extend(decoder.flush())
    return events


def bytewise(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


def test_basic_fields_and_multiline_data() -> None:
    events = decode([b"event: delta\ndata: one\ndata: two\n\ndata:{}\n\n"])
    assert events == [ServerSentEvent("delta", "one\ntwo"), ServerSentEvent(None, "{}")]


def test_one_optional_space_after_the_colon() -> None:
    assert decode([b"data:  x\n\n"]) == [ServerSentEvent(None, " x")]


def test_comments_are_skipped_but_kept_in_raw() -> None:
    (event,) = decode([b": keep-alive\nevent: e\ndata: x\n\n"])
    assert event == ServerSentEvent("e", "x")
    assert event.raw == (": keep-alive", "event: e", "data: x")


def test_a_comment_only_block_dispatches_nothing() -> None:
    assert decode([b": ping\n\n: ping\n\n"]) == []


def test_field_without_colon_has_an_empty_value() -> None:
    assert decode([b"data\ndata\n\n"]) == [ServerSentEvent(None, "\n")]
    assert decode([b"nonsense-without-colon\n\n"]) == []


def test_event_without_data_is_dispatched_with_empty_data() -> None:
    assert decode([b"event: ping\n\n"]) == [ServerSentEvent("ping", "")]


def test_id_persists_and_retry_must_be_digits() -> None:
    events = decode([b"id: 7\nretry: 3000\ndata: a\n\ndata: b\n\nretry: x\nid: 8\0\ndata: c\n\n"])
    assert [(e.data, e.id, e.retry) for e in events] == [
        ("a", "7", 3000),
        ("b", "7", 3000),
        ("c", "7", 3000),
    ]


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
def test_every_line_ending(newline: bytes) -> None:
    data = newline.join([b"event: x", b"data: 1", b"", b"data: 2", b"", b""])
    assert decode([data]) == [ServerSentEvent("x", "1"), ServerSentEvent(None, "2")]


def test_crlf_split_across_chunks_is_one_line_break() -> None:
    # pi-ai's Anthropic parser would see an empty line here and dispatch early.
    events = decode([b"event: a\r", b"\ndata: 1\r\n\r", b"\n"])
    assert events == [ServerSentEvent("a", "1")]


def test_utf8_split_inside_a_character() -> None:
    data = "data: €😀 ü\n\n".encode()
    assert decode(bytewise(data)) == [ServerSentEvent(None, "€😀 ü")]


def test_invalid_utf8_becomes_replacement_characters() -> None:
    assert decode([b"data: a\xffb\n\n"]) == [ServerSentEvent(None, "a\ufffdb")]


def test_byte_order_mark_is_dropped() -> None:
    assert decode([b"\xef\xbb", b"\xbfdata: x\n\n"]) == [ServerSentEvent(None, "x")]


def test_missing_final_blank_line_drops_the_event_by_default() -> None:
    assert decode([b"data: 1\n\ndata: 2\n"]) == [ServerSentEvent(None, "1")]
    assert decode([b"data: 1\n\ndata: 2"]) == [ServerSentEvent(None, "1")]


def test_dispatch_at_eof_keeps_the_last_event() -> None:
    expected = [ServerSentEvent(None, "1"), ServerSentEvent("e", "2")]
    assert decode([b"data: 1\n\nevent: e\ndata: 2"], dispatch_at_eof=True) == expected
    assert decode([b"data: 1\n\nevent: e\ndata: 2\r"], dispatch_at_eof=True) == expected


def test_events_come_out_as_soon_as_their_blank_line_arrives() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: 1\n") == []
    assert decoder.feed(b"\r") == [ServerSentEvent(None, "1")]
    assert decoder.feed(b"\ndata: 2\n\n") == [ServerSentEvent(None, "2")]


async def test_iter_sse_over_async_chunks() -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for piece in (b"da", b"ta: x\r", b"\n\r\ndata: y\n", b"\n"):
            yield piece

    assert [e async for e in iter_sse(chunks())] == [
        ServerSentEvent(None, "x"),
        ServerSentEvent(None, "y"),
    ]


# -- any split of a valid stream gives the same events ---------------------------------

_field_text = st.text(
    alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\r\n"),
    max_size=12,
)


@st.composite
def sse_streams(draw: st.DrawFn) -> tuple[bytes, list[ServerSentEvent]]:
    """A byte stream with random line endings, comments and a BOM, and its events."""
    previous = ""

    def newline() -> str:
        # "\r" then "\n" would be one line break, not two: avoid generating that.
        nonlocal previous
        choices = ["\r\n", "\r"] if previous == "\r" else ["\n", "\r\n", "\r"]
        previous = draw(st.sampled_from(choices))
        return previous

    out = ["\ufeff"] if draw(st.booleans()) else []
    events = []
    for _ in range(draw(st.integers(0, 5))):
        lines = []
        if draw(st.booleans()):
            lines.append(": " + draw(_field_text))
        name = draw(st.none() | _field_text.filter(bool))
        if name is not None:
            lines.append(f"event: {name}")
        data = draw(st.lists(_field_text, min_size=1, max_size=3))
        lines.extend(f"data: {d}" for d in data)
        events.append(ServerSentEvent(name, "\n".join(data)))
        out.extend(line + newline() for line in lines)
        out.append(newline())
    return "".join(out).encode(), events


@given(sse_streams(), st.data())
def test_any_split_yields_the_same_events(
    stream: tuple[bytes, list[ServerSentEvent]], data: st.DataObject
) -> None:
    payload, expected = stream
    cuts = sorted(data.draw(st.lists(st.integers(0, len(payload)), max_size=12)))
    chunks = [payload[a:b] for a, b in zip([0, *cuts], [*cuts, len(payload)], strict=True)]
    assert decode([payload]) == expected
    assert decode(chunks) == expected


@given(sse_streams())
def test_byte_by_byte_yields_the_same_events(stream: tuple[bytes, list[ServerSentEvent]]) -> None:
    payload, expected = stream
    assert decode(bytewise(payload)) == expected


def test_a_line_split_over_many_chunks_is_joined_once_its_break_arrives() -> None:
    line = b"data: " + b"x" * 5000
    chunks = [line[i : i + 7] for i in range(0, len(line), 7)] + [b"\n", b"\n"]
    assert decode(chunks) == [ServerSentEvent(None, "x" * 5000)]


def test_an_unterminated_line_longer_than_the_limit_is_an_error() -> None:
    decoder = SSEDecoder(max_event_size=100)
    assert decoder.feed(b"data: " + b"x" * 60) == []
    with pytest.raises(SSEEventTooLargeError, match=r"a line .* max_event_size=100 bytes"):
        decoder.feed(b"x" * 60)


def test_a_long_line_inside_one_chunk_is_an_error() -> None:
    decoder = SSEDecoder(max_event_size=100)
    with pytest.raises(SSEEventTooLargeError, match="a line"):
        decoder.feed(b"data: " + b"x" * 200 + b"\n\n")


def test_an_event_of_many_short_lines_longer_than_the_limit_is_an_error() -> None:
    decoder = SSEDecoder(max_event_size=100)
    for _ in range(6):
        decoder.feed(b"data: 0123456789\n")
    with pytest.raises(SSEEventTooLargeError, match="an event"):
        decoder.feed(b"data: 0123456789\n")


def test_events_up_to_the_limit_pass_and_the_count_restarts_per_event() -> None:
    decoder = SSEDecoder(max_event_size=20)
    events: list[ServerSentEvent] = []
    for _ in range(50):
        events.extend(decoder.feed(b"data: 0123456789\n\n"))
    assert events == [ServerSentEvent(None, "0123456789")] * 50


def test_max_event_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_event_size must be a positive number"):
        SSEDecoder(max_event_size=0)
