"""An OpenTelemetry adapter: Pi's spans as the GenAI semantic conventions.

:class:`OpenTelemetryContext` is a :class:`~pitrio.telemetry.TelemetryContext` whose spans
are OpenTelemetry spans. Pi's names are translated, as pi-telemetry's README lets an
adapter do ("adapters may translate them to backend conventions")::

    pi.harness.run   -> invoke_agent               gen_ai.operation.name=invoke_agent
    pi.ai.request    -> chat {model}   (CLIENT)    gen_ai.provider.name, request/response
                                                   model, usage, finish_reasons, error.type
    pi.harness.tool  -> execute_tool {name}        gen_ai.tool.name, gen_ai.tool.call.id

Other spans keep their ``pi.*`` names. A ``pi.*`` attribute with a GenAI name is
renamed (``pi.ai.model`` -> ``gen_ai.request.model``, ``pi.tool.call_id`` ->
``gen_ai.tool.call.id``, ``pi.ai.error.type`` -> ``error.type`` ...); the constant ones
(``pi.lane.name``, ``pi.operation.kind``, ``pi.tool.replay`` ...) and the ids the tree
already says (``pi.operation.id`` below the root span, ``pi.turn.id`` below the turn's) are
left out; the others keep theirs.
Each ``chat`` span also records the two GenAI metrics,
``gen_ai.client.operation.duration`` (seconds) and ``gen_ai.client.token.usage``.

``OTEL_SEMCONV_STABILITY_OPT_IN`` containing ``gen_ai_latest_experimental`` selects the
latest conventions (``gen_ai.provider.name``; content in ``gen_ai.input.messages`` /
``gen_ai.output.messages`` and the tool call attributes); without it the older ones
(``gen_ai.system``; content as ``gen_ai.content.prompt`` / ``gen_ai.content.completion``
span events). Content reaches the adapter only when :func:`~pitrio.telemetry.instrument`
captures it.

Needs the ``otel`` extra (``pip install 'pitrio[otel]'``: opentelemetry-api; an SDK to
export).
"""

from __future__ import annotations

import os
import time
from types import TracebackType
from typing import TYPE_CHECKING, Any, final

from ._context import AttributeValue, SpanAttributes, SpanScope, SpanStatus, clean_attributes

try:
    from opentelemetry import metrics, trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError as exc:  # pragma: no cover - depends on the environment
    from .._errors import UsageError

    msg = "pitrio.telemetry.OpenTelemetryContext needs OpenTelemetry: pip install 'pitrio[otel]'"
    raise UsageError(msg) from exc

if TYPE_CHECKING:
    from opentelemetry.metrics import Histogram, MeterProvider
    from opentelemetry.trace import Span, Tracer, TracerProvider

__all__ = ["SEMCONV_OPT_IN_ENV", "OpenTelemetryContext"]

SEMCONV_OPT_IN_ENV = "OTEL_SEMCONV_STABILITY_OPT_IN"
"""The environment variable selecting the latest GenAI conventions."""

_LATEST = "gen_ai_latest_experimental"
_SCOPE = "pitrio.telemetry"

# The buckets the GenAI conventions advise for the two histograms.
_DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24,
                     20.48, 40.96, 81.92)  # fmt: skip
_TOKEN_BUCKETS = tuple(float(4**n) for n in range(14))

