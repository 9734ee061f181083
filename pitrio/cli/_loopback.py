"""A ``--base-url`` server on this machine that is not running: said at once, not retried.

The harness retries a connection error (Pi's auto-retry: 3 more attempts, 2 s, 4 s, 8 s
apart), which is right for a remote service that blinked. For a server on a loopback
address a refused connection means nothing listens on that port: the server was not
started, or was started on another port, and waiting 14 s to print the same error four
times only hides that. So before each request to a loopback base URL the command line
tries the port; when the connection is refused the request is not sent, the answer is
an error that names the address and asks whether the server is running, and that answer
is not retried. Every other failure, and every non-loopback URL, goes
through unchanged, retries included. This is the command line's choice: the providers
and the harness behave as Pi's do.
"""

from __future__ import annotations

import ipaddress
import socket
import time
import urllib.parse
from typing import Final, final

import attrs
import trio

from pitrio import (
    AssistantMessage,
    AssistantMessageEventStream,
    Context,
    ErrorEvent,
    Model,
    StreamFn,
    StreamOptions,
)
from pitrio.harness import Harness, RetrySettings

__all__ = ["RefusingStreamFn", "loopback_address", "refused_text"]

_PROBE_SECONDS: Final = 2.0  # a loopback connect answers at once; this only bounds a stall


def loopback_address(base_url: str | None) -> tuple[str, int] | None:
    """``(host, port)`` of ``base_url`` when its host is a loopback address (or
    ``localhost``), else ``None``."""
    if not base_url:
        return None
    parts = urllib.parse.urlsplit(base_url)
    host = parts.hostname
    if host is None:
        return None
    if host.lower() != "localhost":
        try:
            if not ipaddress.ip_address(host).is_loopback:
                return None
        except ValueError:  # a name: not known to be this machine
            return None
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    return host, port


def refused_text(host: str, port: int, base_url: str) -> str:
    """The error a refused loopback connection becomes."""
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return f"nothing is listening on {where}: is the server running? (--base-url {base_url})"


async def _refused(host: str, port: int) -> bool:
    """Whether every address of ``host`` refuses a connection to ``port``."""
    try:
        infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return False
    refused = False
    for family, kind, proto, _, address in infos:
        sock = trio.socket.socket(family, kind, proto)
        try:
            with trio.move_on_after(_PROBE_SECONDS):
                await sock.connect(address)
            return False  # something listens (or the connect stalled): let the request go
        except ConnectionRefusedError:
            refused = True
        except OSError:
            return False  # not a plain refusal: the provider reports it (and retries)
        finally:
            sock.close()
    return refused


@final
class RefusingStreamFn:
    """``stream_fn``, except that a request to a loopback base URL whose port refuses
    connections is answered at once with :func:`refused_text` as its error, and
    :attr:`harness` (the one using this stream function) does not retry that answer.

    The retry policy reads error texts (pi-ai's patterns, which also match digits such
    as the ``500`` of port 5000), so the refusal turns the harness's retry off until the
    next request that reaches a server, rather than relying on its text.
    """

    def __init__(self, stream_fn: StreamFn) -> None:
        self.stream_fn = stream_fn
        self.harness: Harness | None = None
        self._retry: RetrySettings | None = None  # the harness's, while turned off

    async def __call__(
        self, model: Model, context: Context, options: StreamOptions
    ) -> AssistantMessageEventStream:
        address = loopback_address(model.base_url)
        if address is not None and await _refused(*address):
            self._hold_retry()
            message = AssistantMessage(
                api=model.api,
                provider=model.provider,
                model=model.id,
                stop_reason="error",
                error_message=refused_text(*address, model.base_url or ""),
                timestamp=int(time.time() * 1000),
            )
            stream = AssistantMessageEventStream()
            stream.push(ErrorEvent(reason="error", error=message))
            return stream
        self._release_retry()
        returned = self.stream_fn(model, context, options)
        if isinstance(returned, AssistantMessageEventStream):
            return returned
        return await returned

    def _hold_retry(self) -> None:
        harness = self.harness
        if harness is not None and self._retry is None:
            self._retry = harness.retry
            harness.retry = attrs.evolve(harness.retry, enabled=False)

    def _release_retry(self) -> None:
        harness, retry = self.harness, self._retry
        if harness is not None and retry is not None:
            harness.retry = retry
        self._retry = None
