"""One storage suite for every session store (modelled on Pi's session/testing/conformance).

Each test runs against the in-memory store, JSONL files, SQLite, PostgreSQL (a real
server, ``tests/_services.py``) and Pi's coding-agent files (``PiSessionStore``).
``open_store()``
returns a store on the same backing each time it is called (a new object for the
files and the database, as a second process would have), so reopening and
concurrent-writer tests see what really reached storage.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from _services import fresh_schema

from pitrio import (
    AssistantMessage,
    TextContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
    wire,
)
from pitrio.harness import (
    AppMessage,
    BashExecutionMessage,
    BranchSummaryEntry,
    BranchSummaryMessage,
    CompactionEntry,
    CompactionSummaryMessage,
    CustomEntry,
    InMemorySessionStore,
    JsonlSessionStore,
    MessageEntry,
    ModelRef,
    PiSessionStore,
    PostgresSessionStore,
    Session,
    SessionClosedError,
    SessionError,
    SessionExistsError,
    SessionLockedError,
    SessionNotFoundError,
    SessionStore,
    SqliteSessionStore,
)

StoreFactory = Callable[[], Any]


@pytest.fixture(params=["memory", "jsonl", "sqlite", "pi", "postgres"])
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    if request.param == "postgres":
        url, schema = request.getfixturevalue("postgres_url"), fresh_schema()
        made: list[PostgresSessionStore] = []

        def postgres() -> PostgresSessionStore:
            made.append(PostgresSessionStore(url, schema=schema))
            return made[-1]

        def close_all() -> None:
            for store in made:
                store.close_sync()

        request.addfinalizer(close_all)  # noqa: PT021 - the other stores need no teardown
        return postgres
    if request.param == "memory":
        store = InMemorySessionStore()
        return lambda: store
    if request.param == "jsonl":
        return lambda: JsonlSessionStore(tmp_path / "sessions")
    if request.param == "pi":
        return lambda: PiSessionStore(tmp_path / "pi-sessions")
    return lambda: SqliteSessionStore(tmp_path / "sessions.db")


def user(text: str) -> UserMessage:
    return UserMessage(content=text, timestamp=1)


def reply(text: str, stop_reason: Any = "stop") -> AssistantMessage:
    return AssistantMessage(
        content=(TextContent(text=text),),
        api="faux",
        provider="faux",
        model="m",
        usage=Usage(input=3, output=2, total_tokens=5),
        stop_reason=stop_reason,
        timestamp=2,
    )


def texts(session: Session, leaf_id: str | None = None) -> list[Any]:
    """The rebuilt context, one comparable item per message."""
    out: list[Any] = []
    for message in session.build_context(leaf_id).messages:
        match message:
            case UserMessage():
                out.append(("user", message.content))
            case AssistantMessage():
                block = message.content[0]
                assert isinstance(block, TextContent)
                out.append(("assistant", block.text))
            case CompactionSummaryMessage():
                out.append(("compaction", message.summary))
            case BranchSummaryMessage():
                out.append(("branch", message.summary))
            case _:
                out.append((message.role, wire.unstructure(message)))
    return out


async def reopen(open_store: StoreFactory, session: Session) -> Session:
    await session.close()
    store: SessionStore = open_store()
    return await store.open(session.id)


async def test_append_flush_reopen_keeps_every_entry(open_store: StoreFactory) -> None:
    store = open_store()
    session = await store.create(cwd="/work/app")
    first = await session.append_message(user("hello"))
    second = await session.append_message(reply("hi"))
    assert not session.dirty  # written as they were appended
    await session.flush()
    assert not session.dirty
    third = await session.append_message(user("bye"))

    again = await reopen(open_store, session)
    assert [e.id for e in again.entries] == [first, second, third]
    assert [e.parent_id for e in again.entries] == [None, first, second]
    assert again.leaf_id == third
    assert again.cwd == "/work/app"
    assert texts(again) == [("user", "hello"), ("assistant", "hi"), ("user", "bye")]
    assert comparable(again) == comparable(session)  # the same values, messages included
    await again.close()


def comparable(session: Session) -> tuple[Any, ...]:
    """A session's entries; for Pi's coding-agent files, without the storage sequence
    numbers and entry times (v3 lines have no sequence number, and a custom message's
    entry takes the message's time, as pi writes it)."""
    if isinstance(session._store, PiSessionStore):
        return tuple(attrs.evolve(e, seq=0, timestamp=0) for e in session.entries)
    return session.entries


def _stored_entry_ids(store: Any, session_id: str) -> list[str]:
    """The entry ids that reached storage, read behind the store's back."""
    if isinstance(store, InMemorySessionStore):
        transactions = store._records[session_id].transactions
        return [w["id"] for t in transactions for w in t if w["kind"] == "entry"]
    if isinstance(store, JsonlSessionStore):
        (path,) = Path(store.root).glob(f"*/*_{session_id}.jsonl")
        ids = []
        for line in path.read_text().splitlines()[1:]:
            value = json.loads(line)
            ids += [
                w["id"]
                for w in (value if isinstance(value, list) else [value])
                if w["kind"] == "entry"
            ]
        return ids
    if isinstance(store, PiSessionStore):
        (path,) = Path(store.root).glob(f"*/*_{session_id}.jsonl")
        lines = [json.loads(line) for line in path.read_text().splitlines()[1:]]
        return [v["id"] for v in lines if v["type"] in ("message", "compaction", "branch_summary")
                or (v["type"] == "custom" and v["customType"] != "pitrio.state")
                or v["type"] == "custom_message"]  # fmt: skip
    if isinstance(store, PostgresSessionStore):
        import psycopg

        with psycopg.connect(store.conninfo) as conn:
            query = f"SELECT id FROM {store.schema}.entries WHERE session_id = %s ORDER BY seq"
            return [r[0] for r in conn.execute(query, (session_id,))]
    with sqlite3.connect(store.path) as db:
        rows = db.execute("SELECT id FROM entries WHERE session_id = ? ORDER BY seq", (session_id,))
        return [r[0] for r in rows]


async def test_each_change_reaches_storage_as_it_is_made(open_store: StoreFactory) -> None:
    store = open_store()
    session = await store.create()
    kept = await session.append_message(user("kept"))
    assert await trio.to_thread.run_sync(_stored_entry_ids, store, session.id) == [kept]
    pending = await session.append_message(user("pending"))
    assert await trio.to_thread.run_sync(_stored_entry_ids, store, session.id) == [kept, pending]
    await session.close()
    assert await trio.to_thread.run_sync(_stored_entry_ids, store, session.id) == [kept, pending]
    again = await open_store().open(session.id)
    assert texts(again) == [("user", "kept"), ("user", "pending")]
    await again.close()


async def test_every_message_role_round_trips(open_store: StoreFactory) -> None:
    messages: list[Any] = [
        user("look"),
        AssistantMessage(
            content=(
                ToolCall(id="c1", name="bash", arguments={"command": "ls", "n": [1, 2.5, None]}),
            ),
            api="faux",
            provider="faux",
            model="m",
            stop_reason="toolUse",
            timestamp=3,
        ),
        ToolResultMessage(
            tool_call_id="c1",
            tool_name="bash",
            content=(TextContent(text="a\nb ✓"),),
            is_error=False,
            timestamp=4,
        ),
        BashExecutionMessage(command="pwd", output="/", exit_code=0, timestamp=5),
        AppMessage(
            custom_type="hint", content="be brief", display=False, details={"k": 1}, timestamp=6
        ),
    ]
    store = open_store()
    session = await store.create()
    for m in messages:
        await session.append_message(m)
    again = await reopen(open_store, session)
    assert list(again.build_context().messages) == messages
    await again.close()


async def test_list_latest_and_delete(open_store: StoreFactory) -> None:
    store = open_store()
    assert await store.list() == []
    assert await store.latest("/p/one") is None
    a = await store.create(cwd="/p/one")
    await trio.sleep(0.002)  # distinct creation times (milliseconds)
    b = await store.create(cwd="/p/two")
    await trio.sleep(0.002)
    c = await store.create(cwd="/p/one")
    for s in (a, b, c):
        await s.close()

    infos = await open_store().list()
    assert [i.id for i in infos] == [c.id, b.id, a.id]  # newest first
    assert [i.cwd for i in infos] == ["/p/one", "/p/two", "/p/one"]
    assert [i.id for i in await open_store().list(cwd="/p/one")] == [c.id, a.id]
    latest = await open_store().latest("/p/one")
    assert latest is not None
    assert latest.id == c.id
    assert latest.created_at == pytest.approx(c.created_at / 1000)

    # latest() is the session written to last (the one to continue), not the newest.
    older = await open_store().open(a.id)
    await trio.sleep(0.01)
    await older.append_message(user("continued"))
    await older.close()
    latest = await open_store().latest("/p/one")
    assert latest is not None
    assert latest.id == a.id

    await open_store().delete(c.id)
    assert [i.id for i in await open_store().list(cwd="/p/one")] == [a.id]
    with pytest.raises(SessionNotFoundError):
        await open_store().open(c.id)
    with pytest.raises(SessionNotFoundError):
        await open_store().delete(c.id)


async def test_create_with_an_id_that_exists_is_refused(open_store: StoreFactory) -> None:
    store = open_store()
    session = await store.create(session_id="fixed-id")
    assert session.id == "fixed-id"
    await session.close()
    with pytest.raises(SessionExistsError, match="fixed-id"):
        await open_store().create(session_id="fixed-id")


async def test_resume_rebuilds_model_thinking_labels_and_name(open_store: StoreFactory) -> None:
    store = open_store()
    session = await store.create()
    await session.append_thinking_level_change("high")  # before any model: kept aside
    assert session.thinking_level == "high"
    first = await session.append_message(user("q"))
    await session.append_model_change("anthropic", "claude-sonnet-4-5")
    await session.set_active_tools(["read", "bash"])
    await session.append_label(first, "question")
    await session.set_name("My session")
    await session.append_message(reply("a"))

    again = await reopen(open_store, session)
    context = again.build_context()
    assert context.model == ModelRef("anthropic", "claude-sonnet-4-5")
    assert context.thinking_level == "high"
    assert context.active_tool_names == ("read", "bash")
    assert again.labels == {first: "question"}
    assert again.name == "My session"
    await again.append_model_change("openai", "gpt-5")
    await again.append_thinking_level_change("low")
    await again.append_label(first, None)
    again2 = await reopen(open_store, again)
    assert again2.model == ModelRef("openai", "gpt-5")
    assert again2.thinking_level == "low"
    assert again2.labels == {}
    await again2.close()


async def test_branch_from_an_earlier_entry_keeps_both_branches(open_store: StoreFactory) -> None:
    store = open_store()
    session = await store.create()
    q1 = await session.append_message(user("q1"))
    a1 = await session.append_message(reply("a1"))
    q2 = await session.append_message(user("q2"))
    await session.set_leaf(a1)
    summary = await session.append_branch_summary("asked q2", from_id=q2)
    q3 = await session.append_message(user("q3"))

    again = await reopen(open_store, session)
    assert again.leaf_id == q3
    assert texts(again) == [
        ("user", "q1"),
        ("assistant", "a1"),
        ("branch", "asked q2"),
        ("user", "q3"),
    ]
    assert texts(again, q2) == [("user", "q1"), ("assistant", "a1"), ("user", "q2")]
    assert [e.id for e in again.children(a1)] == [q2, summary]
    entry = again.get_entry(summary)
    assert isinstance(entry, BranchSummaryEntry)
    assert entry.from_id == q2
    assert [e.id for e in again.get_branch()] == [q1, a1, summary, q3]
    await again.set_leaf(None)
    root2 = await again.append_message(user("fresh start"))
    assert again.get_entry(root2).parent_id is None
    assert texts(again) == [("user", "fresh start")]
    await again.close()


async def test_fork_from_an_earlier_entry_makes_a_new_session(open_store: StoreFactory) -> None:
    store = open_store()
    session = await store.create(cwd="/p")
    await session.append_model_change("faux", "m1")
    q1 = await session.append_message(user("q1"))
    a1 = await session.append_message(reply("a1"))
    q2 = await session.append_message(user("q2"))
    await session.append_label(q1, "first")
    await session.append_label(q2, "second")
    await session.set_name("parent")

    fork = await session.fork(a1)
    assert fork.id != session.id
    assert fork.parent_session_id == session.id
    assert [e.id for e in fork.entries] == [q1, a1]
    assert fork.labels == {q1: "first"}  # labels of entries left behind are not copied
    assert fork.model == ModelRef("faux", "m1")
    assert fork.name == "parent"
    after = await fork.append_message(user("q2 in the fork"))
    before = await session.fork(q2, position="before")
    assert [e.id for e in before.entries] == [q1, a1]
    await before.close()

    fork2 = await reopen(open_store, fork)
    assert texts(fork2) == [("user", "q1"), ("assistant", "a1"), ("user", "q2 in the fork")]
    assert fork2.leaf_id == after
    assert fork2.parent_session_id == session.id
    assert (await open_store().latest("/p")) is not None
    original = await reopen(open_store, session)
    assert texts(original) == [("user", "q1"), ("assistant", "a1"), ("user", "q2")]
    with pytest.raises(SessionNotFoundError, match="not on the current branch"):
        await original.fork("no-such-entry")
    await original.close()
    await fork2.close()


async def test_compaction_replaces_the_older_part_of_the_context(open_store: StoreFactory) -> None:
    store = open_store()
    session = await store.create()
    await session.append_message(user("q1"))
    await session.append_message(reply("a1"))
    q2 = await session.append_message(user("q2"))
    await session.append_message(reply("a2", stop_reason="error"))  # never shown to the model
    await session.append_message(reply("a2 again"))
    compaction = await session.append_compaction(
        "q1 was answered", tokens_before=1200, first_kept_entry_id=q2, details={"readFiles": ["x"]}
    )
    await session.append_message(user("q3"))

    again = await reopen(open_store, session)
    assert texts(again) == [
        ("compaction", "q1 was answered"),
        ("user", "q2"),
        ("assistant", "a2 again"),
        ("user", "q3"),
    ]
    entry = again.get_entry(compaction)
    assert isinstance(entry, CompactionEntry)
    assert entry.tokens_before == 1200
    assert entry.details == {"readFiles": ["x"]}
    summary = again.build_context().messages[0]
    assert isinstance(summary, CompactionSummaryMessage)
    assert summary.tokens_before == 1200
    assert summary.timestamp == entry.timestamp
    # A second compaction with Pi's explicit retained tail supersedes the first.
    await again.append_compaction(
        "everything so far", tokens_before=900, retained_tail=[user("q3")]
    )
    assert texts(again) == [("compaction", "everything so far"), ("user", "q3")]
    with pytest.raises(TypeError, match="not both"):
        await again.append_compaction(
            "x", tokens_before=1, retained_tail=[], first_kept_entry_id=q2
        )
    await again.close()


async def test_custom_entries_are_stored_but_not_shown_unless_projected(
    open_store: StoreFactory,
) -> None:
    store = open_store()
    session = await store.create()
    await session.append_message(user("q"))
    custom = await session.append_custom("ui-state", {"collapsed": True, "n": [1, 2]})
    again = await reopen(open_store, session)
    entry = again.get_entry(custom)
    assert isinstance(entry, CustomEntry)
    assert entry.data == {"collapsed": True, "n": [1, 2]}
    assert texts(again) == [("user", "q")]
    projected = again.build_context(
        projectors={"ui-state": lambda e: [user(f"state {e.data['n']}")]}
    )
    assert [m.content for m in projected.messages] == ["q", "state [1, 2]"]
    assert isinstance(again.entries[0], MessageEntry)
    await again.close()


async def test_a_second_writer_is_refused_until_the_first_closes(open_store: StoreFactory) -> None:
    store = open_store()
    session = await store.create()
    await session.append_message(user("one"))
    await session.flush()
    with pytest.raises(SessionLockedError, match="close it"):
        await open_store().open(session.id)
    with pytest.raises(SessionLockedError):
        await open_store().delete(session.id)
    await session.close()
    second = await open_store().open(session.id)
    await second.append_message(user("two"))
    await second.close()
    third = await open_store().open(session.id)
    assert texts(third) == [("user", "one"), ("user", "two")]
    await third.close()


async def test_a_closed_session_refuses_writes(open_store: StoreFactory) -> None:
    session = await open_store().create()
    await session.close()
    await session.close()  # twice is fine
    with pytest.raises(SessionClosedError, match="closed"):
        await session.append_message(user("late"))
    with pytest.raises(SessionClosedError):
        await session.flush()


async def test_unknown_ids_are_clear_errors(open_store: StoreFactory) -> None:
    store = open_store()
    with pytest.raises(SessionNotFoundError, match="nope"):
        await store.open("nope")
    session = await store.create()
    with pytest.raises(SessionNotFoundError, match="missing"):
        await session.set_leaf("missing")
    with pytest.raises(SessionNotFoundError, match="missing"):
        await session.append_label("missing", "x")
    with pytest.raises(ValueError, match="thinking level"):
        await session.append_thinking_level_change("huge")
    await session.close()


async def test_many_appends_between_flushes(open_store: StoreFactory) -> None:
    store = open_store()
    session = await store.create()
    ids = []
    for i in range(60):
        ids.append(await session.append_message(user(f"m{i}")))
        if i % 7 == 0:
            await session.flush()
    again = await reopen(open_store, session)
    assert [e.id for e in again.entries] == ids
    assert [e.seq for e in again.entries] == sorted(e.seq for e in again.entries)
    assert texts(again)[-1] == ("user", "m59")
    await again.close()


async def test_concurrent_appends_and_flushes_in_one_session(open_store: StoreFactory) -> None:
    store = open_store()
    session = await store.create()

    async def writer(name: str) -> None:
        for i in range(20):
            await session.append_message(user(f"{name}{i}"))
            if i % 5 == 4:
                await session.flush()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer, "a")
        nursery.start_soon(writer, "b")
    again = await reopen(open_store, session)
    got = [c for _, c in texts(again)]
    assert sorted(got) == sorted([f"a{i}" for i in range(20)] + [f"b{i}" for i in range(20)])
    assert [e.id for e in again.entries] == [e.id for e in session.entries]
    await again.close()


