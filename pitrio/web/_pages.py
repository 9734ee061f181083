"""The pages' side of ``pitrio serve``: one agent session shared by every open page.

:class:`WebApp` holds the :class:`~pitrio.cli._app.App` (harness and session) all pages
see. It turns the agent's events into :mod:`pitrio.ui` messages for every page (and keeps
the transcript a page that connects gets as its snapshot), runs the commands pages send
(prompts, steering, follow-ups, Stop, consent answers; the protocol is described in
:mod:`pitrio.web._serve`), lists, resumes and starts sessions, and asks the pages for
consent to run ``bash``, ``write`` and ``edit``. Slash commands and the model and
thinking switches are :mod:`pitrio.web._commands`; the sockets are
:mod:`pitrio.web._http`.
"""

from __future__ import annotations

import json
import math
import time
import unicodedata
from collections.abc import Callable, Sequence
from json.encoder import encode_basestring
from typing import Any, Final, final

import trio

from pitrio import Model, TextContent, UserMessage
from pitrio.cli._app import App
from pitrio.harness import Session, SessionError, SessionStore, ToolCallEvent
from pitrio.ui import AppendDelta, Status, Transcript, UiAdapter, UiMessage, tool_title

from ._commands import WEB_COMMANDS, Commands, model_name, same_model, thinking_levels
from ._http import Client, text_frame

__all__ = [
    "FRAME_SECONDS",
    "HISTORY_CHARS",
    "HISTORY_LIMIT",
    "MAX_FRAME_SECONDS",
    "SEND_SHARE",
    "SNAPSHOT_CHARS",
    "SNAPSHOT_ITEMS",
    "Broadcaster",
    "WebApp",
    "delta_text",
    "first_prompt",
    "history_reply",
    "message_text",
    "send_or_drop",
]

_LISTED: Final = 50  # sessions shown, newest first
_TITLE: Final = 80

SNAPSHOT_ITEMS: Final = 100
"""At most this many items (the newest) in a connecting page's snapshot."""
SNAPSHOT_CHARS: Final = 256_000
"""About this many characters of items in a snapshot (the newest item always goes)."""
HISTORY_LIMIT: Final = 50
"""Items a ``history`` request gets when it names no ``limit``."""
HISTORY_CHARS: Final = 1_000_000
"""About this many characters of items in one ``history`` reply."""


FRAME_SECONDS: Final = 0.01
"""The shortest time between two batches to the pages: what is published meanwhile goes
to every page together, as one JSON text (a fast stream costs each page a frame per
interval, not one per delta; a message after a quiet interval goes at once)."""
SEND_SHARE: Final = 0.1
"""About the largest share of the server's time that writing batches to the pages takes:
after a batch that took ``t`` seconds to write to every page, the next waits at least
``t / SEND_SHARE`` (up to :data:`MAX_FRAME_SECONDS`). With many pages the batches grow
instead of their number, so that a delta costs about the same whatever the number of
pages (a server made slower by its pages does not get more, smaller batches)."""
MAX_FRAME_SECONDS: Final = 1.0
"""The longest time between two batches, however long writing one takes."""


