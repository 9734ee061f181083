"""Models, request contexts and the stream-function contract.

A *stream function* is the one thing the loop needs from a model layer::

    def stream_fn(model, context, options) -> AssistantMessageEventStream

It returns at once; the returned stream's producer does the work when the consumer
opens it (``async with``). Provider failures are data: the stream ends with an
``error`` event (stop reason ``error`` or ``aborted``), never with an exception.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeAlias, final

import attrs

from ._messages import JSONValue, LlmMessage, fast_construct

if TYPE_CHECKING:
    from ._signal import AbortSignal
    from ._stream import AssistantMessageEventStream

__all__ = ["Context", "Model", "ModelCost", "StreamFn", "StreamOptions", "ToolSpec"]


@final
@attrs.frozen(kw_only=True)
class ModelCost:
    """Dollars per million tokens."""

    input: float = 0
    output: float = 0
    cache_read: float = 0
    cache_write: float = 0


@final
@attrs.frozen(kw_only=True)
class Model:
    """A model a provider can serve (pi-ai's ``Model``)."""

    id: str
    name: str = ""
    api: str = "openai-completions"
    provider: str = ""
    base_url: str = ""
    reasoning: bool = False
    input: tuple[str, ...] = ("text",)
    cost: ModelCost = ModelCost()
    context_window: int = 128_000
    max_tokens: int = 16_384
    headers: Mapping[str, str] | None = None
    compat: Mapping[str, JSONValue] | None = None
    thinking_level_map: Mapping[str, str | None] | None = None

    def __attrs_post_init__(self) -> None:
        if not self.name:
            object.__setattr__(self, "name", self.id)


class ToolSpec(Protocol):
    """What a model sees of a tool: its name, description and JSON-schema parameters."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def parameters(self) -> Mapping[str, Any]: ...


@final
@attrs.frozen(kw_only=True, weakref_slot=False)
class Context:
    """One model request: system prompt, the LLM messages, and the tools on offer."""

    system_prompt: str = ""
    messages: Sequence[LlmMessage] = ()
    tools: Sequence[ToolSpec] = ()


fast_construct(Context)  # the loop builds one per request


@final
@attrs.define(kw_only=True)
class StreamOptions:
    """Options for one model request.

    ``signal`` is the run's abort signal; providers do not need to watch it (the loop
    cancels the stream's producer on abort), but may read it.
    """

    signal: AbortSignal | None = None
    api_key: str | None = None
    reasoning: str | None = None
    session_id: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    tool_choice: str | Mapping[str, JSONValue] | None = None
    response_format: Mapping[str, JSONValue] | None = None
    """Ask for a structured answer, in the form of OpenAI chat completions'
    ``response_format`` (``{"type": "json_schema", "json_schema": {"name": ...,
    "schema": ..., "strict": True}}`` or ``{"type": "json_object"}``). openai-completions
    sends it as ``response_format``, openai-responses as ``text.format``; a ``strict``
    schema is made strict (every property required, optional ones nullable) where the
    server supports strict mode, else sent with ``strict: false``. Other APIs ignore it.
    pitrio's own option (pi-ai 0.85.0 has none); ``Agent.run(output_type=...)`` sets it."""
    headers: Mapping[str, str | None] | None = None
    max_retries: int | None = None
    max_retry_delay: float | None = None
    """The longest retry delay in seconds a server may ask for (``retry-after``); a longer
    one fails the request at once (``None``: 60, pi-ai's ``maxRetryDelayMs``; ``0``: no
    cap)."""
    timeout: float | None = None
    """Seconds to wait for the response headers before the request fails with
    ``Request timed out.`` (``None``: 600, the SDKs' default; pi-ai's ``timeoutMs``)."""
    idle_timeout: float | None = None
    """Seconds a provider may wait for the next bytes of a response body before the
    stream ends as an error (``None``: 600, the OpenAI and Anthropic SDKs' read
    timeout; ``0`` or less: no limit). ``timeout`` covers only the headers."""
    max_event_size: int | None = None
    """The longest server-sent event line or event (bytes) a provider accepts before the
    stream ends as an error (``None``: 64 MiB). It bounds the memory one broken or hostile
    event can take."""
    thinking_budgets: Mapping[str, int] | None = None
    cache_retention: str | None = None
    metadata: Mapping[str, JSONValue] | None = None
    sampling_params: Mapping[str, JSONValue] | None = None
    deferred: bool | Mapping[str, JSONValue] | None = None
    on_payload: Callable[[JSONValue, Model], Awaitable[JSONValue] | JSONValue] | None = None
    on_response: Callable[[int, Mapping[str, str], Model], Awaitable[None] | None] | None = None
    on_error_response: Callable[[int, Mapping[str, str], Model], None] | None = None
    """Called with the status and headers of an HTTP error response that ends the
    request (after the provider's own retries), before its ``error`` event; pitrio's
    providers call it (pi-ai has no such hook). The harness reads ``retry-after`` there."""
    extra: dict[str, JSONValue] = attrs.field(factory=dict)


_REQUEST_FIELDS: Final = ("signal", "api_key", "reasoning")
_request_copier: Callable[..., StreamOptions] | None = None


def request_options(
    template: StreamOptions, signal: AbortSignal, api_key: str | None, reasoning: str | None
) -> StreamOptions:
    """``attrs.evolve(template, signal=..., api_key=..., reasoning=...)`` at a tenth of its
    cost: every run makes one, and ``evolve`` walks the 25 fields' metadata each time.

    The copier is a function written for :class:`StreamOptions`' fields, compiled on first
    use (not at import): a new field is copied without anyone touching this code.
    """
    global _request_copier
    copier = _request_copier
    if copier is None:
        names = [f.name for f in attrs.fields(StreamOptions) if f.name not in _REQUEST_FIELDS]
        body = "".join(f"    o.{n} = t.{n}\n" for n in names)
        source = (
            "def copy(t, signal, api_key, reasoning):\n    o = new(cls)\n"
            f"{body}    o.signal = signal\n    o.api_key = api_key\n"
            "    o.reasoning = reasoning\n    return o\n"
        )
        namespace: dict[str, Any] = {"new": object.__new__, "cls": StreamOptions}
        # Our own source, from the class's field names.
        exec(compile(source, "<pitrio request options>", "exec"), namespace)
        copier = _request_copier = namespace["copy"]
    return copier(template, signal, api_key, reasoning)


StreamFn: TypeAlias = Callable[
    [Model, Context, StreamOptions],
    "AssistantMessageEventStream | Awaitable[AssistantMessageEventStream]",
]
"""``(model, context, options) -> AssistantMessageEventStream``; must not block or raise
for provider failures (those end the stream as an ``error`` event)."""
