"""The interactive terminal: line editing, steering, consent prompts, slash commands.

Lines are read by stdlib :mod:`readline` (arrow keys, Ctrl-R, history kept in
``$XDG_STATE_HOME/pitrio/history``, default ``~/.local/state/pitrio/history``) in a
worker thread, so the Trio side keeps streaming while the person types:

* a line typed while the agent works is a steering message (delivered after the
  current tool, the rest of the batch skipped); a line starting with ``>>`` is queued
  as a follow-up (delivered when the agent would otherwise stop);
* a line ending in ``\\`` continues on the next line (multi-line input);
* ``/command`` lines are handled here (:data:`COMMANDS`; Pi's further ones in
  :mod:`pitrio.cli._slash`); ``/skill:NAME args`` and ``/name args`` with a prompt
  template's name expand as in Pi; ``!cmd`` runs a shell command into the context
  (``!!cmd``: kept out of it);
* Ctrl-C aborts the running answer (queued lines are dropped); Ctrl-C when idle, or
  Ctrl-D, exits.
"""

from __future__ import annotations

import contextlib
import os
import queue
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any, Final, TextIO, get_args

import trio

from pitrio import ImageContent, Model, ThinkingLevel, UsageError
from pitrio.harness import SessionError, ToolCallEvent

from . import _slash
from ._app import App, open_interrupts
from ._args import EXIT_INTERRUPTED, EXIT_OK
from ._consent import needs_consent, parse_answer
from ._flags import find_session
from ._login import (
    anthropic_subscription_warning,
    api_key_login_provider,
    has_stored_key,
    login_command,
    logout_command,
)
from ._render import Renderer, session_cost
from ._sanitize import one_line

__all__ = [
    "COMMANDS",
    "FOLLOW_UP_PREFIX",
    "LineReader",
    "model_thinking_levels",
    "run_interactive",
]

_SlashCommand = Callable[[App, Renderer, str], Awaitable[None]]

FOLLOW_UP_PREFIX: Final = ">>"
IDLE_PROMPT: Final = "> "
CONTINUATION_PROMPT: Final = "… "

COMMANDS: Final[dict[str, str]] = {
    "/help": "this list",
    "/model [PROVIDER/ID]": "show or change the model",
    "/thinking [LEVEL]": "show or change the reasoning level",  # /help adds the model's
    "/tools": "the tools and whether they ask before running",
    "/mcp": "the MCP servers (mcp.json) and their tools",
    "/session": "this session: id, file, messages",
    "/resume [ID]": "list this directory's sessions, or continue one",
    "/fork [ENTRY]": "continue in a copy of this session (up to ENTRY)",
    "/compact [INSTRUCTIONS]": "summarise older messages to free context",
    "/clear": "start a new session",
    "/cost": "tokens and cost of this session",
    "/login [PROVIDER]": "sign in with a subscription (Claude, ChatGPT, Copilot, ...)",
    "/logout [PROVIDER]": "remove a login or key stored in auth.json",
    "/name [NAME]": "show or set the session's name",
    "/clone": "continue in a copy of the whole session",
    "/tree [ID]": "the session tree, or continue from entry ID",
    "/export [FILE]": "write the session as an HTML page",
    "/copy": "copy the last answer to the clipboard",
    "/reload": "load context files, skills and prompt templates again",
    "/trust [yes|parent|no]": "show or save this project's trust decision (trust.json)",
    "/hotkeys": "the keys and line prefixes",
    "/skill:NAME [ARGS]": "run a skill",
    "!CMD / !!CMD": "run a shell command (!! keeps it out of the context)",
    "/quit": "exit (so do Ctrl-D and Ctrl-C when idle)",
}


def model_thinking_levels(model: Model) -> list[str]:
    """The thinking levels ``model`` takes, lowest first (what ``/help`` and ``/thinking``
    list; pi-ai's ``getSupportedThinkingLevels``)."""
    from pitrio.providers._options import supported_thinking_levels

    return supported_thinking_levels(model)


