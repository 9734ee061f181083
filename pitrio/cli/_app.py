"""The running CLI: a Harness with the coding tools, a session, and one of four modes.

* ``print`` (``-p``): one prompt, the transcript, exit status 0 / 1 (the run ended in
  an error) / 130 (interrupted);
* ``json``: the same, every event one JSON line in Pi's wire form;
* ``interactive``: the terminal conversation (:mod:`pitrio.cli._interactive`);
* ``rpc``: JSON-line commands on stdin (:mod:`pitrio.cli._rpc`).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import signal as signal_module
import tempfile
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any, TextIO, final

import trio

from pitrio import AssistantMessage, Model, StreamFn, StreamOptions, ThinkingLevel, wire
from pitrio.coding import coding_tools
from pitrio.harness import (
    AutoRetryEnd,
    AutoRetryStart,
    CompactionEnd,
    CompactionStart,
    Harness,
    HarnessEvent,
    PromptTemplate,
    RecoveryEnd,
    RecoveryStart,
    Resources,
    SavePoint,
    Session,
    SessionError,
    SessionStore,
    Settled,
    SystemPromptFn,
    ToolContext,
    TurnState,
    expand_prompt_template,
    expand_skill_command,
    load_prompt_templates,
)

from ._args import EXIT_INTERRUPTED, EXIT_MODEL_ERROR, EXIT_OK
from ._consent import Consent
from ._errors import CliError, CliUsageError
from ._loopback import RefusingStreamFn
from ._offline import RECORDED_FROM, copy_sample_project
from ._render import Renderer, Style, use_color
from ._resources import CodingResources, build_system_prompt, load_resources
from ._sanitize import one_line
from ._setup import AppSettings, api_key_lookup, open_session, open_stream_fn, templates_dirs

__all__ = [
    "App",
    "default_system_prompt",
    "event_to_pi",
    "event_to_wire",
    "open_interrupts",
    "run_app",
    "run_once",
    "tools_for",
]


def default_system_prompt(cwd: str) -> str:
    """The system prompt used unless ``--system`` replaces it."""
    today = datetime.date.today().isoformat()
    return (
        "You are an expert coding assistant. You help with coding tasks by reading files, "
        "running commands, editing code and writing new files.\n\n"
        "Available tools:\n"
        "- read: read file contents (offset/limit page through long files)\n"
        "- write: create or overwrite a file\n"
        "- edit: replace one exact, unique piece of text in a file\n"
        "- ls: list a directory\n"
        "- grep: search file contents with a regular expression\n"
        "- bash: run a shell command (ls, python3, git, tests, ...)\n\n"
        "Guidelines:\n"
        "- Read a file before editing it; use edit for small changes, write for new files.\n"
        "- Paths are relative to the working directory; tools refuse paths outside it.\n"
        "- Be concise. Show file paths when you change files.\n\n"
        f"Current date: {today}\n"
        f"Current working directory: {cwd}"
    )


def event_to_wire(event: Any) -> dict[str, Any]:
    """An agent or harness event as one JSON object in Pi's wire form (camelCase)."""
    data: dict[str, Any] = wire.unstructure(event)
    event_type = getattr(event, "type", None)
    if isinstance(event_type, str) and "type" not in data:
        data = {"type": event_type, **data}
    return data


