"""ScriptedModel: a stream function that plays scripted responses, for tests and benchmarks."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final, Literal, final

import attrs
import trio

from .._errors import ArgumentTypeError, UsageError
from .._events import (
    AssistantMessageEvent,
    DoneEvent,
    ErrorEvent,
    StartEvent,
    TextDeltaEvent,
    TextEndEvent,
    TextStartEvent,
    ThinkingDeltaEvent,
    ThinkingEndEvent,
    ThinkingStartEvent,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
)
from .._messages import (
    ZERO_USAGE,
    AssistantContent,
    AssistantMessage,
    DeferredHandle,
    LazyValue,
    TextContent,
    ThinkingContent,
    ToolCall,
    Usage,
)
from .._model import Context, Model, StreamOptions
from .._stream import AssistantMessageEventStream

__all__ = ["ScriptedModel", "ScriptedResponse"]


@final
@attrs.frozen(kw_only=True)
class ScriptedResponse:
    """One scripted model response.

    Attributes:
        content: the final content blocks.
        stop_reason: default ``toolUse`` when there is a tool call, else ``stop``.
        error_message: for ``error``/``aborted`` responses.
        usage: final usage.
        chunk_size: stream text in deltas of this many characters (``None``: one delta
            per block).
        delay: seconds to wait (in the stream's producer) before the terminal event;
            an abort cuts it short and ends the response as ``aborted``.
        checkpoint_each_event: yield to the scheduler before every event, as a network
            provider would (off by default: the fast path for benchmarks).
        deferred: end with stop reason ``deferred`` and this handle (pi-ai's protocol).
        pending_fetches: when the request asks for a deferred response
            (``options.deferred``), how many :meth:`ScriptedModel.fetch_deferred` calls
            answer "still pending" before the response is delivered.
    """

    content: tuple[AssistantContent, ...] = ()
    stop_reason: Literal["stop", "toolUse", "length", "error", "aborted"] | None = None
    error_message: str | None = None
    usage: Usage = ZERO_USAGE
    chunk_size: int | None = None
    delay: float = 0
    checkpoint_each_event: bool = False
    deferred: DeferredHandle | None = None
    pending_fetches: int = 0

    def __attrs_post_init__(self) -> None:
        _check_response(self)

    @classmethod
    def text(cls, text: str, **kwargs: Any) -> ScriptedResponse:
        """A plain text answer."""
        return cls(content=(TextContent(text=text),), **kwargs)

    @classmethod
    def tool_calls(cls, *calls: tuple[str, str, dict[str, Any]], **kwargs: Any) -> ScriptedResponse:
        """Tool calls given as ``(id, name, arguments)``."""
        return cls(
            content=tuple(ToolCall(id=i, name=n, arguments=a) for i, n, a in calls), **kwargs
        )


@final
class ScriptedModel:
    """A stream function playing ``responses`` in order (one per model request).

    It is callable as ``(model, context, options) -> AssistantMessageEventStream``, so
    it can be given to :class:`pitrio.Agent` as ``stream_fn``. ``responses`` may also be
    a function ``(context) -> ScriptedResponse`` for dynamic scripts.

    Attributes:
        requests: the :class:`pitrio.Context` of each request, in order (unless
            ``record_requests=False``).
    """

    def __init__(
        self,
        responses: Sequence[ScriptedResponse] | Callable[[Context], ScriptedResponse],
        *,
        record_requests: bool = True,
    ) -> None:
        given: object = responses  # checked at run time: the types are a promise only
        if callable(given):
            pass
        elif isinstance(given, str | bytes) or not isinstance(given, Sequence):
            msg = (
                "ScriptedModel(responses): expected a list of ScriptedResponse or a function "
                f"(context) -> ScriptedResponse; got {type(given).__name__}"
            )
            raise ArgumentTypeError(msg)
        else:
            response: object
            for index, response in enumerate(given):
                if not isinstance(response, ScriptedResponse):
                    msg = (
                        f"ScriptedModel(responses): responses[{index}] is a "
                        f"{type(response).__name__}, not a ScriptedResponse (for a text "
                        "answer write ScriptedResponse.text(...))"
                    )
                    raise ArgumentTypeError(msg)
        self._responses = responses
        self._index = 0
        self.record_requests = record_requests
        self.requests: list[Context] = []
        self.cancelled_deferred: list[DeferredHandle] = []
        self._deferred: dict[str, _DeferredEntry] = {}

    @property
    def calls(self) -> int:
        """How many requests were made."""
        return self._index

    def __call__(
        self, model: Model, context: Context, options: StreamOptions
    ) -> AssistantMessageEventStream:
        if self.record_requests:
            self.requests.append(context)
        if callable(self._responses):
            response = self._responses(context)
        else:
            if self._index >= len(self._responses):
                response = ScriptedResponse(
                    stop_reason="error",
                    error_message=(
                        f"ScriptedModel: no scripted response for request {self._index + 1} "
                        f"(only {len(self._responses)} scripted)"
                    ),
                )
            else:
                response = self._responses[self._index]
        self._index += 1
        template = AssistantMessage(
            api=model.api, provider=model.provider, model=model.id, stop_reason="pending"
        )
        if options.deferred:
            return self._defer(model, response, template)
        signal = options.signal
        if signal is not None and signal.aborted:
            # A request made after an abort: answered at once, no response consumed.
            stream = AssistantMessageEventStream(template=template)
            stream.push(
                ErrorEvent(
                    reason="aborted",
                    error=attrs.evolve(
                        template, stop_reason="aborted", error_message="Request was aborted"
                    ),
                )
            )
            return stream
        if response.delay or response.checkpoint_each_event:
            return AssistantMessageEventStream(
                lambda stream: _produce(stream, response, template), template=template
            )
        # Nothing to wait for: the whole response is in the stream when it is returned,
        # each event made when it is read (one snapshot alive at a time).
        stream = AssistantMessageEventStream(template=template)
        stream.push_lazily(_events(response, template))
        return stream

    # -- deferred responses (pi-ai's faux provider protocol) ---------------------------

    def _defer(
        self, model: Model, response: ScriptedResponse, template: AssistantMessage
    ) -> AssistantMessageEventStream:
        handle = DeferredHandle(
            provider=model.provider,
            model_id=model.id,
            api=model.api,
            id=f"deferred-{self._index}",
        )
        self._deferred[handle.id] = _DeferredEntry(response, response.pending_fetches)
        return _deferred_stream(template, handle)

    def fetch_deferred(
        self,
        model: Model,
        handle: DeferredHandle,
        options: StreamOptions | None = None,
        wait_ms: int = 0,
    ) -> AssistantMessageEventStream:
        """The deferred response: ``deferred`` again while it is pending, then the
        scripted response itself. Unknown or cancelled handles end with an error."""
        template = AssistantMessage(
            api=model.api, provider=model.provider, model=model.id, stop_reason="pending"
        )
        entry = self._deferred.get(handle.id)
        if entry is None or (handle.provider, handle.model_id, handle.api) != (
            model.provider,
            model.id,
            model.api,
        ):
            return _error_stream(template, f"Unknown scripted deferred response: {handle.id}")
        if entry.cancelled:
            return _error_stream(template, f"Scripted deferred response was cancelled: {handle.id}")
        if entry.pending_fetches > 0:
            entry.pending_fetches -= 1
            return _deferred_stream(template, handle)
        stream = AssistantMessageEventStream(template=template)
        stream.push_lazily(_events(entry.response, template))
        return stream

    async def cancel_deferred(
        self, model: Model, handle: DeferredHandle, options: StreamOptions | None = None
    ) -> None:
        """Mark a deferred response cancelled (later fetches fail). Checkpoints."""
        await trio.lowlevel.checkpoint()
        self.cancelled_deferred.append(handle)
        entry = self._deferred.get(handle.id)
        if entry is not None:
            entry.cancelled = True

    def register(self, api: str = "scripted") -> None:
        """Register this model as the implementation of ``api`` in
        :mod:`pitrio.providers`, deferred responses included, so that
        :class:`pitrio.providers.Models` can stream, fetch and cancel through it."""
        from ..providers import register_api

        register_api(
            api,
            lambda client, model, context, options: self(model, context, options),
            fetch_deferred=lambda client, model, handle, options, wait_ms: self.fetch_deferred(
                model, handle, options, wait_ms
            ),
            cancel_deferred=lambda client, model, handle, options: self.cancel_deferred(
                model, handle, options
            ),
        )


_STOP_REASONS: Final = ("stop", "toolUse", "length", "error", "aborted")


def _check_response(r: ScriptedResponse) -> None:
    """The checks of :class:`ScriptedResponse`'s fields, each error naming the fix."""
    # The fields are checked at run time: their types are a promise only.
    content: object = r.content
    stop_reason: object = r.stop_reason
    chunk_size: object = r.chunk_size
    delay: object = r.delay
    pending_fetches: object = r.pending_fetches
    if isinstance(content, str) or not isinstance(content, tuple | list):
        msg = (
            "ScriptedResponse(content=...) takes a tuple of content blocks, not a "
            f"{type(content).__name__}; "
            "for a text answer write ScriptedResponse.text(...)"
        )
        raise ArgumentTypeError(msg)
    block: object
    for index, block in enumerate(content):
        if not isinstance(block, TextContent | ThinkingContent | ToolCall):
            msg = (
                f"ScriptedResponse(content=...): content[{index}] is a "
                f"{type(block).__name__}; a model answers with TextContent, ThinkingContent "
                "or ToolCall blocks"
            )
            raise ArgumentTypeError(msg)
    if stop_reason is not None and stop_reason not in _STOP_REASONS:
        msg = (
            f"ScriptedResponse(stop_reason={stop_reason!r}): must be one of "
            f"{', '.join(_STOP_REASONS)} (or None: toolUse with a tool call, else stop)"
        )
        raise UsageError(msg)
    if chunk_size is not None and (
        not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size < 1
    ):
        msg = (
            f"ScriptedResponse(chunk_size={chunk_size!r}): must be an int >= 1 "
            "(or None for one delta per block)"
        )
        raise UsageError(msg)
    if not isinstance(delay, int | float) or isinstance(delay, bool) or not delay >= 0:
        msg = f"ScriptedResponse(delay={delay!r}): must be a number of seconds >= 0"
        raise UsageError(msg)
    if not isinstance(pending_fetches, int) or pending_fetches < 0:
        msg = f"ScriptedResponse(pending_fetches={pending_fetches!r}): must be an int >= 0"
        raise UsageError(msg)


@attrs.define(eq=False)
class _DeferredEntry:
    response: ScriptedResponse
    pending_fetches: int
    cancelled: bool = False


def _deferred_stream(
    template: AssistantMessage, handle: DeferredHandle
) -> AssistantMessageEventStream:
    message = attrs.evolve(template, stop_reason="deferred", deferred=handle)
    stream = AssistantMessageEventStream(template=template)
    stream.push(StartEvent(partial=template))
    stream.push(DoneEvent(reason="deferred", message=message))
    return stream


def _error_stream(template: AssistantMessage, text: str) -> AssistantMessageEventStream:
    stream = AssistantMessageEventStream(template=template)
    stream.push(
        ErrorEvent(
            reason="error", error=attrs.evolve(template, stop_reason="error", error_message=text)
        )
    )
    return stream


async def _produce(
    stream: AssistantMessageEventStream, r: ScriptedResponse, partial: AssistantMessage
) -> None:
    checkpoint = r.checkpoint_each_event
    events = list(_events(r, partial))
    for event in events[:-1]:
        if checkpoint:
            await trio.lowlevel.checkpoint()
        stream.push(event)
    if r.delay:
        await trio.sleep(r.delay)
    elif checkpoint:
        await trio.lowlevel.checkpoint()
    stream.push(events[-1])


def _partial(template: AssistantMessage, blocks: list[AssistantContent]) -> AssistantMessage:
    return AssistantMessage(
        content=tuple(blocks),
        api=template.api,
        provider=template.provider,
        model=template.model,
        stop_reason="pending",
        timestamp=template.timestamp,
    )


def _events(r: ScriptedResponse, template: AssistantMessage) -> Iterator[AssistantMessageEvent]:
    """The events of one response: start, each block's start/deltas/end, done or error."""
    partial = template
    content = r.content
    stop = r.stop_reason or ("toolUse" if any(isinstance(b, ToolCall) for b in content) else "stop")
    yield StartEvent(partial=partial)
    blocks: list[AssistantContent] = []
    for index, block in enumerate(content):
        if isinstance(block, TextContent | ThinkingContent):
            is_text = isinstance(block, TextContent)
            full = block.text if isinstance(block, TextContent) else block.thinking
            blocks.append(_with_text(block, ""))
            partial = _partial(template, blocks)
            yield (
                TextStartEvent(content_index=index, partial=partial)
                if is_text
                else ThinkingStartEvent(content_index=index, partial=partial)
            )
            # Each snapshot's text is the prefix of the full text, sliced when read:
            # a delta costs the same whatever the length before it.
            end = 0
            for piece in _chunks(full, r.chunk_size):
                end += len(piece)
                blocks[index] = _with_text(block, LazyValue(_prefix, full, end))
                partial = _partial(template, blocks)
                yield (
                    TextDeltaEvent(content_index=index, delta=piece, partial=partial)
                    if is_text
                    else ThinkingDeltaEvent(content_index=index, delta=piece, partial=partial)
                )
            blocks[index] = block
            partial = _partial(template, blocks)
            yield (
                TextEndEvent(content_index=index, content=full, partial=partial)
                if is_text
                else ThinkingEndEvent(content_index=index, content=full, partial=partial)
            )
        else:
            assert isinstance(block, ToolCall)
            blocks.append(ToolCall(id=block.id, name=block.name, arguments={}))
            partial = _partial(template, blocks)
            yield ToolCallStartEvent(content_index=index, partial=partial)
            if r.chunk_size is not None:
                arguments = json.dumps(block.arguments, separators=(",", ":"))
                for piece in _chunks(arguments, r.chunk_size):
                    yield ToolCallDeltaEvent(content_index=index, delta=piece, partial=partial)
            blocks[index] = block
            partial = _partial(template, blocks)
            yield ToolCallEndEvent(content_index=index, tool_call=block, partial=partial)
    final = attrs.evolve(
        partial,
        content=content,
        usage=r.usage,
        stop_reason="deferred" if r.deferred is not None else stop,
        error_message=r.error_message
        or (
            "An unknown error occurred"
            if stop == "error"
            else "Request was aborted"
            if stop == "aborted"
            else None
        ),
        deferred=r.deferred,
    )
    reason = final.stop_reason
    if reason == "error" or reason == "aborted":
        yield ErrorEvent(reason=reason, error=final)
    else:
        assert reason != "pending"  # a response's stop reason is checked when it is built
        yield DoneEvent(reason=reason, message=final)


def _chunks(text: str, size: int | None) -> list[str]:
    if size is None or not text:
        return [text]
    return [text[i : i + size] for i in range(0, len(text), size)]


def _prefix(text: str, end: int) -> str:
    return text[:end]


def _with_text(block: TextContent | ThinkingContent, text: Any) -> AssistantContent:
    if type(block) is TextContent:
        return TextContent(text=text, text_signature=block.text_signature)
    assert isinstance(block, ThinkingContent)
    return ThinkingContent(
        thinking=text, thinking_signature=block.thinking_signature, redacted=block.redacted
    )
