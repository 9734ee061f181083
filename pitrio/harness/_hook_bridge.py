"""The glue between the harness's :class:`Hooks` and the Agent's callbacks.

:class:`HookBridge` turns the registered hooks into what the Agent and the stream
function accept: ``context`` into the Agent's ``transform_context``, ``tool_call`` and
``tool_result`` into ``before_tool_call`` / ``after_tool_call``, and the provider hooks
(``before_provider_request``, ``before_provider_payload``, ``after_provider_response``)
into a stream function wrapping the real one (request options, ``on_payload``,
``on_response``). A hook that fails is remembered as :attr:`HookBridge.failure`; the
harness then ends the run as an error run. Without hooks, nothing is wrapped: the Agent
calls the stream function directly.

Reproduces where Pi's harness runs these hooks around a request and a tool call
(pi-agent-core 0.85.0, ``harness/runtime/drive/generation.js``: ``before_request``,
``transform_context``, ``before_payload``; ``drive/response.js``: ``after_response``;
``drive/tools.js``: ``before_tool`` / ``after_tool``); the hooks themselves (order,
results, errors) are in ``_hooks``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, final

import attrs

from pitrio import (
    AfterToolCallContext,
    AfterToolCallResult,
    Agent,
    AgentMessage,
    BeforeToolCallContext,
    BeforeToolCallResult,
    EventStream,
    Model,
    StreamFn,
    StreamOptions,
)

from ._hooks import (
    HookError,
    Hooks,
    ProviderRequestEvent,
    ProviderResponseEvent,
    ToolCallEvent,
    ToolResultEvent,
)

if TYPE_CHECKING:
    from pitrio import AbortSignal

__all__ = ["HookBridge"]


@final
class HookBridge:
    """The hooks as the Agent calls them, around the stream function ``inner``."""

    __slots__ = ("_options", "error_headers", "failure", "hooks", "inner")

    def __init__(self, hooks: Hooks, inner: StreamFn) -> None:
        self.hooks = hooks
        self.inner = inner
        self.failure: BaseException | None = None
        """The first failure of the current prompt (a hook's, or the turn state's)."""
        self.error_headers: dict[str, str] | None = None
        """The headers of the HTTP error response that ended the latest request."""
        # The latest request's options and what they became (the loop passes the same
        # options object to the requests of a run: wrapped once, not per request).
        self._options: tuple[StreamOptions, StreamOptions] | None = None

    def install(self, agent: Agent) -> None:
        """Give the Agent the tool and context callbacks the registered hooks need."""
        hooks = self.hooks
        agent.transform_context = self.transform_context if hooks.has("context") else None
        agent.before_tool_call = self.before_tool_call if hooks.has("tool_call") else None
        agent.after_tool_call = self.after_tool_call if hooks.has("tool_result") else None

    async def transform_context(
        self, messages: list[AgentMessage], signal: AbortSignal
    ) -> list[AgentMessage]:
        if self.failure is not None:
            raise self.failure
        try:
            return await self.hooks.run_context(messages)
        except HookError as exc:
            self.failure = exc
            raise

    async def before_tool_call(
        self, ctx: BeforeToolCallContext, signal: AbortSignal
    ) -> BeforeToolCallResult | None:
        call = ctx.tool_call
        try:
            result = await self.hooks.run_tool_call(
                ToolCallEvent(tool_call_id=call.id, tool_name=call.name, args=ctx.args)
            )
        except HookError as exc:
            self.failure = exc
            raise
        if result is None:
            return None
        return BeforeToolCallResult(block=True, reason=result.reason)

    async def after_tool_call(
        self, ctx: AfterToolCallContext, signal: AbortSignal
    ) -> AfterToolCallResult | None:
        call = ctx.tool_call
        event = ToolResultEvent(
            tool_call_id=call.id,
            tool_name=call.name,
            args=ctx.args,
            content=ctx.result.content,
            details=ctx.result.details,
            is_error=ctx.is_error,
        )
        try:
            patch = await self.hooks.run_tool_result(event)
        except HookError as exc:
            self.failure = exc
            raise
        if patch is None:
            return None
        return AfterToolCallResult(
            content=patch.content,
            details=patch.details,
            is_error=patch.is_error,
            terminate=patch.terminate,
        )

    def stream(self, model: Model, context: Any, options: StreamOptions) -> Any:
        """The stream function the Agent calls: ``inner``, wrapped when a provider hook
        is registered (or a failure is pending).

        The headers of an HTTP error response ending the request are kept as
        :attr:`error_headers` (until the next request), for the retry's delay."""
        self.error_headers = None
        known = self._options
        if known is not None and known[0] is options:
            options = known[1]
        else:
            wrapped = attrs.evolve(
                options, on_error_response=self._error_response_hook(options.on_error_response)
            )
            self._options = (options, wrapped)
            options = wrapped
        inner = self.inner
        hooks = self.hooks
        if self.failure is None and not (
            hooks.has("before_provider_request")
            or hooks.has("before_provider_payload")
            or hooks.has("after_provider_response")
        ):
            return inner(model, context, options)
        return self._stream_with_hooks(inner, model, context, options)

    async def _stream_with_hooks(
        self, inner: StreamFn, model: Model, context: Any, options: StreamOptions
    ) -> Any:
        if self.failure is not None:
            raise self.failure
        hooks = self.hooks
        try:
            if hooks.has("before_provider_request"):
                headers = {k: v for k, v in (options.headers or {}).items() if v is not None}
                request = await hooks.run_before_provider_request(
                    ProviderRequestEvent(
                        model=model,
                        headers=headers,
                        timeout=options.timeout,
                        max_retries=options.max_retries,
                    )
                )
                options = attrs.evolve(
                    options,
                    headers=dict(request.headers),
                    timeout=request.timeout,
                    max_retries=request.max_retries,
                )
        except HookError as exc:
            self.failure = exc
            raise
        if hooks.has("before_provider_payload"):
            options = attrs.evolve(options, on_payload=self._payload_hook(options.on_payload))
        if hooks.has("after_provider_response"):
            options = attrs.evolve(options, on_response=self._response_hook(options.on_response))
        returned = inner(model, context, options)
        return returned if isinstance(returned, EventStream) else await returned

    def _error_response_hook(self, previous: Callable[..., Any] | None) -> Callable[..., Any]:
        def on_error_response(status: int, headers: Mapping[str, str], model: Model) -> None:
            self.error_headers = dict(headers)
            if previous is not None:
                previous(status, headers, model)

        return on_error_response

    def _payload_hook(self, previous: Callable[..., Any] | None) -> Callable[..., Any]:
        async def on_payload(payload: Any, model: Model) -> Any:
            if previous is not None:
                replaced = previous(payload, model)
                if hasattr(type(replaced), "__await__"):
                    replaced = await replaced
                if replaced is not None:
                    payload = replaced
            try:
                return await self.hooks.run_before_provider_payload(model, payload)
            except HookError as exc:
                self.failure = exc
                raise

        return on_payload

    def _response_hook(self, previous: Callable[..., Any] | None) -> Callable[..., Any]:
        async def on_response(status: int, headers: Any, model: Model) -> None:
            if previous is not None:
                result = previous(status, headers, model)
                if hasattr(type(result), "__await__"):
                    await result
            try:
                await self.hooks.run_after_provider_response(
                    ProviderResponseEvent(model=model, status=status, headers=dict(headers))
                )
            except HookError as exc:
                self.failure = exc
                raise

        return on_response
