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
4. **Summarise.** :func:`compact` asks the model for a structured summary of the older
   part (Pi's prompt; Pi's update prompt when an earlier compaction's summary exists),
   appends the files read and modified by ``read``/``write``/``edit`` tool calls, and
   returns what the harness writes as a compaction entry
   (:meth:`~pitrio.harness.Session.append_compaction`).

:func:`~pitrio.harness.is_context_overflow` (in ``_retry``) recognises a provider's
"context too long" error, after which the harness compacts and retries once.
:func:`generate_branch_summary` summarises a branch the conversation leaves.

Token counts follow Pi's JavaScript arithmetic: string lengths are counted in UTF-16
code units, as ``String.length`` does.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, final

import attrs
import trio

from pitrio import (
    AbortSignal,
    AgentMessage,
    AssistantMessage,
    Context,
    Cost,
    EventStream,
    Model,
    StreamFn,
    StreamOptions,
    TextContent,
    ThinkingContent,
    ThinkingLevel,
    ToolCall,
    Usage,
    UserMessage,
)

from ._entries import MessageEntry, SessionEntry, build_session_context
from ._errors import BranchSummaryError, CompactionError
from ._messages import BranchSummaryMessage, CompactionSummaryMessage, convert_to_llm
from ._retry import RetrySettings, is_retryable

__all__ = [
    "BRANCH_SUMMARY_PROMPT",
    "SUMMARIZATION_PROMPT",
    "SUMMARIZATION_SYSTEM_PROMPT",
    "TURN_PREFIX_SUMMARIZATION_PROMPT",
    "UPDATE_SUMMARIZATION_PROMPT",
    "BranchPreparation",
    "BranchSummaryError",
    "BranchSummaryResult",
    "CompactionError",
    "CompactionPreparation",
    "CompactionResult",
    "CompactionSettings",
    "ContextEstimate",
    "CutPoint",
    "FileOperations",
    "calculate_context_tokens",
    "collect_entries_for_branch_summary",
    "compact",
    "estimate_context_tokens",
    "estimate_tokens",
    "find_cut_point",
    "generate_branch_summary",
    "generate_summary",
    "prepare_branch_entries",
    "prepare_compaction",
    "serialize_conversation",
    "should_compact",
]


# -- settings and errors ------------------------------------------------------------------


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


# -- JavaScript string arithmetic ---------------------------------------------------------


def _js_len(text: str) -> int:
    """``String.length``: UTF-16 code units."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le")) // 2


def _js_slice(text: str, end: int) -> str:
    """``text.slice(0, end)`` in UTF-16 code units, except that a surrogate pair cut in
    half is dropped rather than left as a lone surrogate (which cannot be sent as UTF-8)."""
    if text.isascii():
        return text[:end]
    return text.encode("utf-16-le", "surrogatepass")[: 2 * end].decode("utf-16-le", "ignore")


def _json_stringify(value: Any) -> str:
    """``JSON.stringify`` (compact, non-ASCII kept), or ``"[unserializable]"``."""
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        return "[unserializable]"


def _content_text(content: Any, separator: str = "\n") -> str:
    """pi-ai's ``contentText``: the text blocks joined."""
    if isinstance(content, str):
        return content
    return separator.join(b.text for b in content if isinstance(b, TextContent))


# -- measuring ---------------------------------------------------------------------------

_ESTIMATED_IMAGE_CHARS: Final = 4800


def calculate_context_tokens(usage: Usage) -> int:
    """The context size a response's usage implies (its total, else the sum of parts)."""
    return usage.total_tokens or (usage.input + usage.output + usage.cache_read + usage.cache_write)


def _content_chars(content: Any) -> int:
    if isinstance(content, str):
        return _js_len(content)
    chars = 0
    for block in content:
        if isinstance(block, TextContent):
            chars += _js_len(block.text)
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
                chars += _js_len(block.text)
            elif isinstance(block, ThinkingContent):
                chars += _js_len(block.thinking)
            elif isinstance(block, ToolCall):
                chars += _js_len(block.name) + _js_len(_json_stringify(block.arguments))
    elif role in ("user", "toolResult", "custom"):
        chars = _content_chars(_field(message, "content"))
    elif role == "bashExecution":
        chars = _js_len(_field(message, "command")) + _js_len(_field(message, "output"))
    elif role in ("branchSummary", "compactionSummary"):
        chars = _js_len(_field(message, "summary"))
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


def should_compact(context_tokens: int, context_window: int, settings: CompactionSettings) -> bool:
    """Whether a context of ``context_tokens`` leaves less than ``reserve_tokens`` free."""
    if not settings.enabled:
        return False
    return context_tokens > context_window - settings.reserve_tokens


# -- file operations ----------------------------------------------------------------------


@final
@attrs.define
class FileOperations:
    """Paths touched by ``read``, ``write`` and ``edit`` tool calls."""

    read: set[str] = attrs.field(factory=set)
    written: set[str] = attrs.field(factory=set)
    edited: set[str] = attrs.field(factory=set)

    def add_from(self, message: AgentMessage) -> None:
        """Record the paths of an assistant message's tool calls."""
        if not isinstance(message, AssistantMessage):
            return
        for block in message.content:
            if not isinstance(block, ToolCall) or not isinstance(block.arguments, Mapping):
                continue
            path = block.arguments.get("path")
            if not isinstance(path, str) or not path:
                continue
            if block.name == "read":
                self.read.add(path)
            elif block.name == "write":
                self.written.add(path)
            elif block.name == "edit":
                self.edited.add(path)

    def add_details(self, details: Any) -> None:
        """Carry over the lists of an earlier compaction's or branch summary's details."""
        if not isinstance(details, Mapping):
            return
        for key, target in (("readFiles", self.read), ("modifiedFiles", self.edited)):
            paths = details.get(key)
            if isinstance(paths, list):
                target.update(p for p in paths if isinstance(p, str))

    def file_lists(self) -> tuple[list[str], list[str]]:
        """``(read_only, modified)``, each sorted; a modified file is not listed as read."""
        modified = self.edited | self.written
        return sorted(self.read - modified), sorted(modified)


def _format_file_operations(read_files: list[str], modified_files: list[str]) -> str:
    sections = []
    if read_files:
        sections.append("<read-files>\n" + "\n".join(read_files) + "\n</read-files>")
    if modified_files:
        sections.append("<modified-files>\n" + "\n".join(modified_files) + "\n</modified-files>")
    if not sections:
        return ""
    return "\n\n" + "\n\n".join(sections)


# -- serialising a conversation for the summary prompt ------------------------------------

_TOOL_RESULT_MAX_CHARS: Final = 2000


def _truncate_for_summary(text: str, max_chars: int) -> str:
    length = _js_len(text)
    if length <= max_chars:
        return text
    return f"{_js_slice(text, max_chars)}\n\n[... {length - max_chars} more characters truncated]"


def serialize_conversation(messages: Iterable[AgentMessage]) -> str:
    """LLM messages as the plain text the summary prompt quotes (Pi's format:
    ``[User]: ...``, ``[Assistant thinking]: ...``, ``[Assistant]: ...``,
    ``[Assistant tool calls]: name(k=json, ...)``, ``[Tool result]: ...`` cut at 2,000
    characters)."""
    parts: list[str] = []
    for message in messages:
        role = message.role
        if role == "user":
            text = _content_text(message.content, "")
            if text:
                parts.append(f"[User]: {text}")
        elif role == "assistant":
            thinking = [b.thinking for b in message.content if isinstance(b, ThinkingContent)]
            calls = [
                f"{b.name}("
                + ", ".join(f"{k}={_json_stringify(v)}" for k, v in b.arguments.items())
                + ")"
                for b in message.content
                if isinstance(b, ToolCall)
            ]
            if thinking:
                parts.append("[Assistant thinking]: " + "\n".join(thinking))
            if any(isinstance(b, TextContent) for b in message.content):
                parts.append(f"[Assistant]: {_content_text(message.content)}")
            if calls:
                parts.append("[Assistant tool calls]: " + "; ".join(calls))
        elif role == "toolResult":
            text = _content_text(message.content, "")
            if text:
                parts.append(
                    f"[Tool result]: {_truncate_for_summary(text, _TOOL_RESULT_MAX_CHARS)}"
                )
    return "\n\n".join(parts)


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


def _entry_message(entry: SessionEntry) -> AgentMessage | None:
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
        found = (_entry_message(entries[i]) for i in range(start, stop))
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


# -- summarising -------------------------------------------------------------------------

SUMMARIZATION_SYSTEM_PROMPT: Final = """You are a context summarization assistant. Your task is to read a conversation between a user and an AI assistant, then produce a structured summary following the exact format specified.

Do NOT continue the conversation. Do NOT respond to any questions in the conversation. ONLY output the structured summary."""  # noqa: E501

SUMMARIZATION_PROMPT: Final = """The messages above are a conversation to summarize. Create a structured context checkpoint summary that another LLM will use to continue the work.

Use this EXACT format:

## Goal
[What is the user trying to accomplish? Can be multiple items if the session covers different tasks.]

## Constraints & Preferences
- [Any constraints, preferences, or requirements mentioned by user]
- [Or "(none)" if none were mentioned]

## Progress
### Done
- [x] [Completed tasks/changes]

### In Progress
- [ ] [Current work]

### Blocked
- [Issues preventing progress, if any]

## Key Decisions
- **[Decision]**: [Brief rationale]

## Next Steps
1. [Ordered list of what should happen next]

## Critical Context
- [Any data, examples, or references needed to continue]
- [Or "(none)" if not applicable]

Keep each section concise. Preserve exact file paths, function names, and error messages."""  # noqa: E501

UPDATE_SUMMARIZATION_PROMPT: Final = """The messages above are NEW conversation messages to incorporate into the existing summary provided in <previous-summary> tags.

Update the existing structured summary with new information. RULES:
- PRESERVE all existing information from the previous summary
- ADD new progress, decisions, and context from the new messages
- UPDATE the Progress section: move items from "In Progress" to "Done" when completed
- UPDATE "Next Steps" based on what was accomplished
- PRESERVE exact file paths, function names, and error messages
- If something is no longer relevant, you may remove it

Use this EXACT format:

## Goal
[Preserve existing goals, add new ones if the task expanded]

## Constraints & Preferences
- [Preserve existing, add new ones discovered]

## Progress
### Done
- [x] [Include previously done items AND newly completed items]

### In Progress
- [ ] [Current work - update based on progress]

### Blocked
- [Current blockers - remove if resolved]

## Key Decisions
- **[Decision]**: [Brief rationale] (preserve all previous, add new)

## Next Steps
1. [Update based on current state]

## Critical Context
- [Preserve important context, add new if needed]

Keep each section concise. Preserve exact file paths, function names, and error messages."""  # noqa: E501

TURN_PREFIX_SUMMARIZATION_PROMPT: Final = """This is the PREFIX of a turn that was too large to keep. The SUFFIX (recent work) is retained.

Summarize the prefix to provide context for the retained suffix:

## Original Request
[What did the user ask for in this turn?]

## Early Progress
- [Key decisions and work done in the prefix]

## Context for Suffix
- [Information needed to understand the retained recent work]

Be concise. Focus on what's needed to understand the kept suffix."""  # noqa: E501


async def _request_once(
    stream_fn: StreamFn,
    model: Model,
    prompt_text: str,
    *,
    max_tokens: int,
    thinking_level: ThinkingLevel | None,
    stream_options: StreamOptions | None,
    signal: AbortSignal | None,
) -> AssistantMessage:
    """One standalone summary request (no cache writes, its own session id), streamed
    to its final message."""
    template = stream_options if stream_options is not None else StreamOptions()
    reasoning = thinking_level if model.reasoning and thinking_level not in (None, "off") else None
    options = attrs.evolve(
        template,
        signal=signal,
        max_tokens=max_tokens,
        reasoning=reasoning,
        cache_retention="none",
        session_id=template.session_id or str(uuid.uuid4()),
    )
    context = Context(
        system_prompt=SUMMARIZATION_SYSTEM_PROMPT,
        messages=[
            UserMessage(content=(TextContent(text=prompt_text),), timestamp=int(time.time() * 1000))
        ],
    )
    returned = stream_fn(model, context, options)
    stream = returned if isinstance(returned, EventStream) else await returned
    remove = signal.add_callback(stream.cancel) if signal is not None else None
    try:
        if stream.has_producer:
            async with stream:
                async for _ in stream:
                    pass
        else:
            async for _ in stream:
                pass
        return await stream.result()
    finally:
        if remove is not None:
            remove()


async def _request(
    stream_fn: StreamFn,
    model: Model,
    prompt_text: str,
    *,
    max_tokens: int,
    thinking_level: ThinkingLevel | None,
    stream_options: StreamOptions | None,
    signal: AbortSignal | None,
    retry: RetrySettings | None = None,
) -> AssistantMessage:
    """A summary request, retried as pi-ai's ``retryAssistantCall`` does: a retryable
    error is tried again after ``base_delay * 2 ** (attempt - 1)`` seconds, up to
    ``max_retries`` times; an abort during the wait ends it as ``aborted``."""
    attempt = 0
    while True:
        response = await _request_once(
            stream_fn,
            model,
            prompt_text,
            max_tokens=max_tokens,
            thinking_level=thinking_level,
            stream_options=stream_options,
            signal=signal,
        )
        if (
            response.stop_reason != "error"
            or retry is None
            or not retry.enabled
            or attempt >= retry.max_retries
            or not is_retryable(response)
        ):
            return response
        attempt += 1
        with trio.CancelScope() as scope:
            remove = signal.add_callback(scope.cancel) if signal is not None else None
            try:
                await trio.sleep(retry.base_delay * 2 ** (attempt - 1))
            finally:
                if remove is not None:
                    remove()
        if scope.cancelled_caught:
            return attrs.evolve(response, stop_reason="aborted", error_message=None)


def _max_tokens(model: Model, fraction: float, reserve_tokens: int) -> int:
    limit = math.floor(fraction * reserve_tokens)
    return min(limit, model.max_tokens) if model.max_tokens > 0 else limit


async def generate_summary(
    messages: Sequence[AgentMessage],
    *,
    stream_fn: StreamFn,
    model: Model,
    reserve_tokens: int = 16384,
    custom_instructions: str | None = None,
    previous_summary: str | None = None,
    thinking_level: ThinkingLevel | None = None,
    stream_options: StreamOptions | None = None,
    signal: AbortSignal | None = None,
    retry: RetrySettings | None = None,
) -> tuple[str, Usage]:
    """Ask the model to summarise ``messages`` (or to update ``previous_summary`` with
    them), with Pi's prompts. Returns the summary text and the request's usage.

    Raises:
        CompactionError: the request ended with an error or was aborted.
    """
    prompt = UPDATE_SUMMARIZATION_PROMPT if previous_summary else SUMMARIZATION_PROMPT
    if custom_instructions:
        prompt = f"{prompt}\n\nAdditional focus: {custom_instructions}"
    text = (
        f"<conversation>\n{serialize_conversation(convert_to_llm(messages))}\n</conversation>\n\n"
    )
    if previous_summary:
        text += f"<previous-summary>\n{previous_summary}\n</previous-summary>\n\n"
    text += prompt
    response = await _request(
        stream_fn,
        model,
        text,
        max_tokens=_max_tokens(model, 0.8, reserve_tokens),
        thinking_level=thinking_level,
        stream_options=stream_options,
        signal=signal,
        retry=retry,
    )
    _raise_if_failed(response, "Summarization", CompactionError)
    return _content_text(response.content), response.usage


async def _turn_prefix_summary(
    messages: Sequence[AgentMessage],
    *,
    stream_fn: StreamFn,
    model: Model,
    reserve_tokens: int,
    thinking_level: ThinkingLevel | None,
    stream_options: StreamOptions | None,
    signal: AbortSignal | None,
    retry: RetrySettings | None = None,
) -> tuple[str, Usage]:
    conversation = serialize_conversation(convert_to_llm(messages))
    text = f"<conversation>\n{conversation}\n</conversation>\n\n{TURN_PREFIX_SUMMARIZATION_PROMPT}"
    response = await _request(
        stream_fn,
        model,
        text,
        max_tokens=_max_tokens(model, 0.5, reserve_tokens),
        thinking_level=thinking_level,
        stream_options=stream_options,
        signal=signal,
        retry=retry,
    )
    _raise_if_failed(response, "Turn prefix summarization", CompactionError)
    return _content_text(response.content), response.usage


def _raise_if_failed(
    response: AssistantMessage,
    what: str,
    error: type[CompactionError] | type[BranchSummaryError],
) -> None:
    """Pi's texts for a summary request that was aborted or failed."""
    if response.stop_reason == "aborted":
        raise error(response.error_message or f"{what} aborted", reason="aborted")
    if response.stop_reason == "error":
        msg = f"{what} failed: {response.error_message or 'Unknown error'}"
        raise error(msg, reason="summarization_failed")


def _add_usage(a: Usage, b: Usage) -> Usage:
    return Usage(
        input=a.input + b.input,
        output=a.output + b.output,
        cache_read=a.cache_read + b.cache_read,
        cache_write=a.cache_write + b.cache_write,
        total_tokens=a.total_tokens + b.total_tokens,
        cost=Cost(
            input=a.cost.input + b.cost.input,
            output=a.cost.output + b.cost.output,
            cache_read=a.cost.cache_read + b.cost.cache_read,
            cache_write=a.cost.cache_write + b.cost.cache_write,
            total=a.cost.total + b.cost.total,
        ),
    )


@final
@attrs.frozen(kw_only=True)
class CompactionResult:
    """What to write as the compaction entry::

        await session.append_compaction(
            result.summary, tokens_before=result.tokens_before,
            retained_tail=result.retained_tail, details=result.details, usage=result.usage)

    Attributes:
        summary: the summary, ending with ``<read-files>``/``<modified-files>`` lists.
        tokens_before: the context size before compacting.
        usage: what the summary request(s) cost.
        retained_tail: the recent messages kept intact.
        details: ``{"readFiles": [...], "modifiedFiles": [...]}`` (Pi's JSON names).
    """

    summary: str
    tokens_before: int
    usage: Usage
    retained_tail: tuple[AgentMessage, ...]
    details: dict[str, list[str]]

    @property
    def read_files(self) -> list[str]:
        """Files read (and not modified) in the summarised part, sorted."""
        return self.details["readFiles"]

    @property
    def modified_files(self) -> list[str]:
        """Files written or edited in the summarised part, sorted."""
        return self.details["modifiedFiles"]


async def compact(
    preparation: CompactionPreparation,
    *,
    stream_fn: StreamFn,
    model: Model,
    custom_instructions: str | None = None,
    thinking_level: ThinkingLevel | None = None,
    stream_options: StreamOptions | None = None,
    signal: AbortSignal | None = None,
    retry: RetrySettings | None = None,
) -> CompactionResult:
    """Summarise a prepared branch with the model (Pi's ``compact``).

    One request, or two for a split turn (the history, then the turn's prefix, joined
    under "Turn Context (split turn)"). ``stream_options`` is a template for the
    requests (API key, headers); each gets ``max_tokens`` from the reserve, no cache
    writes and a session id of its own. ``thinking_level`` applies to reasoning models.
    With ``retry`` (the harness's :class:`~pitrio.harness.RetrySettings`) a request that
    fails with a retryable error is tried again as Pi does: after ``base_delay``,
    doubling, up to ``max_retries`` times (no jitter, no server-requested delay).

    Raises:
        CompactionError: a summary request failed or was aborted (through ``signal``).
    """
    settings = preparation.settings
    common: dict[str, Any] = {
        "stream_fn": stream_fn,
        "model": model,
        "reserve_tokens": settings.reserve_tokens,
        "thinking_level": thinking_level,
        "stream_options": stream_options,
        "signal": signal,
        "retry": retry,
    }
    if preparation.is_split_turn and preparation.turn_prefix_messages:
        history = "No prior history."
        history_usage: Usage | None = None
        if preparation.messages_to_summarize:
            history, history_usage = await generate_summary(
                preparation.messages_to_summarize,
                custom_instructions=custom_instructions,
                previous_summary=preparation.previous_summary,
                **common,
            )
        prefix, prefix_usage = await _turn_prefix_summary(
            preparation.turn_prefix_messages, **common
        )
        summary = f"{history}\n\n---\n\n**Turn Context (split turn):**\n\n{prefix}"
        usage = _add_usage(history_usage, prefix_usage) if history_usage else prefix_usage
    else:
        summary, usage = await generate_summary(
            preparation.messages_to_summarize,
            custom_instructions=custom_instructions,
            previous_summary=preparation.previous_summary,
            **common,
        )
    read_files, modified_files = preparation.file_ops.file_lists()
    summary += _format_file_operations(read_files, modified_files)
    return CompactionResult(
        summary=summary,
        tokens_before=preparation.tokens_before,
        usage=usage,
        retained_tail=preparation.retained_tail,
        details={"readFiles": read_files, "modifiedFiles": modified_files},
    )


# -- branch summaries --------------------------------------------------------------------

BRANCH_SUMMARY_PREAMBLE: Final = (
    "The user explored a different conversation branch before returning here.\n"
    "Summary of that exploration:\n\n"
)

BRANCH_SUMMARY_PROMPT: Final = """Create a structured summary of this conversation branch for context when returning later.

Use this EXACT format:

## Goal
[What was the user trying to accomplish in this branch?]

## Constraints & Preferences
- [Any constraints, preferences, or requirements mentioned]
- [Or "(none)" if none were mentioned]

## Progress
### Done
- [x] [Completed tasks/changes]

### In Progress
- [ ] [Work that was started but not finished]

### Blocked
- [Issues preventing progress, if any]

## Key Decisions
- **[Decision]**: [Brief rationale]

## Next Steps
1. [What should happen next to continue this work]

Keep each section concise. Preserve exact file paths, function names, and error messages."""  # noqa: E501


def collect_entries_for_branch_summary(
    session: Any, old_tip_id: str | None, target_id: str
) -> tuple[list[SessionEntry], str | None]:
    """The entries to summarise when moving from ``old_tip_id`` to ``target_id``, and
    their common ancestor (Pi's ``collectEntriesForBranchSummary``).

    The entries run from just after the common ancestor down to the old tip, oldest
    first; nothing when there was no old tip. ``session`` is a
    :class:`~pitrio.harness.Session` (anything with ``get_branch(leaf_id)``).
    """
    if not old_tip_id:
        return [], None
    old_path = session.get_branch(old_tip_id)
    old_ids = {e.id for e in old_path}
    common: str | None = None
    for entry in reversed(session.get_branch(target_id)):
        if entry.id in old_ids:
            common = entry.id
            break
    entries: list[SessionEntry] = []
    for entry in reversed(old_path):
        if entry.id == common:
            break
        entries.append(entry)
    entries.reverse()
    return entries, common


@final
@attrs.frozen(kw_only=True)
class BranchPreparation:
    """The newest messages of a branch that fit the budget, and the files it touched."""

    messages: tuple[AgentMessage, ...]
    file_ops: FileOperations
    total_tokens: int


def _branch_entry_message(entry: SessionEntry) -> AgentMessage | None:
    if entry.type == "message":
        return None if entry.message.role == "toolResult" else entry.message
    if entry.type == "compaction":
        return CompactionSummaryMessage(
            summary=entry.summary, tokens_before=entry.tokens_before, timestamp=entry.timestamp
        )
    return _entry_message(entry)


def prepare_branch_entries(
    entries: Sequence[SessionEntry], token_budget: int = 0
) -> BranchPreparation:
    """Pi's ``prepareBranchEntries``: the newest messages of ``entries`` within
    ``token_budget`` (0: all), tool results left out; an older summary that does not
    fit is still kept while the budget is under 90% used."""
    file_ops = FileOperations()
    for entry in entries:
        if entry.type == "branch_summary":
            file_ops.add_details(entry.details)
    kept: list[AgentMessage] = []
    total = 0
    for entry in reversed(entries):
        message = _branch_entry_message(entry)
        if message is None:
            continue
        file_ops.add_from(message)
        tokens = estimate_tokens(message)
        if token_budget > 0 and total + tokens > token_budget:
            if entry.type in ("compaction", "branch_summary") and total < token_budget * 0.9:
                kept.append(message)
                total += tokens
            break
        kept.append(message)
        total += tokens
    kept.reverse()
    return BranchPreparation(messages=tuple(kept), file_ops=file_ops, total_tokens=total)


@final
@attrs.frozen(kw_only=True)
class BranchSummaryResult:
    """A branch summary, for :meth:`~pitrio.harness.Session.append_branch_summary`
    (``details={"readFiles": result.read_files, "modifiedFiles": result.modified_files}``)."""

    summary: str
    usage: Usage | None
    read_files: list[str]
    modified_files: list[str]


async def generate_branch_summary(
    entries: Sequence[SessionEntry],
    *,
    stream_fn: StreamFn,
    model: Model,
    custom_instructions: str | None = None,
    replace_instructions: bool = False,
    reserve_tokens: int = 16384,
    stream_options: StreamOptions | None = None,
    signal: AbortSignal | None = None,
    retry: RetrySettings | None = None,
) -> BranchSummaryResult:
    """Summarise the entries of a branch being left (Pi's ``generateBranchSummary``).

    The newest entries that fit the context window minus ``reserve_tokens`` are
    summarised with Pi's branch prompt (``custom_instructions`` added as an "Additional
    focus", or used instead with ``replace_instructions``).

    Raises:
        BranchSummaryError: the request failed or was aborted.
    """
    window = model.context_window or 128_000
    preparation = prepare_branch_entries(entries, window - reserve_tokens)
    if not preparation.messages:
        return BranchSummaryResult(
            summary="No content to summarize", usage=None, read_files=[], modified_files=[]
        )
    conversation = serialize_conversation(convert_to_llm(preparation.messages))
    if replace_instructions and custom_instructions:
        instructions = custom_instructions
    elif custom_instructions:
        instructions = f"{BRANCH_SUMMARY_PROMPT}\n\nAdditional focus: {custom_instructions}"
    else:
        instructions = BRANCH_SUMMARY_PROMPT
    response = await _request(
        stream_fn,
        model,
        f"<conversation>\n{conversation}\n</conversation>\n\n{instructions}",
        max_tokens=2048,
        thinking_level=None,
        stream_options=stream_options,
        signal=signal,
        retry=retry,
    )
    _raise_if_failed(response, "Branch summary", BranchSummaryError)
    read_files, modified_files = preparation.file_ops.file_lists()
    summary = BRANCH_SUMMARY_PREAMBLE + _content_text(response.content)
    summary += _format_file_operations(read_files, modified_files)
    return BranchSummaryResult(
        summary=summary or "No summary generated",
        usage=response.usage,
        read_files=read_files,
        modified_files=modified_files,
    )
