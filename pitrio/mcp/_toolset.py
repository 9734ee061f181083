"""Several MCP servers as one harness tool factory, their lifetimes owned by a nursery."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final, TextIO, final

import trio

from pitrio import InvalidStateError, TextContent, Tool, ToolResult
from pitrio.harness import PromptTemplate, ToolContext

from ._client import McpServer, connect, server_tools
from ._config import McpError, McpServerConfig

if TYPE_CHECKING:
    from types import TracebackType

    from pitrio import AbortSignal, AgentTool

__all__ = ["LIST_RESOURCES", "READ_RESOURCE", "McpToolset", "resource_tools"]

LIST_RESOURCES: Final = "mcp__list_resources"
READ_RESOURCE: Final = "mcp__read_resource"


@final
class McpToolset:
    """The tools of several MCP servers, for ``Harness(tools=[..., toolset])``.

    ``async with McpToolset(configs) as toolset:`` starts every server at once and
    blocks until each has listed its tools, failed, or run out of ``start_timeout``
    seconds; a server that fails is left out and its reason kept in :attr:`failures`
    (the others go on). Leaving the block stops every server (see
    :func:`~pitrio.mcp.connect`): keep the harness inside it, so that nothing outlives
    the harness.

    Called with a :class:`~pitrio.harness.ToolContext` (a tool factory), it returns the
    connected servers' tools; its :attr:`tools_revision` changes when a server's tool list
    does, so a harness picks the new list up for its next request.

    Args:
        servers: the servers to start or reach.
        errlog: where child processes' stderr goes (default ``sys.stderr``).
        start_timeout: seconds each server may take to start and list its tools.
    """

    def __init__(
        self,
        servers: Iterable[McpServerConfig],
        *,
        errlog: TextIO | None = None,
        start_timeout: float = 30.0,
    ) -> None:
        self.configs = tuple(servers)
        self.errlog = errlog
        self.start_timeout = start_timeout
        self.servers: tuple[McpServer, ...] = ()
        """The servers that started, in the configuration's order."""
        self.failures: dict[str, str] = {}
        """Why each server that did not start (by name) did not."""
        self._stack: contextlib.AsyncExitStack | None = None
        self._nursery: trio.Nursery | None = None

    @property
    def tools_revision(self) -> tuple[int, ...]:
        """Changes whenever the tools this factory returns do (the harness calls the
        factory again then)."""
        return tuple(s.revision if not s.closed else -1 for s in self.servers)

    def __call__(self, context: ToolContext) -> list[AgentTool]:
        tools: list[AgentTool] = list(server_tools(self.servers))
        if any(s.resources for s in self.servers if not s.closed):
            tools.extend(resource_tools(self))
        return tools

    @property
    def prompt_templates(self) -> tuple[PromptTemplate, ...]:
        """The connected servers' prompts that fit a prompt template."""
        return tuple(t for s in self.servers if not s.closed for t in s.prompt_templates)

    async def __aenter__(self) -> McpToolset:
        if self._stack is not None:
            msg = "this McpToolset is already open; make a new one for another block"
            raise InvalidStateError(msg)
        stack = self._stack = contextlib.AsyncExitStack()
        nursery = self._nursery = await stack.enter_async_context(trio.open_nursery())
        started: dict[str, McpServer] = {}
        try:
            async with trio.open_nursery() as starting:
                for config in self.configs:
                    starting.start_soon(self._start, nursery, config, started)
        except BaseException as exc:
            nursery.cancel_scope.cancel()
            if not await stack.__aexit__(type(exc), exc, exc.__traceback__):
                raise
            raise  # pragma: no cover - a nursery does not swallow what it did not raise
        self.servers = tuple(started[c.name] for c in self.configs if c.name in started)
        return self

    async def _start(
        self, nursery: trio.Nursery, config: McpServerConfig, started: dict[str, McpServer]
    ) -> None:
        try:
            server = await nursery.start(self._run, config)
        except McpError as exc:
            self.failures[config.name] = str(exc)
        else:
            started[config.name] = server

    async def _run(
        self,
        config: McpServerConfig,
        task_status: trio.TaskStatus[McpServer] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        # One scope over the server's whole life: its deadline bounds the start only (a
        # scope must enclose the SDK's task groups, so it cannot end after the start).
        started = False
        try:
            with trio.CancelScope(deadline=trio.current_time() + self.start_timeout) as scope:
                async with connect(config, errlog=self.errlog) as server:
                    scope.deadline = math.inf
                    task_status.started(server)
                    started = True
                    await trio.sleep_forever()
        except Exception as exc:
            if not started:
                raise
            # The connection broke after the start (the server's tools are gone with it;
            # ``server.closed`` says so): the others and the harness go on.
            self.failures[config.name] = f"the MCP server {config.name!r} failed: {exc}"
            return
        if scope.cancelled_caught and not started:
            msg = (
                f"the MCP server {config.name!r} did not start within "
                f"{self.start_timeout:g} seconds"
            )
            raise McpError(msg)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        stack, nursery = self._stack, self._nursery
        assert stack is not None, "McpToolset exited without entering"
        assert nursery is not None
        nursery.cancel_scope.cancel(reason="the MCP toolset is closing")
        return bool(await stack.__aexit__(exc_type, exc, tb))


def _resource_line(server: McpServer, resource: Any) -> str:
    line = f"{server.name}: {resource.uri}"
    if resource.name and resource.name != str(resource.uri):
        line += f" ({resource.name})"
    if resource.mime_type:
        line += f" [{resource.mime_type}]"
    if resource.description:
        line += f" - {resource.description}"
    return line


def resource_tools(toolset: McpToolset) -> tuple[Tool, Tool]:
    """The two tools that let a model use the servers' resources: one lists them (all
    servers', or one server's), one reads a resource by server and URI.

    :class:`McpToolset` offers them while a connected server has resources.
    """

    def find(name: object) -> McpServer:
        for server in toolset.servers:
            if server.name == name and not server.closed:
                return server
        names = ", ".join(repr(s.name) for s in toolset.servers if not s.closed) or "none"
        msg = f"no connected MCP server is named {name!r} (connected: {names})"
        raise McpError(msg)

    async def list_resources(
        call_id: str, params: Any, signal: AbortSignal, on_update: Any
    ) -> ToolResult:
        wanted = params.get("server")
        servers = [find(wanted)] if wanted else [s for s in toolset.servers if not s.closed]
        lines = [_resource_line(s, r) for s in servers for r in s.resources]
        await trio.lowlevel.checkpoint()
        text = "\n".join(lines) if lines else "No resources."
        details = [
            {"server": s.name, "uri": str(r.uri), "name": r.name}
            for s in servers
            for r in s.resources
        ]
        return ToolResult(content=(TextContent(text=text),), details={"resources": details})

    async def read_resource(
        call_id: str, params: Any, signal: AbortSignal, on_update: Any
    ) -> ToolResult:
        server = find(params["server"])
        uri = str(params["uri"])
        blocks = await server.read_resource(uri)
        return ToolResult(
            content=blocks or (TextContent(text="(empty)"),),
            details={"mcp": {**server.call_info(None, method="resources/read"), "uri": uri}},
        )

    listing = Tool(
        name=LIST_RESOURCES,
        label="MCP: list resources",
        description=(
            "List the resources (files, documents, data) the connected MCP servers offer, "
            "as 'server: uri (name) [mime type] - description' lines."
        ),
        parameters={
            "type": "object",
            "properties": {
                "server": {"type": "string", "description": "Only this server's resources."}
            },
        },
        execute=list_resources,
        replay="safe",
    )
    reading = Tool(
        name=READ_RESOURCE,
        label="MCP: read a resource",
        description="Read one resource of a connected MCP server by its server name and URI.",
        parameters={
            "type": "object",
            "properties": {
                "server": {"type": "string", "description": "The server's name."},
                "uri": {"type": "string", "description": "The resource's URI."},
            },
            "required": ["server", "uri"],
        },
        execute=read_resource,
        replay="safe",
    )
    return listing, reading
