"""MCP servers' tools through pitrio: real servers written with the SDK, over stdio and
streamable HTTP, every test time-limited."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import trio

from pitrio import ImageContent, Model, TextContent, ToolExecutionUpdate, ToolResultMessage
from pitrio.harness import Harness, expand_prompt_template
from pitrio.mcp import (
    HttpServer,
    McpError,
    McpServer,
    McpToolset,
    StdioServer,
    connect,
    tool_name,
)
from pitrio.testing import ScriptedModel, ScriptedResponse

from .conftest import children, stdio

# The SDK's streamable HTTP client drops httpx2 response iterators without closing them
# (Trio's async generator hooks then warn when they are collected): the SDK's, not ours.
pytestmark = [
    pytest.mark.filterwarnings("ignore:Async generator 'httpx2:ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

MODEL = Model(id="m", api="scripted", provider="scripted")
LIMIT = 60  # seconds: a start, a few calls and a stop each take well under a second


def _text(message: ToolResultMessage) -> str:
    return "\n".join(b.text for b in message.content if isinstance(b, TextContent))


def _results(harness: Harness) -> list[ToolResultMessage]:
    return [m for m in harness.messages if isinstance(m, ToolResultMessage)]


def _tool(server: McpServer, name: str) -> Any:
    return next(t for t in server.tools if t.name == tool_name(server.name, name))


async def _call(server: McpServer, name: str, args: dict[str, Any]) -> Any:
    """One call through a harness (validation, hooks, the tool result message)."""
    scripted = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("c1", tool_name(server.name, name), args)),
            ScriptedResponse.text("done"),
        ]
    )
    harness = Harness(model=MODEL, stream_fn=scripted, tools=list(server.tools))
    await harness.prompt("go")
    (result,) = _results(harness)
    return result


@pytest.fixture(params=["stdio", "http"])
def tools_config(
    request: pytest.FixtureRequest, http_server: Callable[[str], HttpServer]
) -> StdioServer | HttpServer:
    return stdio("tools") if request.param == "stdio" else http_server("tools")


async def test_tools_are_listed_with_their_schemas(tools_config: Any) -> None:
    """Each MCP tool is a pitrio tool named mcp__SERVER__TOOL whose parameters are the
    tool's inputSchema."""
    with trio.fail_after(LIMIT):
        async with connect(tools_config) as server:
            names = {t.name for t in server.tools}
            assert tool_name(server.name, "add") in names
            assert tool_name(server.name, "echo") in names
            add = _tool(server, "add")
            assert add.parameters["properties"]["a"]["type"] == "integer"
            assert add.parameters["required"] == ["a", "b"]
            assert add.description == "Add two integers."
            assert server.instructions == "Tools for pitrio's tests."


async def test_calls_go_through_the_harness(tools_config: Any) -> None:
    """add and a unicode echo answer through the agent loop as text results."""
    with trio.fail_after(LIMIT):
        async with connect(tools_config) as server:
            added = await _call(server, "add", {"a": 2, "b": 40})
            assert not added.is_error
            assert _text(added) == "42"
            transport = "stdio" if isinstance(tools_config, StdioServer) else "streamable-http"
            mcp_info = added.details.pop("mcp")
            assert added.details == {"structuredContent": {"result": 42}}
            assert mcp_info["server"] == server.name
            assert mcp_info["tool"] == "add"
            assert mcp_info["method"] == "tools/call"
            assert mcp_info["transport"] == transport
            assert mcp_info["protocol_version"]
            # Over HTTP the server's session id (its mcp-session-id header) is kept.
            assert ("session_id" in mcp_info) == (transport == "streamable-http")
            echoed = await _call(server, "echo", {"text": "héllo wörld ✓ 🐍"})
            assert _text(echoed) == "echo: héllo wörld ✓ 🐍"