# pi.* keys with a GenAI name; the provider's depends on the conventions' version.
_RENAMED = {
    "pi.ai.model": "gen_ai.request.model",
    "pi.ai.response.model": "gen_ai.response.model",
    "pi.ai.response.id": "gen_ai.response.id",
    "pi.ai.usage.input_tokens": "gen_ai.usage.input_tokens",
    "pi.ai.usage.output_tokens": "gen_ai.usage.output_tokens",
    "pi.ai.error.type": "error.type",
    "pi.tool.name": "gen_ai.tool.name",
    "pi.tool.call_id": "gen_ai.tool.call.id",
    "pi.session.id": "gen_ai.conversation.id",
    "pi.mcp.method": "mcp.method.name",
    "pi.mcp.session_id": "mcp.session.id",
    "pi.mcp.protocol_version": "mcp.protocol.version",
}
# MCP's transports as OpenTelemetry's network.transport values (stdio is a pipe).
_MCP_TRANSPORTS = {"stdio": "pipe", "streamable-http": "tcp"}
# Content: never kept under its pi.* name (the one copy is the GenAI one).
_CONTENT_LATEST = {
    "pi.ai.input.messages": "gen_ai.input.messages",
    "pi.ai.output.messages": "gen_ai.output.messages",
    "pi.tool.arguments": "gen_ai.tool.call.arguments",
    "pi.tool.result": "gen_ai.tool.call.result",
}
_CONTENT_EVENTS = {
    "pi.ai.input.messages": ("gen_ai.content.prompt", "gen_ai.prompt"),
    "pi.ai.output.messages": ("gen_ai.content.completion", "gen_ai.completion"),
}
_FINISH_REASONS = {"tool_use": "tool_call"}
# Left out: what the span's GenAI name or operation already says, and Pi's durable-runtime
# bookkeeping that is constant in pitrio (one lane, no recovery, no replay). Each attribute
# costs the SDK a validation.
_IMPLIED = frozenset(
    (
        "pi.ai.operation",
        "pi.ai.provider",  # gen_ai.provider.name (or gen_ai.system) says it
        "pi.ai.streaming",
        "pi.lane.name",
        "pi.operation.kind",
        "pi.operation.recovery",
        "pi.tool.replay",
        "pi.tool.recovery",
    )
)
# Ids the span tree already carries: the operation's on its root span, the turn's on its
# turn span; the spans below them say them by being their children.
_IDS = frozenset(("pi.operation.id", "pi.turn.id"))
_ROOT_IDS = frozenset(("pi.turn.id",))
_TURN_IDS = frozenset(("pi.operation.id",))
_METRIC_KEYS = frozenset(
    ("gen_ai.response.model", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens")
)


@final
class OpenTelemetryContext:
    """Pi's telemetry contract on OpenTelemetry (GenAI semantic conventions).

    Args:
        tracer_provider: default: the global one (``opentelemetry.trace``).
        meter_provider: default: the global one (``opentelemetry.metrics``).
        latest_conventions: use the latest experimental GenAI conventions. ``None``: when
            ``OTEL_SEMCONV_STABILITY_OPT_IN`` lists ``gen_ai_latest_experimental``.
        turn_spans: keep Pi's ``pi.harness.turn`` span around each turn's request and
            tools. By default a turn has no span (the GenAI conventions have none):
            ``chat`` and ``execute_tool`` are children of ``invoke_agent`` and carry the
            turn's ``pi.turn.id``.

    Root spans are children of OpenTelemetry's current span (an application's own span
    around a prompt); below that, parents are always the spans pitrio handed over.
    """

    __slots__ = ("_duration", "_latest", "_tokens", "_tracer", "_turn_spans")

    def __init__(
        self,
        *,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        latest_conventions: bool | None = None,
        turn_spans: bool = False,
    ) -> None:
        self._turn_spans = turn_spans
        if latest_conventions is None:
            opt_in = os.environ.get(SEMCONV_OPT_IN_ENV, "")
            latest_conventions = _LATEST in {part.strip() for part in opt_in.split(",")}
        self._latest = latest_conventions
        self._tracer: Tracer = trace.get_tracer(_SCOPE, tracer_provider=tracer_provider)
        meter = metrics.get_meter(_SCOPE, meter_provider=meter_provider)
        self._duration: Histogram = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="GenAI operation duration",
            explicit_bucket_boundaries_advisory=list(_DURATION_BUCKETS),
        )
        self._tokens: Histogram = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Number of input and output tokens used",
            explicit_bucket_boundaries_advisory=list(_TOKEN_BUCKETS),
        )

    def start_span(self, name: str, attributes: SpanAttributes | None = None) -> SpanScope:
        """A root span (under OpenTelemetry's current span, if any)."""
        return _Scope(self, None, name, attributes)


