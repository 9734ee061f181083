"""Telemetry: Pi's span contract, spans of a harness's runs, an OpenTelemetry adapter.

``instrument(harness, telemetry)`` records each run as spans in Pi's vocabulary
(``pi.harness.run``, ``pi.harness.turn``, ``pi.ai.request``, ``pi.harness.tool`` ...) under
the context it is handed: :class:`InMemoryTelemetryContext` (the reference adapter, for
tests and local diagnostics) or :class:`OpenTelemetryContext` (the GenAI semantic
conventions; the ``otel`` extra). ``import pitrio`` does not import this package, and this
package imports OpenTelemetry only when :class:`OpenTelemetryContext` is first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._context import (
    NOOP_TELEMETRY_CONTEXT as NOOP_TELEMETRY_CONTEXT,
    AttributeValue as AttributeValue,
    InMemoryTelemetryContext as InMemoryTelemetryContext,
    RecordedTelemetryEvent as RecordedTelemetryEvent,
    RecordedTelemetrySpan as RecordedTelemetrySpan,
    SpanAttributes as SpanAttributes,
    SpanScope as SpanScope,
    SpanStatus as SpanStatus,
    TelemetryContext as TelemetryContext,
    TelemetrySpan as TelemetrySpan,
)
from ._instrument import CAPTURE_CONTENT_ENV as CAPTURE_CONTENT_ENV, instrument as instrument

if TYPE_CHECKING:
    from ._otel import (
        SEMCONV_OPT_IN_ENV as SEMCONV_OPT_IN_ENV,
        OpenTelemetryContext as OpenTelemetryContext,
    )

__all__ = [
    "CAPTURE_CONTENT_ENV",
    "NOOP_TELEMETRY_CONTEXT",
    "SEMCONV_OPT_IN_ENV",
    "AttributeValue",
    "InMemoryTelemetryContext",
    "OpenTelemetryContext",
    "RecordedTelemetryEvent",
    "RecordedTelemetrySpan",
    "SpanAttributes",
    "SpanScope",
    "SpanStatus",
    "TelemetryContext",
    "TelemetrySpan",
    "instrument",
]


def __getattr__(name: str) -> object:
    # OpenTelemetry is an extra: import it only when its adapter is asked for.
    if name in ("OpenTelemetryContext", "SEMCONV_OPT_IN_ENV"):
        from . import _otel

        return getattr(_otel, name)
    msg = f"module 'pitrio.telemetry' has no attribute {name!r}"
    raise AttributeError(msg)
