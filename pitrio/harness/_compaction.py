"""Compaction: keep a long conversation inside the model's context window.

Pi's algorithm (pi-agent-core 0.85.0, ``harness/compaction/``), step by step:

1. **Measure.** :func:`estimate_context_tokens` takes the usage the provider reported
   for the last successful assistant message and adds a character estimate (4
   characters a token) for every message after it.
2. **Decide.** :func:`should_compact`: compact when that exceeds the context window
   minus :attr:`CompactionSettings.reserve_tokens`.
3. **Cut.** :func:`prepare_compaction` walks back from the newest entry until
   :attr:`CompactionSettings.keep_recent_tokens` are kept, and cuts at the nearest
   turn boundary at or after that point: before a user, assistant or summary message,
   never before a tool result, so a tool call stays with its result. A cut inside a
   turn (after its user message) is a *split turn*: the turn's start is summarised
   separately.
4. **Summarise.** :func:`~pitrio.harness.compact` (in ``_summary``) asks the model for
   a structured summary of the older part (Pi's prompt; Pi's update prompt when an
   earlier compaction's summary exists), appends the files read and modified by
   ``read``/``write``/``edit`` tool calls, and returns what the harness writes as a
   compaction entry
   (:meth:`~pitrio.harness.Session.append_compaction`).

:func:`~pitrio.harness.is_context_overflow` (in ``_retry``) recognises a provider's
"context too long" error, after which the harness compacts and retries once.
:func:`~pitrio.harness.generate_branch_summary` (in ``_branch_summary``) summarises a
branch the conversation leaves.

This module holds steps 1 to 3, the token estimation and cut-point half of Pi's
``compaction/compaction.js`` (``estimateTokens``, ``estimateContextTokens``,
``shouldCompact``, ``findCutPoint``, ``prepareCompaction``). Token counts follow Pi's
JavaScript arithmetic: string lengths are counted in UTF-16 code units, as
``String.length`` does (``_compaction_utils``).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any, Final, final

import attrs

from pitrio import AgentMessage, AssistantMessage, TextContent, ThinkingContent, ToolCall, Usage

from ._compaction_utils import FileOperations
from ._entries import MessageEntry, SessionEntry, build_session_context
from ._js_text import js_len, json_stringify
from ._messages import BranchSummaryMessage

__all__ = [
    "CompactionPreparation",
    "CompactionSettings",
    "ContextEstimate",
    "ContextTokenCounter",
    "CutPoint",
    "calculate_context_tokens",
    "entry_message",
    "estimate_context_tokens",
    "estimate_tokens",
    "find_cut_point",
    "prepare_compaction",
    "should_compact",
]


# -- settings ----------------------------------------------------------------------------


@final
@attrs.frozen(kw_only=True)
class CompactionSettings:
    """When to compact and how much to keep (Pi's ``DEFAULT_COMPACTION_SETTINGS``).

    Attributes:
        enabled: compact automatically at all.
        reserve_tokens: room kept free in the context window for the next response;
            the summary request asks for at most 80% of it.
        keep_recent_tokens: roughly how many tokens of recent conversation stay intact.
    """

    enabled: bool = True
    reserve_tokens: int = 16384
    keep_recent_tokens: int = 20000


# -- measuring ---------------------------------------------------------------------------

_ESTIMATED_IMAGE_CHARS: Final = 4800


def calculate_context_tokens(usage: Usage) -> int:
    """The context size a response's usage implies (its total, else the sum of parts)."""
    return usage.total_tokens or (usage.input + usage.output + usage.cache_read + usage.cache_write)


def _content_chars(content: Any) -> int:
    if isinstance(content, str):
        return js_len(content)
    chars = 0
    for block in content:
        if isinstance(block, TextContent):
            chars += js_len(block.text)
        elif getattr(block, "type", None) == "image":
            chars += _ESTIMATED_IMAGE_CHARS
    return chars


def estimate_tokens(message: AgentMessage) -> int:
    """A conservative token estimate for one message: characters / 4, rounded up.

    Images count as 4,800 characters; tool calls as their name and JSON arguments;
    roles the harness does not know count 0.
    """
    role = message.role
    chars = 0
    if role == "assistant":
        for block in message.content:
            if isinstance(block, TextContent):
                chars += js_len(block.text)
            elif isinstance(block, ThinkingContent):
                chars += js_len(block.thinking)
            elif isinstance(block, ToolCall):
                chars += js_len(block.name) + js_len(json_stringify(block.arguments))
    elif role in ("user", "toolResult", "custom"):
        chars = _content_chars(_field(message, "content"))
    elif role == "bashExecution":
        chars = js_len(_field(message, "command")) + js_len(_field(message, "output"))
    elif role in ("branchSummary", "compactionSummary"):
        chars = js_len(_field(message, "summary"))
    else:
        return 0
    return math.ceil(chars / 4)


def _field(message: Any, name: str) -> Any:
    """A field of a typed message, or of a :class:`pitrio.CustomMessage` with that role."""
    if hasattr(message, "fields"):
        return message.fields.get(name, "")
    return getattr(message, name)


def _assistant_usage(message: AgentMessage) -> Usage | None:
    if (
        isinstance(message, AssistantMessage)
        and message.stop_reason not in ("aborted", "error")
        and calculate_context_tokens(message.usage) > 0
    ):
        return message.usage
    return None


@final
@attrs.frozen(kw_only=True)
class ContextEstimate:
    """How big a context is, in tokens.

    Attributes:
        tokens: the estimate, ``usage_tokens + trailing_tokens``.
        usage_tokens: what the provider reported for the last successful response.
        trailing_tokens: the character estimate of the messages after it.
        last_usage_index: the index of that response (``None``: no usage, all estimated).
    """

    tokens: int
    usage_tokens: int
    trailing_tokens: int
    last_usage_index: int | None


def estimate_context_tokens(messages: Sequence[AgentMessage]) -> ContextEstimate:
    """Pi's ``estimateContextTokens``: reported usage plus estimates for what follows."""
    for index in range(len(messages) - 1, -1, -1):
        usage = _assistant_usage(messages[index])
        if usage is not None:
            usage_tokens = calculate_context_tokens(usage)
            trailing = sum(estimate_tokens(m) for m in messages[index + 1 :])
            return ContextEstimate(
                tokens=usage_tokens + trailing,
                usage_tokens=usage_tokens,
                trailing_tokens=trailing,
                last_usage_index=index,
            )
    estimated = sum(estimate_tokens(m) for m in messages)
    return ContextEstimate(
        tokens=estimated, usage_tokens=0, trailing_tokens=estimated, last_usage_index=None
    )


@final
class ContextTokenCounter:
    """:func:`estimate_context_tokens` for a transcript that grows, at the cost of what
    was added since the last call (the harness checks the compaction threshold every
    turn; a full estimate would cost a walk over the whole transcript each time).

    It remembers the messages it last measured (by identity: messages are not changed
    once they are in a transcript) with a running sum of their estimates and where the
    reported usages are. Given the same list again, grown at its end or cut short, it
    estimates only the new messages; given another list (the agent's transcript was
    replaced: a compaction, a resume, a move to another branch), it first checks how
    much of it is the list it knew, at C speed, and estimates the rest. An element of
    the same list replaced in place, in its middle, is not seen: replace the list.
    """

    __slots__ = ("_list", "_messages", "_sums", "_usages")

    def __init__(self) -> None:
        self._list: Sequence[AgentMessage] | None = None
        self._messages: list[AgentMessage] = []
        self._sums: list[int] = [0]  # _sums[i]: the estimates of _messages[:i]
        self._usages: list[tuple[int, int]] = []  # (index, context tokens), increasing

    def estimate(self, messages: Sequence[AgentMessage]) -> ContextEstimate:
        """The same :class:`ContextEstimate` as ``estimate_context_tokens(messages)``."""
        seen = self._messages
        count = len(messages)
        keep = min(count, len(seen))
        if keep and (
            messages is not self._list
            or messages[keep - 1] is not seen[keep - 1]
            or messages[0] is not seen[0]
        ):
            # Another list, or this one changed other than at its end: how much of it
            # is what was measured before.
            same = list(map(operator.is_, messages[:keep], seen[:keep]))
            keep = same.index(False) if False in same else keep
        self._list = messages
        if keep < len(seen):
            del seen[keep:]
            del self._sums[keep + 1 :]
            usages = self._usages
            while usages and usages[-1][0] >= keep:
                usages.pop()
        sums = self._sums
        for index in range(keep, count):
            message = messages[index]
            seen.append(message)
            sums.append(sums[-1] + estimate_tokens(message))
            usage = _assistant_usage(message)
            if usage is not None:
                self._usages.append((index, calculate_context_tokens(usage)))
        if self._usages:
            index, usage_tokens = self._usages[-1]
            trailing = sums[count] - sums[index + 1]
            return ContextEstimate(
                tokens=usage_tokens + trailing,
                usage_tokens=usage_tokens,
                trailing_tokens=trailing,
                last_usage_index=index,
            )
        return ContextEstimate(
            tokens=sums[count], usage_tokens=0, trailing_tokens=sums[count], last_usage_index=None
        )


def should_compact(context_tokens: int, context_window: int, settings: CompactionSettings) -> bool:
    """Whether a context of ``context_tokens`` leaves less than ``reserve_tokens`` free."""
    if not settings.enabled:
        return False
    return context_tokens > context_window - settings.reserve_tokens


# -- cut points ---------------------------------------------------------------------------

_CUT_ROLES: Final = frozenset(
    {"bashExecution", "custom", "branchSummary", "compactionSummary", "user", "assistant"}
)


def _valid_cut_points(entries: Sequence[SessionEntry], start: int, end: int) -> list[int]:
    points = []
    for index in range(start, end):
        entry = entries[index]
        if entry.type == "branch_summary" or (
            entry.type == "message" and entry.message.role in _CUT_ROLES
        ):
            points.append(index)
    return points


def _turn_start_index(entries: Sequence[SessionEntry], entry_index: int, start: int) -> int:
    """The entry starting the turn that contains ``entry_index`` (-1: none)."""
    for index in range(entry_index, start - 1, -1):
        entry = entries[index]
        if entry.type == "branch_summary":
            return index
        if entry.type == "message" and entry.message.role in ("user", "bashExecution"):
            return index
    return -1


@final
@attrs.frozen(kw_only=True)
class CutPoint:
    """Where a compaction cuts a branch.

    Attributes:
        first_kept_entry_index: the first entry kept intact.
        turn_start_index: the start of the turn the cut falls into (-1 unless split).
        is_split_turn: the cut falls after a turn's start (its prefix is summarised).
    """

    first_kept_entry_index: int
    turn_start_index: int
    is_split_turn: bool


def find_cut_point(
    entries: Sequence[SessionEntry], start: int, end: int, keep_recent_tokens: int
) -> CutPoint:
    """Pi's ``findCutPoint``: keep about ``keep_recent_tokens`` of ``entries[start:end]``.

    Walks back from ``end`` adding message estimates; at the first entry where the
    total reaches the budget, the cut moves forward to the next valid cut point (never
    before a tool result), then back over non-message entries just before it.
    """
    points = _valid_cut_points(entries, start, end)
    if not points:
        return CutPoint(first_kept_entry_index=start, turn_start_index=-1, is_split_turn=False)
    accumulated = 0
    cut = points[0]
    for index in range(end - 1, start - 1, -1):
        entry = entries[index]
        if entry.type != "message":
            continue
        accumulated += estimate_tokens(entry.message)
        if accumulated >= keep_recent_tokens:
            for point in points:
                if point >= index:
                    cut = point
                    break
            break
    while cut > start:
        previous = entries[cut - 1]
        if previous.type in ("compaction", "message"):
            break
        cut -= 1
    cut_entry = entries[cut]
    is_user = cut_entry.type == "message" and cut_entry.message.role == "user"
    turn_start = -1 if is_user else _turn_start_index(entries, cut, start)
    return CutPoint(
        first_kept_entry_index=cut,
        turn_start_index=turn_start,
        is_split_turn=not is_user and turn_start != -1,
    )


# -- preparing --------------------------------------------------------------------------


@final
@attrs.frozen(kw_only=True)
class CompactionPreparation:
    """What :func:`compact` summarises and what it keeps (from :func:`prepare_compaction`).

    Attributes:
        messages_to_summarize: the older messages the summary replaces.
        turn_prefix_messages: in a split turn, the turn's start (summarised apart).
        retained_tail: the recent messages kept intact after the summary.
        is_split_turn: the cut falls inside a turn.
        tokens_before: the context size now (estimated), recorded in the entry.
        previous_summary: the last compaction's summary, updated rather than redone.
        file_ops: the files read and modified so far (carried across compactions).
        settings: the settings used.
    """

    messages_to_summarize: tuple[AgentMessage, ...]
    turn_prefix_messages: tuple[AgentMessage, ...]
    retained_tail: tuple[AgentMessage, ...]
    is_split_turn: bool
    tokens_before: int
    previous_summary: str | None
    file_ops: FileOperations
    settings: CompactionSettings


def entry_message(entry: SessionEntry) -> AgentMessage | None:
    """An entry as a message, for compaction (compaction entries are left out)."""
    if entry.type == "message":
        return entry.message
    if entry.type == "branch_summary":
        return BranchSummaryMessage(
            summary=entry.summary, from_id=entry.from_id, timestamp=entry.timestamp
        )
    return None


def prepare_compaction(
    path: Sequence[SessionEntry], settings: CompactionSettings = CompactionSettings()
) -> CompactionPreparation | None:
    """Pi's ``prepareCompaction`` for a branch (``path``: its entries, root first).

    ``None`` when there is nothing to compact (an empty branch, or one that ends with
    a compaction). After an earlier compaction only its retained tail and what follows
    are candidates, and its summary is passed on to be updated.
    """
    if not path or path[-1].type == "compaction":
        return None
    previous_index = -1
    for index in range(len(path) - 1, -1, -1):
        if path[index].type == "compaction":
            previous_index = index
            break
    previous_summary: str | None = None
    entries: list[SessionEntry] = list(path)
    file_ops = FileOperations()
    if previous_index >= 0:
        previous = path[previous_index]
        assert previous.type == "compaction"
        previous_summary = previous.summary
        file_ops.add_details(previous.details)
        virtual: list[SessionEntry] = []
        for index, message in enumerate(previous.retained_tail):
            virtual.append(
                MessageEntry(
                    id=f"{previous.id}:retained:{index}",
                    parent_id=previous.id if index == 0 else f"{previous.id}:retained:{index - 1}",
                    seq=previous.seq,
                    timestamp=getattr(message, "timestamp", 0),
                    message=message,
                )
            )
        entries = [*virtual, *path[previous_index + 1 :]]
    end = len(entries)
    tokens_before = estimate_context_tokens(build_session_context(path)).tokens
    cut = find_cut_point(entries, 0, end, settings.keep_recent_tokens)
    history_end = cut.turn_start_index if cut.is_split_turn else cut.first_kept_entry_index

    def messages(start: int, stop: int) -> tuple[AgentMessage, ...]:
        found = (entry_message(entries[i]) for i in range(start, stop))
        return tuple(m for m in found if m is not None)

    to_summarize = messages(0, history_end)
    prefix = messages(cut.turn_start_index, cut.first_kept_entry_index) if cut.is_split_turn else ()
    for message in (*to_summarize, *prefix):
        file_ops.add_from(message)
    return CompactionPreparation(
        messages_to_summarize=to_summarize,
        turn_prefix_messages=prefix,
        retained_tail=messages(cut.first_kept_entry_index, end),
        is_split_turn=cut.is_split_turn,
        tokens_before=tokens_before,
        previous_summary=previous_summary,
        file_ops=file_ops,
        settings=settings,
    )