@final
class _Scope:
    __slots__ = ("_adapter", "_attributes", "_in_turn", "_name", "_parent", "_span")

    def __init__(
        self,
        adapter: OpenTelemetryContext,
        parent: Span | None,
        name: str,
        attributes: SpanAttributes | None,
        *,
        in_turn: bool = False,
    ) -> None:
        self._adapter = adapter
        self._parent = parent
        self._name = name
        self._attributes = attributes
        self._in_turn = in_turn
        self._span: _Span | _Turn | None = None

    def __enter__(self) -> _Span | _Turn:
        attributes = clean_attributes(self._attributes)
        span: _Span | _Turn
        if self._name == "pi.harness.turn" and not self._adapter._turn_spans:
            span = _Turn(self._adapter, self._parent, attributes)
        else:
            span = _Span(self._adapter, self._parent, self._name, attributes, self._in_turn)
        self._span = span
        return span

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._span is not None:
            self._span.settle(exc)


@final
class _Turn:
    """A turn without a span of its own (the GenAI conventions have none): what it
    starts is a child of the run's span and says its turn in ``pi.turn.id``."""

    __slots__ = ("_adapter", "_parent", "_settled", "_turn_id")

    def __init__(
        self,
        adapter: OpenTelemetryContext,
        parent: Span | None,
        attributes: dict[str, AttributeValue],
    ) -> None:
        self._adapter = adapter
        self._parent = parent
        self._turn_id = attributes.get("pi.turn.id")
        self._settled = False

    def start_span(self, name: str, attributes: SpanAttributes | None = None) -> SpanScope:
        if self._settled:
            from ._context import NOOP_TELEMETRY_CONTEXT

            return NOOP_TELEMETRY_CONTEXT.start_span(name, attributes)
        own = dict(attributes or {})
        if self._turn_id is not None:
            own.setdefault("pi.turn.id", self._turn_id)
        return _Scope(self._adapter, self._parent, name, own, in_turn=True)

    def add_event(self, name: str, attributes: SpanAttributes | None = None) -> None:
        """Nothing: the turn has no span to hold it."""

    def set_attributes(self, attributes: SpanAttributes) -> None:
        """Nothing: the turn has no span to hold them."""

    def set_status(self, status: SpanStatus) -> None:
        """Nothing: the turn's outcome is its request's and its tools'."""

    def settle(self, exc: BaseException | None) -> None:
        self._settled = True


