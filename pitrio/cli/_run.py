"""Starting the CLI: :func:`run_app` opens what a run needs (the stream function, the
session, resources, MCP servers), builds the :class:`~pitrio.cli._app.App` and runs one of
the modes with it:

* ``print`` (``-p``): one prompt, the transcript, exit status 0 / 1 (the run ended in
  an error) / 130 (interrupted);
* ``json``: the same, every event one JSON line as Pi's json mode writes it
  (:mod:`pitrio.cli._json_mode`; exit status 0 unless interrupted);
* ``interactive``: the terminal conversation (:mod:`pitrio.cli._interactive`);
* ``rpc``: JSON-line commands on stdin (:mod:`pitrio.cli._rpc`);
* ``export`` (``--export``): a session as HTML (:mod:`pitrio.cli._export`).

This is the only module that imports the modes; they import the core
(:mod:`pitrio.cli._app`), never this. :mod:`pitrio.cli._main` calls :func:`run_app`.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import tempfile
from collections.abc import Awaitable, Callable
from typing import Final, TextIO

import attrs
import trio

from pitrio import AssistantMessage, ImageContent, TextContent
from pitrio.coding import coding_tools
from pitrio.harness import Session, SessionError, SessionStore, load_prompt_templates

from ._app import App, open_interrupts, run_once
from ._args import EXIT_OK
from ._errors import CliError, CliUsageError
from ._flags import apply_resource_flags
from ._offline import RECORDED_FROM, copy_sample_project
from ._render import Renderer, Style, use_color
from ._resources import agent_dir, load_resources, trust_needed, trust_undecided
from ._sanitize import inert, one_line
from ._setup import (
    AppSettings,
    open_session,
    open_stream_fn,
    restore_from_session,
    templates_dirs,
)
from ._trust import ask_project_trust

__all__ = ["run_app"]

_UNTRUSTED: Final = (
    "This project is not trusted. Project .pi resources and packages are ignored. Use /trust "
    "to save a trust decision, then restart pitrio."
)  # Pi's notice, with pitrio named


async def run_app(
    settings: AppSettings,
    stdin: TextIO,
    out: TextIO,
    err: TextIO,
    *,
    serve: Callable[[App], Awaitable[int]] | None = None,
) -> int:
    """Run the CLI in Trio; returns the exit status (``serve``: run this with the App
    instead of the mode, as ``python -m pitrio mcp`` does).

    Raises:
        CliError: it cannot start (the session cannot be opened, the ``--local`` model
            server did not start); the caller shows it as one line.
    """
    if settings.mode == "export":
        from ._export import export_session

        return await export_session(settings, out)
    async with contextlib.AsyncExitStack() as stack:
        cwd = settings.cwd
        if cwd is None:
            temp = stack.enter_context(tempfile.TemporaryDirectory(prefix="pitrio-offline-"))
            cwd = copy_sample_project(os.path.join(temp, "greet"))
        if settings.local_port is not None:
            from ._local import LOCAL_WARNING, start_local_server

            print(
                f"{LOCAL_WARNING} (server: http://127.0.0.1:{settings.local_port}/v1)",
                file=err,
                flush=True,
            )
            await start_local_server(stack, settings.local_port)  # CliError if it fails
        stream_fn = await open_stream_fn(settings, stack)
        try:
            store, session = await open_session(settings, cwd, err)
        except CliError:
            raise
        except SessionError as exc:  # --continue / --resume: missing, locked, unreadable
            raise CliUsageError(str(exc)) from None
        if settings.session.kind == "resume" and session is None:
            if settings.mode != "interactive" or store is None:
                return await _list_sessions(store, cwd, out)
            from ._flags import pick_session

            session = await pick_session(store, cwd, stdin, out)  # Pi's session picker
            if session is None:
                return EXIT_OK
        if (
            settings.mode == "interactive"
            and serve is None
            and settings.trust is None
            and not settings.offline
            and stdin.isatty()
            and await trio.to_thread.run_sync(trust_undecided, cwd, settings.env)
        ):  # Pi's question at an interactive start
            trusted = await ask_project_trust(cwd, agent_dir(settings.env), stdin, out)
            settings = attrs.evolve(settings, trust=trusted)
        startup = settings
        if session is not None:
            stack.push_async_callback(_close_quietly, session)
            settings = restore_from_session(settings, session, err)  # Pi's model and level
        resources = None
        template_dirs = templates_dirs(cwd, settings.env)
        if not settings.offline:
            resources = await load_resources(cwd, settings.env, trust=settings.trust)
            resources, template_dirs = await apply_resource_flags(
                resources, settings, [*resources.template_dirs, *template_dirs]
            )
            for warning in resources.warnings:
                print(f"pitrio: warning: {warning}", file=err)
            if (
                settings.mode == "interactive"
                and not resources.trusted
                and await trio.to_thread.run_sync(trust_needed, cwd, settings.env)
            ):
                print(f"pitrio: warning: {_UNTRUSTED}", file=err)
            _warn_unknown_tools(settings, cwd, err)
        templates_result = await load_prompt_templates(template_dirs)
        templates = tuple(templates_result.templates)
        mcp = None
        if resources is not None:
            from ._mcp import open_mcp

            # a server's stderr would write over the terminal's screen
            quiet = settings.mode == "interactive"
            mcp = await open_mcp(stack, cwd, settings.env, resources, err, quiet=quiet)
            if mcp is not None:
                templates = (*templates, *mcp.prompt_templates)
        app = App(
            settings,
            cwd=cwd,
            stream_fn=stream_fn,
            store=store,
            session=session,
            templates=templates,
            out=out,
            err=err,
            resources=resources,
            mcp=mcp,
            startup=startup,
        )
        if serve is not None:
            return await serve(app)
        if settings.mode == "rpc":
            from ._rpc import run_rpc

            return await run_rpc(app, stdin, out)
        if settings.mode == "json":
            from ._json_mode import run_json

            return await run_json(app, settings.prompt or "", settings.images)
        # -p into a pipe or a file: stdout is what ``pi -p`` writes there (the last
        # answer's text, once the run is over); the transcript goes to stderr, with the
        # usage line and the hints.
        answer_only = settings.mode == "print" and not _isatty(out)
        screen = err if answer_only else out
        style = _style(screen, settings)
        renderer = Renderer(
            screen,
            style=style,
            live=style != "plain",  # a terminal: spinners and the live answer
            model=lambda: app.model,
            messages=lambda: app.harness.messages,
            # -p: the screen carries the transcript only; the banner, usage and hints go
            # to stderr.
            notes=err if settings.mode == "print" else out,
        )
        app.subscribe(renderer)
        interrupted = app.harness.interrupted
        if interrupted is not None:  # a run killed mid-way: the next prompt resumes it first
            renderer.note(
                f"The last run of this session was interrupted (at {interrupted.at}); "
                "it is resumed before the next prompt.",
                color="33",
            )
        if settings.offline:
            renderer.note(
                f"pitrio offline replay: no model is configured, so this replays a recorded "
                f"session made by {RECORDED_FROM}. Its tools are real and work on a "
                f"temporary copy of a sample project ({cwd}), deleted at exit. For a real "
                "model set ANTHROPIC_API_KEY or OPENAI_API_KEY, or use --base-url; "
                "see pitrio --help.",
                color="33",
            )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(renderer.animate)
            if settings.mode == "interactive":
                from ._interactive import run_interactive

                status = await run_interactive(app, renderer, stdin)
            else:
                status = await _run_print(app, renderer, settings.prompt or "", settings.images)
            nursery.cancel_scope.cancel(reason="the conversation is over")
        if answer_only:
            _print_answer(app, out)
        return status


def _warn_unknown_tools(settings: AppSettings, cwd: str, err: TextIO) -> None:
    """``--tools`` / ``--exclude-tools`` naming no tool pitrio has: said, not fatal."""
    if settings.tools.default:
        return
    known = [t.name for t in coding_tools(cwd)]
    for name in settings.tools.unknown(known):
        print(f"pitrio: warning: no tool {name!r} (pitrio's tools: {', '.join(known)})", file=err)


async def _close_quietly(session: Session) -> None:
    with contextlib.suppress(SessionError):
        await session.close()


async def _list_sessions(store: SessionStore | None, cwd: str, out: TextIO) -> int:
    assert store is not None
    infos = await store.list(cwd=cwd)
    if not infos:
        out.write(f"No sessions for {one_line(cwd)} yet.\n")
        return EXIT_OK
    shown = one_line(cwd)
    out.write(f"Sessions for {shown} (newest first); resume one with pitrio --session ID:\n")
    for info in infos:
        when = datetime.datetime.fromtimestamp(info.modified_at).strftime("%Y-%m-%d %H:%M")
        out.write(f"  {one_line(info.id)}  {when}\n")
    return EXIT_OK


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no file behind it, or closed
        return False


def _print_answer(app: App, out: TextIO) -> None:
    """What ``pi -p`` writes to stdout once its prompts are done (Pi's
    ``print-mode.js``): the last message's text parts, each with a newline, if it is an
    answer that did not fail. A failure is on stderr, in the transcript (Pi writes its
    error there). The text is the model's but for what a terminal would obey (a pipe
    may end at one: ``| cat``), which :func:`inert` shows instead; Pi writes that raw
    (docs/deviations.md)."""
    messages = app.harness.messages
    last = messages[-1] if messages else None
    if not isinstance(last, AssistantMessage) or last.stop_reason in ("error", "aborted"):
        return
    for part in last.content:
        if isinstance(part, TextContent):
            out.write(inert(part.text) + "\n")
    out.flush()


def _style(out: TextIO, settings: AppSettings) -> Style:
    if not use_color(out, settings.env, no_color=settings.no_color):
        return "plain"
    return "rich"  # falls back to "ansi" when rich is not installed


async def _run_print(
    app: App, renderer: Renderer, prompt: str, images: tuple[ImageContent, ...] = ()
) -> int:
    async with open_interrupts() as interrupts:
        status = await run_once(app, prompt, interrupts, images)
        for message in app.settings.messages:  # Pi's further messages, one after another
            if status != EXIT_OK:
                break
            status = await run_once(app, message, interrupts)
    last = app.last_assistant()
    if last is not None and last.stop_reason == "error":
        hint = app.error_hint(last)
        if hint:
            renderer.error(hint)
    return status
