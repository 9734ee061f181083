"""Named lanes: several lanes of one session, each with its own branch, queue and
operations (Pi's ``harness.lane(name)``), restored by pitrio and by Pi's harness."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import trio

from pitrio import Model, Tool, ToolResult, UsageError, text_result
from pitrio.harness import (
    Harness,
    InMemorySessionStore,
    JsonlSessionStore,
    MessageEntry,
    PiSessionStore,
    Session,
    SessionNotFoundError,
    restore_session,
)
from pitrio.testing import ScriptedModel, ScriptedResponse

from .test_operations import _pi

MODEL = Model(id="scripted", api="scripted", provider="local", context_window=200_000)


def _texts(session: Session) -> list[str]:
    out = []
    for m in session.build_context().messages:
        content = m.content if not isinstance(m.content, str) else ()
        out.append(" ".join(getattr(b, "text", "") for b in content))
    return out


def _answers(*texts: str) -> ScriptedModel:
    return ScriptedModel([ScriptedResponse.text(t) for t in texts])


async def test_two_lanes_of_one_session_keep_their_own_branches(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    session = await store.create(cwd="/w", session_id="lanes")
    main = Harness(model=MODEL, stream_fn=_answers("one", "two", "three"), session=session)
    await main.set_model(MODEL)
    await main.prompt("first")
    fork_point = session.leaf_id
    assert fork_point is not None
    review = await main.lane("review", create_at=fork_point)
    assert review.lane_name == "review"
    assert await main.lane("review") is review
    assert await review.lane("main") is main
    assert await main.lane("main") is main
    await review.prompt("on review")
    await main.prompt("on main")
    review_session = review.session
    assert review_session is not None
    assert _texts(review_session) == ["first", "one", "on review", "two"]
    assert _texts(session) == ["first", "one", "on main", "three"]
    # One session, one file: both lanes in it, each with its tip, config and state.
    lanes = restore_session(session)
    assert sorted(lanes) == ["main", "review"]
    assert lanes["review"].tip_id == review_session.leaf_id
    assert lanes["main"].tip_id == session.leaf_id
    assert lanes["review"].configuration["model"] == {"provider": "local", "modelId": "scripted"}
    assert all(lane.operation is None for lane in lanes.values())
    await review_session.close()  # a lane's view only flushes
    await main.prompt("still open")
    await session.close()
    # Reopened, the lane is there again.
    reopened = await store.open("lanes")
    again = Harness(model=MODEL, stream_fn=_answers("four"), session=reopened)
    lane = await again.lane("review")
    assert lane.session is not None
    assert _texts(lane.session) == ["first", "one", "on review", "two"]
    await reopened.close()


async def test_pi_restores_the_lanes_pitrio_made(tmp_path: Path, pi_node_modules: Path) -> None:
    session = await JsonlSessionStore(tmp_path).create(cwd="/w", session_id="lanes")
    main = Harness(model=MODEL, stream_fn=_answers("one", "two"), session=session)
    await main.set_model(MODEL)
    await main.prompt("first")
    review = await main.lane("review")  # an empty lane
    await review.prompt("alone")
    await session.close()
    assert session.path is not None
    pi = await _pi(pi_node_modules, "lanes", session.path)
    assert sorted(pi["lanes"]) == ["main", "review"]
    assert all(lane["operation"] is None for lane in pi["lanes"].values())
    reopened = await JsonlSessionStore(tmp_path).open("lanes")
    lane = await Harness(model=MODEL, stream_fn=_answers(), session=reopened).lane("review")
    assert lane.session is not None
    assert _texts(lane.session) == ["alone", "two"]
    await reopened.close()


async def test_a_lanes_run_killed_mid_tool_is_recovered_on_that_lane(tmp_path: Path) -> None:
    root, copy = tmp_path / "run", tmp_path / "copy"
    session = await JsonlSessionStore(root).create(cwd="/w", session_id="crash")
    blocked = trio.Event()

    async def step(call_id: str, params: Any, signal: Any, on_update: Any) -> ToolResult:
        blocked.set()
        await trio.sleep_forever()
        raise AssertionError

    main = Harness(
        model=MODEL,
        stream_fn=ScriptedModel([ScriptedResponse.tool_calls(("c1", "step", {}))]),
        session=session,
        tools=[Tool(name="step", execute=step, replay="safe")],
    )
    await main.set_model(MODEL)
    side = await main.lane("side")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(side.prompt, "work on the side")
        with trio.fail_after(10):
            await blocked.wait()
        shutil.copytree(root, copy)  # what a SIGKILL leaves
        nursery.cancel_scope.cancel()
    await session.close()

    restored = await JsonlSessionStore(copy).open("crash")
    lanes = restore_session(restored)
    assert lanes["main"].operation is None
    side_op = lanes["side"].operation
    assert side_op is not None
    assert (side_op.at, side_op.meta["lane"]) == ("tools", "side")

    async def done(call_id: str, params: Any, signal: Any, on_update: Any) -> ToolResult:
        return text_result("stepped")

    fresh = Harness(
        model=MODEL,
        stream_fn=_answers("finished"),
        session=restored,
        tools=[Tool(name="step", execute=done, replay="safe")],
    )
    assert fresh.interrupted is None  # main was idle
    lane = await fresh.lane("side")
    assert lane.interrupted == side_op
    await lane.resume()
    assert lane.session is not None
    assert _texts(lane.session) == ["work on the side", "", "stepped", "finished"]
    assert restore_session(restored)["side"].operation is None
    assert restored.leaf_id is None  # main's branch is still empty
    await restored.close()


async def test_lanes_refuse_what_they_cannot_do(tmp_path: Path) -> None:
    session = await InMemorySessionStore().create(cwd="/w", session_id="s")
    harness = Harness(model=MODEL, stream_fn=_answers(), session=session)
    with pytest.raises(UsageError, match="lane name must not be empty"):
        await harness.lane("")
    with pytest.raises(UsageError, match="must not contain"):
        await harness.lane("a\x00b")
    with pytest.raises(SessionNotFoundError):
        await harness.lane("x", create_at="no-such-entry")
    with pytest.raises(UsageError, match="needs a session"):
        await Harness(model=MODEL, stream_fn=_answers()).lane("x")
    pi = await PiSessionStore(tmp_path).create(cwd="/w", session_id="p")
    with pytest.raises(UsageError, match="one lane"):
        await Harness(model=MODEL, stream_fn=_answers(), session=pi).lane("x")
    await pi.close()
    # A lane's view is closed with its session.
    view = await session.lane("other")
    assert view.lane_name == "other"
    assert await session.lane("main") is session
    await session.close()
    with pytest.raises(Exception, match="closed"):
        await view.set_name("late")
    entry = [e for e in view.entries if isinstance(e, MessageEntry)]
    assert entry == []
