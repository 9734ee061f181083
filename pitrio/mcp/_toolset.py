"""Several MCP servers as one harness tool factory, their lifetimes owned by a nursery."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, TextIO, final

import trio

from pitrio import InvalidStateError
from pitrio.harness import PromptTemplate, ToolContext

from ._client import McpServer, connect, server_tools
from ._config import McpError, McpServerConfig

if TYPE_CHECKING:
    from types import TracebackType

    from pitrio import AgentTool

__all__ = ["McpToolset"]


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
        return list(server_tools(self.servers))

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
