"""The operation states a run passes through, in one process (JSONL sessions, virtual time).

Each case reads the session file back and lists the ``pi.op.state`` each transaction set,
the ``pi.result`` the run ended with and the lane state after it: a run with a tool, a
retried request (``assistant.retry_wait``), an aborted run, a failed one, ``resume()``
without a prompt. Then the restore: its checks, and a prompt on a session whose last run
was interrupted (it is finished first).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio

from pitrio import Model, Tool, UserMessage, text_result
from pitrio.harness import (
    Harness,
    JsonlSessionStore,
    Operation,
    RetrySettings,
    SessionFormatError,
    restore_lane,
    restore_session,
)
from pitrio.testing import ScriptedModel, ScriptedResponse

MODEL = Model(id="scripted", api="scripted", provider="local", context_window=200_000)


async def ok(call_id: str, params: Any, signal: Any, on_update: Any) -> Any:
    return text_result("ok")


TOOL = Tool(name="t", description="t", execute=ok, parameters={"type": "object"})


def _log(path: str | None) -> list[dict[str, Any]]:
    assert path is not None
    writes: list[dict[str, Any]] = []
    for line in Path(path).read_text().splitlines()[1:]:
        data = json.loads(line)
        writes += data if isinstance(data, list) else [data]
    return writes


def _states(writes: list[dict[str, Any]]) -> list[str]:
    out = []
    for w in writes:
        if w.get("namespace") == "pi.op.state" and w["op"] == "set":
            value = w["value"]
            calls = value.get("batch", {}).get("calls")
            out.append(value["at"] + (f" {[c['status'] for c in calls]}" if calls else ""))
    return out


def _results(writes: list[dict[str, Any]]) -> list[str]:
    return [w["value"]["status"] for w in writes if w.get("namespace") == "pi.result"]


def _text(message: Any) -> str:
    content = message.content
    return content if isinstance(content, str) else str(getattr(content[0], "text", ""))


async def _run(tmp_path: Path, responses: list[ScriptedResponse], **kwargs: Any) -> Any:
    store = JsonlSessionStore(tmp_path)
    session = await store.create(cwd="/p")
    harness = Harness(
        model=MODEL, stream_fn=ScriptedModel(responses), session=session, tools=[TOOL], **kwargs
    )
    return store, session, harness


async def test_a_run_with_a_tool_passes_pis_states_and_ends_idle(tmp_path: Path) -> None:
    _, session, harness = await _run(
        tmp_path, [ScriptedResponse.tool_calls(("c1", "t", {})), ScriptedResponse.text("done")]
    )
    await harness.prompt("go")
    writes = _log(session.path)
    assert _states(writes) == [
        "starting",
        "checkpoint",
        "assistant.ready",
        "assistant.effect_pending",
        "tools ['planned']",
        "tools ['effect_pending']",
        "tools ['outcome_ready']",
        "checkpoint",
        "assistant.ready",
        "assistant.effect_pending",
        "checkpoint",
    ]
    assert _results(writes) == ["completed"]
    lane = restore_lane(session)
    assert lane.operation is None
    assert lane.last_operation_id is not None
    assert harness.interrupted is None
    # The reserved ids are the entries': the response's and the tool result's.
    reply, result = session.get_branch()[1:3]
    ids = [
        w["value"].get("responseEntryId")
        for w in writes
        if w.get("namespace") == "pi.op.state" and w["op"] == "set"
    ]
    assert reply.id in ids
    assert result.parent_id == reply.id
    # Nothing of the run is left but its result.
    left = {w["namespace"] for w in writes if w.get("kind") == "value"}
    assert {"pi.op.tool_args", "pi.pending.entry"} <= left
    values = {ns for (ns, _key) in session._state.values}
    assert not values & {"pi.op.meta", "pi.op.state", "pi.op.tool_args", "pi.pending.entry"}
    await session.close()


async def test_a_retried_request_waits_in_retry_wait(tmp_path: Path) -> None:
    _, session, harness = await _run(
        tmp_path,
        [
            ScriptedResponse(stop_reason="error", error_message="503 Service Unavailable"),
            ScriptedResponse.text("done"),
        ],
        retry=RetrySettings(base_delay=0.01, jitter=0),
    )
    await harness.prompt("go")
    writes = _log(session.path)
    # Pi's runRetryWait: the wait over, the next attempt is ready, then sent
    assert _states(writes)[3:] == [
        "assistant.effect_pending",
        "assistant.retry_wait",
        "assistant.ready",
        "assistant.effect_pending",
        "checkpoint",
    ]
    attempts = [
        w["value"]["attempt"]
        for w in writes
        if w.get("namespace") == "pi.op.state"
        and w["op"] == "set"
        and w["value"]["at"] == "assistant.effect_pending"
    ]
    assert attempts == [1, 2]
    assert _results(writes) == ["completed"]
    await session.close()


async def test_an_aborted_run_and_a_failed_one_end_as_such(tmp_path: Path) -> None:
    _, session, harness = await _run(
        tmp_path,
        [
            ScriptedResponse.text("slow", delay=10),
            ScriptedResponse(stop_reason="error", error_message="400 bad request"),
        ],
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(harness.prompt, "go")
        await trio.sleep(1)
        harness.abort()
    await harness.prompt("again")
    assert _results(_log(session.path)) == ["aborted", "failed"]
    assert restore_lane(session).operation is None
    await session.close()


async def test_resume_without_a_prompt_is_a_run_naming_no_prompt(tmp_path: Path) -> None:
    _, session, harness = await _run(tmp_path, [ScriptedResponse.text("done")])
    await session.append_message(UserMessage(content="hi", timestamp=1))
    harness.agent.state.messages = list(session.build_context().messages)
    await harness.resume()
    log = _log(session.path)
    metas = [w["value"] for w in log if w.get("namespace") == "pi.op.meta" and w["op"] == "set"]
    assert metas[0]["intent"] == {"kind": "run", "promptEntryIds": []}
    assert _results(_log(session.path)) == ["completed"]
    await session.close()


async def test_a_prompt_on_an_interrupted_session_finishes_the_interrupted_run_first(
    tmp_path: Path,
) -> None:
    store, session, harness = await _run(tmp_path, [ScriptedResponse.tool_calls(("c1", "t", {}))])
    # Cut the run off at its tool: what a process killed there leaves.
    started = trio.Event()

    async def hang(call_id: str, params: Any, signal: Any, on_update: Any) -> Any:
        started.set()
        await trio.sleep_forever()

    harness.set_tools([Tool(name="t", execute=hang)])
    async with trio.open_nursery() as nursery:
        nursery.start_soon(harness.prompt, "first")
        await started.wait()
        nursery.cancel_scope.cancel()
    # The cancelled prompt ended its operation (as aborted); put back what a kill leaves.
    await session.close()
    assert session.path is not None
    _cut_after_the_tool_intent(Path(session.path))

    session = await store.open(session.id)
    lanes = restore_session(session)
    interrupted = lanes["main"].operation
    assert isinstance(interrupted, Operation)
    assert interrupted.at == "tools"
    harness = Harness(
        model=MODEL,
        stream_fn=ScriptedModel([ScriptedResponse.text("after"), ScriptedResponse.text("2nd")]),
        session=session,
        tools=[TOOL],
    )
    assert harness.interrupted == interrupted
    await harness.prompt("second")
    texts = [
        (m.role, m.content if isinstance(m.content, str) else getattr(m.content[0], "text", ""))
        for m in session.build_context().messages
    ]
    assert [role for role, _ in texts] == [
        "user", "assistant", "toolResult", "assistant", "user", "assistant",
    ]  # fmt: skip
    assert texts[2][1].startswith("[Tool execution was interrupted."), texts
    assert texts[3:] == [("assistant", "after"), ("user", "second"), ("assistant", "2nd")]
    assert _results(_log(session.path))[-2:] == ["completed", "completed"]
    await session.close()


def _cut_after_the_tool_intent(path: Path) -> None:
    """Keep the file's lines up to the tool's intent (its arguments, effect_pending)."""
    lines = path.read_text().splitlines()
    kept = [lines[0]]
    for line in lines[1:]:
        kept.append(line)
        data = json.loads(line)
        writes = data if isinstance(data, list) else [data]
        if any(w.get("namespace") == "pi.op.tool_args" for w in writes):
            break
    path.write_text("\n".join(kept) + "\n")


async def test_restore_checks_what_pis_restore_checks(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    session = await store.create(cwd="/p")
    assert restore_session(session) == {}
    with pytest.raises(SessionFormatError, match=r'Lane "main" is missing branch.tip'):
        restore_lane(session)
    await session.append_message(UserMessage(content="hi", timestamp=1))
    with pytest.raises(SessionFormatError, match=r'Lane "main" is missing lane.config'):
        restore_lane(session)
    await session.append_model_change("local", "scripted")
    lane = restore_lane(session)
    assert lane.operation is None
    assert lane.configuration["model"] == {"provider": "local", "modelId": "scripted"}
    # A lane naming an operation whose records are gone.
    state: dict[str, Any] = {"currentOperationId": "op-1", "lastOperationId": None, "inbox": []}
    await session._record([[{"kind": "value", "op": "set", "namespace": "pi.lane.state",
                             "key": "main", "value": state}]])  # fmt: skip
    with pytest.raises(SessionFormatError, match=r"Operation op-1 is missing op\.meta"):
        restore_lane(session)
    # The harness treats such a session as having nothing to recover.
    harness = Harness(model=MODEL, stream_fn=ScriptedModel([]), session=session)
    assert harness.interrupted is None
    await session.close()