@final
class _Span:
    """One OpenTelemetry span behind Pi's span interface."""

    __slots__ = (
        "_adapter",
        "_drop",
        "_error_type",
        "_explicit",
        "_metric",
        "_otel",
        "_settled",
        "_started",
    )

    def __init__(
        self,
        adapter: OpenTelemetryContext,
        parent: Span | None,
        name: str,
        attributes: dict[str, AttributeValue],
        in_turn: bool = False,
    ) -> None:
        self._adapter = adapter
        self._explicit = False
        self._settled = False
        self._error_type: str | None = None
        self._metric: dict[str, AttributeValue] | None = None
        self._drop = (
            _ROOT_IDS
            if parent is None
            else _TURN_IDS
            if name == "pi.harness.turn" or in_turn
            else _IDS
        )
        provider_key = "gen_ai.provider.name" if adapter._latest else "gen_ai.system"
        kind = SpanKind.INTERNAL
        extra: dict[str, AttributeValue] = {}
        if name == "pi.ai.request":
            model = attributes.get("pi.ai.model", "")
            otel_name = f"chat {model}"
            kind = SpanKind.CLIENT
            extra["gen_ai.operation.name"] = "chat"
            extra[provider_key] = attributes.get("pi.ai.provider", "")
            self._metric = {
                "gen_ai.operation.name": "chat",
                provider_key: extra[provider_key],
                "gen_ai.request.model": model,
            }
        elif name == "pi.harness.tool":
            otel_name = f"execute_tool {attributes.get('pi.tool.name', '')}"
            extra["gen_ai.operation.name"] = "execute_tool"
            extra["gen_ai.tool.type"] = "function"
        elif name == "pi.harness.run":
            otel_name = "invoke_agent"
            extra["gen_ai.operation.name"] = "invoke_agent"
        else:
            otel_name = name
        context = trace.set_span_in_context(parent) if parent is not None else None
        # One attribute bag at the start: the SDK validates each set_attributes() call.
        events: list[tuple[str, dict[str, AttributeValue]]] = []
        extra.update(self._translate(attributes, events))
        self._otel: Span = adapter._tracer.start_span(
            otel_name, context=context, kind=kind, attributes=extra
        )
        self._started = time.perf_counter()
        for event, event_attributes in events:
            self._otel.add_event(event, event_attributes)

    def _record(self, attributes: dict[str, AttributeValue]) -> None:
        events: list[tuple[str, dict[str, AttributeValue]]] = []
        self._otel.set_attributes(self._translate(attributes, events))
        for event, event_attributes in events:
            self._otel.add_event(event, event_attributes)

    def _translate(
        self,
        attributes: dict[str, AttributeValue],
        events: list[tuple[str, dict[str, AttributeValue]]],
    ) -> dict[str, AttributeValue]:
        latest = self._adapter._latest
        out: dict[str, AttributeValue] = {}
        for key, value in attributes.items():
            if key in _IMPLIED or key in self._drop:
                continue
            if key in _CONTENT_LATEST:
                if latest:
                    out[_CONTENT_LATEST[key]] = value
                elif key in _CONTENT_EVENTS:
                    event, attribute = _CONTENT_EVENTS[key]
                    events.append((event, {attribute: value}))
                continue
            renamed = _RENAMED.get(key)
            if key == "pi.mcp.transport":
                out["network.transport"] = _MCP_TRANSPORTS.get(str(value), str(value))
                if value == "streamable-http":
                    out["network.protocol.name"] = "http"
                continue
            if renamed is None:
                out[key] = value
                if key == "pi.ai.response.stop_reason":
                    reason = str(value)
                    finish = _FINISH_REASONS.get(reason, reason)
                    out["gen_ai.response.finish_reasons"] = (finish,)
                continue
            if renamed == "gen_ai.conversation.id" and not value:
                continue
            out[renamed] = value
            if self._metric is not None and renamed in _METRIC_KEYS:
                self._metric[renamed] = value
            if renamed == "error.type":
                self._error_type = str(value)
        return out

    # -- TelemetrySpan ----------------------------------------------------------------------

    def start_span(self, name: str, attributes: SpanAttributes | None = None) -> SpanScope:
        if self._settled:
            from ._context import NOOP_TELEMETRY_CONTEXT

            return NOOP_TELEMETRY_CONTEXT.start_span(name, attributes)
        return _Scope(self._adapter, self._otel, name, attributes)

    def add_event(self, name: str, attributes: SpanAttributes | None = None) -> None:
        if not self._settled:
            self._otel.add_event(name, clean_attributes(attributes))

    def set_attributes(self, attributes: SpanAttributes) -> None:
        if not self._settled:
            self._record(clean_attributes(attributes))

    def set_status(self, status: SpanStatus) -> None:
        if self._settled:
            return
        self._explicit = True
        self._apply(status)

    def _apply(self, status: SpanStatus) -> None:
        if status.status == "ok":
            self._otel.set_status(Status(StatusCode.OK))
            return
        self._otel.set_status(Status(StatusCode.ERROR, status.error_message))
        if self._error_type is None:
            self._error_type = status.error_name or "error"
            self._otel.set_attribute("error.type", self._error_type)

    def settle(self, exc: BaseException | None) -> None:
        if self._settled:
            return
        self._settled = True
        if exc is not None and not self._explicit:
            self._apply(
                SpanStatus(status="error", error_name=type(exc).__name__, error_message=str(exc))
            )
        self._otel.end()
        metric = self._metric
        if metric is not None:
            self._measure(metric, time.perf_counter() - self._started)

    def _measure(self, metric: dict[str, AttributeValue], seconds: float) -> None:
        adapter = self._adapter
        common: dict[str, Any] = {
            key: metric[key]
            for key in (
                "gen_ai.operation.name",
                "gen_ai.provider.name",
                "gen_ai.system",
                "gen_ai.request.model",
                "gen_ai.response.model",
            )
            if key in metric
        }
        if self._error_type is not None:
            adapter._duration.record(seconds, {**common, "error.type": self._error_type})
        else:
            adapter._duration.record(seconds, common)
        for key, token_type in (
            ("gen_ai.usage.input_tokens", "input"),
            ("gen_ai.usage.output_tokens", "output"),
        ):
            count = metric.get(key)
            if isinstance(count, int) and not isinstance(count, bool):
                adapter._tokens.record(count, {**common, "gen_ai.token.type": token_type})
