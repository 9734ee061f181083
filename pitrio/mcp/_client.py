"""One connected MCP server: its tools as pitrio tools, its prompts as prompt templates.

Built on the official ``mcp`` SDK, which runs on anyio and so on Trio: its stdio client
starts the server with ``anyio.open_process`` and stops it (stdin closed, then SIGTERM,
then SIGKILL to the process group) even when the caller is cancelled; a call cancelled
by an abort sends ``notifications/cancelled`` to the server.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, TextIO, TypeAlias, final

import mcp
import mcp.types
import trio
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from pitrio import ImageContent, TextContent, Tool, ToolResult
from pitrio.harness import PromptTemplate

from ._config import HttpServer, McpError, McpServerConfig, StdioServer

if TYPE_CHECKING:
    from pitrio import AbortSignal

ToolUpdateCallback: TypeAlias = Callable[[ToolResult], None]

__all__ = ["TOOL_PREFIX", "McpServer", "connect", "convert_result", "tool_name"]

TOOL_PREFIX: Final = "mcp__"
"""What the name of every MCP tool starts with: ``mcp__SERVER__TOOL``."""

_NAME_LIMIT: Final = 64  # what the providers accept as a tool name
_UNSAFE: Final = re.compile(r"[^A-Za-z0-9_-]")


def tool_name(server: str, tool: str) -> str:
    """The pitrio name of ``server``'s tool ``tool``: ``mcp__SERVER__TOOL`` with each
    character providers refuse in a name replaced by ``_``, cut at 64 characters."""
    name = f"{TOOL_PREFIX}{_UNSAFE.sub('_', server)}__{_UNSAFE.sub('_', tool)}"
    return name[:_NAME_LIMIT]


_CHANGES: Final = (mcp.types.ToolListChangedNotification, mcp.types.PromptListChangedNotification)


def _block(block: object) -> TextContent | ImageContent:
    """One MCP content block as a pitrio block (what has no pitrio form becomes a line
    of text saying what it was)."""
    if isinstance(block, mcp.types.TextContent):
        return TextContent(text=block.text)
    if isinstance(block, mcp.types.ImageContent):
        return ImageContent(data=block.data, mime_type=block.mime_type)
    if isinstance(block, mcp.types.AudioContent):
        return TextContent(text=f"[audio ({block.mime_type}), not shown]")
    if isinstance(block, mcp.types.ResourceLink):
        return TextContent(text=f"[resource link: {block.uri} ({block.name})]")
    if isinstance(block, mcp.types.EmbeddedResource):
        return _contents(block.resource, labelled=True)
    return TextContent(text=f"[{type(block).__name__} content, not shown]")


def _contents(
    resource: mcp.types.TextResourceContents | mcp.types.BlobResourceContents, *, labelled: bool
) -> TextContent | ImageContent:
    """A resource's contents as a block: text (after a ``[resource: URI]`` line when
    ``labelled``), an image, or a line saying what binary data was left out."""
    if isinstance(resource, mcp.types.TextResourceContents):
        label = f"[resource: {resource.uri}]\n" if labelled else ""
        return TextContent(text=label + resource.text)
    mime = resource.mime_type or "application/octet-stream"
    if mime.startswith("image/"):
        return ImageContent(data=resource.blob, mime_type=mime)
    return TextContent(text=f"[resource: {resource.uri} ({mime}, binary), not shown]")


def convert_result(result: mcp.types.CallToolResult) -> tuple[ToolResult, bool]:
    """An MCP tool result as a pitrio result and whether it is an error (``isError``).

    Text, images and embedded resources become content blocks; ``structuredContent``
    goes into ``details["structuredContent"]`` and, when the server sent no content
    besides, into a text block as JSON (the MCP spec asks servers to send both).
    """
    blocks = [_block(b) for b in result.content]
    details: dict[str, Any] = {}
    if result.structured_content is not None:
        details["structuredContent"] = result.structured_content
        if not blocks:
            blocks.append(
                TextContent(text=json.dumps(result.structured_content, ensure_ascii=False))
            )
    return ToolResult(content=tuple(blocks), details=details), result.is_error


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, MCPError):
        return exc.message
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        return _error_text(exc.exceptions[0])
    return str(exc) or type(exc).__name__


def _result_text(result: ToolResult) -> str:
    texts = [b.text for b in result.content if isinstance(b, TextContent)]
    return "\n".join(texts) or "the tool reported an error"


@final
class McpServer:
    """A connected MCP server (from :func:`connect`).

    Attributes:
        config: how it was started or reached.
        tools: its tools as pitrio tools (named by :func:`tool_name`), refreshed when
            the server says its list changed.
        prompt_templates: its prompts that fit a prompt template (see
            :func:`connect`), named ``SERVER:PROMPT``.
        resources: its resources (``mcp.types.Resource``: ``uri``, ``name``,
            ``description``, ``mime_type``); :meth:`read_resource` reads one, and an
            :class:`~pitrio.mcp.McpToolset` offers the model two tools for them.
        revision: a number that grows each time ``tools`` is replaced.
    """

    __slots__ = (
        "_client",
        "_closed",
        "_lock",
        "_session_id",
        "_stale",
        "_wake",
        "config",
        "instructions",
        "mcp_tools",
        "prompt_templates",
        "resources",
        "revision",
        "tools",
    )

    def __init__(self, config: McpServerConfig) -> None:
        self.config = config
        self.tools: tuple[Tool, ...] = ()
        self.mcp_tools: tuple[mcp.types.Tool, ...] = ()
        """The tools as the server lists them."""
        self.prompt_templates: tuple[PromptTemplate, ...] = ()
        self.resources: tuple[mcp.types.Resource, ...] = ()
        self.instructions: str | None = None
        """What the server says about using it (``instructions``), if anything."""
        self.revision = 0
        self._client: mcp.Client | None = None
        self._session_id: Callable[[], str | None] | None = None
        self._closed = False
        self._stale = False
        self._wake = trio.Event()
        self._lock = trio.Lock()  # one refresh at a time

    @property
    def name(self) -> str:
        """The server's name in the configuration."""
        return self.config.name

    @property
    def closed(self) -> bool:
        """Whether the connection has ended (its ``async with`` exited, or the server
        went away in the middle of a call)."""
        return self._closed

    @property
    def transport(self) -> str:
        """``"stdio"`` or ``"streamable-http"``."""
        return "stdio" if isinstance(self.config, StdioServer) else "streamable-http"

    def call_info(self, tool: str | None, *, method: str = "tools/call") -> dict[str, str]:
        """Where a request went, as a tool result's ``details["mcp"]`` says: ``server``,
        ``method`` (MCP's, ``tools/call``), ``tool``, ``transport``, and the protocol
        version and session id when the server gave them."""
        info = {"server": self.name, "method": method, "transport": self.transport}
        if tool is not None:
            info["tool"] = tool
        client = self._client
        if client is not None and not self._closed:
            with contextlib.suppress(Exception):  # not connected (yet, any more)
                info["protocol_version"] = str(client.protocol_version)
        session_id = self._session_id() if self._session_id is not None else None
        if session_id:
            info["session_id"] = session_id
        return info

    async def read_resource(self, uri: str) -> tuple[TextContent | ImageContent, ...]:
        """The contents of the server's resource ``uri`` as content blocks (text as
        text, images as images, other binary data as a line saying what it was).

        Raises:
            McpError: the server refused or went away.
        """
        client = self._live()
        try:
            result = await client.read_resource(uri)
        except MCPError as exc:
            msg = f"MCP server {self.name!r} could not read {uri!r}: {exc.message}"
            raise McpError(msg) from exc
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            self._closed = True
            msg = f"MCP server {self.name!r} went away while reading {uri!r}"
            raise McpError(msg) from exc
        return tuple(_contents(c, labelled=False) for c in result.contents)

    def _live(self) -> mcp.Client:
        client = self._client
        if client is None or self._closed:
            msg = f"the MCP server {self.name!r} is not connected (it exited or was closed)"
            raise McpError(msg)
        return client

    async def refresh(self) -> None:
        """Fetch the tool list (and the prompts) again.

        Raises:
            McpError: the server did not answer.
        """
        async with self._lock:
            await self._refresh()

    async def _refresh(self) -> None:
        client = self._live()
        self._stale = False
        try:
            tools: list[mcp.types.Tool] = []
            cursor: str | None = None
            while True:
                page = await client.list_tools(cursor=cursor, cache_mode="refresh")
                tools.extend(page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    break
            templates = await self._templates(client)
            resources = await self._resources(client)
        except (MCPError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            msg = f"the MCP server {self.name!r} did not list its tools: {_error_text(exc)}"
            raise McpError(msg) from exc
        self.mcp_tools = tuple(tools)
        self.tools = tuple(self._tool(t) for t in tools)
        self.prompt_templates = templates
        self.resources = resources
        self.revision += 1

    async def _resources(self, client: mcp.Client) -> tuple[mcp.types.Resource, ...]:
        if client.server_capabilities.resources is None:
            return ()
        found: list[mcp.types.Resource] = []
        cursor: str | None = None
        while True:
            page = await client.list_resources(cursor=cursor, cache_mode="refresh")
            found.extend(page.resources)
            cursor = page.next_cursor
            if cursor is None:
                return tuple(found)

    async def _templates(self, client: mcp.Client) -> tuple[PromptTemplate, ...]:
        """The prompts whose text is a template: fetched once with ``$1``, ``$2``... for
        the required arguments, kept when the answer is user text holding each of them."""
        capabilities = client.server_capabilities
        if capabilities.prompts is None:
            return ()
        listed = await client.list_prompts(cache_mode="refresh")
        out: list[PromptTemplate] = []
        for prompt in listed.prompts:
            required = [a.name for a in prompt.arguments or () if a.required]
            placeholders = {name: f"${i}" for i, name in enumerate(required, 1)}
            try:
                got = await client.get_prompt(prompt.name, placeholders)
            except MCPError:
                continue
            texts = [
                m.content.text
                for m in got.messages
                if m.role == "user" and isinstance(m.content, mcp.types.TextContent)
            ]
            if len(texts) != len(got.messages) or not texts:
                continue  # assistant turns, images or resources: not a template
            content = "\n\n".join(texts)
            if not all(p in content for p in placeholders.values()):
                continue
            out.append(
                PromptTemplate(
                    name=f"{self.name}:{prompt.name}",
                    description=prompt.description or got.description or "",
                    content=content,
                    file_path=None,
                )
            )
        return tuple(out)

    def _tool(self, listed: mcp.types.Tool) -> Tool:
        mcp_name = listed.name

        async def execute(
            tool_call_id: str, params: Any, signal: AbortSignal, on_update: ToolUpdateCallback
        ) -> ToolResult:
            result, is_error = await self.call_tool(mcp_name, params, on_update=on_update)
            if is_error:
                raise McpError(_result_text(result))
            details = dict(result.details) if isinstance(result.details, dict) else {}
            details["mcp"] = self.call_info(mcp_name)
            return ToolResult(content=result.content, details=details)

        description = listed.description or listed.title or mcp_name
        return Tool(
            name=tool_name(self.name, mcp_name),
            label=f"{self.name}: {listed.title or mcp_name}",
            description=description,
            parameters=listed.input_schema,
            execute=execute,
        )

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        on_update: ToolUpdateCallback | None = None,
    ) -> tuple[ToolResult, bool]:
        """Call the server's tool ``name`` (its MCP name); returns the result as
        :func:`convert_result` does.

        Cancelling the call (an abort) cancels the request: the server is sent
        ``notifications/cancelled`` and the call returns at once. Progress the server
        reports reaches ``on_update`` as a text result.

        Raises:
            McpError: the server answered with an error, or went away.
        """
        client = self._live()

        finished = False  # progress the SDK hands over after the result is dropped

        async def progress(progress: float, total: float | None, message: str | None) -> None:
            if on_update is not None and not finished:
                of = f"/{total:g}" if total is not None else ""
                text = f"{progress:g}{of}" + (f" {message}" if message else "")
                on_update(ToolResult(content=(TextContent(text=text),)))

        try:
            result = await client.call_tool(name, dict(arguments or {}), progress_callback=progress)
        except MCPError as exc:
            if exc.code == mcp.types.CONNECTION_CLOSED:
                self._closed = True
            msg = f"MCP server {self.name!r}: {exc.message}"
            raise McpError(msg) from exc
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            self._closed = True
            msg = f"MCP server {self.name!r} went away during the call"
            raise McpError(msg) from exc
        finally:
            finished = True
        await self._settle()
        return convert_result(result)

    async def _settle(self) -> None:
        """Take in a tool list change the server announced during a call (waiting for
        a refresh already under way), so that the next turn sees the new list."""
        if self._stale or self._lock.locked():
            async with self._lock:
                if self._stale and not self._closed:
                    with contextlib.suppress(McpError):
                        await self._refresh()

    async def _on_message(self, message: object) -> None:
        if isinstance(message, _CHANGES):
            self._stale = True
            self._wake.set()
        await trio.lowlevel.checkpoint()

    async def _watch(self) -> None:
        """Refresh after a change notification that came outside a call."""
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            async with self._lock:
                if self._stale and not self._closed:
                    with contextlib.suppress(McpError):
                        await self._refresh()


def _file_of(stream: TextIO) -> TextIO:
    """``stream`` if a child process can write to it (it has a file descriptor), else the
    interpreter's own stderr (``sys.__stderr__``: under pytest's capture, for one)."""
    try:
        stream.fileno()
    except (OSError, ValueError, AttributeError):  # io.UnsupportedOperation is an OSError
        fallback = sys.__stderr__
        assert fallback is not None, "the interpreter has no stderr"
        return fallback
    return stream


def _transport(config: McpServerConfig, errlog: TextIO, server: McpServer) -> Any:
    if isinstance(config, StdioServer):
        parameters = mcp.StdioServerParameters(
            command=config.command, args=list(config.args), env=dict(config.env), cwd=config.cwd
        )
        return stdio_client(parameters, errlog=errlog)
    assert isinstance(config, HttpServer)
    import httpx2

    seen: list[str] = []

    async def session_header(response: Any) -> None:
        value = response.headers.get("mcp-session-id")
        if value and (not seen or seen[-1] != value):
            seen.append(value)

    server._session_id = lambda: seen[-1] if seen else None
    client = httpx2.AsyncClient(
        headers=dict(config.headers),
        timeout=httpx2.Timeout(30.0, read=300.0),
        event_hooks={"response": [session_header]},
    )
    return _http(config.url, client)


@contextlib.asynccontextmanager
async def _http(url: str, client: Any) -> AsyncIterator[Any]:
    async with client, streamable_http_client(url, http_client=client) as streams:
        yield streams


@contextlib.asynccontextmanager
async def connect(
    config: McpServerConfig, *, errlog: TextIO | None = None
) -> AsyncIterator[McpServer]:
    """Start (or reach) an MCP server and keep it for the block.

    Entering blocks until the server has answered the handshake and listed its tools
    (and prompts); leaving stops it: a child process gets its stdin closed, then
    SIGTERM, then SIGKILL to its process group, each after a grace period of about two
    seconds, even when the block was cancelled. The caller owns timeouts
    (``with trio.move_on_after(30):`` around the whole block).

    Prompts become :class:`~pitrio.harness.PromptTemplate` values where they fit: a
    prompt answered with user text, fetched once with ``$1``, ``$2``... standing for its
    required arguments in order (``/SERVER:PROMPT a b``).

    Args:
        config: what to start or where to connect.
        errlog: where a child process's stderr goes (default ``sys.stderr``; a stream
            without a file descriptor, such as :class:`io.StringIO`, is replaced by
            ``sys.__stderr__``).

    Raises:
        McpError: the server did not start or did not answer the handshake.
    """
    server = McpServer(config)
    target = _transport(config, _file_of(errlog or sys.stderr), server)
    async with contextlib.AsyncExitStack() as stack:
        try:
            client = await stack.enter_async_context(
                mcp.Client(
                    target,
                    mode="legacy",
                    message_handler=server._on_message,
                    client_info=mcp.types.Implementation(name="pitrio", version=_version()),
                    cache=None,
                )
            )
            server._client = client
            server.instructions = client.instructions
            await server.refresh()
        except (McpError, MCPError, OSError, trio.BrokenResourceError) as exc:
            server._closed = True
            msg = f"the MCP server {config.name!r} did not start: {_error_text(exc)}"
            raise McpError(msg) from exc
        except BaseExceptionGroup as group:
            server._closed = True
            if group.subgroup(trio.Cancelled) is not None:
                raise
            msg = f"the MCP server {config.name!r} did not start: {_error_text(group)}"
            raise McpError(msg) from group
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(server._watch)
                try:
                    yield server
                finally:
                    nursery.cancel_scope.cancel(reason="the MCP server is being closed")
        finally:
            server._closed = True


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pitrio")
    except PackageNotFoundError:  # pragma: no cover - a source tree without metadata
        return "0"


def server_tools(servers: Sequence[McpServer]) -> list[Tool]:
    """The tools of ``servers`` that are still connected, in order."""
    return [tool for server in servers if not server.closed for tool in server.tools]
