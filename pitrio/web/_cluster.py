"""``pitrio serve --store postgresql://... --queue redis://...``: the web UI of N workers.

The pages speak the protocol of :mod:`pitrio.web._serve`, but nothing runs in the server:
a prompt typed in a page becomes a Celery job (:func:`pitrio.worker.submit_prompt`, one
idempotency key per prompt) that some worker (``python -m pitrio worker``) runs against the
shared PostgreSQL store, and the pages follow the session's Redis stream
(:func:`pitrio.worker.follow`), into which that worker publishes the run's events. Stop
sends an abort over Redis (:func:`pitrio.worker.send_abort`) to the session's jobs that
have not ended; the worker's job watches for it, aborts its run, and the run settles as
an aborted answer, as in one process.

What a page sees is the session as PostgreSQL holds it, read without a lease (a worker
holds the lease while it runs), with the running job's events laid over it: the stream
carries each job's markers (``pitrio.job``: ``started``, then ``done`` or ``failed``), and
the view shows the events between the markers of a job the session has not recorded as
done. When a job ends, the view is read again from the session (the store is the truth:
a recovered run, a compaction) and every page gets it as a new snapshot. A page that
connects late gets the view so far (the session, and the events of the running job
replayed from the stream), then the live events.

What needs the server's own harness is not offered: slash commands, prompt templates, the
model and thinking switches (the workers' harness factory chooses the model), and consent
(the factory's tools decide). A prompt sent while a job runs is queued as the next job, not
steered into the run.
"""

from __future__ import annotations

import json
import re
import types
import uuid
from collections.abc import Sequence
from typing import Any, Final, final

import trio

from pitrio import wire
from pitrio.harness import (
    CustomEntry,
    PostgresSessionStore,
    Session,
    SessionError,
    SessionNotFoundError,
)
from pitrio.ui import Status, Transcript, UiAdapter
from pitrio.worker import (
    JOB_ENTRY,
    StreamedEvent,
    follow,
    make_client_app,
    read_stream,
    send_abort,
    stream_for,
    submit_prompt,
)

from ._http import Client, text_frame
from ._pages import SNAPSHOT_CHARS, SNAPSHOT_ITEMS, Broadcaster, first_prompt, history_reply

__all__ = ["ClusterPages"]

_LISTED: Final = 50
_CAMEL: Final = re.compile(r"(?<!^)(?=[A-Z])")
_REFUSED: Final = (
    "is not available here: prompts run as jobs on the workers (pitrio serve --queue), "
    "whose harness chooses the model, tools and settings"
)


def _session_jobs(session: Session | None) -> tuple[str | None, set[str]]:
    """The running job's key, when it is the session's last, and the keys that ended."""
    started: list[str] = []
    ended: set[str] = set()
    for entry in session.entries if session is not None else ():
        if isinstance(entry, CustomEntry) and entry.custom_type == JOB_ENTRY:
            data = entry.data
            if isinstance(data, dict) and isinstance(data.get("key"), str):
                key = str(data["key"])
                if data.get("state") == "started":
                    started.append(key)
                else:
                    ended.add(key)
    last = started[-1] if started else None
    return (last if last is not None and last not in ended else None), ended


def _history(session: Session | None, running: str | None) -> Sequence[Any]:
    """The session's messages, without those of the running job (its events show them)."""
    if session is None:
        return ()
    if running is None:
        return session.build_context().messages
    for entry in session.entries:
        if (
            isinstance(entry, CustomEntry)
            and entry.custom_type == JOB_ENTRY
            and isinstance(entry.data, dict)
            and entry.data.get("key") == running
        ):
            if entry.parent_id is None:
                return ()
            return session.build_context(entry.parent_id).messages
    return session.build_context().messages


async def _read_view(session: Session | None) -> tuple[set[str], Sequence[Any]]:
    """The keys of the jobs that ended and the messages to show (:func:`_session_jobs`,
    :func:`_history`), read in a worker thread: they read entries of the whole session,
    which an open reads back from the database."""

    def read() -> tuple[set[str], Sequence[Any]]:
        running, ended = _session_jobs(session)
        return ended, _history(session, running)

    return await trio.to_thread.run_sync(read)


def _harness_event(data: dict[str, Any]) -> Any:
    """A harness event read from the stream, as the adapter reads it (by attribute)."""
    fields = {_CAMEL.sub("_", k).lower(): v for k, v in data.items()}
    return types.SimpleNamespace(**fields)