def _keyed_models(
    env: Mapping[str, str],
    config_keys: Mapping[str, str],
    stored: Mapping[str, Any] | None = None,
    custom: Sequence[Model] = (),
) -> str:
    """``/model``'s list: the usable catalog models of the providers that have a key
    (the environment, the config file, or ``auth.json``: a stored key or a login), then
    ``custom`` (models.json's)."""
    from pitrio.providers import Models, env_api_key, registered_apis

    models = Models(env=env)
    apis = registered_apis()
    keyed = [
        p
        for p in models.providers()
        if env_api_key(p, env) or config_keys.get(p) or has_stored_key(p, env, stored or {})
    ]
    names = [f"{m.provider}/{m.id}" for p in keyed for m in models.list(p) if m.api in apis]
    names += [
        f"{m.provider}/{m.id}"
        for m in custom
        if m.api in apis and f"{m.provider}/{m.id}" not in names
    ]
    if not names:
        return "no catalog provider has a key (pitrio --list-models lists all models)"
    return f"models with a key ({len(names)}; pitrio --list-models lists all): " + ", ".join(names)


def _history_path(env: Any) -> str:
    base = env.get("XDG_STATE_HOME") or os.path.join(
        env.get("HOME") or os.path.expanduser("~"), ".local", "state"
    )
    return os.path.join(base, "pitrio", "history")


