"""What the PostgreSQL store adds to the storage suite (``test_session_storage.py`` runs it
there too): the lease two processes race for, durability of a harness killed mid-tool,
the fsync policy, clear errors, and a lazy import of psycopg. A real server
(``tests/_services.py``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any

import psycopg
import pytest
import trio
from _services import free_port, fresh_schema

from pitrio import AssistantMessage, Model, ToolCall, UserMessage
from pitrio.harness import (
    CustomEntry,
    Harness,
    MessageEntry,
    PostgresSessionStore,
    SessionError,
    SessionLockedError,
    SessionNotFoundError,
)
from pitrio.testing import ScriptedModel

MODEL = Model(id="scripted", api="scripted", provider="local", context_window=200_000)

HOLDER = r"""
import sys

import trio

from pitrio.harness import PostgresSessionStore, SessionLockedError

url, schema, session_id = sys.argv[1:4]


async def main():
    store = PostgresSessionStore(url, schema=schema)
    print("ready", flush=True)
    await trio.to_thread.run_sync(sys.stdin.readline)  # go: both start together
    try:
        session = await store.open(session_id)
    except SessionLockedError:
        print("locked", flush=True)
        return
    print("opened", flush=True)
    await session.append_custom("holder", {"pid": __import__("os").getpid()})
    await trio.sleep_forever()  # holds the lease until killed


trio.run(main)
"""

KILLED = r"""
import sys

import trio

from pitrio import Model, Tool, text_result
from pitrio.harness import Harness, PostgresSessionStore
from pitrio.testing import ScriptedModel, ScriptedResponse

url, schema, session_id = sys.argv[1:4]


async def blocking(call_id, params, signal, on_update):
    sys.stdout.write("tool started\n")
    sys.stdout.flush()
    await trio.sleep_forever()
    return text_result("never")


async def main():
    store = PostgresSessionStore(url, schema=schema, fsync="never")
    session = await store.create(cwd="/work/project", session_id=session_id)
    model = Model(id="scripted", api="scripted", provider="local", context_window=200_000)
    stream = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("call_1", "slow", {})),
            ScriptedResponse.text("finished"),
        ]
    )
    tool = Tool(name="slow", description="slow", execute=blocking, parameters={"type": "object"})
    harness = Harness(model=model, stream_fn=stream, session=session, tools=[tool])
    await harness.set_model(model)
    await harness.prompt("run the slow tool")


