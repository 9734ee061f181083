"""The provider fixture player's scripted HTTP server (``PROVIDERS.md`` §2).

A small HTTP/1.1 server on Trio: it records every request (headers filtered as the
oracle does, the body as JSON), answers each with the fixture's next scripted response
(status, headers, body parts with delays and splits, a hang or a connection reset),
and reports each request's number so that the run can fire an abort on it. A WebSocket
upgrade (openai-codex-responses) is a request too, recorded as ``{type: "websocket", n,
path, headers, message}``: a scripted status other than 101 refuses it; otherwise, once
the client's first message came, each body part is one text message (a ``data`` part as
its JSON), as ``tests/providers/node/google_trace.mjs`` plays it for pi-ai.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import re
import socket
import struct
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, final

import trio

__all__ = ["ScriptedServer"]

_HEADER_DENYLIST: Final = frozenset(
    {
        "host",
        "connection",
        "content-length",
        "accept-encoding",
        "accept-language",
        "sec-fetch-mode",
        "transfer-encoding",
        "keep-alive",
    }
)
_PI_USER_AGENT: Final = re.compile(r"^pi \(.*\)$")


def _event_stream_message(headers: Mapping[str, str], payload: bytes) -> bytes:
    """One binary AWS event-stream message: prelude (total and header lengths, their
    CRC32), string headers (value type 7), payload, CRC32 of all that."""
    head = b"".join(
        bytes([len(name.encode())])
        + name.encode()
        + b"\x07"
        + struct.pack(">H", len(value.encode()))
        + value.encode()
        for name, value in headers.items()
    )
    prelude = struct.pack(">II", 16 + len(head) + len(payload), len(head))
    message = prelude + struct.pack(">I", zlib.crc32(prelude)) + head + payload
    return message + struct.pack(">I", zlib.crc32(message))


def _is_event_stream_part(part: object) -> bool:
    return isinstance(part, dict) and ("awsEvent" in part or "awsException" in part)


def _part_bytes(part: str | Mapping[str, Any]) -> bytes:
    if isinstance(part, str):
        return part.encode()
    if _is_event_stream_part(part):
        kind = "event" if "awsEvent" in part else "exception"
        headers = {
            f":{kind}-type": str(part.get("awsEvent", part.get("awsException"))),
            ":content-type": "application/json",
            ":message-type": kind,
        }
        payload = json.dumps(part["data"], separators=(",", ":"), ensure_ascii=False)
        return _event_stream_message(headers, payload.encode())
    if "text" in part:
        return str(part["text"]).encode()
    if "hex" in part:
        return bytes.fromhex(re.sub(r"\s+", "", part["hex"]))
    event = f"event: {part['event']}\n" if "event" in part else ""
    data = json.dumps(part["data"], separators=(",", ":"), ensure_ascii=False)
    return f"{event}data: {data}\n\n".encode()


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


_REASONS: Final = {  # Node's http.STATUS_CODES (pi-messages shows them)
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
}


class _RequestReader:
    """Reads HTTP/1.1 requests (Content-Length or chunked bodies) from a stream."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buffer = b""

    async def _fill(self) -> bool:
        data = await self.stream.receive_some(65536)
        if not data:
            return False
        self.buffer += data
        return True

    async def _read_until(self, marker: bytes) -> bytes | None:
        while marker not in self.buffer:
            if not await self._fill():
                return None
        head, _, self.buffer = self.buffer.partition(marker)
        return head

    async def _read_exact(self, n: int) -> bytes | None:
        while len(self.buffer) < n:
            if not await self._fill():
                return None
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data

    async def read_request(self) -> tuple[str, str, dict[str, str], bytes] | None:
        head = await self._read_until(b"\r\n\r\n")
        if head is None:
            return None
        lines = head.decode("latin-1").split("\r\n")
        method, target, *_ = lines[0].split(" ")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            key = name.strip().lower()
            value = value.strip()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        body = b""
        if headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                size_line = await self._read_until(b"\r\n")
                if size_line is None:
                    return None
                size = int(size_line.split(b";")[0], 16)
                if size == 0:
                    await self._read_until(b"\r\n")
                    break
                data = await self._read_exact(size + 2)
                if data is None:
                    return None
                body += data[:-2]
        elif "content-length" in headers:
            data = await self._read_exact(int(headers["content-length"]))
            if data is None:
                return None
            body = data
        return method, target, headers, body