class Broadcaster:
    """What every kind of server's pages share: the connected pages, the view they show,
    and sending to them (a page that stopped reading is dropped).

    What is published or broadcast waits in an outbox for at most :data:`FRAME_SECONDS`
    (longer when writing the last batch took long: :data:`SEND_SHARE`) and then goes to
    every page as one frame, the same bytes for each, written straight to each page's
    socket (:meth:`pitrio.web._http.Client.write`): its JSON and its frame are made once,
    whatever the number of pages. Each page still gets every message in the order
    it was made: a message to one page (:meth:`send`) and a page connecting (its
    snapshot, which shows what the outbox holds) send the outbox first.
    """

    view: Transcript

    def __init__(self) -> None:
        self.clients: set[Client] = set()
        self.nursery: trio.Nursery | None = None
        self._outbox: list[str] = []
        self._flush_pending = False
        self._last_flush = -math.inf
        self._gap = FRAME_SECONDS
        self._delta_to: tuple[str, str] | None = None  # the outbox's last delta's item
        self._deltas: list[str] = []

    def publish(self, messages: Sequence[UiMessage]) -> None:
        for message in messages:
            self.view.apply(message)
            if type(message) is AppendDelta:
                self._post_delta(message)
            else:
                self._post(message_text(message))

    def broadcast(self, data: dict[str, Any]) -> None:
        self._post(_dumps(data))

    def send(self, client: Client, text: str) -> None:
        self.flush()  # what was broadcast before goes first
        send_or_drop(self.clients, client, text_frame(text))

    def flush(self) -> None:
        """Send the outbox to every page now (one text: a message, or an array)."""
        self._end_delta()
        outbox = self._outbox
        if not outbox:
            return
        self._outbox = []
        self._last_flush = trio.current_time()
        started = _clock()
        frame = text_frame(outbox[0] if len(outbox) == 1 else f"[{','.join(outbox)}]")
        dropped = [client for client in self.clients if not _wrote(client, frame)]
        if dropped:
            self.clients.difference_update(dropped)
        took = _clock() - started
        self._gap = min(max(FRAME_SECONDS, took / SEND_SHARE), MAX_FRAME_SECONDS)

    def _post(self, text: str) -> None:
        self._end_delta()
        self._outbox.append(text)
        self._schedule()

    def _post_delta(self, message: AppendDelta) -> None:
        # Deltas in a row to the same item and channel go as one: the page appends their
        # text together, as it would one after the other.
        if self._delta_to is not None:
            if self._delta_to == (message.id, message.channel):
                self._deltas.append(message.delta)
                return
            self._end_delta()
        self._delta_to = (message.id, message.channel)
        self._deltas = [message.delta]
        self._schedule()

    def _end_delta(self) -> None:
        if self._delta_to is not None:
            item, channel = self._delta_to
            self._delta_to = None
            self._outbox.append(delta_text(item, "".join(self._deltas), channel))

    def _schedule(self) -> None:
        if self._flush_pending:
            return
        wait = self._last_flush + self._gap - trio.current_time()
        if wait <= 0 or self.nursery is None:
            self.flush()
        else:
            self._flush_pending = True
            self.nursery.start_soon(self._flush_after, wait)

    async def _flush_after(self, wait: float) -> None:
        try:
            await trio.sleep(wait)
        finally:
            self._flush_pending = False
        self.flush()