trio.run(main)
"""


async def _read_line(stream: Any, seen: bytearray) -> str:
    while b"\n" not in seen:
        chunk = await stream.receive_some()
        if not chunk:
            pytest.fail(f"the child ended early; it wrote {bytes(seen)!r}")
        seen += chunk
    line, _, rest = bytes(seen).partition(b"\n")
    seen[:] = rest
    return line.decode()


async def test_two_processes_race_for_one_session_and_one_wins_the_lease(
    postgres_url: str,
) -> None:
    schema = fresh_schema()
    async with PostgresSessionStore(postgres_url, schema=schema) as store:
        session = await store.create(session_id="raced")
        await session.close()
        with trio.fail_after(120):
            procs = [
                await trio.lowlevel.open_process(
                    [sys.executable, "-c", HOLDER, postgres_url, schema, "raced"],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                )
                for _ in range(2)
            ]
            try:
                buffers = [bytearray(), bytearray()]
                for proc, seen in zip(procs, buffers, strict=True):
                    assert await _read_line(proc.stdout, seen) == "ready"
                for proc in procs:
                    assert proc.stdin is not None
                    await proc.stdin.send_all(b"go\n")
                outcomes = [
                    await _read_line(p.stdout, seen) for p, seen in zip(procs, buffers, strict=True)
                ]
                assert sorted(outcomes) == ["locked", "opened"]
                winner = procs[outcomes.index("opened")]
                loser = procs[outcomes.index("locked")]
                assert await loser.wait() == 0
                with pytest.raises(SessionLockedError, match="open for writing elsewhere"):
                    await store.open("raced")
                with pytest.raises(SessionLockedError, match="close it before deleting"):
                    await store.delete("raced")
                # Read-only opens take no lock: the winner's write is there.
                while True:
                    snapshot = await store.open("raced", read_only=True)
                    held = [
                        e
                        for e in snapshot.entries
                        if isinstance(e, CustomEntry) and e.custom_type == "holder"
                    ]
                    await snapshot.close()
                    if held:
                        break
                    await trio.sleep(0.05)
                assert held[0].data == {"pid": winner.pid}
                # A worker that dies releases the lease with its connection.
                winner.send_signal(signal.SIGKILL)
                await winner.wait()
                while True:
                    try:
                        again = await store.open("raced")
                    except SessionLockedError:  # the server notices the lost client
                        await trio.sleep(0.05)
                        continue
                    break
                assert [type(e) for e in again.entries] == [CustomEntry]
                await again.close()
            finally:
                for proc in procs:
                    if proc.returncode is None:
                        proc.kill()
                        await proc.wait()


async def test_a_harness_killed_mid_tool_leaves_the_prompt_and_the_tool_call(
    postgres_url: str,
) -> None:
    schema = fresh_schema()
    with trio.fail_after(120):
        proc = await trio.lowlevel.open_process(
            [sys.executable, "-c", KILLED, postgres_url, schema, "killed-mid-tool"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            assert proc.stdout is not None
            seen = bytearray()
            assert await _read_line(proc.stdout, seen) == "tool started"
        finally:
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
        assert proc.returncode == -signal.SIGKILL

        async with PostgresSessionStore(postgres_url, schema=schema) as store:
            while True:  # the lease goes when the server sees the connection gone
                try:
                    session = await store.open("killed-mid-tool")
                except SessionLockedError:
                    await trio.sleep(0.05)
                    continue
                break
            messages = [e.message for e in session.entries if isinstance(e, MessageEntry)]
            assert [m.role for m in messages] == ["user", "assistant"]
            prompt, reply = messages
            assert isinstance(prompt, UserMessage)
            assert prompt.content[0].text == "run the slow tool"  # type: ignore[union-attr]
            assert isinstance(reply, AssistantMessage)
            assert reply.stop_reason == "toolUse"
            assert [b.id for b in reply.content if isinstance(b, ToolCall)] == ["call_1"]
            harness = Harness(model=MODEL, stream_fn=ScriptedModel([]), session=session)
            assert harness.messages == messages
            await session.close()


@pytest.mark.parametrize(
    ("policy", "expected", "setting"),
    [("never", 0, "off"), ("flush", 1, "off"), ("always", 0, "on")],
)
async def test_the_fsync_policy_sets_synchronous_commit_and_syncs_at_flush(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch, policy: Any, expected: int, setting: str
) -> None:
    async with PostgresSessionStore(postgres_url, schema=fresh_schema(), fsync=policy) as store:
        session = await store.create()
        writer: Any = session._writer
        shown = writer._conn.execute("SHOW synchronous_commit").fetchone()
        assert shown == (setting,)
        syncs: list[None] = []
        real = store._sync_sync
        monkeypatch.setattr(store, "_sync_sync", lambda w: syncs.append(real(w)))
        await session.append_message(UserMessage(content="a", timestamp=1))
        await session.append_message(UserMessage(content="b", timestamp=1))
        assert syncs == []
        await session.flush()
        await session.flush()  # nothing written since
        assert len(syncs) == expected
        await session.close()


def test_bad_arguments_are_clear_errors() -> None:
    with pytest.raises(ValueError, match=r"^fsync must be one of 'never', 'flush', 'always'"):
        PostgresSessionStore("postgresql://x/y", fsync="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^schema must be a lower-case SQL identifier"):
        PostgresSessionStore("postgresql://x/y", schema="drop table; --")
    with pytest.raises(ValueError, match=r"^conninfo must be a PostgreSQL connection string"):
        PostgresSessionStore("")


async def test_an_unreachable_server_is_a_session_error_naming_it() -> None:
    port = free_port()  # nothing listens there
    store = PostgresSessionStore(f"postgresql://nobody:secret@127.0.0.1:{port}/db")
    with pytest.raises(SessionError, match=rf"^PostgreSQL at 127\.0\.0\.1:{port}/db: ") as info:
        await store.list()
    assert "secret" not in str(info.value)
    assert isinstance(info.value.__cause__, psycopg.OperationalError)


async def test_schemas_are_separate_stores(postgres_url: str) -> None:
    async with (
        PostgresSessionStore(postgres_url, schema=fresh_schema()) as one,
        PostgresSessionStore(postgres_url, schema=fresh_schema()) as two,
    ):
        a = await one.create(session_id="same")
        b = await two.create(session_id="same")  # another schema: another lock, too
        await a.append_message(UserMessage(content="in one", timestamp=1))
        await a.close()
        await b.close()
        assert [i.id for i in await one.list()] == ["same"]
        again = await two.open("same")
        assert list(again.entries) == []
        await again.close()
        await two.delete("same")
        with pytest.raises(SessionNotFoundError):
            await two.open("same")
        assert [i.id for i in await one.list()] == ["same"]


async def test_entries_are_read_on_first_use_even_after_the_store_closed(
    postgres_url: str,
) -> None:
    store = PostgresSessionStore(postgres_url, schema=fresh_schema())
    session = await store.create()
    for i in range(5):
        await session.append_message(UserMessage(content=f"m{i}", timestamp=i))
    await session.append_compaction("s", tokens_before=1)
    await session.append_message(UserMessage(content="last", timestamp=9))
    await session.close()
    again = await store.open(session.id, read_only=True)
    loaded: list[int] = []
    loader = again._state.loader
    assert loader is not None

    def counted(positions: Any) -> Any:
        loaded.extend(positions)
        return loader(positions)

    again._state.loader = counted
    # The open read the compaction and what follows it, in its worker thread; nothing else.
    assert sorted(again._state._cache) == [5, 6]
    assert [m.role for m in again.build_context().messages] == ["compactionSummary", "user"]
    assert loaded == []
    await store.aclose()
    # The rest, after the store's connection closed: one short-lived connection.
    assert [e.message.content for e in again.entries if isinstance(e, MessageEntry)][:2] == [
        "m0",
        "m1",
    ]
    assert loaded == [0, 1, 2, 3, 4]
    assert store._conn is None


def test_importing_the_harness_does_not_import_psycopg() -> None:
    code = (
        "import sys, pitrio.harness\n"
        "store = pitrio.harness.PostgresSessionStore('postgresql://h/d')\n"
        "print('psycopg' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env={**os.environ, "PYTHONWARNINGS": "error"},
    )
    assert done.stdout.strip() == "False"