@final
class ScriptedServer:
    """The scripted HTTP server of one fixture run."""

    def __init__(
        self,
        responses: Sequence[Mapping[str, Any]],
        records: list[dict[str, Any]],
        problems: list[str],
        on_request: Callable[[int], None],
    ) -> None:
        self.responses = responses
        self.records = records
        self.problems = problems
        self.on_request = on_request
        self.count = 0

    async def handle(self, stream: trio.SocketStream) -> None:
        reader = _RequestReader(stream)
        try:
            while True:
                request = await reader.read_request()
                if request is None:
                    return
                if not await self._serve(stream, reader, *request):
                    return
        except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
            return
        finally:
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(stream)

    def _record(self, method: str, target: str, headers: Mapping[str, str], body: bytes) -> int:
        record = self._new_record("request", target, headers, method=method)
        text = body.decode("utf-8", "replace")
        if text:
            try:
                record["body"] = json.loads(text)
            except ValueError:
                record["bodyText"] = text
        self.on_request(record["n"])
        return int(record["n"])

    def _new_record(
        self, kind: str, target: str, headers: Mapping[str, str], **fields: str
    ) -> dict[str, Any]:
        """Count a request and record it (``kind``: ``request`` or ``websocket``)."""
        self.count += 1
        record: dict[str, Any] = {"type": kind, "n": self.count, **fields, "path": target}
        record["headers"] = _headers(headers)
        self.records.append(record)
        return record

    async def _serve(
        self,
        stream: trio.SocketStream,
        reader: _RequestReader,
        method: str,
        target: str,
        headers: Mapping[str, str],
        body: bytes,
    ) -> bool:
        """Answer one request; returns whether the connection may serve another."""
        if headers.get("upgrade", "").lower() == "websocket":
            await self._serve_websocket(stream, reader, target, headers)
            return False
        n = self._record(method, target, headers, body)
        if n > len(self.responses):
            self.problems.append(
                f"request {n} arrived but only {len(self.responses)} response(s) are scripted"
            )
            payload = b'{"error":{"message":"provider-oracle: unscripted request"}}'
            await stream.send_all(
                b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(payload), payload)
            )
            return False
        spec = self.responses[n - 1]
        if spec.get("headersDelayMs") and await self._client_gone_within(
            stream, reader, spec["headersDelayMs"] / 1000
        ):
            return False
        status = spec.get("status", 200)
        given: Mapping[str, str] = spec.get("headers", {})
        out_headers: dict[str, str] = {}
        if not any(k.lower() == "content-type" for k in given):
            event_stream = any(_is_event_stream_part(p) for p in spec.get("body", ()))
            out_headers["content-type"] = (
                "application/json"
                if "json" in spec or status >= 300
                else "application/vnd.amazon.eventstream"
                if event_stream
                else "text/event-stream"
            )
        out_headers.update(given)
        head = f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in out_headers.items())
        head += "transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
        await stream.send_all(head.encode("latin-1"))
        parts: list[Any] = (
            [json.dumps(spec["json"], separators=(",", ":"), ensure_ascii=False)]
            if "json" in spec
            else list(spec.get("body", ()))
        )
        hang_after = spec.get("hangAfter")
        for index, part in enumerate(parts):
            if hang_after == index:
                await self._wait_client_gone(stream, reader)
                return False
            if (
                isinstance(part, dict)
                and part.get("delayMs")
                and await self._client_gone_within(stream, reader, part["delayMs"] / 1000)
            ):
                return False
            data = _part_bytes(part)
            split = part.get("split") if isinstance(part, dict) else None
            step = split or len(data) or 1
            for offset in range(0, len(data), step):
                if offset > 0:
                    await trio.sleep(0.002)
                await stream.send_all(_chunk(data[offset : offset + step]))
        if hang_after is not None and hang_after == len(parts):
            await self._wait_client_gone(stream, reader)
            return False
        if spec.get("end") == "reset":
            await trio.sleep(0.005)
            _reset(stream)
            return False
        await stream.send_all(b"0\r\n\r\n")
        return False

    async def _serve_websocket(
        self,
        stream: trio.SocketStream,
        reader: _RequestReader,
        target: str,
        headers: Mapping[str, str],
    ) -> None:
        record = self._new_record("websocket", target, headers)
        n = self.count
        self.on_request(n)
        if n > len(self.responses):
            self.problems.append(
                f"request {n} arrived but only {len(self.responses)} response(s) are scripted"
            )
            return
        spec = self.responses[n - 1]
        if spec.get("headersDelayMs"):
            await trio.sleep(spec["headersDelayMs"] / 1000)
        status = spec.get("status", 101)
        if status != 101:
            refusal = f"HTTP/1.1 {status} Refused\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            await stream.send_all(refusal.encode())
            return
        key = headers.get("sec-websocket-key", "") + _WEBSOCKET_GUID
        accept = base64.b64encode(
            hashlib.sha1(key.encode()).digest()
        ).decode()  # the protocol's hash
        await stream.send_all(
            b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\n"
            b"connection: Upgrade\r\nsec-websocket-accept: %s\r\n\r\n" % accept.encode()
        )
        first = await _next_text(stream, reader)
        if first is None:
            return
        try:
            record["message"] = json.loads(first)
        except ValueError:
            record["messageText"] = first
        parts = list(spec.get("body", ()))
        hang_after = spec.get("hangAfter")
        for index, part in enumerate(parts):
            if hang_after == index:
                break
            if isinstance(part, dict) and part.get("delayMs"):
                await trio.sleep(part["delayMs"] / 1000)
            if isinstance(part, dict) and "data" in part:
                text = json.dumps(part["data"], separators=(",", ":"), ensure_ascii=False)
            else:
                text = _part_bytes(part).decode("utf-8", "replace")
            await stream.send_all(_frame(1, text.encode()))
        else:
            if spec.get("end") == "reset":
                await trio.sleep(0.005)
                _reset(stream)
                return
        await _next_text(stream, reader, until_close=True)

    async def _wait_client_gone(self, stream: trio.SocketStream, reader: _RequestReader) -> None:
        while True:
            data = await stream.receive_some(65536)
            if not data:
                return
            reader.buffer += data

    async def _client_gone_within(
        self, stream: trio.SocketStream, reader: _RequestReader, seconds: float
    ) -> bool:
        with trio.move_on_after(seconds):
            await self._wait_client_gone(stream, reader)
            return True
        return False