async def test_arguments_are_validated_by_pitrio_before_the_call() -> None:
    """A call whose arguments fail the inputSchema is refused by pitrio's validator (the
    server is not called)."""
    with trio.fail_after(LIMIT):
        async with connect(stdio("tools")) as server:
            result = await _call(server, "add", {"a": "two"})
            assert result.is_error
            assert "Validation failed for tool" in _text(result)


async def test_images_resources_and_structured_content() -> None:
    """An image becomes an image block, an embedded resource text, structured content
    details (and JSON text when it is all the server sent)."""
    with trio.fail_after(LIMIT):
        async with connect(stdio("tools")) as server:
            image = await _call(server, "image", {})
            assert isinstance(image.content[0], TextContent)
            assert image.content[0].text == "a pixel"
            assert isinstance(image.content[1], ImageContent)
            assert image.content[1].mime_type == "image/png"
            resource = await _call(server, "resource", {})
            assert _text(resource) == "[resource: file:///notes.txt]\nthe notes"
            point = await _call(server, "point", {"x": 3, "y": 4})
            assert point.details["structuredContent"] == {"x": 3, "y": 4}


async def test_a_tool_that_raises_is_an_error_result(tools_config: Any) -> None:
    """isError results are error tool results with the server's text."""
    with trio.fail_after(LIMIT):
        async with connect(tools_config) as server:
            result = await _call(server, "boom", {})
            assert result.is_error
            assert _text(result) == "Error executing tool boom"


async def test_error_results_keep_the_servers_text() -> None:
    """A ToolError's message reaches the model, and the server still answers after it."""
    with trio.fail_after(LIMIT):
        async with connect(stdio("errors")) as server:
            result = await _call(server, "refuse", {"reason": "no thanks"})
            assert result.is_error
            assert _text(result) == "Error executing tool refuse: refused: no thanks"
            again = await _call(server, "refuse", {"reason": "still no"})
            assert _text(again) == "Error executing tool refuse: refused: still no"


async def test_abort_cancels_the_request_on_the_server(tools_config: Any) -> None:
    """Aborting a slow call ends it at once as aborted, and the server was told
    (notifications/cancelled: its handler was cancelled); its progress reached the run as
    a tool_execution_update."""
    with trio.fail_after(LIMIT):
        async with connect(tools_config) as server:
            slow = tool_name(server.name, "slow")
            scripted = ScriptedModel(
                [ScriptedResponse.tool_calls(("c1", slow, {})), ScriptedResponse.text("x")]
            )
            harness = Harness(model=MODEL, stream_fn=scripted, tools=list(server.tools))
            updates: list[str] = []
            running = trio.Event()

            def listen(event: object) -> None:
                if isinstance(event, ToolExecutionUpdate):
                    updates.append(_text_of(event.partial_result))
                    running.set()  # the server's handler has started

            harness.subscribe(listen)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(harness.prompt, "go")
                await running.wait()
                harness.abort()
            assert updates == ["0/1 sleeping"]  # its progress notification
            (result,) = _results(harness)
            assert result.is_error
            assert _text(result) == "Operation aborted"
            seen = "none"
            for _ in range(100):  # the notification is one-way: poll for its effect
                seen = _text_of((await server.call_tool("cancelled", {}))[0])
                if seen != "none":
                    break
                await trio.sleep(0.05)
            assert seen == "slow"


def _text_of(result: Any) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, TextContent))


async def test_a_hung_call_is_aborted_and_nothing_is_left_behind() -> None:
    """A call the server never answers (it ignores the cancellation) ends promptly on
    abort, and leaving the block stops the server: no child process remains."""
    before, tasks = children(), _tasks()
    with trio.fail_after(LIMIT):
        async with connect(stdio("hang")) as server:
            assert len(children() - before) == 1
            assert _tasks() > tasks  # the SDK's pipe readers, our watcher...
            with trio.move_on_after(0.5) as scope:
                await server.call_tool("hang", {})
            assert scope.cancelled_caught
    assert children() - before == set()
    assert _tasks() == tasks


