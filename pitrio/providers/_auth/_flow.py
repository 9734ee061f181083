"""What every OAuth flow shares: the login interaction, PKCE, the device-code poll,
the loopback callback server and the pasted-redirect parser (pi-ai's
``auth/types.ts``, ``oauth/pkce.js``, ``oauth/device-code.js``, ``oauth/oauth-page.js``
and the ``parseAuthorizationInput`` of its flows)."""

from __future__ import annotations

import base64
import hashlib
import html
import json
import os
import secrets
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from typing import Final, Generic, Literal, Protocol, TypeAlias, TypeVar, final

import attrs
import httpx
import trio

from ..._messages import JSONValue
from ._errors import LoginError
from ._store import OAuthCredential

__all__ = [
    "AuthEvent",
    "AuthPrompt",
    "LoginInteraction",
    "ModelAuth",
    "OAuthFlow",
]

T = TypeVar("T")


@final
@attrs.frozen(kw_only=True)
class AuthPrompt:
    """A question a login asks (pi-ai's ``AuthPrompt``): ``kind`` ``"text"``,
    ``"secret"``, ``"select"`` (answer with an option's id) or ``"manual_code"`` (a
    pasted code or redirect URL, asked while the browser callback is awaited: the
    login cancels the prompt when the callback comes first)."""

    kind: Literal["text", "secret", "select", "manual_code"]
    message: str
    placeholder: str | None = None
    options: tuple[tuple[str, str], ...] = ()
    """``(id, label)`` pairs of a ``select``."""


@final
@attrs.frozen(kw_only=True)
class AuthEvent:
    """What a login tells the person (pi-ai's ``AuthEvent``): ``kind`` ``"auth_url"``
    (open ``url``), ``"device_code"`` (enter ``user_code`` at ``url``), ``"progress"``
    or ``"info"`` (``message``)."""

    kind: Literal["info", "auth_url", "device_code", "progress"]
    message: str = ""
    url: str = ""
    instructions: str | None = None
    user_code: str = ""
    interval_seconds: float | None = None
    expires_in_seconds: float | None = None


class LoginInteraction(Protocol):
    """The person at a login (pi-ai's ``AuthInteraction``); cancelling the login is
    cancelling the task that runs it."""

    async def prompt(self, prompt: AuthPrompt) -> str:
        """The answer to ``prompt``; may be cancelled (a ``manual_code`` prompt is,
        when the browser callback arrives first)."""
        ...

    def notify(self, event: AuthEvent) -> None:
        """Show ``event`` (a URL to open, a device code, progress)."""
        ...


@final
@attrs.frozen(kw_only=True)
class ModelAuth:
    """What a credential adds to a request (pi-ai's ``ModelAuth``): the API key, extra
    headers, or another base URL (GitHub Copilot's per-account endpoint)."""

    api_key: str | None = None
    headers: Mapping[str, str] | None = None
    base_url: str | None = None


class OAuthFlow(Protocol):
    """One provider's subscription login (pi-ai's ``OAuthAuth``)."""

    @property
    def name(self) -> str:
        """Display name, e.g. ``"Anthropic (Claude Pro/Max)"``."""
        ...

    async def login(
        self, client: httpx.AsyncClient, interaction: LoginInteraction
    ) -> OAuthCredential:
        """Run the login; raises :class:`LoginError` when it does not complete."""
        ...

    async def refresh(
        self, client: httpx.AsyncClient, credential: OAuthCredential
    ) -> OAuthCredential:
        """New tokens for ``credential`` (a network call); raises on failure."""
        ...

    def to_auth(self, credential: OAuthCredential) -> ModelAuth:
        """The request auth a valid credential gives (no side effects)."""
        ...


def now_ms() -> int:
    """pi-ai's ``Date.now()``: milliseconds since the epoch."""
    return int(time.time() * 1000)


# -- PKCE ---------------------------------------------------------------------------


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def generate_pkce() -> tuple[str, str]:
    """``(verifier, challenge)``: 32 random bytes base64url, and its SHA-256 (S256)."""
    verifier = _b64url(secrets.token_bytes(32))
    return verifier, _b64url(hashlib.sha256(verifier.encode()).digest())


def parse_authorization_input(value: str) -> tuple[str | None, str | None]:
    """``(code, state)`` from what a person pasted: a redirect URL, ``code#state``, a
    query string with ``code=``, or the bare code (pi-ai's ``parseAuthorizationInput``)."""
    value = value.strip()
    if not value:
        return None, None
    parsed = urllib.parse.urlsplit(value)
    if parsed.scheme and (parsed.netloc or parsed.scheme in ("http", "https")):
        query = urllib.parse.parse_qs(parsed.query)
        return _first(query, "code"), _first(query, "state")
    if "#" in value:
        code, _, state = value.partition("#")
        return code, state.split("#", 1)[0]
    if "code=" in value:
        query = urllib.parse.parse_qs(value)
        return _first(query, "code"), _first(query, "state")
    return value, None


