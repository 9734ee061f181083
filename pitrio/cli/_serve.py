"""``python -m pitrio serve``: the coding agent in the browser.

A Trio HTTP + WebSocket server on 127.0.0.1 serves one page (static HTML, JS and CSS
shipped in ``pitrio/ui/_static``, no build step) and one WebSocket. Every request must
carry the random token printed at start (``?token=...``); any other request gets 403.

The page is a chat view fed by :mod:`pitrio.ui` messages (``append``, ``appendDelta``,
``replace``, ``status``). It sends commands as JSON objects:

* ``{"type": "prompt", "text": ...}``: a prompt; while the agent works, a steering
  message (``{"type": "follow_up", "text": ...}`` queues a follow-up instead);
* ``{"type": "abort"}``: stop the running answer and tools;
* ``{"type": "sessions"}``, ``{"type": "open", "id": ...}``, ``{"type": "new"}``:
  list, resume and start sessions (the CLI's JSONL store);
* ``{"type": "hello", "session": ...}``: sent on connecting; a page reloaded on a
  session the server has left switches back to it;
* ``{"type": "consent", "id": ..., "answer": "y" | "n" | "a"}``: the answer to a
  ``consent`` request (``bash``, ``write`` and ``edit`` ask, as in the terminal).

The model is chosen as the CLI chooses it (:mod:`pitrio.cli._setup`); with none
configured the recorded offline demo is replayed on a temporary copy of the sample
project.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import os
import secrets
import signal
import sys
import tempfile
import traceback
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from typing import Any, Final, TextIO, final

import attrs
import trio

from pitrio import StreamFn, TextContent, UserMessage
from pitrio.harness import (
    JsonlSessionStore,
    Session,
    SessionError,
    ToolCallEvent,
    load_prompt_templates,
)
from pitrio.ui import Transcript, UiAdapter, UiMessage, tool_title

from ._app import App
from ._offline import DEMO_PROMPT, RECORDED_FROM, copy_sample_project
from ._setup import (
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    AppSettings,
    build_parser,
    configure,
    open_session,
    open_stream_fn,
    templates_dirs,
)

__all__ = ["ServerInfo", "main", "serve"]

_MAX_HEAD: Final = 16 * 1024
_MAX_MESSAGE: Final = 1024 * 1024
_CLIENT_QUEUE: Final = 100_000
_BATCH: Final = 2_000
_LISTED: Final = 50  # sessions shown, newest first
_TITLE: Final = 80
_STATIC: Final = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/app.css": ("app.css", "text/css; charset=utf-8"),
}


@final
@attrs.frozen(kw_only=True)
class ServerInfo:
    """Where a started server listens (given to ``task_status.started``)."""

    host: str
    port: int
    token: str

    @property
    def url(self) -> str:
        """The page's URL, token included."""
        return f"http://{self.host}:{self.port}/?token={self.token}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``pitrio serve`` until Ctrl-C or SIGTERM; returns the exit status (130 stopped
    that way, 2 bad arguments or the port is taken)."""
    args_list = list(sys.argv[2:] if argv is None else argv)
    try:
        settings, options = _settings(args_list, os.environ, None)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    failure: list[str] = []
    try:
        trio.run(_serve_until_interrupted, settings, options)
    except* SessionError as group:  # --continue / --resume: missing, locked, unreadable
        failure.extend(str(e) for e in group.exceptions)
    except* OSError as group:
        where = f"{options.host}:{options.port}"
        failure.extend(f"cannot listen on {where}: {e}" for e in group.exceptions)
    if failure:
        print(f"pitrio serve: {failure[0]}", file=sys.stderr)
        return EXIT_USAGE
    print("pitrio serve: stopped.", file=sys.stderr)
    return EXIT_INTERRUPTED


async def _serve_until_interrupted(settings: AppSettings, options: _Options) -> None:
    """Serve until Ctrl-C (SIGINT) or SIGTERM, then stop cleanly."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                functools.partial(
                    _serve, settings, host=options.host, port=options.port, out=sys.stdout
                )
            )
            async for _ in signals:
                nursery.cancel_scope.cancel(reason="interrupted")
                break