@final
class WebApp(Broadcaster):
    """The state shared by every connected page: one App (harness + session)."""

    def __init__(
        self,
        app: App,
        store: SessionStore | None,
        *,
        banner: str | None,
        models: Sequence[Model] = (),
    ) -> None:
        super().__init__()
        self.app = app
        self.store = store
        self.banner = banner
        current = app.model
        self.models = tuple(models)
        if not any(same_model(m, current) for m in self.models):
            self.models = (current, *self.models)
        self.adapter = UiAdapter(harness=True)
        self.view = Transcript()
        self.running = False
        self._consents: dict[str, tuple[dict[str, Any], trio.Event, list[str]]] = {}
        self._consent_counter = 0
        self.switch_lock = trio.Lock()
        self._titles: dict[str, tuple[float, str]] = {}
        self._tail_cache: tuple[int, list[str], int] | None = None
        self.commands = Commands(self)
        app.subscribe(self._on_event)
        app.consent.ask = self._ask
        app.consent.mode_hint = "the web UI"
        self._show_history()

    # -- events to pages ---------------------------------------------------------------

    def _on_event(self, event: Any) -> None:
        self.publish(self.adapter.feed(event))

    def _show_history(self) -> None:
        self.adapter = UiAdapter(harness=True)
        self.view.clear()
        self.view.apply_all(self.adapter.history(self.app.harness.messages))

    def info(self) -> dict[str, Any]:
        """The page's header: model and thinking switches, directory, banner, commands."""
        app = self.app
        model = app.model
        levels = thinking_levels(model)
        fixed = len(self.models) == 1
        commands = [[name, text] for name, text in WEB_COMMANDS.items()]
        commands += [[f"/{t.name} ARGS", t.description] for t in app.templates]
        return {
            "type": "info",
            "model": model_name(model),
            "models": [{"id": model_name(m), "name": m.name} for m in self.models],
            "modelNote": (
                "The model is fixed for this server: restart pitrio serve with --model"
                if fixed
                else "The model of this session (recorded in it; /model does the same)"
            ),
            "thinking": app.thinking,
            "thinkingLevels": levels,
            "thinkingNote": (
                f"{model_name(model)} has no reasoning levels to choose from"
                if len(levels) < 2
                else "The reasoning level (recorded in the session; /thinking does the same)"
            ),
            "commands": commands,
            "cwd": app.cwd,
            "banner": self.banner,
        }

    def hello(self) -> list[str]:
        """What a page gets first (JSON texts): ``info``, ``reset`` (with ``earlier``,
        the number of older items it may ask for with ``history``), the view's tail
        (at most :data:`SNAPSHOT_ITEMS` items and about :data:`SNAPSHOT_CHARS`
        characters), ``status``, and the consent requests waiting for an answer."""
        session = self.app.session
        tail, earlier = self._tail()
        reset = {
            "type": "reset",
            "session": session.id if session is not None else None,
            "earlier": earlier,
        }
        return [
            _dumps(self.info()),
            _dumps(reset),
            *tail,
            *(_dumps(request) for request, _, _ in self._consents.values()),
        ]

    def _tail(self) -> tuple[list[str], int]:
        """The snapshot's items and status as JSON texts, and how many items it leaves
        out; made once per change of the view, so that pages connecting meanwhile
        share the same texts."""
        cached = self._tail_cache
        if cached is None or cached[0] != self.view.version:
            messages, earlier = self.view.earlier(
                None, limit=SNAPSHOT_ITEMS, max_chars=SNAPSHOT_CHARS
            )
            messages.append(Status(working=self.view.working))
            cached = (self.view.version, [_dumps(m.to_json()) for m in messages], earlier)
            self._tail_cache = cached
        return cached[1], cached[2]

    def history(self, client: Client, data: dict[str, Any]) -> None:
        """Answer ``{"type": "history", "before": ID, "limit": N}``: the items before
        the item ``ID``, as the snapshot gives them, and how many come before those."""
        session = self.app.session
        self.send(client, history_reply(self.view, session.id if session else None, data))

    # -- the pages' connections and commands -------------------------------------------

    def connect(self, client: Client) -> None:
        """Queue the snapshot for a page that connected, then its live messages."""
        self.flush()  # the snapshot shows what the outbox holds: the others get it first
        # The snapshot (one write), then the live messages, in order.
        client.write(b"".join(map(text_frame, self.hello())))
        self.clients.add(client)

    def disconnect(self, client: Client) -> None:
        """A page left: broadcast nothing more to it."""
        self.clients.discard(client)

    async def receive(self, client: Client, raw: str | bytes) -> None:
        """One WebSocket message from a page: a JSON command; a bad one is answered with
        an ``error`` message (the page keeps its socket)."""
        try:
            data = json.loads(raw)
        except json.JSONDecodeError:
            self.send(client, _error("a command must be JSON"))
            return
        try:
            await self.command(client, data)
        except Exception as exc:  # a bad command must not cost the page its socket
            self.send(client, _error(f"{data.get('type')!r} failed: {exc}"))

    async def command(self, client: Client, data: Any) -> None:
        if not isinstance(data, dict) or not isinstance(data.get("type"), str):
            self.send(client, _error("a command is a JSON object with a string 'type'"))
            return
        kind = data["type"]
        text = data.get("text")
        if kind in ("prompt", "steer", "follow_up"):
            if not isinstance(text, str) or not text.strip():
                self.send(client, _error(f"{kind} needs a non-empty 'text'"))
                return
            if text.lstrip().startswith("/"):
                expanded = await self.commands.slash(client, text.strip())
                if expanded is None:
                    return
                text = expanded
            if not self.running:
                self._start_prompt(text)
            elif kind == "follow_up":
                self.app.harness.follow_up(text)
                self.broadcast({"type": "queued", "mode": "follow_up", "text": text})
            else:
                self.app.harness.steer(text)
                self.broadcast({"type": "queued", "mode": "steer", "text": text})
        elif kind == "abort":
            # As the terminal does on Ctrl-C: what was queued goes with the run, not
            # with the next, unrelated prompt.
            agent = self.app.harness.agent
            dropped = len(agent.queued_steering) + len(agent.queued_follow_up)
            agent.clear_all_queues()
            self.app.harness.abort()
            for _, event, answer in self._consents.values():
                answer.append("n")
                event.set()
            if dropped:
                self.broadcast({"type": "queueCleared", "dropped": dropped})
        elif kind == "sessions":
            self.send(client, json.dumps(await self.sessions()))
        elif kind in ("open", "new", "hello"):
            await self.switch(client, kind, data.get("id") or data.get("session"))
        elif kind in ("set_model", "set_thinking"):
            name, key = ("/model", "model") if kind == "set_model" else ("/thinking", "level")
            value = data.get(key)
            if not isinstance(value, str):
                self.send(client, _error(f"{kind} needs a {key!r} string"))
                return
            await self.commands.run(client, name, value)
        elif kind == "history":
            self.history(client, data)
        elif kind == "consent":
            entry = self._consents.get(str(data.get("id")))
            reply = data.get("answer")
            if entry is not None and reply in ("y", "n", "a"):
                entry[2].append(str(reply))
                entry[1].set()
        else:
            self.send(client, _error(f"unknown command type {kind!r}"))

    def _start_prompt(self, text: str) -> None:
        assert self.nursery is not None
        self.running = True

        async def run() -> None:
            try:
                await self.app.harness.prompt(text)
            except Exception as exc:  # a failed run is data; anything else is reported
                self.broadcast(json.loads(_error(f"the prompt could not run: {exc}")))
            finally:
                self.running = False

        self.nursery.start_soon(run)

    async def sessions(self) -> dict[str, Any]:
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
        title = first_prompt(messages)
        if title:  # a session without a prompt yet will have one soon
            self._titles[session_id] = (modified, title)
        return title

    async def switch(self, client: Client, kind: str, session_id: Any) -> Session | None:
        """Open (``open``, ``hello``) or start (``new``) a session and show it in every
        page; the session, or ``None`` when the page was told why not."""
        store = self.store
        current = self.app.session
        if kind == "hello" and (not session_id or (current and current.id == session_id)):
            return None
        if store is None:
            self.send(client, _error("this server keeps no sessions"))
            return None
        if self.running:
            self.send(client, _error("the agent is working: stop it before switching sessions"))
            return None
        async with self.switch_lock:
            try:
                if kind == "new":
                    session = await store.create(cwd=self.app.cwd)
                else:
                    session = await store.open(str(session_id))
            except (SessionError, OSError, ValueError) as exc:
                self.send(client, _error(f"cannot open session {session_id}: {exc}"))
                return None
            await self.adopt(session)
        return session

    async def adopt(self, session: Session) -> None:
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
        first = self.hello()
        for page in list(self.clients):
            for text in first:
                self.send(page, text)
        self.broadcast(await self.sessions())

    async def _ask(self, event: ToolCallEvent) -> str:
        self._consent_counter += 1
        ask_id = f"c{self._consent_counter}"
        request = {
            "type": "consent",
            "id": ask_id,
            "tool": event.tool_name,
            "title": tool_title(event.tool_name, event.args),  # the short label
            "arguments": event.args,  # the call exactly, as the tool gets it
            "full": shown_arguments(event.args),  # the same, as text to show whole
        }
        done = trio.Event()
        answer: list[str] = []
        self._consents[ask_id] = (request, done, answer)
        self.broadcast(request)
        # The run is shielded, and a cancellation from outside (the server shutting down)
        # becomes its abort: that refuses the call too, instead of waiting for ever.
        signal = self.app.harness.agent.signal
        forget = signal.add_callback(done.set) if signal is not None else None
        try:
            await done.wait()
        finally:
            if forget is not None:
                forget()
            del self._consents[ask_id]
            self.broadcast({"type": "consentDone", "id": ask_id})
        return answer[0] if answer else "n"

    # -- HTTP and WebSocket ------------------------------------------------------------


