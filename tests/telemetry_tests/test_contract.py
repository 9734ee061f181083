"""Pi's telemetry contract: the in-memory reference adapter and the no-op context.

The cases are those of pi-telemetry 0.85.0's adapter conformance suite
(``testing/conformance.js``): nesting, attribute merging, event order, automatic and
explicit status, inert calls after settlement.
"""

from __future__ import annotations

import pytest

from pitrio.telemetry import (
    NOOP_TELEMETRY_CONTEXT,
    InMemoryTelemetryContext,
    RecordedTelemetryEvent,
    SpanStatus,
)


def test_nested_spans_record_parents_attributes_and_end_order() -> None:
    """A child span names its parent; spans are listed in start order, ended inner first."""
    telemetry = InMemoryTelemetryContext()
    with telemetry.start_span("outer", {"a": 1, "skip": None}) as outer:
        with outer.start_span("inner") as inner:
            inner.add_event("e1", {"hit": True})
            inner.add_event("e2")
        outer.set_attributes({"a": 2, "b": ["x", "y"], "c": None})
    spans = telemetry.get_spans()
    assert [(s.id, s.parent_id, s.name, s.end_sequence) for s in spans] == [
        (1, None, "outer", 2),
        (2, 1, "inner", 1),
    ]
    assert spans[0].attributes == {"a": 2, "b": ("x", "y")}
    assert spans[1].events == (
        RecordedTelemetryEvent(name="e1", attributes={"hit": True}),
        RecordedTelemetryEvent(name="e2", attributes={}),
    )
    assert all(s.settled and s.status == SpanStatus() for s in spans)


def test_an_exception_sets_an_error_status_unless_one_was_set() -> None:
    """Raising out of a span's block is an error with the exception's name and text."""
    telemetry = InMemoryTelemetryContext()
    with pytest.raises(ValueError, match=r"^bad$"), telemetry.start_span("auto"):
        raise ValueError("bad")
    scope = telemetry.start_span("explicit")
    span = scope.__enter__()
    span.set_status(SpanStatus(status="error", error_name="First"))
    span.set_status(SpanStatus(status="ok"))  # the last call wins
    scope.__exit__(KeyError, KeyError("k"), None)
    auto, explicit = telemetry.get_spans()
    assert auto.status == SpanStatus(status="error", error_name="ValueError", error_message="bad")
    assert explicit.status == SpanStatus(status="ok")


def test_calls_after_settlement_are_ignored() -> None:
    """A settled span records nothing more, and its children go nowhere."""
    telemetry = InMemoryTelemetryContext()
    with telemetry.start_span("s") as span:
        pass
    span.set_attributes({"late": 1})
    span.add_event("late")
    span.set_status(SpanStatus(status="error"))
    with span.start_span("orphan") as child:
        child.set_attributes({"x": 1})
    (only,) = telemetry.get_spans()
    assert (only.attributes, only.events, only.status) == ({}, (), SpanStatus())


def test_snapshots_are_detached_and_show_open_spans() -> None:
    """get_spans() copies: later changes do not reach an earlier snapshot."""
    telemetry = InMemoryTelemetryContext()
    with telemetry.start_span("s", {"n": 1}) as span:
        before = telemetry.get_spans()
        span.set_attributes({"n": 2})
    assert (before[0].attributes, before[0].settled, before[0].end_sequence) == (
        {"n": 1},
        False,
        None,
    )
    assert telemetry.get_spans()[0].attributes == {"n": 2}


def test_the_noop_context_runs_the_block_and_records_nothing() -> None:
    """The no-op context hands out one inert span at every level."""
    with NOOP_TELEMETRY_CONTEXT.start_span("a", {"x": 1}) as span:
        span.set_attributes({"y": 2})
        span.add_event("e")
        with span.start_span("b") as child:
            assert child is span
    with pytest.raises(RuntimeError), NOOP_TELEMETRY_CONTEXT.start_span("c"):
        raise RuntimeError
