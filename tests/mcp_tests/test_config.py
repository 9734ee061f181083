"""The mcpServers file shape (Claude Desktop's, Cursor's, Pi's MCP adapter's) and its
errors, which name the file, the server and what to change."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pitrio import UsageError
from pitrio.mcp import (
    HttpServer,
    McpConfigError,
    StdioServer,
    parse_mcp_servers,
    read_mcp_config,
    tool_name,
)


def test_both_kinds_of_server_are_read_in_order() -> None:
    """command/args/env/cwd is a child process, url/headers an HTTP endpoint; disabled
    entries and unknown keys are left out."""
    servers = parse_mcp_servers(
        {
            "mcpServers": {
                "git": {"command": "uvx", "args": ["mcp-server-git"], "env": {"A": "1"}},
                "off": {"command": "x", "disabled": True},
                "docs": {"url": "https://example.com/mcp", "headers": {"X": "y"}, "type": "http"},
            }
        }
    )
    assert servers == [
        StdioServer(name="git", command="uvx", args=("mcp-server-git",), env={"A": "1"}),
        HttpServer(name="docs", url="https://example.com/mcp", headers={"X": "y"}),
    ]


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"args": []}, 'mcpServers.s has neither "command" (a program to start) nor "url"'),
        ({"command": "a", "url": "http://x"}, 'mcpServers.s has both "command" and "url"'),
        ({"command": ""}, "mcpServers.s: command must be a non-empty string; got ''"),
        ({"command": "a", "args": "b"}, "mcpServers.s: args must be a list of strings; got 'b'"),
        ({"command": "a", "env": {"A": 1}}, "mcpServers.s: env must be an object of strings"),
        ({"url": "ftp://x"}, "mcpServers.s: url must be an http:// or https:// URL"),
        ("npx server", "mcpServers.s must be an object with \"command\" or \"url\""),
    ],
)
def test_a_bad_entry_is_named(entry: object, message: str) -> None:
    """Each mistake is a McpConfigError (a UsageError) saying which server and what."""
    with pytest.raises(McpConfigError) as info:
        parse_mcp_servers({"mcpServers": {"s": entry}}, source="mcp.json")
    assert str(info.value).startswith(f"mcp.json: {message}")
    assert isinstance(info.value, UsageError)


def test_a_server_name_must_be_usable_in_tool_names() -> None:
    """A name with spaces or slashes is refused (it becomes part of the tools' names)."""
    with pytest.raises(McpConfigError, match=r"the server name 'my server' must be letters"):
        parse_mcp_servers({"mcpServers": {"my server": {"command": "x"}}})


def test_later_files_replace_servers_of_the_same_name(tmp_path: Path) -> None:
    """The project's file (read last) wins; a missing file is skipped; bad JSON is named."""
    first, second, missing = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    first.write_text(json.dumps({"mcpServers": {"x": {"command": "one"}, "y": {"command": "y"}}}))
    second.write_text(json.dumps({"mcpServers": {"x": {"command": "two"}}}))
    servers = read_mcp_config([first, missing, second])
    assert [(s.name, getattr(s, "command", None)) for s in servers] == [("y", "y"), ("x", "two")]
    first.write_text("{not json")
    with pytest.raises(McpConfigError, match=r"a\.json: not valid JSON"):
        read_mcp_config([first])


def test_tool_names_are_what_providers_accept() -> None:
    """mcp__SERVER__TOOL, other characters replaced by _, at most 64 characters."""
    assert tool_name("git", "status") == "mcp__git__status"
    assert tool_name("my.server", "do thing/now") == "mcp__my_server__do_thing_now"
    assert len(tool_name("s", "x" * 100)) == 64
