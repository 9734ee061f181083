"""``python -m pitrio serve``: the coding agent in the browser.

A Trio HTTP + WebSocket server on 127.0.0.1 serves one page (static HTML, JS and CSS
shipped in ``pitrio/ui/_static``, no build step) and one WebSocket. Every request must
carry the random token printed at start (``?token=...``, kept in a cookie after the first
load), name this server as its ``Host`` and come from no other page's ``Origin``; any
other request gets 403 (:class:`pitrio.web._http.Gate`).

The page is a chat view fed by :mod:`pitrio.ui` messages (``append``, ``appendDelta``,
``replace``, ``status``). It sends commands as JSON objects:

* ``{"type": "prompt", "text": ...}``: a prompt; while the agent works, a steering
  message (``{"type": "follow_up", "text": ...}`` queues a follow-up instead). A text
  starting with ``/`` is a slash command (:data:`~pitrio.web._commands.WEB_COMMANDS`,
  the terminal's set less ``/quit``) or a prompt template (``/name args``), answered with
  an ``output`` message to that page; an unknown one is refused, never sent to the model;
* ``{"type": "set_model", "model": "PROVIDER/ID"}``, ``{"type": "set_thinking",
  "level": ...}``: the page's model and thinking switches (as ``/model`` and
  ``/thinking``; recorded in the session), offered in the ``info`` message;
* ``{"type": "abort"}``: stop the running answer and tools, and drop the queued steering
  and follow-up messages (as Ctrl-C in the terminal; ``queueCleared`` says how many);
* ``{"type": "sessions"}``, ``{"type": "open", "id": ...}``, ``{"type": "new"}``:
  list, resume and start sessions (the CLI's store: Pi's coding-agent files);
* ``{"type": "hello", "session": ...}``: sent on connecting; a page reloaded on a
  session the server has left switches back to it;
* ``{"type": "consent", "id": ..., "answer": "y" | "n" | "a"}``: the answer to a
  ``consent`` request (``bash``, ``write`` and ``edit`` ask, as in the terminal). The
  request holds a short ``title``, the call's exact ``arguments`` and ``full``, the
  arguments as text to show whole (invisible characters escaped);
* ``{"type": "history", "before": ID, "limit": N}``: older items than the page shows. A
  page that connects gets only the view's tail (``reset`` says how many items it left
  out, ``earlier``); the reply ``{"type": "history", "session": ..., "before": ID,
  "messages": [...], "earlier": N}`` holds an ``append`` and a ``replace`` per item,
  oldest first.

The model is chosen as the CLI chooses it (:mod:`pitrio.cli._setup`); with none
configured the recorded offline demo is replayed on a temporary copy of the sample
project.

This module holds the entry points (``pitrio serve``'s arguments, :func:`serve`; the
command line's :mod:`pitrio.cli._main` hands ``pitrio serve ...`` to :func:`main`) and
starts the server; :mod:`pitrio.web._http` is the transport (token check, static
files, WebSocket), :mod:`pitrio.web._pages` the session every page shares and the
commands above, :mod:`pitrio.web._commands` the slash commands and switches.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import os
import secrets
import signal
import sys
import tempfile
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Final, TextIO, final

import attrs
import trio

from pitrio import Model, StreamFn
from pitrio.cli._app import App
from pitrio.cli._args import EXIT_INTERRUPTED, EXIT_USAGE, CliArgumentParser, build_parser
from pitrio.cli._offline import DEMO_PROMPT, RECORDED_FROM, copy_sample_project
from pitrio.cli._setup import AppSettings, configure, open_session, open_stream_fn, templates_dirs
from pitrio.harness import (
    PiSessionStore,
    Session,
    SessionError,
    SessionStore,
    load_prompt_templates,
)
from pitrio.worker import WorkerError

from ._commands import LEVELS
from ._http import Gate, handle_connection
from ._pages import WebApp

__all__ = ["ServerInfo", "main", "offered_models", "serve"]


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
    serving: Callable[[], Awaitable[None]]
    try:
        cluster = _cluster_options(args_list)
        if cluster is not None:
            options = _Options(host="127.0.0.1", port=cluster.port)
            serving = functools.partial(_serve_cluster, cluster, host=options.host, out=sys.stdout)
        else:
            settings, options = _settings(args_list, os.environ, None)
            serving = functools.partial(
                _serve, settings, host=options.host, port=options.port, out=sys.stdout
            )
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    failure: list[str] = []
    try:
        trio.run(_serve_until_interrupted, serving)
    except* WorkerError as group:  # --store / --queue: a server that cannot be reached
        failure.extend(str(e) for e in _leaves(group))
    except* SessionError as group:  # --continue / --resume: missing, locked, unreadable
        failure.extend(str(e) for e in _leaves(group))
    except* OSError as group:
        where = f"{options.host}:{options.port}"
        failure.extend(f"cannot listen on {where}: {e}" for e in _leaves(group))
    if failure:
        print(f"pitrio serve: {failure[0]}", file=sys.stderr)
        return EXIT_USAGE
    print("pitrio serve: stopped.", file=sys.stderr)
    return EXIT_INTERRUPTED


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    """The exceptions of ``group``, nested groups opened (nurseries nest them)."""
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


async def _serve_until_interrupted(serving: Callable[[], Awaitable[None]]) -> None:
    """Serve until Ctrl-C (SIGINT) or SIGTERM, then stop cleanly."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serving)
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
            cluster = _cluster_options(list(argv))
            environ = os.environ if env is None else env
            chosen = None if cluster is not None else _settings(list(argv), environ, stream_fn)
    except SystemExit:
        raise ValueError(buffer.getvalue().strip() or "bad pitrio serve arguments") from None
    if chosen is None:
        assert cluster is not None
        where = sys.stdout if out is None else out
        await _serve_cluster(cluster, host="127.0.0.1", out=where, task_status=task_status)
        return
    settings, options = chosen
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
    parser = CliArgumentParser(
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
    add("--thinking", choices=list(LEVELS), default=None, help="reasoning effort")
    add(
        "--system-prompt",
        "--system",
        dest="system_prompt",
        metavar="TEXT|FILE",
        help="replace the default system prompt (a file's contents when FILE exists)",
    )
    add("--cwd", metavar="DIR", help="the working directory (default: the current)")
    add(
        "--demo",
        "--offline",
        dest="demo",
        action="store_true",
        help="replay the recorded demo even with a key set",
    )
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
    cluster = parser.add_argument_group(
        "many workers (docs/deploy.md)",
        "With --store and --queue, nothing runs in this server: each prompt becomes a job "
        "of the workers (python -m pitrio worker) and the page follows it over Redis.",
    )
    cluster.add_argument(
        "--store", metavar="POSTGRESQL_URL", help="the sessions' database (postgresql://...)"
    )
    cluster.add_argument(
        "--queue", metavar="REDIS_URL", help="the workers' Celery broker (redis://...)"
    )
    cluster.add_argument(
        "--events",
        metavar="REDIS_URL",
        help="the Redis server of the runs' event streams (default: --queue)",
    )
    cluster.add_argument(
        "--schema", default="pitrio", help="the sessions' schema in --store (default pitrio)"
    )
    return parser


@final
@attrs.frozen(kw_only=True)
class _ClusterOptions:
    port: int
    store: str
    queue: str
    events: str
    schema: str
    cwd: str
    resume: str | None


_LOCAL_ONLY: Final = (
    "model",
    "provider",
    "base_url",
    "system_prompt",
    "demo",
    "yes",
    "policy",
    "continue_",
    "thinking",
)


def _cluster_options(argv: list[str]) -> _ClusterOptions | None:
    """The options of ``--store ... --queue ...``, or ``None`` without them."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.store is None and args.queue is None:
        if args.events is not None:
            parser.error("--events goes with --store and --queue")
        return None
    if args.store is None or args.queue is None:
        parser.error(
            "--store and --queue go together: the sessions' PostgreSQL database and the "
            "workers' broker, e.g. --store postgresql://pitrio@db/pitrio --queue redis://redis:6379/0"
        )
    if not args.store.startswith(("postgresql://", "postgres://")):
        parser.error(f"--store must be a postgresql:// URL; got {args.store!r}")
    for name, url in (("--queue", args.queue), ("--events", args.events)):
        if url is not None and not url.startswith(("redis://", "rediss://", "unix://")):
            parser.error(f"{name} must be a redis:// URL; got {url!r}")
    if not 0 <= args.port <= 65535:
        parser.error(f"--port must be 0-65535; got {args.port}")
    local = [n for n in _LOCAL_ONLY if getattr(args, n) not in (None, False, [])]
    local += ["compat"] if args.compat else []
    local += ["context_window"] if args.context_window is not None else []
    if local:
        flags = ", ".join("--" + n.rstrip("_").replace("_", "-") for n in local)
        parser.error(
            f"{flags}: not with --queue (the workers' harness factory chooses the model, "
            "tools and settings)"
        )
    return _ClusterOptions(
        port=args.port,
        store=args.store,
        queue=args.queue,
        events=args.events or args.queue,
        schema=args.schema,
        cwd=os.path.abspath(args.cwd or os.getcwd()),
        resume=args.resume,
    )


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
        store: SessionStore | None
        if cwd is None:  # the offline replay: a throwaway project and session store
            temp = stack.enter_context(tempfile.TemporaryDirectory(prefix="pitrio-offline-"))
            cwd = copy_sample_project(os.path.join(temp, "greet"))
            store = PiSessionStore(os.path.join(temp, "sessions"))
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
        web = WebApp(app, store, banner=banner, models=offered)
        # Whichever session the pages switched to is closed at the end too.
        stack.push_async_callback(_close_quietly, lambda: web.app.session)
        bound_port = listeners[0].socket.getsockname()[1]
        info = ServerInfo(host=host, port=bound_port, token=token)
        async with trio.open_nursery() as nursery:
            web.nursery = nursery
            gate = Gate(token, bound_port)
            handler = functools.partial(handle_connection, gate=gate, pages=web)
            nursery.start_soon(trio.serve_listeners, handler, listeners)
            out.write(
                f"pitrio serve: {settings.model.provider}/{settings.model.id} in {cwd}\n"
                f"Open {info.url}\n(Ctrl-C stops the server.)\n"
            )
            out.flush()
            task_status.started(info)


async def _serve_cluster(
    options: _ClusterOptions,
    *,
    host: str,
    out: TextIO,
    task_status: trio.TaskStatus[ServerInfo] = trio.TASK_STATUS_IGNORED,
) -> None:
    from pitrio.harness import PostgresSessionStore

    from ._cluster import ClusterPages

    async with contextlib.AsyncExitStack() as stack:
        listeners = await trio.open_tcp_listeners(options.port, host=host)
        for listener in listeners:
            stack.push_async_callback(listener.aclose)
        store = PostgresSessionStore(options.store, schema=options.schema)
        stack.push_async_callback(_shielded, store.aclose)
        if options.resume is not None:
            opened = await store.open(options.resume, read_only=True)
        else:
            opened = await store.create(cwd=options.cwd)
        await opened.close()
        banner = f"Prompts run as jobs on the workers of {_without_password(options.queue)}."
        pages = ClusterPages(
            store,
            queue_url=options.queue,
            events_url=options.events,
            cwd=options.cwd,
            banner=banner,
        )
        stack.push_async_callback(pages.aclose)
        bound_port = listeners[0].socket.getsockname()[1]
        info = ServerInfo(host=host, port=bound_port, token=secrets.token_urlsafe(24))
        async with trio.open_nursery() as nursery:
            pages.nursery = nursery
            await pages.switch(opened.id)
            gate = Gate(info.token, bound_port)
            handler = functools.partial(handle_connection, gate=gate, pages=pages)
            nursery.start_soon(trio.serve_listeners, handler, listeners)
            out.write(
                f"pitrio serve: prompts as jobs of {_without_password(options.queue)}, "
                f"sessions in {_without_password(options.store)}\n"
                f"Open {info.url}\n(Ctrl-C stops the server.)\n"
            )
            out.flush()
            task_status.started(info)


async def _shielded(close: Callable[[], Awaitable[None]]) -> None:
    with trio.CancelScope(shield=True):  # the server stops by being cancelled
        await close()


def _without_password(url: str) -> str:
    """``url`` with its password (if any) left out, to print."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


async def _close_quietly(current: Callable[[], Session | None]) -> None:
    session = current()
    if session is not None:
        with trio.CancelScope(shield=True), contextlib.suppress(SessionError):
            await session.close()