async def serve(
    argv: Sequence[str] = (),
    *,
    stream_fn: StreamFn | None = None,
    env: Mapping[str, str] | None = None,
    out: TextIO | None = None,
    task_status: trio.TaskStatus[ServerInfo] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the server until cancelled (a testing and embedding entry point).

    Args:
        argv: ``pitrio serve`` arguments (``--port 0`` picks a free port).
        stream_fn: answer with this stream function instead of a provider (tests).
        env: the environment (default ``os.environ``): keys, ``PITRIO_SESSIONS_DIR``.
        out: where the URL is printed (default ``sys.stdout``).
        task_status: receives the :class:`ServerInfo` once the server listens.

    Raises:
        ValueError: bad arguments (the message says which and how to fix them).
        pitrio.harness.SessionError: the session to start on cannot be opened (missing,
            or open in another process).
        OSError: the port cannot be listened on.
    """
    buffer = io.StringIO()
    try:
        with contextlib.redirect_stderr(buffer):
            settings, options = _settings(list(argv), os.environ if env is None else env, stream_fn)
    except SystemExit:
        raise ValueError(buffer.getvalue().strip() or "bad pitrio serve arguments") from None
    await _serve(
        settings,
        host=options.host,
        port=options.port,
        out=sys.stdout if out is None else out,
        task_status=task_status,
    )


# --------------------------------------------------------------------------------------
# Arguments: the CLI's model and session options, checked by the CLI's own code


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pitrio serve",
        allow_abbrev=False,
        description=(
            "The coding agent in the browser: a local web UI on 127.0.0.1. Open the URL it "
            "prints (it holds a random token; requests without it are refused). The model "
            "is chosen as by `pitrio` itself: with none configured, a recorded scripted "
            "demo is replayed on a temporary copy of a sample project."
        ),
        epilog=(
            "In the page: Enter sends (while the agent works: steers it), Alt+Enter queues a "
            "follow-up, Stop aborts. Exit status: 130 after Ctrl-C, 2 bad arguments or the "
            "port is taken. See docs/web.md."
        ),
    )
    add = parser.add_argument
    add("--port", type=int, default=8765, help="the port (default 8765; 0 picks a free one)")
    add("-m", "--model", metavar="[PROVIDER/]ID", help="the model, as for pitrio --model")
    add("--provider", metavar="NAME", help="the provider of --model without a PROVIDER/ prefix")
    add("--base-url", metavar="URL", help="an OpenAI-compatible server, as for pitrio")
    add(
        "--compat",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="with --base-url: a compat switch, e.g. supportsStore=false (repeatable)",
    )
    add(
        "--context-window",
        metavar="TOKENS",
        type=int,
        help="with --base-url: the server's context window (default 128000)",
    )
    add("--thinking", choices=_cli_thinking_levels(), default=None, help="reasoning effort")
    add("--system", metavar="TEXT", help="replace the default system prompt")
    add("--cwd", metavar="DIR", help="the working directory (default: the current)")
    add("--offline", action="store_true", help="replay the recorded demo even with a key set")
    add(
        "-y",
        "--yes",
        action="store_true",
        help="run bash, write and edit without asking (otherwise the page asks)",
    )
    add("--policy", metavar="FILE", help="allow/deny patterns, as for pitrio --policy")
    sessions = parser.add_mutually_exclusive_group()
    sessions.add_argument(
        "-c",
        "--continue",
        dest="continue_",
        action="store_true",
        help="start on the latest session of this directory",
    )
    sessions.add_argument("-r", "--resume", metavar="ID", help="start on this session")
    return parser


def _cli_thinking_levels() -> list[str]:
    from typing import get_args

    from pitrio import ThinkingLevel

    return list(get_args(ThinkingLevel))


@final
@attrs.frozen
class _Options:
    host: str
    port: int


def _settings(
    argv: list[str], env: Mapping[str, str], stream_fn: StreamFn | None
) -> tuple[AppSettings, _Options]:
    parser = _parser()
    args = parser.parse_args(argv)
    if not 0 <= args.port <= 65535:
        parser.error(f"--port must be 0-65535; got {args.port}")
    # The CLI's namespace with this command's values: its checks and model choice apply.
    cli = build_parser().parse_args([])
    for key, value in vars(args).items():
        if key != "port":
            setattr(cli, key, value)
    cli.mode = "rpc"  # no prompt from stdin: the page sends them
    settings = configure(parser, cli, env, stream_fn, io.StringIO())
    return settings, _Options(host="127.0.0.1", port=args.port)


# --------------------------------------------------------------------------------------
# The server


async def _serve(
    settings: AppSettings,
    *,
    host: str,
    port: int,
    out: TextIO,
    task_status: trio.TaskStatus[ServerInfo] = trio.TASK_STATUS_IGNORED,
) -> None:
    async with contextlib.AsyncExitStack() as stack:
        # Listen first: a taken port fails before any session is opened.
        listeners = await trio.open_tcp_listeners(port, host=host)
        for listener in listeners:
            stack.push_async_callback(listener.aclose)
        cwd = settings.cwd
        store: JsonlSessionStore | None
        if cwd is None:  # the offline replay: a throwaway project and session store
            temp = stack.enter_context(tempfile.TemporaryDirectory(prefix="pitrio-offline-"))
            cwd = copy_sample_project(os.path.join(temp, "greet"))
            store = JsonlSessionStore(os.path.join(temp, "sessions"))
            session: Session | None = await store.create(cwd=cwd)
        else:
            store, session = await open_session(settings, cwd, sys.stderr)
        if session is not None:
            opened = session
            stack.push_async_callback(_close_quietly, lambda: opened)
        stream_fn = await open_stream_fn(settings, stack)
        templates = await load_prompt_templates(templates_dirs(cwd, settings.env))
        app = App(
            settings,
            cwd=cwd,
            stream_fn=stream_fn,
            store=store,
            session=session,
            templates=tuple(templates.templates),
            out=io.StringIO(),
            err=io.StringIO(),
        )
        token = secrets.token_urlsafe(24)
        banner = (
            f"Offline replay: no model is configured, so this replays a recorded session made "
            f"by {RECORDED_FROM}. Its tools are real and work on a temporary copy of a sample "
            f"project ({cwd}), deleted when the server stops. Try: “{DEMO_PROMPT}”"
            if settings.offline
            else None
        )
        web = _WebApp(app, store, token=token, banner=banner)
        # Whichever session the pages switched to is closed at the end too.
        stack.push_async_callback(_close_quietly, lambda: web.app.session)
        bound_port = listeners[0].socket.getsockname()[1]
        info = ServerInfo(host=host, port=bound_port, token=token)
        async with trio.open_nursery() as nursery:
            web.nursery = nursery
            nursery.start_soon(trio.serve_listeners, web.handle_connection, listeners)
            out.write(
                f"pitrio serve: {settings.model.provider}/{settings.model.id} in {cwd}\n"
                f"Open {info.url}\n(Ctrl-C stops the server.)\n"
            )
            out.flush()
            task_status.started(info)


async def _close_quietly(current: Callable[[], Session | None]) -> None:
    session = current()
    if session is not None:
        with trio.CancelScope(shield=True), contextlib.suppress(SessionError):
            await session.close()


@final
class _Client:
    __slots__ = ("closed", "send")

    def __init__(self, send: trio.MemorySendChannel[str]) -> None:
        self.send = send
        self.closed = False


@final
class _WebApp:
    """The state shared by every connected page: one App (harness + session)."""

    def __init__(
        self, app: App, store: JsonlSessionStore | None, *, token: str, banner: str | None
    ) -> None:
        self.app = app
        self.store = store
        self.token = token
        self.banner = banner
        self.nursery: trio.Nursery | None = None
        self.clients: set[_Client] = set()
        self.adapter = UiAdapter(harness=True)
        self.view = Transcript()
        self.running = False
        self._consents: dict[str, tuple[dict[str, Any], trio.Event, list[str]]] = {}
        self._consent_counter = 0
        self._switch_lock = trio.Lock()
        self._titles: dict[str, tuple[float, str]] = {}
        app.subscribe(self._on_event)
        app.consent.ask = self._ask
        app.consent.mode_hint = "the web UI"
        self._show_history()

    # -- events to pages ---------------------------------------------------------------

    def _on_event(self, event: Any) -> None:
        self._publish(self.adapter.feed(event))

    def _publish(self, messages: Sequence[UiMessage]) -> None:
        for message in messages:
            self.view.apply(message)
            self._broadcast(message.to_json())

    def _broadcast(self, data: dict[str, Any]) -> None:
        text = json.dumps(data, ensure_ascii=False)
        for client in list(self.clients):
            self._send(client, text)

    def _send(self, client: _Client, text: str) -> None:
        try:
            client.send.send_nowait(text)
        except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
            # A page that stopped reading: drop it (it reconnects and gets a snapshot).
            client.closed = True
            self.clients.discard(client)
            client.send.close()

    def _show_history(self) -> None:
        self.adapter = UiAdapter(harness=True)
        self.view.clear()
        self.view.apply_all(self.adapter.history(self.app.harness.messages))

    def _hello(self) -> list[dict[str, Any]]:
        app = self.app
        session = app.session
        first: list[dict[str, Any]] = [
            {
                "type": "info",
                "model": f"{app.model.provider}/{app.model.id}",
                "cwd": app.cwd,
                "banner": self.banner,
            },
            {"type": "reset", "session": session.id if session is not None else None},
        ]
        first.extend(m.to_json() for m in self.view.snapshot())
        first.extend(request for request, _, _ in self._consents.values())
        return first

    # -- commands from pages -----------------------------------------------------------

    async def command(self, client: _Client, data: Any) -> None:
        if not isinstance(data, dict) or not isinstance(data.get("type"), str):
            self._send(client, _error("a command is a JSON object with a string 'type'"))
            return
        kind = data["type"]
        text = data.get("text")
        if kind in ("prompt", "steer", "follow_up"):
            if not isinstance(text, str) or not text.strip():
                self._send(client, _error(f"{kind} needs a non-empty 'text'"))
                return
            if not self.running:
                self._start_prompt(text)
            elif kind == "follow_up":
                self.app.harness.follow_up(text)
                self._broadcast({"type": "queued", "mode": "follow_up", "text": text})
            else:
                self.app.harness.steer(text)
                self._broadcast({"type": "queued", "mode": "steer", "text": text})
        elif kind == "abort":
            self.app.harness.abort()
            for _, event, answer in self._consents.values():
                answer.append("n")
                event.set()
        elif kind == "sessions":
            self._send(client, json.dumps(await self._sessions()))
        elif kind in ("open", "new", "hello"):
            await self._switch(client, kind, data.get("id") or data.get("session"))
        elif kind == "consent":
            entry = self._consents.get(str(data.get("id")))
            reply = data.get("answer")
            if entry is not None and reply in ("y", "n", "a"):
                entry[2].append(str(reply))
                entry[1].set()
        else:
            self._send(client, _error(f"unknown command type {kind!r}"))

    def _start_prompt(self, text: str) -> None:
        assert self.nursery is not None
        self.running = True

        async def run() -> None:
            try:
                await self.app.harness.prompt(text)
            except Exception as exc:  # a failed run is data; anything else is reported
                self._broadcast(json.loads(_error(f"the prompt could not run: {exc}")))
            finally:
                self.running = False

        self.nursery.start_soon(run)

    async def _sessions(self) -> dict[str, Any]:
        items: list[dict[str, Any]] = []
        if self.store is not None:
            current = self.app.session.id if self.app.session is not None else None
            infos = (await self.store.list(cwd=self.app.cwd))[:_LISTED]  # newest first
            for info in infos:
                items.append(
                    {
                        "id": info.id,
                        "modified": info.modified_at,  # seconds since the epoch
                        "title": await self._title(info.id, info.modified_at),
                        "current": info.id == current,
                    }
                )
        return {"type": "sessions", "items": items}

    async def _title(self, session_id: str, modified: float) -> str:
        """A session's first prompt (shortened), read once per modification."""
        cached = self._titles.get(session_id)
        if cached is not None and cached[0] == modified:
            return cached[1]
        title = ""
        assert self.store is not None
        messages: Sequence[Any]
        if self.app.session is not None and self.app.session.id == session_id:
            messages = self.app.harness.messages  # the open one, as it is now
        else:
            try:
                session = await self.store.open(session_id, read_only=True)
                try:
                    messages = session.build_context().messages
                finally:
                    await session.close()
            except (SessionError, OSError, ValueError):
                messages = ()
        for message in messages:
            if isinstance(message, UserMessage):
                text = (
                    message.content
                    if isinstance(message.content, str)
                    else "".join(b.text for b in message.content if isinstance(b, TextContent))
                )
                title = " ".join(text.split())
                break
        if len(title) > _TITLE:
            title = title[: _TITLE - 1] + "…"
        if title:  # a session without a prompt yet will have one soon
            self._titles[session_id] = (modified, title)
        return title

    async def _switch(self, client: _Client, kind: str, session_id: Any) -> None:
        store = self.store
        current = self.app.session
        if kind == "hello" and (not session_id or (current and current.id == session_id)):
            return
        if store is None:
            self._send(client, _error("this server keeps no sessions"))
            return
        if self.running:
            self._send(client, _error("the agent is working: stop it before switching sessions"))
            return
        async with self._switch_lock:
            try:
                if kind == "new":
                    session = await store.create(cwd=self.app.cwd)
                else:
                    session = await store.open(str(session_id))
            except (SessionError, OSError, ValueError) as exc:
                self._send(client, _error(f"cannot open session {session_id}: {exc}"))
                return
            await self.app.switch_session(session)
            self.app.consent.ask = self._ask
            self.app.consent.mode_hint = "the web UI"
            self._show_history()
        for page in list(self.clients):
            for item in self._hello():
                self._send(page, json.dumps(item, ensure_ascii=False))
        self._broadcast(await self._sessions())

    async def _ask(self, event: ToolCallEvent) -> str:
        self._consent_counter += 1
        ask_id = f"c{self._consent_counter}"
        request = {
            "type": "consent",
            "id": ask_id,
            "tool": event.tool_name,
            "title": tool_title(event.tool_name, event.args),
        }
        done = trio.Event()
        answer: list[str] = []
        self._consents[ask_id] = (request, done, answer)
        self._broadcast(request)
        try:
            await done.wait()
        finally:
            del self._consents[ask_id]
            self._broadcast({"type": "consentDone", "id": ask_id})
        return answer[0] if answer else "n"

    # -- HTTP and WebSocket ------------------------------------------------------------

    async def handle_connection(self, stream: trio.SocketStream) -> None:
        try:
            async with stream:
                await self._handle(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
            pass
        except Exception:  # one broken connection must not stop the server
            traceback.print_exc(file=sys.stderr)

    async def _read_commands(self, client: _Client, ws: Any) -> None:
        import trio_websocket

        while not client.closed:
            try:
                raw = await ws.get_message()
            except trio_websocket.ConnectionClosed:
                return
            try:
                data = json.loads(raw)
            except json.JSONDecodeError:
                self._send(client, _error("a command must be JSON"))
                continue
            try:
                await self.command(client, data)
            except Exception as exc:  # a bad command must not cost the page its socket
                self._send(client, _error(f"{data.get('type')!r} failed: {exc}"))

    async def _handle(self, stream: trio.SocketStream) -> None:
        head = b""
        with trio.move_on_after(30):
            while b"\r\n\r\n" not in head and len(head) <= _MAX_HEAD:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    return
                head += chunk
        if b"\r\n\r\n" not in head:
            await _respond(stream, 431, "text/plain", b"Request header too large or too slow.\n")
            return
        request = _parse_head(head.split(b"\r\n\r\n", 1)[0])
        if request is None:
            await _respond(stream, 400, "text/plain", b"Bad request.\n")
            return
        method, path, query, headers = request
        supplied = query.get("token", [""])[0]
        if not secrets.compare_digest(supplied.encode(), self.token.encode()):
            await _respond(
                stream,
                403,
                "text/plain",
                b"Forbidden: open the URL pitrio serve printed (it holds the server's token).\n",
            )
            return
        if path == "/ws" and headers.get("upgrade", "").lower() == "websocket":
            await self._websocket(_Prefixed(stream, head))
            return
        if method != "GET" or path not in _STATIC:
            await _respond(stream, 404 if method == "GET" else 405, "text/plain", b"Not found.\n")
            return
        name, content_type = _STATIC[path]
        body = _static(name)
        if name == "index.html":
            body = body.replace(b"{{TOKEN}}", self.token.encode())
        await _respond(stream, 200, content_type, body)

    async def _websocket(self, stream: trio.abc.Stream) -> None:
        import trio_websocket

        async with trio.open_nursery() as nursery:
            request = await trio_websocket.wrap_server_stream(
                nursery, stream, max_message_size=_MAX_MESSAGE
            )
            ws = await request.accept()
            send, receive = trio.open_memory_channel[str](_CLIENT_QUEUE)
            client = _Client(send)
            for item in self._hello():  # the snapshot, then the live messages, in order
                send.send_nowait(json.dumps(item, ensure_ascii=False))
            self.clients.add(client)
            try:
                async with trio.open_nursery() as inner:
                    inner.start_soon(_writer, ws, receive, inner.cancel_scope)
                    await self._read_commands(client, ws)
                    inner.cancel_scope.cancel()
            finally:
                self.clients.discard(client)
                send.close()
                with trio.CancelScope(shield=True), trio.move_on_after(1):
                    await ws.aclose()
            nursery.cancel_scope.cancel()


async def _writer(
    ws: Any, receive: trio.MemoryReceiveChannel[str], scope: trio.CancelScope
) -> None:
    import trio_websocket

    try:
        async for text in receive:
            # Whatever queued up while the last frame was sent goes as one JSON array:
            # a fast stream costs a frame per batch, not per delta.
            batch = [text]
            with contextlib.suppress(trio.WouldBlock):
                while len(batch) < _BATCH:
                    batch.append(receive.receive_nowait())
            await ws.send_message(batch[0] if len(batch) == 1 else f"[{','.join(batch)}]")
    except trio_websocket.ConnectionClosed:
        pass
    scope.cancel()  # the page is gone, or was dropped for not reading


def _error(text: str) -> str:
    return json.dumps({"type": "error", "text": text})


@final
class _Prefixed(trio.abc.Stream):
    """A stream whose first bytes were already read (the HTTP head)."""

    def __init__(self, stream: trio.SocketStream, prefix: bytes) -> None:
        self._stream = stream
        self._prefix = prefix

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._prefix:
            size = len(self._prefix) if max_bytes is None else max_bytes
            data, self._prefix = self._prefix[:size], self._prefix[size:]
            await trio.lowlevel.checkpoint()
            return data
        return await self._stream.receive_some(max_bytes)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self._stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._stream.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self._stream.aclose()


def _parse_head(
    head: bytes,
) -> tuple[str, str, dict[str, list[str]], dict[str, str]] | None:
    try:
        lines = head.decode("latin-1").split("\r\n")
        method, target, _version = lines[0].split(" ", 2)
    except ValueError:
        return None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if colon:
            headers[name.strip().lower()] = value.strip()
    parts = urllib.parse.urlsplit(target)
    return method, parts.path, urllib.parse.parse_qs(parts.query), headers


_REASONS: Final = {
    200: "OK",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    431: "Request Header Fields Too Large",
}


async def _respond(stream: trio.abc.Stream, status: int, content_type: str, body: bytes) -> None:
    head = (
        f"HTTP/1.1 {status} {_REASONS[status]}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Cache-Control: no-store\r\n"
        "X-Content-Type-Options: nosniff\r\n"
        "Referrer-Policy: no-referrer\r\n"
        "Content-Security-Policy: default-src 'self'; connect-src 'self'; img-src 'self' data:\r\n"
        "Connection: close\r\n\r\n"
    )
    await stream.send_all(head.encode("latin-1") + body)


def _static(name: str) -> bytes:
    return resources.files("pitrio.ui").joinpath("_static", name).read_bytes()
