"""pitrio.ui: Agent and Harness events -> append / appendDelta / replace, and the view."""

from __future__ import annotations

import json
import re
from typing import Any

import trio
import trio.testing

from pitrio import (
    AbortSignal,
    Agent,
    AssistantMessage,
    Model,
    TextContent,
    ThinkingContent,
    Tool,
    ToolCall,
    ToolExecutionEnd,
    ToolResult,
    ToolResultMessage,
    UserMessage,
    text_result,
)
from pitrio.harness import Harness, InMemorySessionStore, RetrySettings
from pitrio.testing import ScriptedModel, ScriptedResponse
from pitrio.ui import (
    Append,
    AppendDelta,
    Replace,
    Status,
    Transcript,
    UiAdapter,
    UiMessage,
    tool_summary,
    tool_title,
)

MODEL = Model(id="m", api="scripted", provider="scripted")


def _echo_tool() -> Tool:
    async def execute(call_id: str, params: Any, signal: AbortSignal, on_update: Any) -> ToolResult:
        on_update(text_result("partial"))
        return text_result(f"line 1\nline 2 {params.get('command', '')}")

    return Tool(name="bash", execute=execute)


def _failing_tool() -> Tool:
    async def execute(call_id: str, params: Any, signal: AbortSignal, on_update: Any) -> ToolResult:
        raise FileNotFoundError("Traceback (most recent call last):\nOSError: no x.py")

    return Tool(name="read", execute=execute)


def _record(agent: Agent | Harness, adapter: UiAdapter) -> list[UiMessage]:
    out: list[UiMessage] = []
    if isinstance(agent, Agent):
        agent.subscribe(lambda event, signal: out.extend(adapter.feed(event)))
    else:
        agent.subscribe(lambda event: out.extend(adapter.feed(event)))
    return out


def _wire(messages: list[UiMessage]) -> list[dict[str, Any]]:
    return [m.to_json() for m in messages]


async def test_text_and_tool_run_map_to_append_delta_replace() -> None:
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("c1", "bash", {"command": "ls  -la"})),
            ScriptedResponse.text("all done here", chunk_size=5),
        ]
    )
    agent = Agent(stream_fn=model, model=MODEL, tools=[_echo_tool()])
    adapter = UiAdapter()
    out = _record(agent, adapter)
    await agent.prompt("list files")

    assert _wire(out) == [
        {"type": "status", "working": True},
        {"type": "append", "id": "i1", "kind": "user", "text": "list files", "working": False},
        {"type": "append", "id": "i2", "kind": "assistant", "text": "", "working": True},
        {"type": "replace", "id": "i2", "text": "", "state": "done", "working": False},
        {
            "type": "append",
            "id": "i3",
            "kind": "tool",
            "text": "",
            "title": "bash ls -la",
            "working": True,
        },
        {"type": "replace", "id": "i3", "text": "partial", "state": "working", "working": True},
        {
            "type": "replace",
            "id": "i3",
            "text": "line 1\nline 2 ls  -la",
            "state": "done",
            "working": False,
            "summary": "ok · 2 lines",
        },
        {"type": "append", "id": "i4", "kind": "assistant", "text": "", "working": True},
        {"type": "appendDelta", "id": "i4", "delta": "all d", "channel": "text"},
        {"type": "appendDelta", "id": "i4", "delta": "one h", "channel": "text"},
        {"type": "appendDelta", "id": "i4", "delta": "ere", "channel": "text"},
        {"type": "replace", "id": "i4", "text": "all done here", "state": "done", "working": False},
        {"type": "status", "working": False},
    ]
    # Every message is JSON as it is.
    assert json.loads(json.dumps(_wire(out))) == _wire(out)


async def test_failed_tool_and_provider_error_end_as_error_items() -> None:
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("c1", "read", {"path": "x.py"})),
            ScriptedResponse(stop_reason="error", error_message="503 Service Unavailable"),
        ]
    )
    agent = Agent(stream_fn=model, model=MODEL, tools=[_failing_tool()])
    out = _record(agent, UiAdapter())
    await agent.prompt("read x.py")

    tool_end = [m for m in out if isinstance(m, Replace) and m.id == "i3"]
    assert tool_end == [
        Replace(
            id="i3",
            text="Traceback (most recent call last):\nOSError: no x.py",
            state="error",
            summary="error: OSError: no x.py",
        )
    ]
    last_bubble = [m for m in out if isinstance(m, Replace)][-1]
    assert last_bubble.state == "error"
    assert last_bubble.summary == "503 Service Unavailable"
    assert out[-1] == Status(working=False)