def _tasks() -> int:
    """How many tasks run under this test's task (in its nurseries, recursively)."""

    def count(task: trio.lowlevel.Task) -> int:
        return sum(
            1 + count(child) for nursery in task.child_nurseries for child in nursery.child_tasks
        )

    return count(trio.lowlevel.current_task())


async def test_a_server_that_crashes_mid_call() -> None:
    """A server exiting in the middle of a call fails that call with an error result;
    the server is then closed and its tools are gone."""
    with trio.fail_after(LIMIT):
        async with McpToolset([stdio("crash")]) as toolset:
            (server,) = toolset.servers
            die = tool_name("crash", "die")
            scripted = ScriptedModel(
                [ScriptedResponse.tool_calls(("c1", die, {})), ScriptedResponse.text("ok")]
            )
            harness = Harness(model=MODEL, stream_fn=scripted, tools=[toolset])
            await harness.prompt("go")
            (result,) = _results(harness)
            assert result.is_error
            assert _text(result) == "MCP server 'crash': Connection closed"
            assert server.closed
            assert toolset(harness.tool_context) == []


async def test_a_tool_list_that_changes_is_seen_on_the_next_turn() -> None:
    """After notifications/tools/list_changed the next request offers the new tool."""
    with trio.fail_after(LIMIT):
        async with McpToolset([stdio("tools")]) as toolset:
            grow, extra = tool_name("tools", "grow"), tool_name("tools", "extra")
            scripted = ScriptedModel(
                [
                    ScriptedResponse.tool_calls(("c1", grow, {})),
                    ScriptedResponse.tool_calls(("c2", extra, {})),
                    ScriptedResponse.text("done"),
                ]
            )
            harness = Harness(model=MODEL, stream_fn=scripted, tools=[toolset])
            await harness.prompt("go")
            first, second, _ = scripted.requests
            assert extra not in {t.name for t in first.tools or ()}
            assert extra in {t.name for t in second.tools or ()}
            assert [_text(r) for r in _results(harness)] == ["grown", "extra!"]


async def test_a_toolset_keeps_going_without_a_server_that_fails() -> None:
    """A server that cannot start is left out with its reason; the others serve."""
    missing = StdioServer(name="missing", command="/nonexistent/mcp-server")
    with trio.fail_after(LIMIT):
        async with McpToolset([missing, stdio("errors")]) as toolset:
            assert [s.name for s in toolset.servers] == ["errors"]
            assert "missing" in toolset.failures
            assert "did not start" in toolset.failures["missing"]
            tools = toolset(Harness(model=MODEL, stream_fn=ScriptedModel([])).tool_context)
            assert [t.name for t in tools] == [tool_name("errors", "refuse")]


async def test_a_server_that_never_answers_times_out() -> None:
    """start_timeout bounds the start of a server that does not speak MCP."""
    silent = StdioServer(name="silent", command="sleep", args=["3600"])
    before = children()
    with trio.fail_after(LIMIT):
        async with McpToolset([silent], start_timeout=0.5) as toolset:
            assert toolset.servers == ()
            assert toolset.failures == {
                "silent": "the MCP server 'silent' did not start within 0.5 seconds"
            }
    assert children() - before == set()


async def test_connect_names_a_server_that_does_not_start() -> None:
    """connect raises McpError naming the server."""
    with (
        trio.fail_after(LIMIT),
        pytest.raises(McpError, match=r"^the MCP server 'gone' did not start: "),
    ):
        async with connect(StdioServer(name="gone", command="/nonexistent/x")):
            pass  # pragma: no cover


async def test_prompts_become_templates() -> None:
    """A prompt with arguments becomes a /SERVER:PROMPT template with $1, $2..."""
    with trio.fail_after(LIMIT):
        async with connect(stdio("tools")) as server:
            (template,) = server.prompt_templates
            assert template.name == "tools:review"
            assert template.description == "Review a file."
            expanded = expand_prompt_template("/tools:review src/app.py", [template])
            assert expanded == "Review src/app.py, looking for bugs."


