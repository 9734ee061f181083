"""``python -m pitrio serve``: the coding agent in the browser.

A Trio HTTP + WebSocket server on 127.0.0.1 serves one page (static HTML, JS and CSS
shipped in ``pitrio/ui/_static``, no build step) and one WebSocket. Every request must
carry the random token printed at start (``?token=...``); any other request gets 403.

The page is a chat view fed by :mod:`pitrio.ui` messages (``append``, ``appendDelta``,
``replace``, ``status``). It sends commands as JSON objects:

* ``{"type": "prompt", "text": ...}``: a prompt; while the agent works, a steering
  message (``{"type": "follow_up", "text": ...}`` queues a follow-up instead). A text
  starting with ``/`` is a slash command (:data:`WEB_COMMANDS`, the terminal's set less
  ``/quit``) or a prompt template (``/name args``), answered with an ``output`` message
  to that page; an unknown one is refused, never sent to the model;
* ``{"type": "set_model", "model": "PROVIDER/ID"}``, ``{"type": "set_thinking",
  "level": ...}``: the page's model and thinking switches (as ``/model`` and
  ``/thinking``; recorded in the session), offered in the ``info`` message;
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
from collections.abc import Awaitable, Callable, Mapping, Sequence
from importlib import resources
from typing import Any, Final, TextIO, final, get_args

import attrs
import trio

from pitrio import Model, StreamFn, TextContent, ThinkingLevel, UsageError, UserMessage
from pitrio.harness import (
    JsonlSessionStore,
    Session,
    SessionError,
    ToolCallEvent,
    expand_prompt_template,
    load_prompt_templates,
)
from pitrio.ui import Status, Transcript, UiAdapter, UiMessage, tool_title

from ._app import App, tools_for
from ._args import EXIT_INTERRUPTED, EXIT_USAGE, build_parser
from ._interactive import COMMANDS
from ._offline import DEMO_PROMPT, RECORDED_FROM, copy_sample_project
from ._render import session_cost
from ._setup import AppSettings, configure, open_session, open_stream_fn, templates_dirs

__all__ = ["WEB_COMMANDS", "ServerInfo", "main", "serve"]

WEB_COMMANDS: Final[dict[str, str]] = {
    name: text for name, text in COMMANDS.items() if not name.startswith("/quit")
}
"""The page's slash commands: the terminal's, less ``/quit`` (a tab is closed instead)."""

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
    models: Sequence[Model] | None = None,
    env: Mapping[str, str] | None = None,
    out: TextIO | None = None,
    task_status: trio.TaskStatus[ServerInfo] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the server until cancelled (a testing and embedding entry point).

    Args:
        argv: ``pitrio serve`` arguments (``--port 0`` picks a free port).
        stream_fn: answer with this stream function instead of a provider (tests).
        models: the models the page's switch and ``/model`` offer (default: those of
            the configuration, see :func:`offered_models`; the running one is always
            among them).
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
        models=models,
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
    add("--thinking", choices=list(_LEVELS), default=None, help="reasoning effort")
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


def offered_models(settings: AppSettings) -> tuple[Model, ...]:
    """The models the page's switch offers for these settings.

    The catalog models of the configured provider (the key the server found is that
    provider's); only the configured model when it is fixed: the offline replay, a
    ``--base-url`` or ``--local`` server, an injected stream function.
    """
    model = settings.model
    if settings.offline or settings.base_url or settings.stream_fn is not None:
        return (model,)
    from pitrio.providers import Models

    listed = Models(env=settings.env).list(model.provider)
    if any(m.id == model.id for m in listed):
        return tuple(listed)
    return (model, *listed)


def thinking_levels(model: Model) -> list[ThinkingLevel]:
    """The thinking levels ``model`` takes (pi-ai's ``getSupportedThinkingLevels``)."""
    from pitrio.providers._options import supported_thinking_levels

    levels: list[ThinkingLevel] = [
        level for level in _LEVELS if level in supported_thinking_levels(model)
    ]
    return levels


def _nearest_level(model: Model, level: ThinkingLevel) -> ThinkingLevel:
    """``level`` if ``model`` takes it, else the nearest it takes (pi-ai's clamp)."""
    from pitrio.providers._options import clamp_thinking_level

    clamped = clamp_thinking_level(model, level)
    return next((known for known in _LEVELS if known == clamped), "off")


_LEVELS: Final[tuple[ThinkingLevel, ...]] = get_args(ThinkingLevel)


class _CommandError(Exception):
    """A slash command or switch that cannot be done: the message says why."""


# --------------------------------------------------------------------------------------
# The server


async def _serve(
    settings: AppSettings,
    *,
    host: str,
    port: int,
    out: TextIO,
    models: Sequence[Model] | None = None,
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
        offered = offered_models(settings) if models is None else tuple(models)
        web = _WebApp(app, store, token=token, banner=banner, models=offered)
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
        self,
        app: App,
        store: JsonlSessionStore | None,
        *,
        token: str,
        banner: str | None,
        models: Sequence[Model] = (),
    ) -> None:
        self.app = app
        self.store = store
        self.token = token
        self.banner = banner
        current = app.model
        self.models = tuple(models)
        if not any(_same(m, current) for m in self.models):
            self.models = (current, *self.models)
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

    def _info(self) -> dict[str, Any]:
        """The page's header: model and thinking switches, directory, banner, commands."""
        app = self.app
        model = app.model
        levels = thinking_levels(model)
        fixed = len(self.models) == 1
        commands = [[name, text] for name, text in WEB_COMMANDS.items()]
        commands += [[f"/{t.name} ARGS", t.description] for t in app.templates]
        return {
            "type": "info",
            "model": _name(model),
            "models": [{"id": _name(m), "name": m.name} for m in self.models],
            "modelNote": (
                "The model is fixed for this server: restart pitrio serve with --model"
                if fixed
                else "The model of this session (recorded in it; /model does the same)"
            ),
            "thinking": app.thinking,
            "thinkingLevels": levels,
            "thinkingNote": (
                f"{_name(model)} has no reasoning levels to choose from"
                if len(levels) < 2
                else "The reasoning level (recorded in the session; /thinking does the same)"
            ),
            "commands": commands,
            "cwd": app.cwd,
            "banner": self.banner,
        }

    def _hello(self) -> list[dict[str, Any]]:
        session = self.app.session
        first: list[dict[str, Any]] = [
            self._info(),
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
            if text.lstrip().startswith("/"):
                expanded = await self._slash(client, text.strip())
                if expanded is None:
                    return
                text = expanded
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
        elif kind in ("set_model", "set_thinking"):
            name, key = ("/model", "model") if kind == "set_model" else ("/thinking", "level")
            value = data.get(key)
            if not isinstance(value, str):
                self._send(client, _error(f"{kind} needs a {key!r} string"))
                return
            await self._run_command(client, name, value)
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

    # -- slash commands and the switches -----------------------------------------------

    async def _slash(self, client: _Client, text: str) -> str | None:
        """Run a slash command; a prompt template's expansion, or ``None`` when the
        command was handled (or refused) here."""
        name = text.split(maxsplit=1)[0]
        arg = text[len(name) :].strip()
        if name in self._handlers() or name in ("/quit", "/exit"):
            await self._run_command(client, name, arg)
            return None
        expanded = expand_prompt_template(text, self.app.templates)
        if expanded == text:
            self._output(
                client,
                name,
                f"unknown command {name}: nothing was sent to the model (/help lists the commands)",
                error=True,
            )
            return None
        return expanded

    async def _run_command(self, client: _Client, name: str, arg: str) -> None:
        handler = self._handlers().get(name)
        try:
            if handler is None:  # /quit, /exit
                msg = (
                    f"{name} is for the terminal: close the tab to leave (the session is "
                    "saved); Ctrl-C where pitrio serve runs stops the server"
                )
                raise _CommandError(msg)
            await handler(client, name, arg)
        except _CommandError as exc:
            self._output(client, name, str(exc), error=True)
            if name in ("/model", "/thinking"):
                self._send(client, json.dumps(self._info()))  # the switch shows the truth
        except (SessionError, UsageError, ValueError, OSError) as exc:
            self._output(client, name, f"{name}: {exc}", error=True)

    def _handlers(self) -> dict[str, Callable[[_Client, str, str], Awaitable[None]]]:
        return {
            "/help": self._help,
            "/model": self._model,
            "/thinking": self._thinking,
            "/tools": self._tools,
            "/session": self._session,
            "/resume": self._resume,
            "/fork": self._fork,
            "/compact": self._compact,
            "/clear": self._clear,
            "/new": self._clear,
            "/cost": self._cost,
        }

    def _output(
        self,
        client: _Client,
        command: str,
        text: str,
        *,
        error: bool = False,
        sessions: list[dict[str, Any]] | None = None,
    ) -> None:
        data: dict[str, Any] = {"type": "output", "command": command, "text": text}
        data["error"] = error
        if sessions is not None:
            data["sessions"] = sessions
        self._send(client, json.dumps(data, ensure_ascii=False))

    def _idle_guard(self, name: str) -> None:
        if self.running or self.app.harness.is_busy:
            msg = f"{name} waits until the agent is idle (Stop aborts it)"
            raise _CommandError(msg)

    async def _help(self, client: _Client, name: str, _: str) -> None:
        lines = [f"  {command:<26} {text}" for command, text in WEB_COMMANDS.items()]
        templates = self.app.templates
        if templates:
            lines.append("prompt templates:")
            lines += [f"  /{t.name:<25} {t.description}" for t in templates]
        lines.append(
            "keys: Enter sends; while the agent works Enter steers it and Alt+Enter queues "
            "a follow-up; Stop aborts"
        )
        self._output(client, name, "commands:\n" + "\n".join(lines))

    async def _model(self, client: _Client, name: str, arg: str) -> None:
        app = self.app
        if not arg:
            lines = [f"model: {_name(app.model)} (thinking {app.thinking})"]
            if len(self.models) == 1:
                lines.append("fixed for this server (restart pitrio serve with --model)")
            else:
                lines.append("available (/model PROVIDER/ID, or the Model menu):")
                lines += [
                    f"{'*' if _same(m, app.model) else ' '} {_name(m)}  {m.name}"
                    for m in self.models
                ]
            self._output(client, name, "\n".join(lines))
            return
        self._idle_guard(name)
        provider, slash, model_id = arg.partition("/")
        if not slash:
            provider, model_id = app.model.provider, arg
        model = next((m for m in self.models if m.provider == provider and m.id == model_id), None)
        if model is None:
            if len(self.models) == 1:
                msg = (
                    f"this server runs the fixed model {_name(app.model)} (the offline "
                    "replay, --base-url, --local or an injected model): restart pitrio "
                    "serve with --model to use another"
                )
            else:
                msg = f"unknown model {arg!r}; /model lists the {len(self.models)} available"
            raise _CommandError(msg)
        old_level = app.thinking
        if not _same(model, app.model):
            await app.set_model(model)
        text = f"model: {_name(model)}"
        level = _nearest_level(model, old_level)
        if level != old_level:
            await app.set_thinking(level)
            text += f" (it has no thinking level {old_level}: now {level})"
        await self._flush()
        self._output(client, name, text)
        self._broadcast(self._info())

    async def _thinking(self, client: _Client, name: str, arg: str) -> None:
        app = self.app
        levels = thinking_levels(app.model)
        if not arg:
            self._output(client, name, f"thinking: {app.thinking} (levels: {', '.join(levels)})")
            return
        level = next((known for known in levels if known == arg), None)
        if level is None:
            msg = f"{_name(app.model)} has no thinking level {arg!r} (levels: {', '.join(levels)})"
            raise _CommandError(msg)
        self._idle_guard(name)
        changed = level != app.thinking
        if changed:
            await app.set_thinking(level)
            await self._flush()
        self._output(client, name, f"thinking: {level}")
        if changed:
            self._broadcast(self._info())

    async def _flush(self) -> None:
        """Write a switch to the session file now (the harness writes at a turn's end):
        a reload, or another pitrio opening the session, sees it at once."""
        if self.app.session is not None:
            await self.app.session.flush()

    async def _tools(self, client: _Client, name: str, _: str) -> None:
        app = self.app
        consent = app.consent
        turn = app.harness.turn
        lines = []
        for tool in turn.tools if turn is not None else tools_for(app.harness.tool_context):
            if tool.name in {"bash", "write", "edit"}:
                if consent.yes:
                    how = "runs without asking (--yes)"
                elif tool.name in consent.always:
                    how = "runs without asking (always, this server)"
                else:
                    how = "asks first"
            else:
                how = "read-only"
            first = (tool.description or "").split(". ")[0]
            lines.append(f"  {tool.name:<6} {how:<42} {first}")
        policy = consent.policy
        if policy.source:
            lines.append(
                f"policy {policy.source}: allow {list(policy.allow)}, deny {list(policy.deny)}"
            )
        self._output(client, name, "tools:\n" + "\n".join(lines))

    async def _session(self, client: _Client, name: str, _: str) -> None:
        app = self.app
        session = app.session
        if session is None or self.store is None:
            self._output(client, name, "no session: this server keeps none")
            return
        infos = await self.store.list(cwd=app.cwd)
        path = next((i.path for i in infos if i.id == session.id), None)
        self._output(
            client,
            name,
            f"session {session.id}\n  file: {path}\n  cwd: {app.cwd}\n"
            f"  model: {_name(app.model)}, thinking {app.thinking}\n"
            f"  messages: {len(app.harness.messages)}, entries: {len(session.entries)}",
        )

    async def _resume(self, client: _Client, name: str, arg: str) -> None:
        if self.store is None:
            msg = f"{name} needs sessions (this server keeps none)"
            raise _CommandError(msg)
        listing = await self._sessions()
        items: list[dict[str, Any]] = listing["items"]
        if not arg:
            text = (
                "this directory's sessions, newest first (click one, or /resume ID):"
                if items
                else "no sessions for this directory yet"
            )
            self._output(client, name, text, sessions=items)
            return
        self._idle_guard(name)
        matches = [i["id"] for i in items if i["id"] == arg] or [
            i["id"] for i in items if i["id"].startswith(arg) or i["id"].endswith(arg)
        ]
        if len(matches) != 1:
            how = "matches none" if not matches else f"matches {len(matches)}"
            msg = f"{arg!r} {how} of this directory's sessions; /resume lists them"
            raise _CommandError(msg)
        current = self.app.session
        if current is not None and current.id == matches[0]:
            self._output(client, name, "that is the current session")
            return
        session = await self._switch(client, "open", matches[0])
        if session is not None:
            messages = len(self.app.harness.messages)
            self._output(client, name, f"resumed session {session.id} ({messages} messages)")

    async def _fork(self, client: _Client, name: str, arg: str) -> None:
        current = self.app.session
        if current is None or self.store is None:
            msg = f"{name} needs a session (this server keeps none)"
            raise _CommandError(msg)
        self._idle_guard(name)
        if not self.app.harness.messages:
            msg = "nothing to fork yet: this session has no messages"
            raise _CommandError(msg)
        async with self._switch_lock:
            forked = await current.fork(arg or None)
            await self._adopt(forked)
        messages = len(self.app.harness.messages)
        self._output(client, name, f"forked into session {forked.id} ({messages} messages)")

    async def _compact(self, client: _Client, name: str, arg: str) -> None:
        if self.app.session is None:
            msg = f"{name} needs a session (this server keeps none)"
            raise _CommandError(msg)
        self._idle_guard(name)
        assert self.nursery is not None
        self.running = True
        harness = self.app.harness

        async def run() -> None:
            try:
                end = await harness.compact(arg or None)
            except Exception as exc:  # reported to the page, never lost
                self._output(client, name, f"{name}: {exc}", error=True)
            else:
                if end.status == "declined":
                    self._output(client, name, "nothing to compact yet")
                elif end.status == "completed":
                    self._output(client, name, "compacted")
                else:  # aborted (Stop) or failed: the notice says which and why
                    failure = f": {end.error_message}" if end.error_message else ""
                    self._output(client, name, f"not compacted ({end.status}{failure})", error=True)
            finally:
                self.running = False
                self._publish([Status(working=False)])

        self.nursery.start_soon(run)

    async def _clear(self, client: _Client, name: str, _: str) -> None:
        if self.store is None:
            msg = f"{name} needs sessions (this server keeps none)"
            raise _CommandError(msg)
        self._idle_guard(name)
        session = await self._switch(client, "new", None)
        if session is not None:
            self._output(client, name, f"new session {session.id}")

    async def _cost(self, client: _Client, name: str, _: str) -> None:
        usage, dollars = session_cost(list(self.app.harness.messages))
        self._output(
            client,
            name,
            f"this session: input {usage.input}, output {usage.output}, cache read "
            f"{usage.cache_read}, cache write {usage.cache_write} tokens; ${dollars:.4f}",
        )

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

    async def _switch(self, client: _Client, kind: str, session_id: Any) -> Session | None:
        """Open (``open``, ``hello``) or start (``new``) a session and show it in every
        page; the session, or ``None`` when the page was told why not."""
        store = self.store
        current = self.app.session
        if kind == "hello" and (not session_id or (current and current.id == session_id)):
            return None
        if store is None:
            self._send(client, _error("this server keeps no sessions"))
            return None
        if self.running:
            self._send(client, _error("the agent is working: stop it before switching sessions"))
            return None
        async with self._switch_lock:
            try:
                if kind == "new":
                    session = await store.create(cwd=self.app.cwd)
                else:
                    session = await store.open(str(session_id))
            except (SessionError, OSError, ValueError) as exc:
                self._send(client, _error(f"cannot open session {session_id}: {exc}"))
                return None
            await self._adopt(session)
        return session

    async def _adopt(self, session: Session) -> None:
        """Continue in ``session`` (with the model and thinking level it recorded, when
        this server offers them) and show it in every page."""
        app = self.app
        recorded = session.model
        model = next(
            (
                m
                for m in self.models
                if recorded is not None
                and (m.provider, m.id) == (recorded.provider, recorded.model_id)
            ),
            None,
        )
        if model is not None:
            app.model = model
        level = session.thinking_level
        if level is not None and level in thinking_levels(app.model):
            app.thinking = level
        await app.switch_session(session)
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


def _name(model: Model) -> str:
    return f"{model.provider}/{model.id}"


def _same(a: Model, b: Model) -> bool:
    return a.provider == b.provider and a.id == b.id


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
