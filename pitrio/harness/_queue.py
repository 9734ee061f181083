"""The lane's durable queue: messages waiting for a run, kept in the session as Pi's.

Pi 0.85.0's lane (pi-agent-core ``harness/runtime/lane.js``: ``enqueue``,
``cancelQueued``, ``acceptRun``'s ``selectAcceptedInbox``) keeps each queued message as
``pi.pending.entry`` (``{"type": "message", "payload": ...}``) under the entry id it will
have, and the queue's order in the lane state's ``inbox`` (``{"entryId", "kind"}``, kinds
``"steer"``, ``"followUp"``, ``"nextRun"``). A run's start writes the messages it takes
(every ``nextRun``, and the first ``steer`` and ``followUp`` or all of them, by the
queue modes) as entries before its prompt; a running turn takes its steering and
follow-up messages as they are delivered. A queued message survives an abort and the
death of its process.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal, TypeAlias, final

import attrs

from pitrio import AgentMessage, wire

from ._entries import Write
from ._operations import PENDING_ENTRY, _delete, _set
from ._session import Session
from ._session_state import BRANCH_TIP, IDLE_LANE, LANE_STATE

__all__ = ["QueueKind", "QueuedMessage"]

QueueKind: TypeAlias = Literal["steer", "follow_up", "next_run"]
"""Where a queued message goes: ``"steer"`` (after the running turn), ``"follow_up"``
(when the run would stop) or ``"next_run"`` (before the next prompt)."""

PI_KINDS: Final[dict[str, str]] = {
    "steer": "steer",
    "follow_up": "followUp",
    "next_run": "nextRun",
}
KINDS: Final[dict[str, QueueKind]] = {
    "steer": "steer",
    "followUp": "follow_up",
    "nextRun": "next_run",
}


@final
@attrs.frozen(kw_only=True)
class QueuedMessage:
    """A message in the lane's durable queue.

    Attributes:
        entry_id: the id its entry will have (and :meth:`Harness.cancel_queued` takes).
        kind: where it goes (:data:`QueueKind`).
        message: the message.
    """

    entry_id: str
    kind: QueueKind
    message: AgentMessage


def inbox(session: Session) -> list[dict[str, Any]]:
    state = session.get_value(LANE_STATE, session._lane)
    items = state.get("inbox") if isinstance(state, Mapping) else None
    return [dict(item) for item in items or () if isinstance(item, Mapping)]


def queued(session: Session) -> tuple[QueuedMessage, ...]:
    """The queue, in order (items whose payload is not a message are left out)."""
    out = []
    for item in inbox(session):
        stored = session.get_value(PENDING_ENTRY, str(item.get("entryId")))
        kind = KINDS.get(str(item.get("kind")))
        if kind is None or not isinstance(stored, Mapping) or stored.get("type") != "message":
            continue
        message = wire.structure_message(stored["payload"])
        out.append(QueuedMessage(entry_id=str(item["entryId"]), kind=kind, message=message))
    return tuple(out)


def lane_state(session: Session, items: Sequence[Mapping[str, Any]]) -> Write:
    """The lane state with ``items`` as its inbox."""
    stored = session.get_value(LANE_STATE, session._lane)
    value: dict[str, Any] = {**IDLE_LANE, **(stored if isinstance(stored, Mapping) else {})}
    value["inbox"] = [dict(item) for item in items]
    return _set(LANE_STATE, session._lane, value)


def enqueue_writes(
    session: Session,
    entry_id: str,
    kind: QueueKind,
    message: AgentMessage,
    config: Sequence[Write] = (),
) -> list[Write]:
    """The writes that queue ``message``; on a session whose lane has no tip yet, the
    lane's tip and ``config`` (its configuration when it has none) first, as Pi's lane
    creation writes them: Pi's restore needs all three of a lane."""
    payload = {"type": "message", "payload": wire.unstructure(message)}
    items = [*inbox(session), {"entryId": entry_id, "kind": PI_KINDS[kind]}]
    lane: list[Write] = []
    if (BRANCH_TIP, session._lane) not in session._state.values:
        lane = [_set(BRANCH_TIP, session._lane, session.leaf_id), *config]
    return [*lane, _set(PENDING_ENTRY, entry_id, payload), lane_state(session, items)]


def take_writes(session: Session, entry_ids: Sequence[str]) -> list[Write]:
    """The writes that take ``entry_ids`` out of the queue (their entries are written
    in the same transaction)."""
    taken = set(entry_ids)
    items = [item for item in inbox(session) if item.get("entryId") not in taken]
    return [*(_delete(PENDING_ENTRY, e) for e in entry_ids), lane_state(session, items)]


def select(
    items: Sequence[QueuedMessage], steering_mode: str, follow_up_mode: str
) -> list[QueuedMessage]:
    """What a run's start takes (Pi's ``selectAcceptedInbox``)."""
    steer_taken = follow_up_taken = False
    selected = []
    for item in items:
        if (
            item.kind == "next_run"
            or (item.kind == "steer" and (steering_mode == "all" or not steer_taken))
            or (item.kind == "follow_up" and (follow_up_mode == "all" or not follow_up_taken))
        ):
            selected.append(item)
            steer_taken = steer_taken or item.kind == "steer"
            follow_up_taken = follow_up_taken or item.kind == "follow_up"
    return selected
