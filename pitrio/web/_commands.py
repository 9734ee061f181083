"""The slash commands of ``pitrio serve`` and its model and thinking switches.

A prompt starting with ``/`` is one of :data:`WEB_COMMANDS` (the terminal's set less
``/quit``) or a prompt template (``/name args``): :class:`Commands` runs it and answers
the page that sent it with an ``output`` message; an unknown one is refused, never sent
to the model. The page's Model and Thinking menus (``set_model``, ``set_thinking``) run
``/model`` and ``/thinking``. Here too: which thinking levels a model takes
(:func:`thinking_levels`) and the nearest one it takes (:func:`nearest_level`).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, Protocol, final, get_args

import trio

from pitrio import Model, ThinkingLevel, UsageError
from pitrio.cli._app import App, tools_for
from pitrio.cli._interactive import COMMANDS
from pitrio.cli._render import session_cost
from pitrio.harness import Session, SessionError, SessionStore, expand_prompt_template
from pitrio.ui import Status, UiMessage

from ._http import Client

__all__ = [
    "LEVELS",
    "WEB_COMMANDS",
    "CommandError",
    "Commands",
    "Shared",
    "model_name",
    "nearest_level",
    "same_model",
    "thinking_levels",
]

_HANDLED: Final = frozenset(
    {"/help", "/model", "/thinking", "/tools", "/session", "/resume", "/fork", "/compact",
     "/clear", "/cost"}
)  # fmt: skip
WEB_COMMANDS: Final[dict[str, str]] = {
    name: text for name, text in COMMANDS.items() if name.split()[0] in _HANDLED
}
"""The page's slash commands: those of the terminal's that a page can run (not ``/quit``:
a tab is closed instead; not the terminal's session-file and clipboard commands)."""

LEVELS: Final[tuple[ThinkingLevel, ...]] = get_args(ThinkingLevel)
"""Every thinking level, lowest first."""


def thinking_levels(model: Model) -> list[ThinkingLevel]:
    """The thinking levels ``model`` takes (pi-ai's ``getSupportedThinkingLevels``)."""
    from pitrio.providers._options import supported_thinking_levels

    levels: list[ThinkingLevel] = [
        level for level in LEVELS if level in supported_thinking_levels(model)
    ]
    return levels


def nearest_level(model: Model, level: ThinkingLevel) -> ThinkingLevel:
    """``level`` if ``model`` takes it, else the nearest it takes (pi-ai's clamp)."""
    from pitrio.providers._options import clamp_thinking_level

    clamped = clamp_thinking_level(model, level)
    return next((known for known in LEVELS if known == clamped), "off")


def model_name(model: Model) -> str:
    """``PROVIDER/ID``, as the page and ``/model`` name a model."""
    return f"{model.provider}/{model.id}"


def same_model(a: Model, b: Model) -> bool:
    """Whether ``a`` and ``b`` are the same provider's same model."""
    return a.provider == b.provider and a.id == b.id


class Shared(Protocol):
    """What the commands use of the state the pages share
    (:class:`~pitrio.web._pages.WebApp` is it; a protocol, so that this module
    does not import that one, which imports this)."""

    app: App
    store: SessionStore | None
    models: tuple[Model, ...]
    running: bool
    nursery: trio.Nursery | None
    switch_lock: trio.Lock

    def send(self, client: Client, text: str) -> None: ...

    def broadcast(self, data: dict[str, Any]) -> None: ...

    def publish(self, messages: Sequence[UiMessage]) -> None: ...

    def info(self) -> dict[str, Any]: ...

    async def sessions(self) -> dict[str, Any]: ...

    async def switch(self, client: Client, kind: str, session_id: Any) -> Session | None: ...

    async def adopt(self, session: Session) -> None: ...


class CommandError(Exception):
    """A slash command or switch that cannot be done: the message says why."""


@final
class Commands:
    """The slash commands of the pages of one :class:`Shared` (the server's
    :class:`~pitrio.web._pages.WebApp`)."""

    def __init__(self, web: Shared) -> None:
        self.web = web

    async def slash(self, client: Client, text: str) -> str | None:
        """Run a slash command; a prompt template's expansion, or ``None`` when the
        command was handled (or refused) here."""
        name = text.split(maxsplit=1)[0]
        arg = text[len(name) :].strip()
        if name in self._handlers() or name in ("/quit", "/exit"):
            await self.run(client, name, arg)
            return None
        expanded = expand_prompt_template(text, self.web.app.templates)
        if expanded == text:
            self._output(
                client,
                name,
                f"unknown command {name}: nothing was sent to the model (/help lists the commands)",
                error=True,
            )
            return None
        return expanded

    async def run(self, client: Client, name: str, arg: str) -> None:
        """Run the command ``name`` with ``arg``; a refusal or failure is told to ``client``."""
        handler = self._handlers().get(name)
        try:
            if handler is None:  # /quit, /exit
                msg = (
                    f"{name} is for the terminal: close the tab to leave (the session is "
                    "saved); Ctrl-C where pitrio serve runs stops the server"
                )
                raise CommandError(msg)
            await handler(client, name, arg)
        except CommandError as exc:
            self._output(client, name, str(exc), error=True)
            if name in ("/model", "/thinking"):
                self.web.send(client, json.dumps(self.web.info()))  # the switch shows the truth
        except (SessionError, UsageError, ValueError, OSError) as exc:
            self._output(client, name, f"{name}: {exc}", error=True)

    def _handlers(self) -> dict[str, Callable[[Client, str, str], Awaitable[None]]]:
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
        client: Client,
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
        self.web.send(client, json.dumps(data, ensure_ascii=False))

    def _idle_guard(self, name: str) -> None:
        if self.web.running or self.web.app.harness.is_busy:
            msg = f"{name} waits until the agent is idle (Stop aborts it)"
            raise CommandError(msg)

    async def _help(self, client: Client, name: str, _: str) -> None:
        levels = ", ".join(thinking_levels(self.web.app.model))
        lines = [
            f"  {command:<26} {text}" + (f" ({levels})" if command.startswith("/thinking") else "")
            for command, text in WEB_COMMANDS.items()
        ]
        templates = self.web.app.templates
        if templates:
            lines.append("prompt templates:")
            lines += [f"  /{t.name:<25} {t.description}" for t in templates]
        lines.append(
            "keys: Enter sends; while the agent works Enter steers it and Alt+Enter queues "
            "a follow-up; Stop aborts"
        )
        self._output(client, name, "commands:\n" + "\n".join(lines))

    async def _model(self, client: Client, name: str, arg: str) -> None:
        app = self.web.app
        if not arg:
            lines = [f"model: {model_name(app.model)} (thinking {app.thinking})"]
            if len(self.web.models) == 1:
                lines.append("fixed for this server (restart pitrio serve with --model)")
            else:
                lines.append("available (/model PROVIDER/ID, or the Model menu):")
                lines += [
                    f"{'*' if same_model(m, app.model) else ' '} {model_name(m)}  {m.name}"
                    for m in self.web.models
                ]
            self._output(client, name, "\n".join(lines))
            return
        self._idle_guard(name)
        provider, slash, model_id = arg.partition("/")
        if not slash:
            provider, model_id = app.model.provider, arg
        model = next(
            (m for m in self.web.models if m.provider == provider and m.id == model_id), None
        )
        if model is None:
            if len(self.web.models) == 1:
                msg = (
                    f"this server runs the fixed model {model_name(app.model)} (the offline "
                    "replay, --base-url, --local or an injected model): restart pitrio "
                    "serve with --model to use another"
                )
            else:
                msg = f"unknown model {arg!r}; /model lists the {len(self.web.models)} available"
            raise CommandError(msg)
        old_level = app.thinking
        if not same_model(model, app.model):
            await app.set_model(model)
        text = f"model: {model_name(model)}"
        level = nearest_level(model, old_level)
        if level != old_level:
            await app.set_thinking(level)
            text += f" (it has no thinking level {old_level}: now {level})"
        await self._flush()
        self._output(client, name, text)
        self.web.broadcast(self.web.info())

    async def _thinking(self, client: Client, name: str, arg: str) -> None:
        app = self.web.app
        levels = thinking_levels(app.model)
        if not arg:
            self._output(client, name, f"thinking: {app.thinking} (levels: {', '.join(levels)})")
            return
        level = next((known for known in levels if known == arg), None)
        if level is None:
            known = ", ".join(levels)
            msg = f"{model_name(app.model)} has no thinking level {arg!r} (levels: {known})"
            raise CommandError(msg)
        self._idle_guard(name)
        changed = level != app.thinking
        if changed:
            await app.set_thinking(level)
            await self._flush()
        self._output(client, name, f"thinking: {level}")
        if changed:
            self.web.broadcast(self.web.info())

    async def _flush(self) -> None:
        """Write a switch to the session file now (the harness writes at a turn's end):
        a reload, or another pitrio opening the session, sees it at once."""
        if self.web.app.session is not None:
            await self.web.app.session.flush()

    async def _tools(self, client: Client, name: str, _: str) -> None:
        app = self.web.app
        consent = app.consent
        turn = app.harness.turn
        lines = []
        for tool in turn.tools if turn is not None else tools_for(app.harness.tool_context):
            if tool.name in {"bash", "write", "edit"}:
                if consent.yes:
                    how = f"runs without asking ({app.settings.yes_reason})"
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

    async def _session(self, client: Client, name: str, _: str) -> None:
        app = self.web.app
        session = app.session
        if session is None or self.web.store is None:
            self._output(client, name, "no session: this server keeps none")
            return
        infos = await self.web.store.list(cwd=app.cwd)
        path = next((i.path for i in infos if i.id == session.id), None)
        # Every entry: a resumed session reads those off its branch back from storage.
        entries = await trio.to_thread.run_sync(lambda: len(session.entries))
        self._output(
            client,
            name,
            f"session {session.id}\n  file: {path}\n  cwd: {app.cwd}\n"
            f"  model: {model_name(app.model)}, thinking {app.thinking}\n"
            f"  messages: {len(app.harness.messages)}, entries: {entries}",
        )

    async def _resume(self, client: Client, name: str, arg: str) -> None:
        if self.web.store is None:
            msg = f"{name} needs sessions (this server keeps none)"
            raise CommandError(msg)
        listing = await self.web.sessions()
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
            raise CommandError(msg)
        current = self.web.app.session
        if current is not None and current.id == matches[0]:
            self._output(client, name, "that is the current session")
            return
        session = await self.web.switch(client, "open", matches[0])
        if session is not None:
            messages = len(self.web.app.harness.messages)
            self._output(client, name, f"resumed session {session.id} ({messages} messages)")

    async def _fork(self, client: Client, name: str, arg: str) -> None:
        current = self.web.app.session
        if current is None or self.web.store is None:
            msg = f"{name} needs a session (this server keeps none)"
            raise CommandError(msg)
        self._idle_guard(name)
        if not self.web.app.harness.messages:
            msg = "nothing to fork yet: this session has no messages"
            raise CommandError(msg)
        async with self.web.switch_lock:
            forked = await current.fork(arg or None)
            await self.web.adopt(forked)
        messages = len(self.web.app.harness.messages)
        self._output(client, name, f"forked into session {forked.id} ({messages} messages)")

    async def _compact(self, client: Client, name: str, arg: str) -> None:
        if self.web.app.session is None:
            msg = f"{name} needs a session (this server keeps none)"
            raise CommandError(msg)
        self._idle_guard(name)
        assert self.web.nursery is not None
        self.web.running = True
        harness = self.web.app.harness

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
                self.web.running = False
                self.web.publish([Status(working=False)])

        self.web.nursery.start_soon(run)

    async def _clear(self, client: Client, name: str, _: str) -> None:
        if self.web.store is None:
            msg = f"{name} needs sessions (this server keeps none)"
            raise CommandError(msg)
        self._idle_guard(name)
        session = await self.web.switch(client, "new", None)
        if session is not None:
            self._output(client, name, f"new session {session.id}")

    async def _cost(self, client: Client, name: str, _: str) -> None:
        usage, dollars = session_cost(list(self.web.app.harness.messages))
        self._output(
            client,
            name,
            f"this session: input {usage.input}, output {usage.output}, cache read "
            f"{usage.cache_read}, cache write {usage.cache_write} tokens; ${dollars:.4f}",
        )