def event_to_pi(event: Any, session: Session | None) -> dict[str, Any] | None:
    """An event as Pi's coding agent writes it in its json and rpc modes, or ``None``
    for one it does not send.

    Agent events are :func:`event_to_wire`'s. The harness keeps Python names; here they
    become Pi's ``AgentSessionEvent`` shapes: compaction the harness started on its
    own (``threshold``, ``overflow``) is ``auto_compaction_start`` / ``auto_compaction_end``
    (``result`` only when one was written, ``aborted``, ``willRetry``, ``errorMessage``);
    ``auto_retry_start`` carries ``delayMs``. A manual compaction (Pi answers it in the
    ``compact`` response only), ``save_point``, ``settled`` and the frame of a recovery
    (``recovery_start`` / ``recovery_end``, which Pi's coding agent has not) are not sent.
    """
    if isinstance(event, CompactionStart):
        if event.reason == "manual":
            return None
        return {"type": "auto_compaction_start", "reason": event.reason}
    if isinstance(event, CompactionEnd):
        if event.reason == "manual":
            return None
        data: dict[str, Any] = {"type": "auto_compaction_end"}
        if event.status == "completed":
            entry = session.get_entry(event.entry_id) if session and event.entry_id else None
            data["result"] = {
                "summary": event.summary,
                "firstKeptEntryId": getattr(entry, "first_kept_entry_id", None),
                "tokensBefore": event.tokens_before,
                "details": event.details,
            }
        data["aborted"] = event.status == "aborted"
        data["willRetry"] = event.will_retry
        if event.error_message is not None:
            data["errorMessage"] = event.error_message
        return data
    if isinstance(event, AutoRetryStart):
        return {
            "type": "auto_retry_start",
            "attempt": event.attempt,
            "maxAttempts": event.max_attempts,
            "delayMs": round(event.delay * 1000),
            "errorMessage": event.error_message,
        }
    if isinstance(event, AutoRetryEnd):
        data = {"type": "auto_retry_end", "success": event.success, "attempt": event.attempt}
        if event.final_error is not None:
            data["finalError"] = event.final_error
        return data
    if isinstance(event, (SavePoint, Settled, RecoveryStart, RecoveryEnd)):
        return None
    return event_to_wire(event)


def tools_for(context: ToolContext) -> list[Any]:
    """The coding tools bound to the harness's working directory."""
    return list(coding_tools(context.cwd))


