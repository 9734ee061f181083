"""What a page that joins late sees: the snapshot, then the live messages.

Together they must rebuild the view exactly (whitespace-only deltas included), whichever
moment the page joins; the snapshot is bounded (the visible tail), and older items come
on request (``history``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import trio

from pitrio import Agent, Model
from pitrio.testing import ScriptedModel, ScriptedResponse
from pitrio.ui import Append, AppendDelta, Replace, Status, Transcript, UiAdapter, UiMessage

from .test_web import Socket, open_socket, paced, server

__all__ = ["server"]  # the fixture, shared with test_web

MODEL = Model(id="m", api="scripted", provider="scripted")
SPACED = "Hello world.\n\nNext line"


class PageView:
    """What the page does with the messages: items by id, their text as it shows it."""

    def __init__(self) -> None:
        self.text: dict[str, str] = {}
        self.kind: dict[str, str] = {}
        self.order: list[str] = []

    def apply(self, message: dict[str, Any]) -> None:
        kind, item = message["type"], str(message.get("id"))
        if kind == "append":
            self.order.append(item)
            self.text[item] = message["text"]
            self.kind[item] = message["kind"]
        elif kind == "appendDelta" and message["channel"] == "text" and item in self.text:
            self.text[item] += message["delta"]
        elif kind == "replace" and item in self.text:
            self.text[item] = message["text"]

    def texts(self, kind: str) -> list[str]:
        return [self.text[i] for i in self.order if self.kind[i] == kind]


async def streamed(text: str) -> list[UiMessage]:
    """The messages of a run answering ``text`` one character per delta."""
    agent = Agent(stream_fn=ScriptedModel([ScriptedResponse.text(text, chunk_size=1)]), model=MODEL)
    adapter = UiAdapter()
    out: list[UiMessage] = []
    agent.subscribe(lambda event, signal: out.extend(adapter.feed(event)))
    await agent.prompt("go")
    return out


async def test_whitespace_only_deltas_reach_live_and_late_pages() -> None:
    messages = await streamed(SPACED)
    deltas = [m.delta for m in messages if isinstance(m, AppendDelta)]
    assert deltas == list(SPACED)  # " ", "\n", "\n" and " " among them, each its own delta
    final = max(i for i, m in enumerate(messages) if m.type == "replace")
    # A page joining before any message, or after any of the streamed ones, shows the
    # exact text before the final replace would set it.
    for joined in range(final):
        view = Transcript()
        view.apply_all(messages[:joined])
        page = PageView()
        for message in [*view.snapshot(), *messages[joined:final]]:
            page.apply(message.to_json())
        assert (joined, page.texts("assistant")) == (joined, [SPACED])


def spaced_answer(context: Any) -> ScriptedResponse:
    return ScriptedResponse.text(SPACED, chunk_size=1)


async def receive_until(
    socket: Socket, done: Callable[[dict[str, Any]], bool]
) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    with trio.fail_after(20):
        while not got or not done(got[-1]):
            got.append(await socket.receive())
    return got


def before_final_replace(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages up to the assistant's final ``replace`` (which sets the whole text)."""
    for i, m in enumerate(messages):
        if m["type"] == "replace" and m.get("state") == "done" and m["text"] == SPACED:
            return list(messages[:i])
    raise AssertionError("no final replace")


async def test_a_page_joining_mid_stream_rebuilds_the_spaced_text(tmp_path: Any) -> None:
    import io

    from pitrio.web._serve import ServerInfo, serve

    project = tmp_path / "project"
    project.mkdir()
    env = {"PITRIO_SESSIONS_DIR": str(tmp_path / "sessions"), "HOME": str(tmp_path)}
    async with trio.open_nursery() as nursery:
        info: ServerInfo = await nursery.start(
            lambda task_status: serve(
                ["--port", "0", "--cwd", str(project)],
                stream_fn=paced(ScriptedModel(spaced_answer), delay=0.05),
                env=env,
                out=io.StringIO(),
                task_status=task_status,
            )
        )
        async with open_socket(info) as first_ws:
            first = Socket(first_ws)
            await receive_until(first, lambda m: m["type"] == "status")
            await first_ws.send_message('{"type": "prompt", "text": "go"}')
            # Past "Hello world." and into the blank line: then a second page joins.
            seen = await receive_until(first, lambda m: m.get("delta") == "\n")
            async with open_socket(info) as late_ws:
                late = Socket(late_ws)
                rest = await receive_until(
                    late, lambda m: m["type"] == "replace" and m["text"] == SPACED
                )
            seen += await receive_until(
                first, lambda m: m["type"] == "replace" and m["text"] == SPACED
            )
        nursery.cancel_scope.cancel()
    for messages in (seen, rest):
        page = PageView()
        for message in before_final_replace(messages):
            page.apply(message)
        assert page.texts("assistant") == [SPACED]
    # The late page really joined mid-stream: its snapshot held part of the text only.
    partial = [m["text"] for m in rest if m["type"] == "replace" and m["text"] != SPACED]
    assert any(SPACED.startswith(t) and 0 < len(t) < len(SPACED) for t in partial)