class LineReader:
    """Reads one (possibly continued) line at a time, in a worker thread.

    With a terminal on ``sys.stdin``, :func:`input` with :mod:`readline` gives line
    editing and history; otherwise lines are read from the stream as they come.
    """

    def __init__(self, stdin: TextIO, out: TextIO, history_path: str | None) -> None:
        self.stdin = stdin
        self.out = out
        self.history_path = history_path
        self.readline: Any = None
        self._termios: Any = None
        self.submitted = 0
        """Lines read so far with the busy prompt (each moved the cursor down a row)."""
        self._busy_read = False
        # The idle prompt written over a read that began with no prompt (a turn or a
        # login ended): only once readline has set the terminal up for that read, or a
        # key typed before then (Ctrl-D, above all) is read by the terminal's own line
        # discipline and lost.
        self._lock = threading.Lock()
        self._ready = False
        self._prompt_wanted = ""
        self.use_input = stdin is sys.stdin and _isatty(stdin)
        if self.use_input:
            with contextlib.suppress(ImportError):
                import readline

                self.readline = readline
                if hasattr(readline, "set_pre_input_hook"):
                    readline.set_pre_input_hook(self._input_ready)
            self._save_terminal()
            if self.readline is not None and history_path:
                with contextlib.suppress(OSError):
                    self.readline.read_history_file(history_path)
                self.readline.set_history_length(1000)

    def read(self, prompt: str) -> str | None:
        """One line (continued lines joined with newlines), or ``None`` at end of input."""
        parts: list[str] = []
        current = prompt
        while True:
            line = self._read_one(current)
            if line is None:
                return "\n".join(parts) if parts else None
            if line.endswith("\\"):
                parts.append(line[:-1])
                current = CONTINUATION_PROMPT
                continue
            parts.append(line)
            return "\n".join(parts)

    def typed(self) -> str | None:
        """The text typed so far while the agent works (``None`` when no such line is
        being read, or without readline): the renderer redraws it under its live region."""
        if not self._busy_read or self.readline is None:
            return None
        text: str = self.readline.get_line_buffer()
        return text

    def show_prompt(self, text: str) -> None:
        """Write ``text`` (the idle prompt, and what was typed so far) over the line
        being read: now if readline reads it already, else as soon as it does, or not
        at all if the next read shows its own prompt."""
        with self._lock:
            if self.readline is None or self._ready or not self.use_input:
                self.out.write(text)
                self.out.flush()
            else:
                self._prompt_wanted = text

    def _input_ready(self) -> None:
        # readline's pre-input hook, in the reading thread: the prompt is shown and the
        # terminal is readline's.
        with self._lock:
            self._ready = True
            wanted, self._prompt_wanted = self._prompt_wanted, ""
            if wanted and self._busy_read:
                self.out.write(wanted)
                self.out.flush()

    def _read_one(self, prompt: str) -> str | None:
        if self.use_input:
            with self._lock:
                self._busy_read = prompt == ""
                self._ready = False
            try:
                return input(prompt)
            except EOFError:
                return None
            finally:
                with self._lock:
                    if self._busy_read:
                        self.submitted += 1
                    self._busy_read = False
                    self._ready = False
        if prompt:
            self.out.write(prompt)
            self.out.flush()
        line = self.stdin.readline()
        if not line:
            return None
        return line.rstrip("\n").rstrip("\r")

    def close(self) -> None:
        """Save the history and give the terminal back as it was."""
        if self.readline is not None and self.history_path:
            with contextlib.suppress(OSError):
                directory = os.path.dirname(self.history_path)
                if not os.path.isdir(directory):
                    os.makedirs(directory, mode=0o700)  # it holds what the user typed
                self.readline.write_history_file(self.history_path)
                os.chmod(self.history_path, 0o600)
        self._restore_terminal()

    @property
    def can_read_secret(self) -> bool:
        """Whether :meth:`read_secret` can turn the echo off (stdin is the terminal)."""
        return self.use_input and self._termios is not None

    async def read_secret(self) -> str | None:
        """One line typed with the terminal's echo off (getpass's way: ``ECHO``
        cleared, the line still edited by the terminal), read by Trio so that Ctrl-C
        cancels it; it never reaches readline, so never the history. ``None`` at end
        of input. The echo comes back however the read ends."""
        assert self._termios is not None
        termios = self._termios[0]
        fd = self.stdin.fileno()
        before = termios.tcgetattr(fd)
        quiet = termios.tcgetattr(fd)
        quiet[3] &= ~termios.ECHO
        termios.tcsetattr(fd, termios.TCSAFLUSH, quiet)
        data = b""
        try:
            while not data.endswith(b"\n"):
                await trio.lowlevel.wait_readable(fd)
                chunk = os.read(fd, 4096)
                if not chunk:
                    return None
                data += chunk
        finally:
            termios.tcsetattr(fd, termios.TCSADRAIN, before)
            self.out.write("\n")
            self.out.flush()
        return data.decode(errors="replace").rstrip("\r\n")

    def _save_terminal(self) -> None:
        with contextlib.suppress(ImportError, OSError, ValueError):
            import termios

            self._termios = (termios, termios.tcgetattr(self.stdin.fileno()))

    def _restore_terminal(self) -> None:
        if self._termios is not None:
            termios, attributes = self._termios
            with contextlib.suppress(OSError, ValueError):
                termios.tcsetattr(self.stdin.fileno(), termios.TCSADRAIN, attributes)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class _Interactive:
    def __init__(self, app: App, renderer: Renderer, reader: LineReader) -> None:
        self.app = app
        self.renderer = renderer
        self.reader = reader
        self.out = app.out
        self.status = EXIT_OK
        self.aborted = False
        self.quit = False
        self._answer: trio.MemorySendChannel[str] | None = None
        self._nursery: trio.Nursery | None = None
        self._login_scope: trio.CancelScope | None = None
        self._warned_subscription = False
        self._prompts: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        app.consent.ask = self.ask

    # -- consent -------------------------------------------------------------------------

    async def ask(self, event: ToolCallEvent) -> str:
        """Show the whole call (every character of its command or path, see
        :func:`~pitrio.cli._render.consent_rows`), then pitrio's own question; the
        next line typed is the answer."""
        send, receive = trio.open_memory_channel[str](1)
        self.renderer.ask_consent(event.tool_call_id, event.tool_name, event.args)
        self._answer = send
        answer: str | None = None
        try:
            async with receive:
                while True:
                    answer = parse_answer(await receive.receive())
                    if answer is not None:
                        return answer
                    self.renderer.note("Please answer y, n or a.", color="33")
        finally:
            self._answer = None
            self.renderer.answered(event.tool_call_id, answer)

    # -- the loop --------------------------------------------------------------------------

    async def run(self) -> int:
        app = self.app
        self.renderer.note(
            f"pitrio: {app.model.provider}/{app.model.id} in {app.cwd}"
            + (f" · session {app.session.id}" if app.session is not None else " · no session")
            + f". /help for commands; typing while it works steers ({FOLLOW_UP_PREFIX} queues "
            "a follow-up); Ctrl-C aborts, Ctrl-D exits."
        )
        if app.session is not None and app.harness.messages:
            _slash.show_history(app, self.renderer)  # as Pi redraws a resumed session
        await self._warn_subscription()
        lines_send, lines_receive = trio.open_memory_channel[str | None](0)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._read_lines, lines_send)
            nursery.start_soon(self._watch_interrupts, nursery.cancel_scope)
            if app.settings.prompt:
                self.out.write(IDLE_PROMPT + one_line(app.settings.prompt) + "\n")
                first = app.expand(app.settings.prompt)  # /skill:, /template as typed
                await self._prompt(nursery, first, app.settings.images)
            for message in app.settings.messages:  # Pi's further messages, in turn
                await app.harness.wait_for_idle()
                self.out.write(IDLE_PROMPT + one_line(message) + "\n")
                await self._prompt(nursery, app.expand(message))
            self._next_prompt()
            async for line in lines_receive:
                if line is None:  # Ctrl-D
                    if self._answer is not None:
                        self._answer.send_nowait("n")
                    if app.harness.is_busy:
                        app.harness.abort()
                        await app.harness.wait_for_idle()
                    self.out.write("\n")
                    break
                await self._dispatch(nursery, line)
                if self.quit:
                    break
                self._next_prompt()
            nursery.cancel_scope.cancel(reason="the session ends")
        return self.status

    def _next_prompt(self) -> None:
        busy = self.app.harness.is_busy or self._answer is not None
        self._prompts.put("" if busy else IDLE_PROMPT)

    async def _read_lines(self, send: trio.MemorySendChannel[str | None]) -> None:
        async with send:
            while True:
                prompt = await trio.to_thread.run_sync(self._prompts.get, abandon_on_cancel=True)
                if prompt is None:
                    return
                line = await trio.to_thread.run_sync(
                    self.reader.read, prompt, abandon_on_cancel=True
                )
                await send.send(line)
                if line is None:
                    return

    async def _watch_interrupts(self, scope: trio.CancelScope) -> None:
        async with open_interrupts() as interrupts:
            async for _ in interrupts:
                harness = self.app.harness
                if self._login_scope is not None and not harness.is_busy:
                    self._login_scope.cancel(reason="Ctrl-C during /login")
                    self.renderer.note("[login cancelled]", color="33")
                elif harness.is_busy:
                    agent = harness.agent
                    dropped = len(agent.queued_steering) + len(agent.queued_follow_up)
                    agent.clear_all_queues()
                    self.aborted = True
                    if self._answer is not None:  # a consent question is open: decline
                        self._answer.send_nowait("n")
                    harness.abort()
                    note = f" ({dropped} queued line(s) dropped)" if dropped else ""
                    self.renderer.note(f"[aborted{note}; Ctrl-C again or Ctrl-D exits]", color="33")
                else:
                    self.out.write("\n")
                    self.out.flush()
                    self.status = EXIT_INTERRUPTED
                    scope.cancel(reason="interrupt while idle")
                    return

    async def _dispatch(self, nursery: trio.Nursery, line: str) -> None:
        app = self.app
        if self._answer is not None:
            self._answer.send_nowait(line)
            return
        text = line.strip()
        if not text:
            return
        if text.startswith("!"):
            excluded = text.startswith("!!")
            command = text[2 if excluded else 1 :]
            if not await self._busy_guard("!!" if excluded else "!"):
                await _slash.run_bash(app, self.renderer, command, excluded=excluded)
            return
        if text.startswith("/"):
            name = text.split(maxsplit=1)[0]
            handler = self._commands().get(name)
            if handler is not None:
                rest = text[len(name) :].strip()
                try:
                    await handler(rest)
                except (SessionError, UsageError, ValueError) as exc:
                    self.renderer.error(f"{name}: {exc}")
                return
            if name in _slash.NOT_SUPPORTED:
                self.renderer.error(
                    f"{name} is not supported yet in pitrio: {_slash.NOT_SUPPORTED[name]}"
                )
                return
            expanded = app.expand(text)  # /skill:NAME, then the prompt templates
            if expanded == text:
                self.renderer.error(f"unknown command {name}; /help lists the commands")
                return
            text = expanded
        if app.harness.is_busy:
            if text.startswith(FOLLOW_UP_PREFIX):
                body = text[len(FOLLOW_UP_PREFIX) :].strip()
                app.harness.follow_up(body)
                self.renderer.note(f"[follow-up queued: {body}]", color="35")
            else:
                app.harness.steer(text)
                self.renderer.note(f"[steering: {text}]", color="35")
            return
        if text.startswith(FOLLOW_UP_PREFIX):
            text = text[len(FOLLOW_UP_PREFIX) :].strip()
        await self._prompt(nursery, text)

    async def _prompt(
        self, nursery: trio.Nursery, text: str, images: tuple[ImageContent, ...] = ()
    ) -> None:
        await nursery.start(self._turn, text, images)

    async def _turn(
        self, text: str, images: tuple[ImageContent, ...], *, task_status: trio.TaskStatus[None]
    ) -> None:
        app = self.app
        self.aborted = False
        harness = app.harness
        await harness.prompt(text, images, task_status=task_status)
        # Lines queued after the run's last look at its queues are still waiting.
        while harness.agent.has_queued_messages() and not self.aborted:
            await harness.resume()
        last = app.last_assistant()
        if last is not None and last.stop_reason == "error":
            hint = app.error_hint(last)
            if hint:
                self.renderer.error(hint)
        if self._answer is None:
            # A line typed during the run but not sent is still being read: show it again
            # (the live region it was drawn in is gone).
            self.reader.show_prompt(IDLE_PROMPT + one_line(self.reader.typed() or ""))

    # -- slash commands ----------------------------------------------------------------------

    def _commands(self) -> dict[str, Callable[[str], Awaitable[None]]]:
        return {
            "/help": self._help,
            "/model": self._model,
            "/thinking": self._thinking,
            "/tools": self._tools,
            "/mcp": self._mcp,
            "/session": self._session,
            "/resume": self._resume,
            "/fork": self._fork,
            "/compact": self._compact,
            "/clear": self._clear,
            "/new": self._clear,
            "/cost": self._cost,
            "/login": self._login,
            "/logout": self._logout,
            "/name": self._with_app(_slash.name),
            "/clone": self._idle(_slash.clone, "/clone"),
            "/tree": self._idle(_slash.tree, "/tree"),
            "/export": self._with_app(_slash.export),
            "/copy": self._with_app(_slash.copy_last),
            "/reload": self._idle(_slash.reload, "/reload"),
            "/trust": self._with_app(_slash.trust),
            "/hotkeys": self._hotkeys,
            "/quit": self._quit,
            "/exit": self._quit,
        }

    def _say(self, text: str) -> None:
        self.renderer.say(text)

    def _with_app(self, command: _SlashCommand) -> Callable[[str], Awaitable[None]]:
        async def run(arg: str) -> None:
            await command(self.app, self.renderer, arg)

        return run

    def _idle(self, command: _SlashCommand, name: str) -> Callable[[str], Awaitable[None]]:
        async def run(arg: str) -> None:
            if not await self._busy_guard(name):
                await command(self.app, self.renderer, arg)

        return run

    async def _login(self, arg: str) -> None:
        """``/login``: list the subscription logins; ``/login PROVIDER`` runs one in the
        background, its questions answered by the next lines typed (Ctrl-C cancels)."""
        settings = self.app.settings
        if not arg.strip():
            await login_command(self.renderer, "", settings.env, settings.stored_auth, self._line)
            return
        if self._login_scope is not None:
            self.renderer.error("/login: a login is already running (Ctrl-C cancels it)")
            return
        if await self._busy_guard("/login"):
            return
        if api_key_login_provider(arg) is not None:
            # in turn, not in the background: the line reader stays idle while the key
            # is read with the echo off (Ctrl-C cancels it)
            secret = self.reader.read_secret if self.reader.can_read_secret else None
            self._login_scope = trio.CancelScope()
            try:
                with self._login_scope:
                    await login_command(
                        self.renderer, arg, settings.env, settings.stored_auth, self._line, secret
                    )
            finally:
                self._login_scope = None
            return
        assert self._nursery is not None
        self._login_scope = trio.CancelScope()
        self._nursery.start_soon(self._run_login, self._login_scope, arg)

    async def _run_login(self, scope: trio.CancelScope, arg: str) -> None:
        settings = self.app.settings
        try:
            with scope:
                if await login_command(
                    self.renderer, arg, settings.env, settings.stored_auth, self._line
                ):
                    await self._warn_subscription()
        finally:
            self._login_scope = None
            self._next_prompt_if_idle()

    async def _warn_subscription(self) -> None:
        """Pi's warning about Claude through a subscription, once a session."""
        if self._warned_subscription:
            return
        app = self.app
        text = await anthropic_subscription_warning(
            app.model.provider,
            app.settings.api_key,
            app.settings.env,
            app.settings.stored_auth,
            app.cwd,
        )
        if text is not None:
            self._warned_subscription = True
            self.renderer.note(text, color="33")

    def _next_prompt_if_idle(self) -> None:
        if self._answer is None and not self.app.harness.is_busy:
            self.reader.show_prompt(IDLE_PROMPT)

    async def _line(self) -> str:
        """The next line typed (a login's answer)."""
        send, receive = trio.open_memory_channel[str](1)
        self._answer = send
        try:
            async with receive:
                return await receive.receive()
        finally:
            self._answer = None

    async def _logout(self, arg: str) -> None:
        """``/logout [PROVIDER]``: remove a stored credential."""
        if await self._busy_guard("/logout"):
            return
        settings = self.app.settings
        await logout_command(self.renderer, arg, settings.env, settings.stored_auth)

    async def _hotkeys(self, _: str) -> None:
        self._say(_slash.HOTKEYS)

    async def _help(self, _: str) -> None:
        levels = ", ".join(model_thinking_levels(self.app.model))
        lines = [
            f"  {name:<26} {text}" + (f" ({levels})" if name.startswith("/thinking") else "")
            for name, text in COMMANDS.items()
        ]
        lines.append(
            f"  {FOLLOW_UP_PREFIX + ' TEXT':<26} while it works: queue TEXT as a follow-up"
        )
        lines.append("  " + "TEXT \\".ljust(26) + " continue the line on the next one")
        templates = self.app.templates
        if templates:
            lines.append("prompt templates:")
            lines += [f"  /{t.name:<25} {t.description}" for t in templates]
        self._say("commands:\n" + "\n".join(lines))

    async def _busy_guard(self, name: str) -> bool:
        if self.app.harness.is_busy:
            self.renderer.error(f"{name} waits until the agent is idle (Ctrl-C aborts it)")
            return True
        return False

    async def _model(self, arg: str) -> None:
        app = self.app
        if not arg:
            self._say(f"model: {app.model.provider}/{app.model.id}")
            settings = app.settings
            customs = app.custom_providers.values()
            listed = [m for c in customs if c.api_key is not None for m in c.models]
            self._say(
                _keyed_models(settings.env, settings.config_keys, settings.stored_auth, listed)
            )
            return
        if await self._busy_guard("/model"):
            return
        if app.fixed_model:
            self.renderer.error(
                "/model switches between catalog models; this run uses a fixed model "
                "(offline replay, --base-url or a test model). Restart with --model."
            )
            return
        from pitrio.providers import Models, registered_apis

        provider, slash, model_id = arg.partition("/")
        if not slash:
            provider, model_id = app.model.provider, arg
        model = next(  # a models.json model first, then the catalog's
            (m for m in app.available_models() if (m.provider, m.id) == (provider, model_id)),
            None,
        ) or Models(env=app.settings.env).get(provider, model_id)
        if model is None:
            self.renderer.error(f"unknown model {arg!r} (pitrio --list-models lists them)")
            return
        if model.api not in registered_apis():
            self.renderer.error(
                f"{provider}/{model_id} speaks the {model.api!r} API, which pitrio does not "
                "implement yet"
            )
            return
        await app.set_model(model)
        self._say(f"model: {model.provider}/{model.id}")
        await self._warn_subscription()

    async def _thinking(self, arg: str) -> None:
        levels = ", ".join(model_thinking_levels(self.app.model))
        if not arg:
            self._say(f"thinking: {self.app.thinking} (levels: {levels})")
            return
        if arg not in get_args(ThinkingLevel):
            known = ", ".join(get_args(ThinkingLevel))
            self.renderer.error(f"unknown level {arg!r}; one of {known} (this model's: {levels})")
            return
        if await self._busy_guard("/thinking"):
            return
        level: ThinkingLevel = arg  # type: ignore[assignment]  # checked above
        await self.app.set_thinking(level)
        note = ""
        if level != "off" and not self.app.model.reasoning:
            note = (
                f" (but {self.app.model.provider}/{self.app.model.id} is not a reasoning model, "
                "so nothing is sent; with --base-url, start with --thinking LEVEL to send it)"
            )
        self._say(f"thinking: {level}{note}")

    async def _tools(self, _: str) -> None:
        consent = self.app.consent
        lines = []
        for tool in self.app.harness.turn.tools if self.app.harness.turn else _tool_list(self.app):
            if needs_consent(tool.name):
                if consent.yes:
                    how = f"runs without asking ({self.app.settings.yes_reason})"
                elif tool.name in consent.always:
                    how = "runs without asking (always, this session)"
                else:
                    how = "asks first"
            else:
                how = "read-only"
            first = (tool.description or "").split(". ")[0]
            lines.append(f"  {tool.name:<6} {how:<44} {first}")
        policy = consent.policy
        if policy.source:
            lines.append(
                f"policy {policy.source}: allow {list(policy.allow)}, deny {list(policy.deny)}"
            )
        self._say("tools:\n" + "\n".join(lines))

    async def _mcp(self, _: str) -> None:
        from ._mcp import describe_mcp

        self._say(describe_mcp(self.app.mcp))

    async def _session(self, _: str) -> None:
        app = self.app
        session = app.session
        if session is None:
            self._say("no session: this conversation is not saved (--no-session or offline)")
            return
        assert app.store is not None
        path = next((i.path for i in await app.store.list(cwd=app.cwd) if i.id == session.id), None)
        self._say(
            f"session {session.id}\n  file: {path}\n  cwd: {app.cwd}\n"
            f"  messages: {len(app.harness.messages)}, entries: {len(session.entries)}"
        )

    async def _resume(self, arg: str) -> None:
        app = self.app
        if app.store is None:
            self.renderer.error("/resume needs sessions (this run has none)")
            return
        if not arg:
            infos = await app.store.list(cwd=app.cwd)
            if not infos:
                self._say("no sessions for this directory")
            for info in infos:
                mark = " (current)" if app.session is not None and info.id == app.session.id else ""
                self._say(f"  {info.id}{mark}")
            return
        if await self._busy_guard("/resume"):
            return
        if app.session is not None and arg == app.session.id:
            self._say("that is the current session")
            return
        found = find_session(arg, await app.store.list(cwd=app.cwd), await app.store.list())
        if found is not None and app.session is not None and found.id == app.session.id:
            self._say("that is the current session")
            return
        session = await app.store.open(found.id if found is not None else arg)  # id prefix
        await app.switch_session(session, restore=True)
        _slash.show_history(app, self.renderer)
        self._say(f"resumed session {session.id} ({len(app.harness.messages)} messages)")

    async def _fork(self, arg: str) -> None:
        app = self.app
        if app.session is None:
            self.renderer.error("/fork needs a session (this run has none)")
            return
        if await self._busy_guard("/fork"):
            return
        forked = await app.session.fork(arg or None)
        await app.switch_session(forked, restore=True)
        self._say(f"forked into session {forked.id} ({len(app.harness.messages)} messages)")

    async def _compact(self, arg: str) -> None:
        if self.app.session is None:
            self.renderer.error("/compact needs a session (this run has none)")
            return
        if await self._busy_guard("/compact"):
            return
        end = await self.app.harness.compact(arg or None)
        if end.status == "declined":
            self._say("nothing to compact yet")

    async def _clear(self, _: str) -> None:
        app = self.app
        if await self._busy_guard("/clear"):
            return
        session = await app.store.create(cwd=app.cwd) if app.store is not None else None
        await app.switch_session(session, restore=True)
        self._say("new session" + (f" {session.id}" if session is not None else ""))

    async def _cost(self, _: str) -> None:
        usage, dollars = session_cost(self.app.harness.messages)
        self._say(
            f"this session: input {usage.input}, output {usage.output}, cache read "
            f"{usage.cache_read}, cache write {usage.cache_write} tokens; ${dollars:.4f}"
        )

    async def _quit(self, _: str) -> None:
        if self.app.harness.is_busy:
            self.app.harness.abort()
            await self.app.harness.wait_for_idle()
        self.quit = True

    def shutdown(self) -> None:
        self._prompts.put(None)


def _tool_list(app: App) -> Iterator[Any]:
    from ._app import tools_for

    yield from tools_for(app.harness.tool_context)
    if app.mcp is not None:
        yield from app.mcp(app.harness.tool_context)


async def run_interactive(app: App, renderer: Renderer, stdin: TextIO) -> int:
    """The interactive conversation; returns the exit status."""
    reader = LineReader(stdin, app.out, _history_path(app.settings.env))
    if reader.readline is not None:
        renderer.input = reader
    ui = _Interactive(app, renderer, reader)
    try:
        return await ui.run()
    finally:
        ui.shutdown()
        reader.close()