@final
class ClusterPages(Broadcaster):
    """The state every page shares: the session they show, its view, the follower."""

    def __init__(
        self,
        store: PostgresSessionStore,
        *,
        queue_url: str,
        events_url: str,
        cwd: str,
        banner: str,
    ) -> None:
        super().__init__()
        self.store = store
        self.queue_url = queue_url
        self.events_url = events_url
        self.cwd = cwd
        self.banner = banner
        self.queue = make_client_app(queue_url)
        self.session_id: str | None = None
        self.adapter = UiAdapter(harness=True)
        self.view = Transcript()
        self.active: set[str] = set()  # keys of jobs submitted or started, not ended
        self._shown: str | None = None  # the job whose events the view shows now
        self._ended: set[str] = set()  # jobs the session recorded as ended
        self._follow_scope: trio.CancelScope | None = None
        self._switch_lock = trio.Lock()
        self._titles: dict[str, tuple[float, str]] = {}

    # -- the view ----------------------------------------------------------------------

    async def _read_session(self) -> None:
        """Rebuild the view from the session as PostgreSQL holds it now."""
        assert self.session_id is not None
        session: Session | None
        try:
            session = await self.store.open(self.session_id, read_only=True)
        except SessionNotFoundError:
            session = None  # its first job creates it
        try:
            self._ended, messages = await _read_view(session)
        finally:
            if session is not None:
                await session.close()
        self.adapter = UiAdapter(harness=True)
        self.view.clear()
        self.view.apply_all(self.adapter.history(messages))
        self._shown = None

    async def _feed(self, event: StreamedEvent) -> None:
        data = event.data
        kind = data.get("type")
        if kind == JOB_ENTRY:
            key = str(data.get("key"))
            if data.get("state") == "started":
                self._shown = None if key in self._ended else key
                if self._shown is not None:
                    self.active.add(key)
                return
            self.active.discard(key)
            if key in self._ended:
                return
            await self._read_session()
            self._send_snapshot()
            if data.get("state") == "failed":  # after the snapshot, which would hide it
                self.broadcast({"type": "error", "text": f"the job failed: {data.get('error')}"})
            return
        if self._shown is None:
            return  # a job the session shows already, or events without a marker
        try:
            parsed = wire.structure_event(data)
        except Exception:
            parsed = _harness_event(data)  # settled, auto_retry_*, compaction_*: by attribute
        self.publish(self.adapter.feed(parsed))

    def info(self) -> dict[str, Any]:
        return {
            "type": "info",
            "model": "workers",
            "models": [],
            "modelNote": "The workers' harness factory chooses the model",
            "thinking": "off",
            "thinkingLevels": [],
            "thinkingNote": "The workers' harness factory chooses the reasoning level",
            "commands": [],
            "cwd": self.cwd,
            "banner": self.banner,
        }

    def hello(self) -> list[str]:
        messages, earlier = self.view.earlier(None, limit=SNAPSHOT_ITEMS, max_chars=SNAPSHOT_CHARS)
        messages.append(Status(working=self.view.working or bool(self.active)))
        reset = {"type": "reset", "session": self.session_id, "earlier": earlier}
        return [
            _dumps(self.info()),
            _dumps(reset),
            *(_dumps(m.to_json()) for m in messages),
        ]

    def _send_snapshot(self) -> None:
        first = self.hello()
        for page in list(self.clients):
            for text in first:
                self.send(page, text)

    # -- following the session's stream ------------------------------------------------

    async def switch(self, session_id: str) -> None:
        """Show ``session_id`` in every page and follow its stream."""
        async with self._switch_lock:
            if self._follow_scope is not None:
                self._follow_scope.cancel()
            self.session_id = session_id
            self.active.clear()
            # The stream first, then the session: a job that ends in between is in both,
            # and its events are skipped (the session records it as ended).
            held = await read_stream(self.events_url, stream_for(session_id))
            await self._read_session()
            for event in held:
                await self._feed(event)
            after = held[-1].id if held else "0"
            assert self.nursery is not None
            self._follow_scope = await self.nursery.start(self._follow, session_id, after)
            self._send_snapshot()
            self.broadcast(await self.sessions())

    async def _follow(
        self,
        session_id: str,
        after: str,
        task_status: trio.TaskStatus[trio.CancelScope] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        with trio.CancelScope() as scope:
            task_status.started(scope)
            async with follow(self.events_url, session_id, after=after, poll=0.2) as events:
                async for event in events:
                    if session_id != self.session_id:
                        break  # the pages switched sessions; this task is being cancelled
                    await self._feed(event)

    # -- pages -------------------------------------------------------------------------

    def connect(self, client: Client) -> None:
        self.flush()  # as WebApp.connect
        client.write(b"".join(map(text_frame, self.hello())))
        self.clients.add(client)

    def disconnect(self, client: Client) -> None:
        self.clients.discard(client)

    async def receive(self, client: Client, raw: str | bytes) -> None:
        try:
            data = json.loads(raw)
        except json.JSONDecodeError:
            self.send(client, _error("a command must be JSON"))
            return
        if not isinstance(data, dict) or not isinstance(data.get("type"), str):
            self.send(client, _error("a command is a JSON object with a string 'type'"))
            return
        try:
            await self.command(client, data)
        except Exception as exc:  # a bad command must not cost the page its socket
            self.send(client, _error(f"{data.get('type')!r} failed: {exc}"))

    async def command(self, client: Client, data: dict[str, Any]) -> None:
        kind = data["type"]
        if kind in ("prompt", "steer", "follow_up"):
            text = data.get("text")
            if not isinstance(text, str) or not text.strip():
                self.send(client, _error(f"{kind} needs a non-empty 'text'"))
            elif text.lstrip().startswith("/"):
                self.send(client, _error(f"{text.split()[0]!r} {_REFUSED}"))
            else:
                await self.submit(text)
        elif kind == "abort":
            if self.active and self.session_id is not None:
                await send_abort(self.events_url, self.session_id, sorted(self.active))
        elif kind == "sessions":
            self.send(client, _dumps(await self.sessions()))
        elif kind == "new":
            session = await self.store.create(cwd=self.cwd)
            await session.close()
            await self.switch(session.id)
        elif kind in ("open", "hello"):
            wanted = data.get("id") or data.get("session")
            if kind == "hello" and (not wanted or wanted == self.session_id):
                return
            if not isinstance(wanted, str):
                self.send(client, _error(f"{kind} needs a session 'id' (a string)"))
                return
            try:
                found = await self.store.open(wanted, read_only=True)
            except (SessionError, OSError, ValueError) as exc:
                self.send(client, _error(f"cannot open session {wanted}: {exc}"))
                return
            await found.close()
            await self.switch(wanted)
        elif kind == "history":
            self.history(client, data)
        elif kind in ("set_model", "set_thinking", "consent"):
            self.send(client, _error(f"{kind} {_REFUSED}"))
        else:
            self.send(client, _error(f"unknown command type {kind!r}"))

    async def submit(self, text: str) -> str:
        """Enqueue ``text`` as a job in the shown session; its idempotency key."""
        assert self.session_id is not None
        key = str(uuid.uuid4())
        self.active.add(key)
        self.broadcast(Status(working=True).to_json())
        session_id = self.session_id
        try:
            await trio.to_thread.run_sync(
                lambda: submit_prompt(self.queue, session_id, text, key=key, cwd=self.cwd)
            )
        except BaseException:
            self.active.discard(key)  # never queued: nothing will end it
            self.broadcast(Status(working=self.view.working or bool(self.active)).to_json())
            raise
        return key

    def history(self, client: Client, data: dict[str, Any]) -> None:
        self.send(client, history_reply(self.view, self.session_id, data))

    async def sessions(self) -> dict[str, Any]:
        items: list[dict[str, Any]] = []
        for info in (await self.store.list(cwd=self.cwd))[:_LISTED]:
            items.append(
                {
                    "id": info.id,
                    "modified": info.modified_at,
                    "title": await self._title(info.id, info.modified_at),
                    "current": info.id == self.session_id,
                }
            )
        return {"type": "sessions", "items": items}

    async def _title(self, session_id: str, modified: float) -> str:
        cached = self._titles.get(session_id)
        if cached is not None and cached[0] == modified:
            return cached[1]
        try:
            session = await self.store.open(session_id, read_only=True)
        except (SessionError, OSError, ValueError):
            return ""
        try:
            messages = session.build_context().messages
        finally:
            await session.close()
        title = first_prompt(messages)
        if title:
            self._titles[session_id] = (modified, title)
        return title

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(self.queue.close)


def _dumps(data: dict[str, Any]) -> str:
    return json.dumps(data, ensure_ascii=False)


def _error(text: str) -> str:
    return json.dumps({"type": "error", "text": text})