def long_view(count: int, text: Callable[[int], str] = lambda i: f"message {i}") -> Transcript:
    view = Transcript()
    for i in range(count):
        view.apply(Append(id=f"i{i}", kind="user", text=text(i)))
    view.apply(Status(working=False))
    return view


def ids(messages: Sequence[UiMessage]) -> list[str]:
    return [m.id for m in messages if isinstance(m, Append)]


def test_a_bounded_snapshot_is_the_tail_and_earlier_pages_back_to_the_start() -> None:
    view = long_view(250)
    tail = view.snapshot(limit=100)
    assert ids(tail) == [f"i{i}" for i in range(150, 250)]
    assert tail[-1] == Status(working=False)
    # Page back, 60 at a time: the windows join into the whole snapshot, exactly.
    pages: list[list[UiMessage]] = [tail[:-1]]
    before, left = "i150", 150
    while left:
        window, earlier = view.earlier(before, limit=60)
        assert earlier == max(0, left - 60)
        assert len(ids(window)) == left - earlier
        pages.insert(0, window)
        before, left = ids(window)[0], earlier
    assert [m for page in pages for m in page] == view.snapshot()[:-1]
    assert view.earlier("i0", limit=10) == ([], 0)
    assert view.earlier("no such item", limit=10) == ([], 0)


def test_a_snapshot_bounded_by_characters_keeps_the_newest_item_whole() -> None:
    view = long_view(10, lambda i: "x" * (1000 if i < 9 else 50_000))
    assert ids(view.snapshot(max_chars=2_500)) == ["i9"]  # alone over the budget
    window, earlier = view.earlier("i9", max_chars=2_500)
    assert (ids(window), earlier) == (["i7", "i8"], 7)
    replaced = [m for m in view.snapshot(max_chars=2_500) if isinstance(m, Replace)]
    assert [len(m.text) for m in replaced] == [50_000]


async def test_a_page_gets_the_tail_and_asks_for_the_rest(tmp_path: Any) -> None:
    import io

    from pitrio import AssistantMessage, TextContent, UserMessage
    from pitrio.harness import JsonlSessionStore
    from pitrio.web._pages import SNAPSHOT_ITEMS
    from pitrio.web._serve import ServerInfo, serve

    project = tmp_path / "project"
    project.mkdir()
    sessions = tmp_path / "sessions"
    session = await JsonlSessionStore(sessions).create(cwd=str(project))
    turns = 120  # 240 items: more than a snapshot holds
    for i in range(turns):
        await session.append_message(UserMessage(content=f"prompt {i}"))
        await session.append_message(
            AssistantMessage(content=(TextContent(text=f"answer {i}"),), stop_reason="stop")
        )
    await session.close()
    env = {"PITRIO_SESSIONS_DIR": str(sessions), "HOME": str(tmp_path)}
    async with trio.open_nursery() as nursery:
        info: ServerInfo = await nursery.start(
            lambda task_status: serve(
                ["--port", "0", "--cwd", str(project), "--resume", session.id],
                stream_fn=ScriptedModel(spaced_answer),
                env=env,
                out=io.StringIO(),
                task_status=task_status,
            )
        )
        async with open_socket(info) as ws:
            socket = Socket(ws)
            first = await receive_until(socket, lambda m: m["type"] == "status")
            reset = next(m for m in first if m["type"] == "reset")
            tail = [m for m in first if m["type"] in ("append", "replace")]
            assert len(tail) == 2 * SNAPSHOT_ITEMS
            assert reset["earlier"] == 2 * turns - SNAPSHOT_ITEMS
            pages = [tail]
            before, left = tail[0]["id"], reset["earlier"]
            while left:
                await ws.send_message(json.dumps({"type": "history", "before": before}))
                [reply] = await receive_until(socket, lambda m: m["type"] == "history")
                assert reply["before"] == before
                assert reply["session"] == reset["session"] == session.id
                assert reply["earlier"] == max(0, left - 50)  # 50 when no limit is given
                pages.insert(0, reply["messages"])
                before, left = reply["messages"][0]["id"], reply["earlier"]
            for bad, problem in [
                ({"type": "history"}, "'before'"),
                ({"type": "history", "before": "i1", "limit": 0}, "'limit'"),
                ({"type": "history", "before": "i1", "limit": True}, "'limit'"),
            ]:
                await ws.send_message(json.dumps(bad))
                [error] = await receive_until(socket, lambda m: m["type"] == "error")
                assert problem in error["text"]
        nursery.cancel_scope.cancel()
    page = PageView()
    for message in [m for window in pages for m in window]:
        page.apply(message)
    assert page.texts("user") == [f"prompt {i}" for i in range(turns)]
    assert page.texts("assistant") == [f"answer {i}" for i in range(turns)]


async def test_the_churn_benchmark_does_its_work() -> None:
    """benchmarks/bench_web.py at a tiny size: every page got a snapshot (no timing is
    checked)."""
    from benchmarks.bench_web import measure

    result = await measure(clients=3, rounds=2, turns=5)
    assert (result["clients"], result["rounds"], result["messages"]) == (3, 2, 20)
    assert result["snapshot_bytes"] > 20 * 20  # the 20 messages' items, at least
    assert 0 < result["rss_before_mb"] <= result["peak_rss_mb"]