@final
class App:
    """One CLI run: the harness, its session store and session, consent, output."""

    def __init__(
        self,
        settings: AppSettings,
        *,
        cwd: str,
        stream_fn: StreamFn | None,
        store: SessionStore | None,
        session: Session | None,
        templates: tuple[PromptTemplate, ...],
        out: TextIO,
        err: TextIO,
        resources: CodingResources | None = None,
    ) -> None:
        self.settings = settings
        self.cwd = cwd
        self.stream_fn = stream_fn
        self.store = store
        self.session = session
        self.templates = templates
        self.resources = resources
        self.out = out
        self.err = err
        self.model = settings.model
        self.thinking: ThinkingLevel = settings.thinking
        ask_mode = {
            "print": "-p",
            "json": "--mode json",
            "rpc": "--mode rpc",
            "interactive": "the interactive prompt",
        }[settings.mode]
        self.consent = Consent(settings.policy, yes=settings.yes, mode_hint=ask_mode, cwd=cwd)
        self._listeners: list[Callable[[HarnessEvent], Any]] = []
        self.harness = self._make_harness(session)

    # -- the harness ---------------------------------------------------------------------

    def _make_harness(self, session: Session | None) -> Harness:
        settings = self.settings
        resources = self.resources
        system_prompt: str | SystemPromptFn
        if settings.system_prompt is not None:
            system_prompt = settings.system_prompt
        elif resources is None:  # the offline replay: the prompt it was recorded with
            system_prompt = default_system_prompt(self.cwd)
        else:
            system_prompt = self._pi_system_prompt
        harness = Harness(
            model=self.model,
            stream_fn=self.stream_fn,
            session=session,
            tools=[tools_for],
            system_prompt=system_prompt,
            thinking_level=self.thinking,
            cwd=self.cwd,
            resources=Resources(
                prompt_templates=self.templates,
                skills=resources.skills if resources is not None else (),
                context_files=resources.context_files if resources is not None else (),
            ),
            get_api_key=api_key_lookup(settings),
            stream_options=_local_options() if settings.local_port is not None else None,
        )
        harness.hooks.on("tool_call", self.consent)
        if isinstance(self.stream_fn, RefusingStreamFn):
            self.stream_fn.harness = harness  # a refused loopback server is not retried
        for listener in self._listeners:
            harness.subscribe(listener)
        return harness

    def expand(self, text: str) -> str:
        """A typed prompt as Pi's coding agent sends it: ``/skill:NAME args`` becomes the
        skill's invocation, then ``/TEMPLATE args`` the template's text (any mode)."""
        if not text.startswith("/"):
            return text
        skills = self.resources.skills if self.resources is not None else ()
        return expand_prompt_template(expand_skill_command(text, skills), self.templates)

    def _pi_system_prompt(self, turn: TurnState) -> str:
        """Pi's coding-agent prompt for the turn's tools, with the loaded resources."""
        resources = self.resources
        assert resources is not None
        return build_system_prompt(
            cwd=self.cwd,
            tools=[tool.name for tool in turn.tools],
            custom_prompt=resources.system_prompt,
            append_system_prompt=resources.append_system_prompt,
            context_files=resources.context_files,
            skills=resources.skills,
        )

    def subscribe(self, listener: Callable[[HarnessEvent], Any]) -> None:
        """Listen to this and every later harness (after /resume, /fork, /clear)."""
        self._listeners.append(listener)
        self.harness.subscribe(listener)

    async def switch_session(self, session: Session | None) -> None:
        """Continue in ``session`` (closing the current one)."""
        old = self.session
        self.session = session
        self.harness = self._make_harness(session)
        if old is not None and old is not session:
            await old.close()

    async def set_model(self, model: Model) -> None:
        self.model = model
        await self.harness.set_model(model)

    async def set_thinking(self, level: ThinkingLevel) -> None:
        self.thinking = level
        await self.harness.set_thinking_level(level)

    # -- results ---------------------------------------------------------------------------

    def last_assistant(self) -> AssistantMessage | None:
        for message in reversed(self.harness.messages):
            if isinstance(message, AssistantMessage):
                return message
        return None

    def status(self) -> int:
        last = self.last_assistant()
        if last is not None:
            if last.stop_reason == "error":
                return EXIT_MODEL_ERROR
            if last.stop_reason == "aborted":
                return EXIT_INTERRUPTED
        return EXIT_OK

    def error_hint(self, message: AssistantMessage) -> str | None:
        """Where to look when a request failed: the key's source, the server's URL."""
        text = (message.error_message or "").lower()
        hints: list[str] = []
        if any(s in text for s in ("401", "403", "unauthorized", "api key", "authentication")):
            source = self.settings.key_source or "nowhere (no key was configured)"
            hints.append(f"the API key came from {source}")
        if (
            self.model.base_url
            and ("connect" in text or "timed out" in text or "timeout" in text)
            and self.model.base_url not in (message.error_message or "")
        ):
            hints.append(f"the server is {self.model.base_url} (--base-url)")
        if not hints:
            return None
        return "hint: " + "; ".join(hints)


def _local_options() -> StreamOptions:
    """--local: a base model does not stop by itself at the end of its turn."""
    return StreamOptions(max_tokens=256, sampling_params={"stop": ["<|im_end|>", "<|im_start|>"]})


# --------------------------------------------------------------------------------------
# Starting