def _headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers of a request record, filtered as the oracle does."""
    return {
        k: ("pi (<platform>)" if k == "user-agent" and _PI_USER_AGENT.match(v) else v)
        for k, v in headers.items()
        if k not in _HEADER_DENYLIST and not k.startswith("x-stainless-")
    }


_WEBSOCKET_GUID: Final = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def _frame(opcode: int, payload: bytes) -> bytes:
    """An unmasked, final WebSocket frame (a server's)."""
    size = len(payload)
    if size < 126:
        head = struct.pack("!BB", 0x80 | opcode, size)
    elif size < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 126, size)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, size)
    return head + payload


async def _next_text(
    stream: trio.SocketStream, reader: _RequestReader, *, until_close: bool = False
) -> str | None:
    """The client's next text message (``None``: it closed; its close is answered).
    With ``until_close``, messages are read and dropped until the close."""
    while True:
        head = await reader._read_exact(2)
        if head is None:
            return None
        opcode, size = head[0] & 0x0F, head[1] & 0x7F
        if size == 126:
            extra = await reader._read_exact(2)
            size = struct.unpack("!H", extra)[0] if extra else 0
        elif size == 127:
            extra = await reader._read_exact(8)
            size = struct.unpack("!Q", extra)[0] if extra else 0
        mask = await reader._read_exact(4) if head[1] & 0x80 else b"\0\0\0\0"
        payload = await reader._read_exact(size)
        if mask is None or payload is None:
            return None
        data = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        if opcode == 8:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await stream.send_all(_frame(8, data[:2]))
            return None
        if opcode == 1 and not until_close:
            return data.decode("utf-8", "replace")


def _reset(stream: trio.SocketStream) -> None:
    """Destroy the TCP connection (RST) without finishing the chunked body."""
    sock = stream.socket
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()