_INVISIBLE: Final = frozenset({"Cc", "Cf", "Co", "Cs", "Zl", "Zp"})


def shown_arguments(args: Any) -> str:
    """A tool call's arguments as indented JSON for a person to check before saying
    yes: whole, and with every control, format (bidirectional overrides, zero-width)
    or private-use character written as a JSON ``\\uXXXX`` escape, so that nothing
    hides or reorders what the call does. Other non-ASCII text shows as itself."""
    return "".join(map(_visible, json.dumps(args, ensure_ascii=False, indent=2)))


def _visible(char: str) -> str:
    if char == "\n" or unicodedata.category(char) not in _INVISIBLE:
        return char
    return json.dumps(char)[1:-1]  # "\\u202e"; a surrogate pair beyond the BMP


def send_or_drop(clients: set[Client], client: Client, frame: bytes) -> None:
    """Send ``frame`` (one or more :func:`~pitrio.web._http.text_frame`) to a page; a
    page that is gone, or too far behind, is dropped from ``clients`` (it reconnects and
    gets a snapshot)."""
    if not _wrote(client, frame):
        clients.discard(client)


def _wrote(client: Client, frame: bytes) -> bool:
    client.write(frame)
    return not client.closed


def history_reply(view: Transcript, session_id: str | None, data: dict[str, Any]) -> str:
    """The answer (a JSON text) to a page's ``history`` request ``data`` on ``view``: the
    items before the item ``before``, or an ``error`` naming what was wrong."""
    before = data.get("before")
    limit = data.get("limit", HISTORY_LIMIT)
    if not isinstance(before, str):
        return _error("history needs a 'before' item id (a string)")
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 500:
        return _error("history's 'limit' must be an integer from 1 to 500")
    messages, earlier = view.earlier(before, limit=limit, max_chars=HISTORY_CHARS)
    reply = {
        "type": "history",
        # Item ids start again in each session: a page that got a reset since it
        # asked (another session) knows the reply by this and drops it.
        "session": session_id,
        "before": before,
        "messages": [m.to_json() for m in messages],
        "earlier": earlier,
    }
    return _dumps(reply)