async def run_app(settings: AppSettings, stdin: TextIO, out: TextIO, err: TextIO) -> int:
    """Run the CLI in Trio; returns the exit status.

    Raises:
        CliError: it cannot start (the session cannot be opened, the ``--local`` model
            server did not start); the caller shows it as one line.
    """
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
            return await _list_sessions(store, cwd, out)
        if session is not None:
            stack.push_async_callback(_close_quietly, session)
        resources = None
        template_dirs = templates_dirs(cwd, settings.env)
        if not settings.offline:
            resources = await load_resources(cwd, settings.env)
            for warning in resources.warnings:
                print(f"pitrio: warning: {warning}", file=err)
            template_dirs = [*resources.template_dirs, *template_dirs]
        templates_result = await load_prompt_templates(template_dirs)
        app = App(
            settings,
            cwd=cwd,
            stream_fn=stream_fn,
            store=store,
            session=session,
            templates=tuple(templates_result.templates),
            out=out,
            err=err,
            resources=resources,
        )
        if settings.mode == "rpc":
            from ._rpc import run_rpc

            return await run_rpc(app, stdin, out)
        if settings.mode == "json":
            return await _run_json(app, settings.prompt or "")
        style = _style(out, settings)
        renderer = Renderer(
            out,
            style=style,
            live=style != "plain",  # a terminal: spinners and the live answer
            model=lambda: app.model,
            messages=lambda: app.harness.messages,
            # -p: stdout carries the transcript only; the banner, usage and hints go to
            # stderr.
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
                status = await _run_print(app, renderer, settings.prompt or "")
            nursery.cancel_scope.cancel(reason="the conversation is over")
        return status


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
    out.write(f"Sessions for {shown} (newest first); resume one with pitrio --resume ID:\n")
    for info in infos:
        when = datetime.datetime.fromtimestamp(info.modified_at).strftime("%Y-%m-%d %H:%M")
        out.write(f"  {one_line(info.id)}  {when}\n")
    return EXIT_OK


def _style(out: TextIO, settings: AppSettings) -> Style:
    if not use_color(out, settings.env, no_color=settings.no_color):
        return "plain"
    return "rich"  # falls back to "ansi" when rich is not installed


async def _run_print(app: App, renderer: Renderer, prompt: str) -> int:
    async with open_interrupts() as interrupts:
        status = await run_once(app, prompt, interrupts)
    last = app.last_assistant()
    if last is not None and last.stop_reason == "error":
        hint = app.error_hint(last)
        if hint:
            renderer.error(hint)
    return status


async def _run_json(app: App, prompt: str) -> int:
    import json

    out = app.out

    def emit(event: HarnessEvent) -> None:
        data = event_to_pi(event, app.session)
        if data is not None:
            out.write(json.dumps(data, ensure_ascii=False) + "\n")
            out.flush()

    session = app.session
    if session is not None:  # Pi's json mode starts with the session file's header
        created = datetime.datetime.fromtimestamp(session.created_at / 1000, datetime.UTC)
        header = {
            "type": "session",
            "version": 3,
            "id": session.id,
            "timestamp": created.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "cwd": app.cwd,
        }
        out.write(json.dumps(header, ensure_ascii=False) + "\n")
    app.subscribe(emit)
    async with open_interrupts() as interrupts:
        return await run_once(app, prompt, interrupts)


async def run_once(app: App, prompt: str, interrupts: AsyncIterator[object]) -> int:
    """Run one prompt to the end; the first interrupt aborts it, a second stops waiting."""
    interrupted = False
    async with trio.open_nursery() as nursery:

        async def watch() -> None:
            nonlocal interrupted
            async for _ in interrupts:
                if interrupted:
                    nursery.cancel_scope.cancel(reason="second interrupt")
                    return
                interrupted = True
                app.harness.abort()

        nursery.start_soon(watch)
        await app.harness.prompt(app.expand(prompt))
        nursery.cancel_scope.cancel(reason="the run has settled")
    if interrupted:
        return EXIT_INTERRUPTED
    return app.status()


@contextlib.asynccontextmanager
async def open_interrupts() -> AsyncIterator[AsyncIterator[object]]:
    """Ctrl-C presses as an async iterator (instead of KeyboardInterrupt) while open.

    Off the main thread, where Trio cannot take over SIGINT, the iterator never yields.
    """
    if threading.current_thread() is not threading.main_thread():
        send, receive = trio.open_memory_channel[object](0)
        with send, receive:
            yield receive
        return
    with trio.open_signal_receiver(signal_module.SIGINT) as receiver:
        yield receiver