async def test_a_factory_with_a_tools_revision_is_called_again_when_it_changes() -> None:
    """The harness calls a tool factory again (in the same run) when its tools_revision
    changes, and only then."""
    from pitrio import Tool, text_result

    async def run(call_id: str, params: Any, signal: Any, on_update: Any) -> Any:
        factory.tools_revision += 1
        return text_result("changed")

    class Factory:
        tools_revision = 0
        calls = 0

        def __call__(self, context: Any) -> list[Tool]:
            self.calls += 1
            return [Tool(name=f"t{self.tools_revision}", execute=run)]

    factory = Factory()
    scripted = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("c1", "t0", {})),
            ScriptedResponse.tool_calls(("c2", "t1", {})),
            ScriptedResponse.text("done"),
        ]
    )
    harness = Harness(model=MODEL, stream_fn=scripted, tools=[factory])
    await harness.prompt("go")
    assert [[t.name for t in r.tools or ()] for r in scripted.requests] == [
        ["t0"],
        ["t1"],
        ["t2"],
    ]
    assert factory.calls == 3
    await harness.prompt("again")  # nothing changed since: not called again
    assert factory.calls == 3


async def test_a_change_announced_outside_a_call_is_picked_up() -> None:
    """A tools/list_changed that arrives between calls is fetched by the server's own
    task: the next tool list has the new tool."""
    with trio.fail_after(LIMIT):
        async with connect(stdio("tools")) as server:
            later = tool_name("tools", "later")
            revision = server.revision
            await server.call_tool("grow_soon", {})
            assert later not in {t.name for t in server.tools}
            for _ in range(200):  # the server announces it 0.2 s after the call
                if server.revision != revision:
                    break
                await trio.sleep(0.05)
            assert later in {t.name for t in server.tools}


async def test_resources_are_listed_and_read_through_two_tools(tools_config: Any) -> None:
    """A server with resources gives a toolset mcp__list_resources and
    mcp__read_resource; text comes back as text, an image as an image, an unknown server
    or URI as an error result naming it."""
    with trio.fail_after(LIMIT):
        async with McpToolset([tools_config]) as toolset:
            (server,) = toolset.servers
            assert {str(r.uri) for r in server.resources} == {"notes://readme", "pics://dot"}
            scripted = ScriptedModel(
                [
                    ScriptedResponse.tool_calls(("c1", "mcp__list_resources", {})),
                    ScriptedResponse.tool_calls(
                        (
                            "c2",
                            "mcp__read_resource",
                            {"server": server.name, "uri": "notes://readme"},
                        ),
                        ("c3", "mcp__read_resource", {"server": server.name, "uri": "pics://dot"}),
                        ("c4", "mcp__read_resource", {"server": "nope", "uri": "notes://readme"}),
                        ("c5", "mcp__read_resource", {"server": server.name, "uri": "notes://x"}),
                    ),
                    ScriptedResponse.text("done"),
                ]
            )
            harness = Harness(model=MODEL, stream_fn=scripted, tools=[toolset])
            await harness.prompt("go")
            listed, text, image, unknown, missing = _results(harness)
            assert not listed.is_error
            assert (
                f"{server.name}: notes://readme (readme) [text/markdown] - The project's notes."
                in _text(listed)
            )
            assert f"{server.name}: pics://dot (dot) [image/png]" in _text(listed)
            assert _text(text) == "# Notes\nRemember the milk."
            assert text.details["mcp"]["method"] == "resources/read"
            assert isinstance(image.content[0], ImageContent)
            assert image.content[0].mime_type == "image/png"
            assert unknown.is_error
            assert "no connected MCP server is named 'nope'" in _text(unknown)
            assert missing.is_error
            assert "could not read 'notes://x'" in _text(missing)


async def test_a_toolset_without_resources_offers_no_resource_tools() -> None:
    """The two resource tools appear only while a server has resources."""
    with trio.fail_after(LIMIT):
        async with McpToolset([stdio("errors")]) as toolset:
            names = {t.name for t in toolset(None)}  # type: ignore[arg-type]
            assert names == {tool_name("errors", "refuse")}