async def test_an_append_cancelled_before_its_write_is_kept_and_written_later(
    open_store: StoreFactory,
) -> None:
    store = open_store()
    session = await store.create()
    first = await session.append_message(user("written"))
    with trio.CancelScope() as scope:
        scope.cancel()
        await session.append_message(user("cancelled before its write"))
    assert scope.cancelled_caught
    late = session.leaf_id
    assert session.dirty
    assert await trio.to_thread.run_sync(_stored_entry_ids, store, session.id) == [first]
    await session.flush()
    assert not session.dirty
    assert await trio.to_thread.run_sync(_stored_entry_ids, store, session.id) == [first, late]
    await session.close()


async def test_a_read_only_open_sees_what_was_written_and_changes_nothing(
    open_store: StoreFactory,
) -> None:
    store = open_store()
    writer = await store.create()
    first = await writer.append_message(user("flushed"))
    await writer.flush()
    with trio.CancelScope() as scope:
        scope.cancel()
        await writer.append_message(user("not yet"))  # kept, not written yet

    reader = await open_store().open(writer.id, read_only=True)  # no lock needed
    assert reader.read_only
    assert [e.id for e in reader.entries] == [first]
    with pytest.raises(SessionError, match="read-only"):
        await reader.append_message(user("refused"))
    with pytest.raises(SessionError, match="read-only"):
        await reader.set_leaf(None)
    await reader.close()
    # The reader held nothing: the writer still owns the session, and goes on.
    with pytest.raises(SessionLockedError):
        await open_store().open(writer.id)
    await writer.append_message(user("later"))
    await writer.close()
    again = await open_store().open(writer.id, read_only=True)
    assert texts(again) == [("user", "flushed"), ("user", "not yet"), ("user", "later")]
    await again.close()


