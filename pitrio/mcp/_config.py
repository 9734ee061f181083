"""MCP server configuration: what to start or where to connect, and the ``mcpServers``
file shape that Claude Desktop, Cursor and Pi's MCP adapter extension read."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from typing import TypeAlias, final

import attrs

from pitrio import PitrioError, UsageError

__all__ = [
    "HttpServer",
    "McpConfigError",
    "McpError",
    "McpServerConfig",
    "StdioServer",
    "parse_mcp_servers",
    "read_mcp_config",
]


class McpError(PitrioError):
    """An MCP server cannot be used: it did not start, or the connection failed."""


class McpConfigError(McpError, UsageError):
    """An MCP server configuration pitrio cannot use; the text names the server, the
    file and what to change."""


def _str_tuple(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


def _str_map(value: Mapping[str, str] | None) -> Mapping[str, str]:
    return dict(value or {})


@final
@attrs.frozen(kw_only=True)
class StdioServer:
    """A server pitrio starts as a child process and talks to over its stdin and stdout.

    Attributes:
        name: the server's name (it prefixes its tools' names).
        command: the program to run.
        args: its arguments.
        env: variables added to the few the child inherits (``PATH``, ``HOME``...).
        cwd: its working directory (``None``: pitrio's).
    """

    name: str
    command: str
    args: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    env: Mapping[str, str] = attrs.field(factory=dict, converter=_str_map)
    cwd: str | None = None


@final
@attrs.frozen(kw_only=True)
class HttpServer:
    """A server reached over MCP's streamable HTTP transport.

    Attributes:
        name: the server's name (it prefixes its tools' names).
        url: the endpoint (``http://127.0.0.1:8000/mcp``).
        headers: sent with every request (``Authorization: Bearer ...``).
    """

    name: str
    url: str
    headers: Mapping[str, str] = attrs.field(factory=dict, converter=_str_map)


McpServerConfig: TypeAlias = StdioServer | HttpServer
"""One server: :class:`StdioServer` or :class:`HttpServer`."""


def _strings(value: object, what: str, where: str) -> None:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        msg = f"{where}: {what} must be a list of strings; got {value!r}"
        raise McpConfigError(msg)


def _string_map(value: object, what: str, where: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        msg = f'{where}: {what} must be an object of strings ({{"NAME": "value"}}); got {value!r}'
        raise McpConfigError(msg)
    return dict(value)


def _one_server(name: str, entry: object, source: str) -> McpServerConfig:
    where = f"{source}: mcpServers.{name}"
    if not isinstance(entry, dict):
        msg = f'{where} must be an object with "command" or "url"; got {entry!r}'
        raise McpConfigError(msg)
    if "command" in entry and "url" in entry:
        msg = f'{where} has both "command" and "url"; keep one'
        raise McpConfigError(msg)
    if "command" in entry:
        command = entry["command"]
        if not isinstance(command, str) or not command:
            msg = f"{where}: command must be a non-empty string; got {command!r}"
            raise McpConfigError(msg)
        args = entry.get("args", [])
        _strings(args, "args", where)
        env = _string_map(entry.get("env", {}), "env", where)
        cwd = entry.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            msg = f"{where}: cwd must be a string; got {cwd!r}"
            raise McpConfigError(msg)
        return StdioServer(name=name, command=command, args=args, env=env, cwd=cwd)
    if "url" in entry:
        url = entry["url"]
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            msg = f"{where}: url must be an http:// or https:// URL; got {url!r}"
            raise McpConfigError(msg)
        headers = _string_map(entry.get("headers", {}), "headers", where)
        return HttpServer(name=name, url=url, headers=headers)
    msg = f'{where} has neither "command" (a program to start) nor "url" (an HTTP endpoint)'
    raise McpConfigError(msg)


def parse_mcp_servers(data: object, *, source: str = "MCP configuration") -> list[McpServerConfig]:
    """The servers of one ``{"mcpServers": {NAME: {...}}}`` object, in its order.

    An entry is ``{"command": ..., "args": [...], "env": {...}, "cwd": ...}`` (a child
    process) or ``{"url": ..., "headers": {...}}`` (streamable HTTP); an entry with
    ``"disabled": true`` is left out. Other keys (``type``, ``timeout``...) are ignored.

    Raises:
        McpConfigError: the object is not of that shape; the text names ``source``,
            the server and what to change.
    """
    if not isinstance(data, dict):
        msg = f'{source}: expected an object {{"mcpServers": {{...}}}}; got {data!r}'
        raise McpConfigError(msg)
    servers = data.get("mcpServers", {})
    if not isinstance(servers, dict):
        msg = f"{source}: mcpServers must be an object of servers by name; got {servers!r}"
        raise McpConfigError(msg)
    out: list[McpServerConfig] = []
    for name, entry in servers.items():
        if not name or not all(c.isalnum() or c in "-_." for c in name):
            msg = (
                f"{source}: the server name {name!r} must be letters, digits, '-', '_' "
                "or '.' (it becomes part of its tools' names)"
            )
            raise McpConfigError(msg)
        if isinstance(entry, dict) and entry.get("disabled") is True:
            continue
        out.append(_one_server(name, entry, source))
    return out


def read_mcp_config(paths: Iterable[str | os.PathLike[str]]) -> list[McpServerConfig]:
    """The servers of the ``mcpServers`` files at ``paths`` (missing files are skipped);
    a server named again in a later file replaces the earlier one.

    Blocking (it reads files): call it from a thread in async code.

    Raises:
        McpConfigError: a file is not valid JSON or not of the shape
            :func:`parse_mcp_servers` reads.
    """
    merged: dict[str, McpServerConfig] = {}
    for path in paths:
        source = os.fspath(path)
        try:
            with open(source, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError) as exc:
            msg = f"{source}: cannot read it ({exc})"
            raise McpConfigError(msg) from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            msg = f"{source}: not valid JSON ({exc}); fix or remove the file"
            raise McpConfigError(msg) from None
        for server in parse_mcp_servers(data, source=source):
            merged.pop(server.name, None)
            merged[server.name] = server
    return list(merged.values())
