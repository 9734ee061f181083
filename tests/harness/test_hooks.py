"""Hooks: what each one changes, the order they run in, and what a failing one does."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from pitrio import (
    AgentMessage,
    Context,
    Model,
    StreamOptions,
    TextContent,
    Tool,
    ToolResult,
    UserMessage,
    text_result,
    user_text,
)
from pitrio.harness import (
    BeforeAgentStartEvent,
    BeforeAgentStartResult,
    ContextEvent,
    Harness,
    HarnessEvent,
    Hooks,
    ProviderPayloadEvent,
    ProviderRequestEvent,
    ProviderRequestPatch,
    ProviderResponseEvent,
    ToolCallEvent,
    ToolCallResult,
    ToolResultEvent,
    ToolResultPatch,
)
from pitrio.testing import ScriptedModel, ScriptedResponse

MODEL = Model(id="m", api="scripted", provider="scripted")


class HttpLike:
    """A stream function that behaves like a provider towards the hooks: it calls
    ``on_payload`` with a body and ``on_response`` with a status, then plays a script."""

    def __init__(self, responses: list[ScriptedResponse]) -> None:
        self.scripted = ScriptedModel(responses)
        self.bodies: list[Any] = []
        self.options: list[StreamOptions] = []

    async def __call__(self, model: Model, context: Context, options: StreamOptions) -> Any:
        self.options.append(options)
        body: Any = {"model": model.id, "messages": len(context.messages)}
        if options.on_payload is not None:
            replaced = await options.on_payload(body, model)
            if replaced is not None:
                body = replaced
        self.bodies.append(body)
        if options.on_response is not None:
            await options.on_response(200, {"x-request-id": "r1"}, model)  # type: ignore[misc]
        return self.scripted(model, context, options)


def _tool(log: list[str]) -> Tool:
    async def execute(call_id: str, params: Any, signal: Any, on_update: Any) -> ToolResult:
        log.append(f"execute {params['x']}")
        return text_result(f"got {params['x']}")

    return Tool(
        name="echo",
        description="echo",
        execute=execute,
        parameters={"type": "object", "properties": {"x": {"type": "string"}}},
    )


def _types(events: list[HarnessEvent]) -> list[str]:
    return [e.type for e in events]


async def test_hooks_run_in_request_order(autojump_clock: trio.testing.MockClock) -> None:
    log: list[str] = []
    stream = HttpLike(
        [
            ScriptedResponse.tool_calls(("c1", "echo", {"x": "a"})),
            ScriptedResponse.text("done"),
        ]
    )
    harness = Harness(model=MODEL, stream_fn=stream, tools=[_tool(log)])
    hooks = harness.hooks
    hooks.on("before_agent_start", lambda e: log.append("before_agent_start"))
    hooks.on("context", lambda e: log.append("context"))
    hooks.on("before_provider_request", lambda e: log.append("before_provider_request"))
    hooks.on("before_provider_payload", lambda e: log.append("before_provider_payload"))
    hooks.on("after_provider_response", lambda e: log.append("after_provider_response"))
    hooks.on("tool_call", lambda e: log.append("tool_call"))
    hooks.on("tool_result", lambda e: log.append("tool_result"))
    await harness.prompt("go")
    request = [
        "context",
        "before_provider_request",
        "before_provider_payload",
        "after_provider_response",
    ]
    assert log == [
        "before_agent_start",
        *request,
        "tool_call",
        "execute a",
        "tool_result",
        *request,
    ]


async def test_before_agent_start_adds_messages_and_sets_the_system_prompt(
    autojump_clock: trio.testing.MockClock,
) -> None:
    scripted = ScriptedModel([ScriptedResponse.text("ok"), ScriptedResponse.text("ok")])
    harness = Harness(model=MODEL, stream_fn=scripted, system_prompt="base")
    seen: list[BeforeAgentStartEvent] = []

    def first(event: BeforeAgentStartEvent) -> BeforeAgentStartResult:
        seen.append(event)
        return BeforeAgentStartResult(messages=[user_text("extra context")], system_prompt="one")

    def second(event: BeforeAgentStartEvent) -> BeforeAgentStartResult | None:
        seen.append(event)
        return BeforeAgentStartResult(system_prompt=event.system_prompt + "+two")

    harness.hooks.on("before_agent_start", first)
    remove = harness.hooks.on("before_agent_start", second)
    await harness.prompt("hi")
    assert seen[0].system_prompt == "base"
    assert [_text(m) for m in seen[1].prompt] == ["hi", "extra context"]
    assert seen[1].system_prompt == "one"
    request = scripted.requests[0]
    assert request.system_prompt == "one+two"
    assert [_text(m) for m in request.messages] == ["hi", "extra context"]
    # The override is for that prompt only.
    remove()
    harness.hooks.on("before_agent_start", lambda e: None)
    await harness.prompt("again")
    assert scripted.requests[1].system_prompt == "one"


def _text(message: AgentMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(b.text for b in content if isinstance(b, TextContent))


async def test_context_hook_replaces_the_messages_of_each_request(
    autojump_clock: trio.testing.MockClock,
) -> None:
    scripted = ScriptedModel([ScriptedResponse.text("one"), ScriptedResponse.text("two")])
    harness = Harness(model=MODEL, stream_fn=scripted)
    seen: list[ContextEvent] = []

    def last_only(event: ContextEvent) -> list[AgentMessage]:
        seen.append(event)
        return [event.messages[-1]]

    harness.hooks.on("context", last_only)
    await harness.prompt("first")
    await harness.prompt("second")
    assert [len(e.messages) for e in seen] == [1, 3]
    assert [_text(m) for m in scripted.requests[1].messages] == ["second"]
    # The transcript itself is untouched.
    assert [m.role for m in harness.messages] == ["user", "assistant", "user", "assistant"]


async def test_tool_call_hook_blocks_with_a_reason(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[str] = []
    scripted = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("c1", "echo", {"x": "a"}), ("c2", "echo", {"x": "b"})),
            ScriptedResponse.text("done"),
        ]
    )
    harness = Harness(model=MODEL, stream_fn=scripted, tools=[_tool(log)])
    calls: list[ToolCallEvent] = []

    def guard(event: ToolCallEvent) -> ToolCallResult | None:
        calls.append(event)
        if event.args["x"] == "b":
            return ToolCallResult(block=True, reason="b is not allowed")
        return None

    harness.hooks.on("tool_call", guard)
    await harness.prompt("go")
    assert log == ["execute a"]
    assert [(c.tool_call_id, c.tool_name) for c in calls] == [("c1", "echo"), ("c2", "echo")]
    results = [m for m in harness.messages if m.role == "toolResult"]
    assert [(r.is_error, _text(r)) for r in results] == [
        (False, "got a"),
        (True, "b is not allowed"),
    ]


async def test_tool_result_hook_patches_fields(autojump_clock: trio.testing.MockClock) -> None:
    scripted = ScriptedModel(
        [ScriptedResponse.tool_calls(("c1", "echo", {"x": "a"})), ScriptedResponse.text("done")]
    )
    harness = Harness(model=MODEL, stream_fn=scripted, tools=[_tool([])])
    seen: list[ToolResultEvent] = []

    def redact(event: ToolResultEvent) -> ToolResultPatch:
        seen.append(event)
        return ToolResultPatch(content=(TextContent(text="[redacted]"),), details={"n": 1})

    def flag(event: ToolResultEvent) -> ToolResultPatch:
        seen.append(event)
        return ToolResultPatch(is_error=True)

    harness.hooks.on("tool_result", redact)
    harness.hooks.on("tool_result", flag)
    await harness.prompt("go")
    assert _text_blocks(seen[0].content) == "got a"
    assert _text_blocks(seen[1].content) == "[redacted]"  # sees the earlier patch
    result = next(m for m in harness.messages if m.role == "toolResult")
    assert _text(result) == "[redacted]"
    assert result.details == {"n": 1}
    assert result.is_error is True


def _text_blocks(content: Any) -> str:
    return "".join(b.text for b in content)


async def test_provider_hooks_patch_options_replace_the_body_and_see_the_response(
    autojump_clock: trio.testing.MockClock,
) -> None:
    stream = HttpLike([ScriptedResponse.text("ok")])
    harness = Harness(
        model=MODEL,
        stream_fn=stream,
        stream_options=StreamOptions(headers={"a": "1", "b": "2"}, timeout=5.0),
    )
    requests: list[ProviderRequestEvent] = []
    responses: list[ProviderResponseEvent] = []

    def patch(event: ProviderRequestEvent) -> ProviderRequestPatch:
        requests.append(event)
        return ProviderRequestPatch(headers={"a": None, "c": "3"}, timeout=1.5, max_retries=4)

    def payload(event: ProviderPayloadEvent) -> Any:
        return {**event.payload, "extra": True}

    harness.hooks.on("before_provider_request", patch)
    harness.hooks.on("before_provider_payload", payload)
    harness.hooks.on("after_provider_response", responses.append)
    await harness.prompt("hi")
    assert requests[0].headers == {"a": "1", "b": "2"}
    assert requests[0].timeout == 5.0
    options = stream.options[0]
    assert dict(options.headers or {}) == {"b": "2", "c": "3"}
    assert options.timeout == 1.5
    assert options.max_retries == 4
    assert stream.bodies == [{"model": "m", "messages": 1, "extra": True}]
    assert [(r.status, dict(r.headers)) for r in responses] == [(200, {"x-request-id": "r1"})]


async def test_async_handlers_are_awaited(autojump_clock: trio.testing.MockClock) -> None:
    scripted = ScriptedModel([ScriptedResponse.text("ok")])
    harness = Harness(model=MODEL, stream_fn=scripted)

    async def slow(event: ContextEvent) -> list[AgentMessage]:
        await trio.sleep(1)
        return [*event.messages, user_text("added late")]

    harness.hooks.on("context", slow)
    await harness.prompt("hi")
    assert [_text(m) for m in scripted.requests[0].messages] == ["hi", "added late"]


def _boom(event: Any) -> Any:
    # "503" would make the error retryable; a hook failure must not be retried.
    msg = "boom 503"
    raise RuntimeError(msg)


@pytest.mark.parametrize(
    "hook",
    [
        "before_agent_start",
        "context",
        "tool_call",
        "tool_result",
        "before_provider_request",
        "before_provider_payload",
        "after_provider_response",
    ],
)
async def test_a_failing_hook_ends_the_run_as_an_error_run(
    hook: Any, autojump_clock: trio.testing.MockClock
) -> None:
    stream = HttpLike(
        [
            ScriptedResponse.tool_calls(("c1", "echo", {"x": "a"})),
            ScriptedResponse.text("unreachable"),
            ScriptedResponse.text("after"),
            ScriptedResponse.text("after"),
        ]
    )
    harness = Harness(model=MODEL, stream_fn=stream, tools=[_tool([])])
    events: list[HarnessEvent] = []
    harness.subscribe(events.append)
    remove = harness.hooks.on(hook, _boom)
    await harness.prompt("go")
    assert not harness.is_busy
    last = harness.messages[-1]
    assert last.role == "assistant"
    assert last.stop_reason == "error"
    assert last.error_message is not None
    assert f"{hook} hook failed: boom 503" in last.error_message
    assert "auto_retry_start" not in _types(events)
    assert _types(events)[-2:] == ["agent_end", "settled"]
    if hook in ("tool_call", "tool_result"):
        # The failing call's result carries the error; the run ends after that turn.
        result = next(m for m in harness.messages if m.role == "toolResult")
        assert result.is_error
        assert "boom 503" in _text(result)
    # The harness works again once the hook is gone.
    remove()
    await harness.prompt("again")
    assert harness.messages[-1].stop_reason == "stop"


async def test_a_bad_return_value_is_a_hook_failure(
    autojump_clock: trio.testing.MockClock,
) -> None:
    harness = Harness(model=MODEL, stream_fn=ScriptedModel([ScriptedResponse.text("x")]))
    harness.hooks.on("tool_call", lambda e: "yes")  # type: ignore[call-overload]
    harness.hooks.on("before_agent_start", lambda e: 42)  # type: ignore[call-overload]
    await harness.prompt("hi")
    message = harness.messages[-1]
    assert message.stop_reason == "error"
    assert "before_agent_start hook failed" in message.error_message
    assert "BeforeAgentStartResult" in message.error_message


def test_registration_is_checked() -> None:
    hooks = Hooks()
    with pytest.raises(ValueError, match=r"unknown hook 'tool_calls'.*tool_call"):
        hooks.on("tool_calls", print)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="must be callable"):
        hooks.on("context", 3)  # type: ignore[call-overload]
    remove = hooks.on("context", lambda e: None)
    assert hooks.has("context")
    remove()
    remove()  # idempotent
    assert not hooks.has("context")


async def test_prompt_message_input(autojump_clock: trio.testing.MockClock) -> None:
    scripted = ScriptedModel([ScriptedResponse.text("ok")])
    harness = Harness(model=MODEL, stream_fn=scripted)
    await harness.prompt([UserMessage(content="a"), UserMessage(content="b")])
    assert [_text(m) for m in scripted.requests[0].messages] == ["a", "b"]
    with pytest.raises(TypeError, match="expected a message"):
        await harness.prompt([object()])
    assert not harness.is_busy