def _first(query: Mapping[str, list[str]], name: str) -> str | None:
    values = query.get(name)
    return values[0] if values else None


# -- the device-code poll -------------------------------------------------------------

_CANCEL_MESSAGE: Final = "Login cancelled"
_TIMEOUT_MESSAGE: Final = "Device flow timed out"
_SLOW_DOWN_TIMEOUT_MESSAGE: Final = (
    "Device flow timed out after one or more slow_down responses. This is often caused by "
    "clock drift in WSL or VM environments. Please sync or restart the VM clock and try again."
)
_MINIMUM_INTERVAL: Final = 1.0
_DEFAULT_POLL_INTERVAL: Final = 5.0
_SLOW_DOWN_INCREMENT: Final = 5.0


@final
@attrs.frozen
class Pending:
    """A device poll's answer: not yet authorised."""


@final
@attrs.frozen
class SlowDown:
    """A device poll's answer: poll less often (``interval``: the server's new one)."""

    interval: float | None = None


@final
@attrs.frozen
class Failed:
    """A device poll's answer: the login failed with ``message``."""

    message: str


@final
@attrs.frozen
class Complete(Generic[T]):
    """A device poll's answer: done, with ``value``."""

    value: T


PollResult: TypeAlias = Pending | SlowDown | Failed | Complete[T]


async def poll_device_code(
    poll: Callable[[], Awaitable[PollResult[T]]],
    *,
    interval: float | None,
    expires_in: float | None,
    wait_before_first_poll: bool = False,
) -> T:
    """pi-ai's ``pollOAuthDeviceCodeFlow`` (RFC 8628): ``poll`` every ``interval``
    seconds (5 when not given, at least 1; ``slow_down`` takes the server's interval or
    adds 5 seconds) until it completes, fails, or ``expires_in`` seconds pass. The
    clock is Trio's, so tests run it in virtual time."""
    deadline = trio.current_time() + expires_in if expires_in is not None else float("inf")
    step = max(_MINIMUM_INTERVAL, interval if interval is not None else _DEFAULT_POLL_INTERVAL)
    slow_downs = 0
    if wait_before_first_poll:
        remaining = deadline - trio.current_time()
        if remaining > 0:
            await trio.sleep(min(step, remaining))
    while trio.current_time() < deadline:
        result = await poll()
        if isinstance(result, Complete):
            return result.value
        if isinstance(result, Failed):
            raise LoginError(result.message, provider="")
        if isinstance(result, SlowDown):
            slow_downs += 1
            step = (
                max(_MINIMUM_INTERVAL, result.interval)
                if result.interval is not None and result.interval > 0
                else max(_MINIMUM_INTERVAL, step + _SLOW_DOWN_INCREMENT)
            )
        remaining = deadline - trio.current_time()
        if remaining <= 0:
            break
        await trio.sleep(min(step, remaining))
    raise LoginError(_SLOW_DOWN_TIMEOUT_MESSAGE if slow_downs else _TIMEOUT_MESSAGE, provider="")


# -- HTTP helpers --------------------------------------------------------------------


def json_object(response: httpx.Response) -> dict[str, JSONValue] | None:
    """The response's JSON object, or ``None`` when it is not one."""
    try:
        data = json.loads(response.content or b"null")
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def string_field(data: Mapping[str, JSONValue] | None, name: str) -> str | None:
    """``data[name]`` when it is a non-empty string."""
    value = data.get(name) if data is not None else None
    return value if isinstance(value, str) and value else None


def number_field(data: Mapping[str, JSONValue] | None, name: str) -> float | None:
    """``data[name]`` when it is a finite number (not a boolean)."""
    value = data.get(name) if data is not None else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if value == value and abs(value) != float("inf") else None


def trusted_http_url(value: object, *, https_only: bool = False) -> str | None:
    """``value`` when it is an ``http(s)`` URL (a verification URL the person will open:
    nothing else, such as ``file:`` or a program, is offered)."""
    if not isinstance(value, str) or not value:
        return None
    parts = urllib.parse.urlsplit(value)
    allowed = ("https",) if https_only else ("https", "http")
    return value if parts.scheme in allowed and parts.netloc else None


# -- the loopback callback server ---------------------------------------------------

_LOGO_SVG: Final = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 800 800" aria-hidden="true">'
    '<path fill="#fff" fill-rule="evenodd" d="M165.29 165.29 H517.36 V400 H400 V517.36 '
    'H282.65 V634.72 H165.29 Z M282.65 282.65 V400 H400 V282.65 Z"/><path fill="#fff" '
    'd="M517.36 400 H634.72 V634.72 H517.36 Z"/></svg>'
)


def _page(title: str, message: str, details: str | None) -> str:
    # pi-ai's oauth-page.js, without its stylesheet: every text is escaped
    detail = f'<div class="details">{html.escape(details)}</div>' if details else ""
    return (
        '<!doctype html>\n<html lang="en">\n<head>\n  <meta charset="utf-8" />\n'
        f"  <title>{html.escape(title)}</title>\n</head>\n<body>\n  <main>\n"
        f'    <div class="logo">{_LOGO_SVG}</div>\n    <h1>{html.escape(title)}</h1>\n'
        f"    <p>{html.escape(message)}</p>\n    {detail}\n  </main>\n</body>\n</html>"
    )


