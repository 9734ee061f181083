"""MCP in the command line: servers from mcp.json as tools (consent as for bash), and
``python -m pitrio mcp`` driven by the SDK's client."""

from __future__ import annotations

import io
import json
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import trio

# tests/ is on sys.path (pytest's rootdir import of these test packages)
from cli.conftest import ChatServer, Reply, last_user_text, text_reply, tool_reply

from pitrio import TextContent, ToolResultMessage
from pitrio.cli import main
from pitrio.cli._mcp import describe_mcp
from pitrio.mcp import McpToolset, StdioServer, connect
from pitrio.testing import ScriptedModel, ScriptedResponse

from .conftest import SERVERS, stdio

pytestmark = pytest.mark.timeout(120)


def _env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    return {
        "HOME": str(home),
        "PATH": "/usr/bin:/bin",
        "PI_CODING_AGENT_DIR": str(home / ".pi" / "agent"),
        "PITRIO_SESSIONS_DIR": str(tmp_path / "sessions"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
    }


def _write_config(env: dict[str, str], servers: dict[str, Any]) -> None:
    agent = Path(env["PI_CODING_AGENT_DIR"])
    agent.mkdir(parents=True, exist_ok=True)
    (agent / "mcp.json").write_text(json.dumps({"mcpServers": servers}))


def _run(args: list[str], env: dict[str, str], scripted: ScriptedModel) -> tuple[int, str]:
    out = io.StringIO()
    status = main(args, stream_fn=scripted, env=env, stdin=io.StringIO(""), stdout=out)
    return status, out.getvalue()


def _tool_results(scripted: ScriptedModel) -> list[ToolResultMessage]:
    return [m for m in scripted.requests[-1].messages if isinstance(m, ToolResultMessage)]


def _text(message: ToolResultMessage) -> str:
    return "".join(b.text for b in message.content if isinstance(b, TextContent))


TOOLS = {"tools": {"command": sys.executable, "args": [str(SERVERS), "tools"]}}


def _add_script() -> ScriptedModel:
    return ScriptedModel(
        [
            ScriptedResponse.tool_calls(("c1", "mcp__tools__add", {"a": 20, "b": 22})),
            ScriptedResponse.text("done"),
        ]
    )


def test_configured_servers_tools_need_consent_in_print_mode(tmp_path: Path) -> None:
    """-p without --yes refuses an MCP tool, saying how to allow it; the model saw it."""
    env = _env(tmp_path)
    _write_config(env, TOOLS)
    scripted = _add_script()
    status, _ = _run(["--cwd", str(tmp_path), "-p", "add", "--no-session"], env, scripted)
    assert status == 0
    offered = {t.name for t in scripted.requests[0].tools or ()}
    assert {"read", "bash", "mcp__tools__add", "mcp__tools__echo"} <= offered
    (result,) = _tool_results(scripted)
    assert result.is_error
    assert _text(result).startswith("Refused: mcp__tools__add changes files or runs commands")


def test_configured_servers_tools_run_with_yes(tmp_path: Path) -> None:
    """With --yes the MCP tool runs and its answer reaches the model."""
    env = _env(tmp_path)
    _write_config(env, TOOLS)
    scripted = _add_script()
    status, _ = _run(
        ["--cwd", str(tmp_path), "-p", "add", "--no-session", "--yes"], env, scripted
    )
    assert status == 0
    (result,) = _tool_results(scripted)
    assert not result.is_error
    assert _text(result) == "42"


def test_a_policy_allows_an_mcp_tool_by_name(tmp_path: Path) -> None:
    """allow = ["mcp__tools__*:*"] lets the server's tools run without --yes."""
    env = _env(tmp_path)
    _write_config(env, TOOLS)
    policy = tmp_path / "policy.toml"
    policy.write_text('allow = ["mcp__tools__*:*"]\n')
    scripted = _add_script()
    args = ["--cwd", str(tmp_path), "-p", "add", "--no-session", "--policy", str(policy)]
    status, _ = _run(args, env, scripted)
    assert status == 0
    assert _text(_tool_results(scripted)[0]) == "42"


def test_a_bad_mcp_json_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A server entry without command or url exits 2 naming the file and the server."""
    env = _env(tmp_path)
    _write_config(env, {"broken": {"args": ["x"]}})
    status, _ = _run(["--cwd", str(tmp_path), "-p", "hi", "--no-session"], env, ScriptedModel([]))
    assert status == 2
    err = capsys.readouterr().err
    assert "mcp.json: mcpServers.broken has neither \"command\"" in err


def test_a_project_mcp_json_counts_only_when_trusted(tmp_path: Path) -> None:
    """The project's .pi/mcp.json (a file that needs trust) starts servers only in a
    trusted project."""
    env = _env(tmp_path)
    project = tmp_path / "project"
    (project / ".pi").mkdir(parents=True)
    (project / ".pi" / "mcp.json").write_text(json.dumps({"mcpServers": TOOLS}))
    agent = Path(env["PI_CODING_AGENT_DIR"])
    agent.mkdir(parents=True)
    for trust, expected in (("never", False), ("always", True)):
        (agent / "settings.json").write_text(json.dumps({"defaultProjectTrust": trust}))
        scripted = ScriptedModel([ScriptedResponse.text("hi")])
        args = ["--cwd", str(project), "-p", "hi", "--no-session"]
        status, _ = _run(args, env, scripted)
        assert status == 0
        offered = {t.name for t in scripted.requests[0].tools or ()}
        assert ("mcp__tools__add" in offered) is expected, trust


async def test_slash_mcp_lists_servers_and_tools() -> None:
    """/mcp's text names each server, its command and its tools, and failed ones."""
    missing = StdioServer(name="missing", command="/nonexistent/server")
    with trio.fail_after(60):
        async with McpToolset([stdio("errors"), missing]) as toolset:
            text = describe_mcp(toolset)
    assert text.splitlines()[0] == "MCP servers:"
    assert f"  errors  {sys.executable} {SERVERS} errors  (1 tools)" in text
    assert "    mcp__errors__refuse  Returns an error result." in text
    assert "  missing  failed: the MCP server 'missing' did not start" in text
    assert describe_mcp(None).startswith("no MCP servers")


async def test_slash_mcp_lists_resources() -> None:
    """A server's resources are listed under it (a URI from the server is data: one line)."""
    with trio.fail_after(60):
        async with McpToolset([stdio("tools")]) as toolset:
            text = describe_mcp(toolset)
    assert "    resource notes://readme  The project's notes." in text
    assert "    resource pics://dot  dot" in text


class _Typed(io.StringIO):
    """Lines typed at the interactive prompt (a terminal, as far as pitrio can tell)."""

    def isatty(self) -> bool:
        return True


def test_slash_mcp_and_tools_in_the_terminal(tmp_path: Path) -> None:
    """In the interactive prompt /mcp lists the configured server and its tools, and
    /tools says MCP tools ask first."""
    env = _env(tmp_path)
    _write_config(env, {"errors": {"command": sys.executable, "args": [str(SERVERS), "errors"]}})
    out = io.StringIO()
    argv = ["--cwd", str(tmp_path), "--no-session", "--no-color"]
    status = main(
        argv, stream_fn=ScriptedModel([]), env=env, stdin=_Typed("/mcp\n/tools\n"), stdout=out
    )
    assert status == 0
    text = out.getvalue()
    assert f"  errors  {sys.executable} {SERVERS} errors  (1 tools)" in text
    assert "    mcp__errors__refuse  Returns an error result." in text
    (line,) = [row for row in text.splitlines() if row.startswith("  mcp__errors__refuse ")]
    assert "asks first" in line


async def test_the_terminal_asks_before_an_mcp_tool(tmp_path: Path) -> None:
    """Consent asks about an MCP tool (its arguments shown), as about bash."""
    from pitrio.cli._consent import Consent, Policy
    from pitrio.harness import ToolCallEvent

    asked: list[str] = []

    async def ask(event: ToolCallEvent) -> str:
        asked.append(event.tool_name)
        return "n"

    consent = Consent(Policy(), yes=False, mode_hint="the interactive prompt", cwd=str(tmp_path))
    consent.ask = ask
    read = await consent(_event("read"))
    refused = await consent(_event("mcp__github__create_issue"))
    assert read is None
    assert asked == ["mcp__github__create_issue"]
    assert refused is not None
    assert refused.block


def _event(tool: str) -> Any:
    from pitrio.harness import ToolCallEvent

    return ToolCallEvent(tool_call_id="c1", tool_name=tool, args={"title": "x"})


# -- python -m pitrio mcp ---------------------------------------------------------------


def _script(body: dict[str, Any]) -> Reply:
    asked = last_user_text(body)
    tool_results = [m for m in body["messages"] if m["role"] == "tool"]
    if asked == "say hi":
        return text_reply("hello from pitrio")
    if asked == "write a file" and not tool_results:
        return tool_reply("", "write", {"path": "made.txt", "content": "x"})
    return text_reply("tool said: " + "".join(str(m["content"]) for m in tool_results))


async def test_pitrio_mcp_serves_the_agent_over_stdio(tmp_path: Path) -> None:
    """An MCP client calls the prompt tool; the agent answers with the model's text, and
    a tool that needs consent is refused without --yes."""
    server = ChatServer(_script)
    server.start()
    work = tmp_path / "work"
    work.mkdir()
    try:
        config = StdioServer(
            name="pitrio",
            command=sys.executable,
            args=["-m", "pitrio", "mcp", "--base-url", server.url, "--model", "m",
                  "--no-session", "--cwd", str(work)],
            env=_env(tmp_path),
        )  # fmt: skip
        with trio.fail_after(60):
            async with connect(config) as agent:
                assert [t.name for t in agent.mcp_tools] == ["prompt"]
                result, is_error = await agent.call_tool("prompt", {"text": "say hi"})
                assert not is_error
                assert result.content == (TextContent(text="hello from pitrio"),)
                result, is_error = await agent.call_tool("prompt", {"text": "write a file"})
                assert not is_error
                (block,) = result.content
                assert isinstance(block, TextContent)
                assert "Refused: write changes files" in block.text
                assert "python -m pitrio mcp cannot ask for" in block.text
        assert not (work / "made.txt").exists()
        assert len(server.requests) == 3
    finally:
        server.stop()


async def test_a_cancelled_prompt_aborts_the_run(tmp_path: Path) -> None:
    """The client cancelling a prompt call (notifications/cancelled) ends the run; the
    agent then answers the next prompt."""
    held = threading.Event()

    def script(body: dict[str, Any]) -> Reply:
        if last_user_text(body) == "take forever":
            return [{"delta": {"role": "assistant", "content": "thinking"}}, {"wait": held}]
        return text_reply("hello from pitrio")

    server = ChatServer(script)
    server.start()
    try:
        config = StdioServer(
            name="pitrio",
            command=sys.executable,
            args=["-m", "pitrio", "mcp", "--base-url", server.url, "--model", "m",
                  "--no-session", "--cwd", str(tmp_path)],
            env=_env(tmp_path),
        )  # fmt: skip
        with trio.fail_after(60):
            async with connect(config) as agent:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(agent.call_tool, "prompt", {"text": "take forever"})
                    for _ in range(1000):  # until the model request is under way
                        if server.requests:
                            break
                        await trio.sleep(0.05)
                    nursery.cancel_scope.cancel()
                result, is_error = await agent.call_tool("prompt", {"text": "say hi"})
                assert not is_error
                assert result.content == (TextContent(text="hello from pitrio"),)
        assert [last_user_text(r) for r in server.requests] == ["take forever", "say hi"]
    finally:
        held.set()
        server.stop()


def test_pitrio_mcp_needs_a_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without a model it exits 2 saying what to pass."""
    assert main(["mcp"], env=_env(tmp_path)) == 2
    assert "pitrio mcp needs a model" in capsys.readouterr().err


