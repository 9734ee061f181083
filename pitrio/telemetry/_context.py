"""Pi's telemetry contract: an explicit context, spans, attributes, events, statuses.

Ports ``@earendil-works/pi-telemetry`` 0.85.0 (``TelemetryContext``, ``TelemetrySpan``,
``NOOP_TELEMETRY_CONTEXT``, ``InMemoryTelemetryContext``). There is no global current span:
a span is started from the context it is handed, and a span is itself the context of its
children. Pi starts a span around a callback (``startSpan(options, callback)``); the
Python form is a ``with`` block, which owns settlement the same way: the span ends when
the block exits, ``ok`` unless the block raised or a status was set.

Recording is passive: calls after settlement are ignored, and recording never changes what
the instrumented code does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Literal, Protocol, TypeAlias, final

import attrs

__all__ = [
    "NOOP_TELEMETRY_CONTEXT",
    "AttributeValue",
    "InMemoryTelemetryContext",
    "RecordedTelemetryEvent",
    "RecordedTelemetrySpan",
    "SpanAttributes",
    "SpanScope",
    "SpanStatus",
    "TelemetryContext",
    "TelemetrySpan",
]

AttributeValue: TypeAlias = (
    str | int | float | bool | Sequence[str] | Sequence[int] | Sequence[float] | Sequence[bool]
)
"""What an attribute may hold: a scalar or a sequence of one scalar type (Pi's
``AttributeValue``)."""

SpanAttributes: TypeAlias = Mapping[str, "AttributeValue | None"]
"""An attribute bag; ``None`` values are ignored (Pi's ``undefined``)."""


@final
@attrs.frozen(kw_only=True)
class SpanStatus:
    """A span's outcome (Pi's ``SpanStatus``).

    Attributes:
        status: ``"ok"`` or ``"error"``.
        error_name: the error's class name (an error status only).
        error_message: the error's text (an error status only).
    """

    status: Literal["ok", "error"] = "ok"
    error_name: str | None = None
    error_message: str | None = None


class SpanScope(Protocol):
    """What :meth:`TelemetryContext.start_span` returns: ``with`` it to get the span."""

    def __enter__(self) -> TelemetrySpan: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


class TelemetryContext(Protocol):
    """Where new spans belong: a root, or a span (the parent of what it starts)."""

    def start_span(self, name: str, attributes: SpanAttributes | None = None) -> SpanScope:
        """A child span, started on entering the returned scope and ended on leaving it."""
        ...


class TelemetrySpan(TelemetryContext, Protocol):
    """One timed operation; also the context of its child spans (Pi's ``TelemetrySpan``)."""

    def add_event(self, name: str, attributes: SpanAttributes | None = None) -> None:
        """Record a point-in-time occurrence."""
        ...

    def set_attributes(self, attributes: SpanAttributes) -> None:
        """Merge attributes: later values replace earlier ones, ``None`` is ignored."""
        ...

    def set_status(self, status: SpanStatus) -> None:
        """Set the outcome explicitly (the last call wins over the automatic status)."""
        ...


def clean_attributes(attributes: SpanAttributes | None) -> dict[str, AttributeValue]:
    """A detached copy without ``None`` values (sequences copied to tuples)."""
    if not attributes:
        return {}
    return {
        key: value if type(value) in _SCALARS else tuple(value)  # type: ignore[arg-type,misc]  # a sequence
        for key, value in attributes.items()
        if value is not None
    }


_SCALARS = frozenset((str, int, float, bool, tuple))


def error_status(exc: BaseException) -> SpanStatus:
    """The automatic status of a block that raised ``exc``."""
    return SpanStatus(status="error", error_name=type(exc).__name__, error_message=str(exc))


# -- no-op ------------------------------------------------------------------------------


@final
class _NoopSpan:
    __slots__ = ()

    def start_span(self, name: str, attributes: SpanAttributes | None = None) -> _NoopSpan:
        return self

    def __enter__(self) -> _NoopSpan:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None

    def add_event(self, name: str, attributes: SpanAttributes | None = None) -> None:
        return None

    def set_attributes(self, attributes: SpanAttributes) -> None:
        return None

    def set_status(self, status: SpanStatus) -> None:
        return None


NOOP_TELEMETRY_CONTEXT: TelemetryContext = _NoopSpan()
"""The shared passive context: records nothing, one inert span for every level."""


# -- in memory --------------------------------------------------------------------------


@final
@attrs.frozen(kw_only=True)
class RecordedTelemetryEvent:
    """One event of a recorded span."""

    name: str
    attributes: Mapping[str, AttributeValue]


@final
@attrs.frozen(kw_only=True)
class RecordedTelemetrySpan:
    """A detached snapshot of one span (Pi's ``RecordedTelemetrySpan``).

    Attributes:
        id: the span's number, from 1 in start order.
        parent_id: the parent's ``id`` (``None``: a root span).
        name: the span's name.
        attributes: the merged attributes.
        events: the events, in order.
        status: the final (or, while open, current) status.
        settled: whether the span has ended.
        end_sequence: the order it ended in, from 1 (``None`` while open).
    """

    id: int
    parent_id: int | None
    name: str
    attributes: Mapping[str, AttributeValue]
    events: tuple[RecordedTelemetryEvent, ...]
    status: SpanStatus
    settled: bool
    end_sequence: int | None


@final
class _MemorySpan:
    """One recorded span; also the scope that starts it (one object per span)."""

    __slots__ = (
        "_attributes",
        "_events",
        "_explicit",
        "_id",
        "_name",
        "_parent_id",
        "_recorder",
        "_settled",
        "_status",
        "end_sequence",
    )

    def __init__(
        self,
        recorder: InMemoryTelemetryContext,
        parent_id: int | None,
        name: str,
        attributes: SpanAttributes | None,
    ) -> None:
        self._recorder = recorder
        self._id = 0
        self._parent_id = parent_id
        self._name = name
        self._attributes = clean_attributes(attributes)
        self._events: list[RecordedTelemetryEvent] = []
        self._status = _OK
        self._explicit = False
        self._settled = False
        self.end_sequence: int | None = None

    def __enter__(self) -> TelemetrySpan:
        recorder = self._recorder
        if self._id == 0:
            self._id = recorder._next_id
            recorder._next_id += 1
            recorder._spans.append(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._id == 0 or self._settled:
            return
        if exc is not None and not self._explicit:
            self._status = error_status(exc)
        self._settled = True
        self.end_sequence = self._recorder._next_end
        self._recorder._next_end += 1

    def start_span(self, name: str, attributes: SpanAttributes | None = None) -> SpanScope:
        if self._settled:
            return _NoopSpan()
        return _MemorySpan(self._recorder, self._id, name, attributes)

    def add_event(self, name: str, attributes: SpanAttributes | None = None) -> None:
        if not self._settled:
            self._events.append(
                RecordedTelemetryEvent(name=name, attributes=clean_attributes(attributes))
            )

    def set_attributes(self, attributes: SpanAttributes) -> None:
        if not self._settled:
            self._attributes.update(clean_attributes(attributes))

    def set_status(self, status: SpanStatus) -> None:
        if not self._settled:
            self._status = status
            self._explicit = True

    def snapshot(self) -> RecordedTelemetrySpan:
        return RecordedTelemetrySpan(
            id=self._id,
            parent_id=self._parent_id,
            name=self._name,
            attributes=dict(self._attributes),
            events=tuple(self._events),
            status=self._status,
            settled=self._settled,
            end_sequence=self.end_sequence,
        )


_OK = SpanStatus()


@final
class InMemoryTelemetryContext:
    """The reference adapter: records spans in process memory, without timestamps.

    Ids and end sequences are deterministic, so tests can compare whole span trees. The
    store grows without bound: make a fresh one per test or recording scope.
    """

    __slots__ = ("_next_end", "_next_id", "_spans")

    def __init__(self) -> None:
        self._spans: list[_MemorySpan] = []
        self._next_id = 1
        self._next_end = 1

    def start_span(self, name: str, attributes: SpanAttributes | None = None) -> SpanScope:
        """A root span (see :class:`TelemetryContext`)."""
        return _MemorySpan(self, None, name, attributes)

    def get_spans(self) -> list[RecordedTelemetrySpan]:
        """Detached snapshots, in start order."""
        return [span.snapshot() for span in self._spans]
