"""The harness's own events, emitted beside the Agent's.

A harness listener sees every :data:`pitrio.AgentEvent` the Agent emits, in the Agent's
order, and these events in between:

* :class:`SavePoint` right after each ``turn_end``, once the session holds the turn
  and has been flushed (a crash after it loses nothing of that turn);
* :class:`AutoRetryStart` / :class:`AutoRetryEnd` around automatic retries (after the
  failed run's ``agent_end``, before the retried run's ``agent_start``);
* :class:`CompactionStart` / :class:`CompactionEnd` around a compaction;
* :class:`NavigationStart` / :class:`NavigationEnd` around a tree navigation
  (:meth:`Harness.navigate_tree`);
* :class:`RecoveryStart` / :class:`RecoveryEnd` around the recovery of a run the
  session's process left unfinished (the events between are those Pi marks
  ``recovery: true``: the settled interrupted request, the recovered tool calls);
* :class:`HandlerError` when a ``before_compaction`` / ``before_navigation`` handler
  failed and was skipped (Pi's ``handler_error``);
* :class:`QueueUpdate` when the durable queue changes (:meth:`Harness.enqueue`,
  :meth:`Harness.cancel_queued`, a run taking queued messages);
* :class:`Settled` last, after the final ``agent_end`` of a :meth:`Harness.prompt`
  (retries and recoveries included), once the session is flushed and the harness is
  idle again.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, TypeAlias, final

import attrs

from pitrio import AgentEvent, AssistantMessage

__all__ = [
    "AutoRetryEnd",
    "AutoRetryStart",
    "CompactionEnd",
    "CompactionReason",
    "CompactionStart",
    "HandlerError",
    "HarnessEvent",
    "NavigationEnd",
    "NavigationStart",
    "QueueUpdate",
    "RecoveryEnd",
    "RecoveryStart",
    "SavePoint",
    "Settled",
]

CompactionReason: TypeAlias = Literal["manual", "threshold", "overflow"]


@final
@attrs.frozen(kw_only=True)
class SavePoint:
    """The turn that just ended is in the session, flushed.

    Attributes:
        entry_id: the session's leaf entry after the turn (``None`` without a session).
    """

    type: ClassVar[Literal["save_point"]] = "save_point"
    entry_id: str | None = None


@final
@attrs.frozen(kw_only=True)
class Settled:
    """The harness is idle: the prompt, its retries and recoveries are over.

    Attributes:
        message: the last assistant message of the prompt (``None`` if none was made).
    """

    type: ClassVar[Literal["settled"]] = "settled"
    message: AssistantMessage | None = None


@final
@attrs.frozen(kw_only=True)
class AutoRetryStart:
    """A retryable error ended the run; the harness waits ``delay`` seconds, then retries.

    Attributes:
        attempt: 1 for the first retry.
        max_attempts: the configured number of retries.
        delay: seconds before the retry starts.
        error_message: the failed request's error text.
    """

    type: ClassVar[Literal["auto_retry_start"]] = "auto_retry_start"
    attempt: int
    max_attempts: int
    delay: float
    error_message: str


@final
@attrs.frozen(kw_only=True)
class AutoRetryEnd:
    """Retrying is over.

    Attributes:
        success: a retried request succeeded.
        attempt: the last retry made (0 if none was).
        final_error: why retrying stopped without success (the last error, or
            ``"Retry cancelled"`` after an abort during the back-off).
    """

    type: ClassVar[Literal["auto_retry_end"]] = "auto_retry_end"
    success: bool
    attempt: int
    final_error: str | None = None


@final
@attrs.frozen(kw_only=True)
class CompactionStart:
    """A compaction begins (``manual``, ``threshold`` or ``overflow``)."""

    type: ClassVar[Literal["compaction_start"]] = "compaction_start"
    reason: CompactionReason


@final
@attrs.frozen(kw_only=True)
class CompactionEnd:
    """A compaction ended.

    Attributes:
        reason: as in :class:`CompactionStart`.
        status: ``completed`` (an entry was written), ``declined`` (nothing to compact,
            or a ``before_compaction`` hook declined it), ``aborted`` or ``failed``.
        entry_id: the compaction entry's id when completed.
        summary: the summary written when completed.
        tokens_before: the context's estimated size before compaction.
        error_message: why it failed.
        will_retry: the harness continues the run next (overflow recovery).
    """

    type: ClassVar[Literal["compaction_end"]] = "compaction_end"
    reason: CompactionReason
    status: Literal["completed", "declined", "aborted", "failed"]
    entry_id: str | None = None
    summary: str | None = None
    tokens_before: int | None = None
    error_message: str | None = None
    will_retry: bool = False
    details: Any = None


@final
@attrs.frozen(kw_only=True)
class NavigationStart:
    """A tree navigation begins (:meth:`Harness.navigate_tree`; Pi's
    ``navigation_start``).

    Attributes:
        target_id: the entry the tip moves to (``None``: before the first).
        summarize: whether the branch left is summarised.
    """

    type: ClassVar[Literal["navigation_start"]] = "navigation_start"
    target_id: str | None
    summarize: bool = False


@final
@attrs.frozen(kw_only=True)
class NavigationEnd:
    """A tree navigation ended (Pi's ``navigation_end``).

    Attributes:
        status: ``completed`` (the tip moved), ``declined`` (by a ``before_navigation``
            hook), ``aborted`` or ``failed`` (the tip stays).
        from_tip_id: the tip it left.
        tip_id: the tip now (the branch summary's entry when one was written).
        entry_id: the branch summary's entry, if one was written.
        summary: its text.
        error_message: why it failed.
    """

    type: ClassVar[Literal["navigation_end"]] = "navigation_end"
    status: Literal["completed", "declined", "aborted", "failed"]
    from_tip_id: str | None
    tip_id: str | None
    entry_id: str | None = None
    summary: str | None = None
    error_message: str | None = None


@final
@attrs.frozen(kw_only=True)
class RecoveryStart:
    """An interrupted run is being recovered (:meth:`Harness.resume`).

    Attributes:
        operation_id: the run's operation (``pi.op.meta``).
        at: where it stopped (its ``pi.op.state``: ``"tools"``,
            ``"assistant.effect_pending"``, ...).
    """

    type: ClassVar[Literal["recovery_start"]] = "recovery_start"
    operation_id: str
    at: str


@final
@attrs.frozen(kw_only=True)
class RecoveryEnd:
    """What was interrupted is settled (tool results, an interrupted request).

    Attributes:
        operation_id: the run's operation.
        resumed: whether the run goes on (a request follows); ``False`` when it had
            only its end left to write.
    """

    type: ClassVar[Literal["recovery_end"]] = "recovery_end"
    operation_id: str
    resumed: bool


@final
@attrs.frozen(kw_only=True)
class QueueUpdate:
    """The durable queue changed (Pi's ``queue_update``).

    Attributes:
        queued: the queue now (:class:`QueuedMessage` items, in order).
    """

    type: ClassVar[Literal["queue_update"]] = "queue_update"
    queued: tuple[Any, ...]


@final
@attrs.frozen(kw_only=True)
class HandlerError:
    """A ``before_compaction`` / ``before_navigation`` handler raised, or returned
    something other than its hook's result type: it is skipped, and the next handler
    decides (else the model is asked), as Pi's ``handler_error`` (``kind: "hook"``).

    Attributes:
        hook: the hook's name.
        error_message: what went wrong (the exception's message).
    """

    type: ClassVar[Literal["handler_error"]] = "handler_error"
    hook: str
    error_message: str


HarnessEvent: TypeAlias = (
    AgentEvent
    | SavePoint
    | RecoveryStart
    | RecoveryEnd
    | Settled
    | AutoRetryStart
    | AutoRetryEnd
    | CompactionStart
    | CompactionEnd
    | NavigationStart
    | NavigationEnd
    | QueueUpdate
    | HandlerError
)
"""Everything a harness listener may receive."""