async def test_abort_mid_stream_ends_the_bubble_aborted_with_the_text_so_far(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel([ScriptedResponse.text("partial answer", delay=60)])
    agent = Agent(stream_fn=model, model=MODEL)
    adapter = UiAdapter()
    out = _record(agent, adapter)
    async with trio.open_nursery() as nursery:
        await nursery.start(agent.prompt, "go")
        await trio.testing.wait_all_tasks_blocked()
        assert any(isinstance(m, AppendDelta) for m in out)  # streamed before the abort
        agent.abort()
    end = [m for m in out if isinstance(m, Replace)][-1]
    assert end.state == "aborted"
    assert end.working is False
    assert out[-1] == Status(working=False)
    view = Transcript()
    view.apply_all(out)
    assert view.working is False


async def test_steering_message_appears_as_a_user_item_before_the_next_answer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    def respond(context: Any) -> ScriptedResponse:
        last = context.messages[-1]
        if isinstance(last, UserMessage) and last.content[0] == TextContent(text="use tabs"):
            return ScriptedResponse.text("ok, tabs")
        if isinstance(last, ToolResultMessage):
            return ScriptedResponse.text("finished")
        return ScriptedResponse.tool_calls(("c1", "slow", {}))

    async def slow(call_id: str, params: Any, signal: AbortSignal, on_update: Any) -> ToolResult:
        await trio.sleep(1)
        return text_result("slept")

    tools = [Tool(name="slow", execute=slow)]
    agent = Agent(stream_fn=ScriptedModel(respond), model=MODEL, tools=tools)
    out = _record(agent, UiAdapter())
    async with trio.open_nursery() as nursery:
        await nursery.start(agent.prompt, "format it")
        await trio.testing.wait_all_tasks_blocked()
        agent.steer("use tabs")
    users = [m.text for m in out if isinstance(m, Append) and m.kind == "user"]
    assert users == ["format it", "use tabs"]
    finals = [m.text for m in out if isinstance(m, Replace) and m.text]
    assert finals[-1] == "ok, tabs"


async def test_thinking_deltas_use_the_thinking_channel() -> None:
    response = ScriptedResponse(
        content=(ThinkingContent(thinking="hmm, let me see"), TextContent(text="42")),
        chunk_size=8,
    )
    agent = Agent(stream_fn=ScriptedModel([response]), model=MODEL)
    out = _record(agent, UiAdapter())
    await agent.prompt("?")
    deltas = [(m.channel, m.delta) for m in out if isinstance(m, AppendDelta)]
    assert deltas == [("thinking", "hmm, let"), ("thinking", " me see"), ("text", "42")]
    final = [m for m in out if isinstance(m, Replace)][-1]
    assert (final.text, final.thinking) == ("42", "hmm, let me see")


async def test_harness_retry_keeps_working_until_settled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel(
        [
            ScriptedResponse(stop_reason="error", error_message="503 Service Unavailable"),
            ScriptedResponse.text("recovered"),
        ]
    )
    store = InMemorySessionStore()
    harness = Harness(
        model=MODEL,
        stream_fn=model,
        session=await store.create(cwd="/srv"),
        retry=RetrySettings(base_delay=0.01),
    )
    out = _record(harness, UiAdapter(harness=True))
    await harness.prompt("hi")
    statuses = [m.working for m in out if isinstance(m, Status)]
    assert statuses[-1] is False
    assert False not in statuses[:-1]  # no idle flicker between the failed run and the retry
    notices = [m.text for m in out if isinstance(m, Append) and m.kind == "notice"]
    assert len(notices) == 1
    expected = r"Retrying in 0\.0 s \(attempt 1 of \d+\): 503 Service Unavailable"
    assert re.fullmatch(expected, notices[0])
    view = Transcript()
    view.apply_all(out)
    texts = [m.text for m in view.snapshot() if isinstance(m, Replace)]
    assert texts[-1] == "recovered"


def test_history_rebuilds_the_view_of_a_transcript() -> None:
    messages = [
        UserMessage(content="fix it"),
        AssistantMessage(
            content=(
                TextContent(text="Looking."),
                ToolCall(id="c1", name="read", arguments={"path": "a.py"}),
                ToolCall(id="c2", name="bash", arguments={"command": "pytest"}),
            ),
            stop_reason="toolUse",
        ),
        ToolResultMessage(
            tool_call_id="c1", tool_name="read", content=(TextContent(text="x = 1"),)
        ),
        AssistantMessage(stop_reason="aborted", error_message="Operation aborted"),
    ]
    view = Transcript()
    view.apply_all(UiAdapter().history(messages))
    snap = [m.to_json() for m in view.snapshot()]
    replaces = [(m["id"], m["text"], m["state"], m.get("summary")) for m in snap[1::2]]
    assert replaces == [
        ("i1", "fix it", "done", None),
        ("i2", "Looking.", "done", None),
        ("i3", "x = 1", "done", "ok · 1 line"),
        ("i4", "", "aborted", "no result (interrupted)"),
        ("i5", "", "aborted", "Operation aborted"),
    ]
    titles = [m.get("title") for m in snap if m["type"] == "append"]
    assert titles == [None, None, "read a.py", "bash pytest", None]
    assert snap[-1] == {"type": "status", "working": False}


def test_a_resumed_call_ends_in_its_block_of_the_history() -> None:
    """A killed run's call has no result in the history (aborted); its end, when the run
    is resumed, replaces that block. An end whose call the view never had gets a block."""
    call = ToolCall(id="c1", name="bash", arguments={"command": "sleep 5"})
    adapter = UiAdapter(harness=True)
    view = Transcript()
    view.apply_all(adapter.history([UserMessage(content="go"), AssistantMessage(content=(call,))]))
    result = ToolResult(content=(TextContent(text="[interrupted]"),))
    end = ToolExecutionEnd(tool_call_id="c1", tool_name="bash", result=result, is_error=True)
    view.apply_all(adapter.feed(end))
    other = ToolExecutionEnd(tool_call_id="c9", tool_name="read", result=result, is_error=True)
    view.apply_all(adapter.feed(other))
    snap = [m.to_json() for m in view.snapshot()]
    blocks = [(m["id"], m["state"], m["text"]) for m in snap if m["type"] == "replace"]
    assert blocks[-2:] == [("i3", "error", "[interrupted]"), ("i4", "error", "[interrupted]")]
    titles = [m.get("title") for m in snap if m["type"] == "append"]
    assert titles[-2:] == ["bash sleep 5", "read"]


def test_an_edit_result_sends_its_diff_in_history_and_snapshots() -> None:
    diff = "--- a.py\n+++ a.py\n@@ -1 +1 @@\n-x = 1\n+x = 2"
    edit = ToolCall(id="c1", name="edit", arguments={"path": "a.py"})
    failed = ToolCall(id="c2", name="edit", arguments={"path": "b.py"})
    messages = [
        AssistantMessage(content=(edit, failed), stop_reason="toolUse"),
        ToolResultMessage(
            tool_call_id="c1",
            tool_name="edit",
            content=(TextContent(text="Successfully replaced text in a.py."),),
            details={"diff": diff, "firstChangedLine": 1},
        ),
        ToolResultMessage(
            tool_call_id="c2",
            tool_name="edit",
            content=(TextContent(text="Could not find the exact text in b.py."),),
            details={"diff": "stale"},
            is_error=True,
        ),
    ]
    view = Transcript()
    view.apply_all(UiAdapter().history(messages))
    tools = [m.to_json() for m in view.snapshot() if isinstance(m, Replace) and m.id != "i1"]
    assert [(m["id"], m.get("diff")) for m in tools] == [("i2", diff), ("i3", None)]


def test_transcript_snapshot_replays_to_the_same_view() -> None:
    sent: list[UiMessage] = [
        Status(working=True),
        Append(id="a", kind="user", text="hi"),
        Append(id="b", kind="assistant", working=True),
        AppendDelta(id="b", delta="Hel"),
        AppendDelta(id="b", delta="lo", channel="thinking"),
        AppendDelta(id="b", delta="lo"),
        AppendDelta(id="zz", delta="ignored: unknown id"),
    ]
    view = Transcript()
    view.apply_all(sent)
    again = Transcript()
    again.apply_all(view.snapshot())
    assert again.snapshot() == view.snapshot()
    assert len(view) == 2
    bubble = next(m for m in view.snapshot() if isinstance(m, Replace) and m.id == "b")
    assert (bubble.text, bubble.thinking, bubble.state) == ("Hello", "lo", "working")
    assert view.working is True
    view.clear()
    assert view.snapshot() == [Status(working=False)]


def test_tool_summary_names_what_went_wrong() -> None:
    failed = "Traceback (most recent call last):\n  File x\nAssertionError: boom\n\n"
    failed += "Command exited with code 1"
    assert tool_summary(failed, is_error=True) == "error: AssertionError: boom (exit code 1)"
    assert tool_summary("Command exited with code 2", is_error=True) == "error (exit code 2)"
    assert tool_summary("", is_error=True) == "error"
    assert tool_summary("x" * 500, is_error=True).endswith("…")
    assert len(tool_summary("x" * 500, is_error=True)) == 160
    assert tool_summary("", is_error=False) == "ok · no output"
    assert tool_summary("a\nb\n", is_error=False) == "ok · 2 lines"


def test_tool_title_picks_the_main_argument_and_stays_one_short_line() -> None:
    assert tool_title("bash", {"command": "ls\n  -la"}) == "bash ls -la"
    assert tool_title("edit", {"path": "a.py", "old": "x"}) == "edit a.py"
    assert tool_title("lookup", {"n": 1}) == 'lookup {"n":1}'
    assert tool_title("noargs", {}) == "noargs"
    long = tool_title("bash", {"command": "x" * 500})
    assert len(long) == 120
    assert long.endswith("…")