def success_html(message: str) -> str:
    """pi-ai's ``oauthSuccessHtml``."""
    return _page("Authentication successful", message, None)


def error_html(message: str, details: str | None = None) -> str:
    """pi-ai's ``oauthErrorHtml``."""
    return _page("Authentication failed", message, details)


CallbackAnswer: TypeAlias = tuple[int, str, "Mapping[str, str] | None"]
"""``(status, html, result)``: the page to answer with, and the query when it is the
one the login waits for (``None``: keep waiting)."""


CallbackCheck: TypeAlias = Callable[
    [str, Mapping[str, str]], "CallbackAnswer | Awaitable[CallbackAnswer]"
]
"""``check(path, query)``: the answer to one request (OpenRouter's is async: it
exchanges the code before it answers)."""


def callback_host(env: Mapping[str, str] | None = None) -> str:
    """``$PI_OAUTH_CALLBACK_HOST``, default ``127.0.0.1``."""
    environ = os.environ if env is None else env
    return environ.get("PI_OAUTH_CALLBACK_HOST") or "127.0.0.1"


@final
class CallbackServer:
    """A one-shot HTTP server on the loopback interface that waits for the browser's
    redirect (the ``startCallbackServer`` of pi-ai's flows). ``check(path, query)``
    decides each request's answer."""

    __slots__ = ("_check", "_listener", "_result", "port")

    def __init__(self, listener: trio.SocketListener, check: CallbackCheck) -> None:
        self._listener = listener
        self._check = check
        self._result: Mapping[str, str] | None = None
        self.port: int = listener.socket.getsockname()[1]

    @classmethod
    async def open(cls, host: str, port: int, check: CallbackCheck) -> CallbackServer:
        """Listen on ``host:port`` (``0``: any free port). Raises ``OSError`` when the
        port is taken."""
        sock = trio.socket.socket(
            trio.socket.AF_INET6 if ":" in host else trio.socket.AF_INET, trio.socket.SOCK_STREAM
        )
        try:
            sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_REUSEADDR, 1)
            await sock.bind((host, port))
            sock.listen(8)
        except OSError:
            sock.close()
            raise
        return cls(trio.SocketListener(sock), check)

    async def wait(self) -> Mapping[str, str]:
        """Answer requests, each connection in a task of its own (a browser may open
        one it never uses), until one carries the result; returns its query."""
        async with trio.open_nursery() as nursery:

            async def handle(stream: trio.SocketStream) -> None:
                try:
                    with trio.move_on_after(60):  # a connection that never sends a request
                        await self._answer(stream)
                finally:
                    await trio.aclose_forcefully(stream)
                if self._result is not None:
                    nursery.cancel_scope.cancel()

            while self._result is None:
                nursery.start_soon(handle, await self._listener.accept())
        assert self._result is not None
        return self._result

    async def _answer(self, stream: trio.SocketStream) -> None:
        head = b""
        while b"\r\n\r\n" not in head and len(head) < 16384:
            chunk = await stream.receive_some(4096)
            if not chunk:
                return
            head += chunk
        line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = line.split(" ")
        if len(parts) != 3:
            return
        method, target, _ = parts
        url = urllib.parse.urlsplit(target)
        query = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
        if method != "GET":
            status, page, result = 404, error_html("Callback route not found."), None
        else:
            answer = self._check(url.path, query)
            status, page, result = answer if isinstance(answer, tuple) else await answer
        body = page.encode()
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found"}.get(status, "Error")
        await stream.send_all(
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/html; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nCache-Control: no-store\r\n"
            "Connection: close\r\n\r\n".encode()
            + body
        )
        if result is not None:
            self._result = result

    async def aclose(self) -> None:
        """Stop listening."""
        await self._listener.aclose()


async def race_callback(
    server: CallbackServer | None, interaction: LoginInteraction, prompt: AuthPrompt
) -> tuple[Mapping[str, str] | None, str | None]:
    """Wait for the browser's redirect and, at the same time, for a pasted code (the
    ``manual_code`` prompt); ``(query, None)`` or ``(None, pasted)``, whichever comes
    first (the other is cancelled). Without a server only the prompt is asked."""
    query: Mapping[str, str] | None = None
    pasted: str | None = None
    async with trio.open_nursery() as nursery:

        async def from_browser() -> None:
            nonlocal query
            assert server is not None
            query = await server.wait()
            nursery.cancel_scope.cancel()

        async def from_person() -> None:
            nonlocal pasted
            pasted = await interaction.prompt(prompt)
            nursery.cancel_scope.cancel()

        if server is not None:
            nursery.start_soon(from_browser)
        nursery.start_soon(from_person)
    return query, pasted


def form(fields: Mapping[str, str]) -> str:
    """``URLSearchParams(fields).toString()``."""
    return urllib.parse.urlencode(fields)