def first_prompt(messages: Sequence[Any]) -> str:
    """A session's title: its first prompt, on one line, shortened."""
    title = ""
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
    return title


def message_text(message: UiMessage) -> str:
    """A protocol message as the JSON text ``json.dumps(message.to_json(),
    ensure_ascii=False)`` gives, built directly for ``appendDelta`` (a stream's many
    messages: a fifth of the cost)."""
    if type(message) is AppendDelta:
        return delta_text(message.id, message.delta, message.channel)
    return _dumps(message.to_json())


def delta_text(item: str, delta: str, channel: str) -> str:
    """The JSON text of ``AppendDelta(id=item, delta=delta, channel=channel)``."""
    return (
        f'{{"type": "appendDelta", "id": {encode_basestring(item)}, '
        f'"delta": {encode_basestring(delta)}, '
        f'"channel": {encode_basestring(channel)}}}'
    )


# What times writing a batch (the benchmark's and the tests' point of entry).
_clock: Callable[[], float] = time.perf_counter

# One encoder: json.dumps with an option builds a new one per call.
_ENCODER: Final = json.JSONEncoder(ensure_ascii=False)


def _dumps(data: dict[str, Any]) -> str:
    return _ENCODER.encode(data)


def _error(text: str) -> str:
    return json.dumps({"type": "error", "text": text})
