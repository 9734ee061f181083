"""Compaction's summary requests: Pi's prompts, the request itself, and :func:`compact`.

Reproduces the summarising half of Pi's ``harness/compaction/compaction.js``
(pi-agent-core 0.85.0): ``SUMMARIZATION_SYSTEM_PROMPT`` and the other prompts verbatim,
``createSummaryRequestOptions`` and ``completeSimpleWithRetries`` (one standalone
request, retried as pi-ai's ``retryAssistantCall`` does), ``generateSummary``, the
split-turn prefix summary, and ``compact``. The branch summary
(``branch-summarization.js``) makes its request through :func:`summary_request` too.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, TypeAlias, final

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
    ThinkingLevel,
    Usage,
    UserMessage,
)

from ._compaction import CompactionPreparation
from ._compaction_utils import format_file_operations, serialize_conversation
from ._entries import now_ms
from ._errors import BranchSummaryError, CompactionError
from ._js_text import content_text
from ._messages import convert_to_llm
from ._retry import RetrySettings, is_retryable

__all__ = [
    "SUMMARIZATION_PROMPT",
    "SUMMARIZATION_SYSTEM_PROMPT",
    "TURN_PREFIX_SUMMARIZATION_PROMPT",
    "UPDATE_SUMMARIZATION_PROMPT",
    "CompactionResult",
    "ResponseHook",
    "compact",
    "generate_summary",
    "raise_if_failed",
    "summary_request",
]

ResponseHook: TypeAlias = Callable[[AssistantMessage], Awaitable[object]]
"""Called with each summary request's response, before it is used."""

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
        messages=[UserMessage(content=(TextContent(text=prompt_text),), timestamp=now_ms())],
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


async def summary_request(
    stream_fn: StreamFn,
    model: Model,
    prompt_text: str,
    *,
    max_tokens: int,
    thinking_level: ThinkingLevel | None,
    stream_options: StreamOptions | None,
    signal: AbortSignal | None,
    retry: RetrySettings | None = None,
    on_response: Callable[[AssistantMessage], Awaitable[object]] | None = None,
) -> AssistantMessage:
    """A summary request, retried as pi-ai's ``retryAssistantCall`` does: a retryable
    error is tried again after ``base_delay * 2 ** (attempt - 1)`` seconds, up to
    ``max_retries`` times; an abort during the wait ends it as ``aborted``.
    ``on_response`` is awaited with each response (the harness records its usage)."""
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
        if on_response is not None:
            await on_response(response)
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
    on_response: Callable[[AssistantMessage], Awaitable[object]] | None = None,
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
    response = await summary_request(
        stream_fn,
        model,
        text,
        max_tokens=_max_tokens(model, 0.8, reserve_tokens),
        thinking_level=thinking_level,
        stream_options=stream_options,
        signal=signal,
        retry=retry,
        on_response=on_response,
    )
    raise_if_failed(response, "Summarization", CompactionError)
    return content_text(response.content), response.usage


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
    on_response: Callable[[AssistantMessage], Awaitable[object]] | None = None,
) -> tuple[str, Usage]:
    conversation = serialize_conversation(convert_to_llm(messages))
    text = f"<conversation>\n{conversation}\n</conversation>\n\n{TURN_PREFIX_SUMMARIZATION_PROMPT}"
    response = await summary_request(
        stream_fn,
        model,
        text,
        max_tokens=_max_tokens(model, 0.5, reserve_tokens),
        thinking_level=thinking_level,
        stream_options=stream_options,
        signal=signal,
        retry=retry,
        on_response=on_response,
    )
    raise_if_failed(response, "Turn prefix summarization", CompactionError)
    return content_text(response.content), response.usage


def raise_if_failed(
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
        usage: what the summary request(s) cost (``None``: a summary no request made,
            a ``before_compaction`` hook's).
        retained_tail: the recent messages kept intact.
        details: ``{"readFiles": [...], "modifiedFiles": [...]}`` (Pi's JSON names).
    """

    summary: str
    tokens_before: int
    usage: Usage | None
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
    on_response: Callable[[AssistantMessage], Awaitable[object]] | None = None,
) -> CompactionResult:
    """Summarise a prepared branch with the model (Pi's ``compact``).

    One request, or two for a split turn (the history, then the turn's prefix, joined
    under "Turn Context (split turn)"). ``stream_options`` is a template for the
    requests (API key, headers); each gets ``max_tokens`` from the reserve, no cache
    writes and a session id of its own. ``thinking_level`` applies to reasoning models.
    With ``retry`` (the harness's :class:`~pitrio.harness.RetrySettings`) a request that
    fails with a retryable error is tried again as Pi does: after ``base_delay``,
    doubling, up to ``max_retries`` times (no jitter, no server-requested delay).
    ``on_response`` is awaited with each request's response.

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
        "on_response": on_response,
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
    summary += format_file_operations(read_files, modified_files)
    return CompactionResult(
        summary=summary,
        tokens_before=preparation.tokens_before,
        usage=usage,
        retained_tail=preparation.retained_tail,
        details={"readFiles": read_files, "modifiedFiles": modified_files},
    )