async def test_every_async_session_method_checkpoints(open_store: StoreFactory) -> None:
    from trio.testing import assert_checkpoints

    store = open_store()
    with assert_checkpoints():
        session = await store.create()
    with assert_checkpoints():
        first = await session.append_message(user("q"))
    with assert_checkpoints():
        await session.append_custom("c", {"x": 1})
    with assert_checkpoints():
        await session.append_label(first, "l")
    with assert_checkpoints():
        await session.append_model_change("p", "m")
    with assert_checkpoints():
        await session.append_thinking_level_change("low")
    with assert_checkpoints():
        await session.set_name("n")
    with assert_checkpoints():
        await session.set_leaf(first)
    with assert_checkpoints():
        await session.flush()
    with assert_checkpoints():
        await session.flush()  # nothing pending: still a checkpoint
    with assert_checkpoints():
        await session.close()
    with assert_checkpoints():
        await session.close()  # closed already
    with assert_checkpoints():
        await store.list()


async def test_every_settled_stop_reason_round_trips_and_pending_is_refused(
    open_store: StoreFactory,
) -> None:
    store = open_store()
    session = await store.create()
    settled = ["stop", "length", "toolUse", "error", "aborted", "deferred"]
    for reason in settled:
        await session.append_message(reply(reason, stop_reason=reason))
    with pytest.raises(SessionError, match="pending assistant message"):
        await session.append_message(reply("streaming", stop_reason="pending"))
    again = await reopen(open_store, session)
    stored = [e.message.stop_reason for e in again.entries if isinstance(e, MessageEntry)]
    assert stored == settled
    # The model sees neither failed, aborted nor deferred replies (Pi's context rule);
    # Pi's coding agent keeps the failed and aborted ones in its transcript (its
    # providers leave them out of requests).
    kept = ["stop", "length", "toolUse"]
    if isinstance(store, PiSessionStore):
        kept += ["error", "aborted"]
    assert texts(again) == [("assistant", r) for r in kept]
    await again.close()


async def test_a_session_knows_where_it_is_stored(open_store: StoreFactory) -> None:
    store = open_store()
    session = await store.create(cwd="/p")
    await session.close()
    (info,) = await store.list()
    assert session.path == info.path
    for read_only in (False, True):
        again = await store.open(session.id, read_only=read_only)
        assert again.path == info.path
        await again.close()
    if isinstance(store, InMemorySessionStore | PostgresSessionStore):
        assert session.path is None  # not a file
    else:
        assert session.path is not None
        assert await trio.Path(session.path).exists()


async def test_a_leaf_before_the_first_entry_survives_a_reopen(open_store: StoreFactory) -> None:
    store = open_store()
    session = await store.create()
    first = await session.append_message(user("first"))
    await session.set_leaf(None)
    again = await reopen(open_store, session)
    assert again.leaf_id is None
    assert again.get_branch() == []
    second = await again.append_message(user("a second root"))
    assert again.get_entry(second).parent_id is None
    assert [e.id for e in again.entries] == [first, second]
    await again.close()
