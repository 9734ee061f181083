"""Branch summaries: what the conversation leaves behind when it moves to another branch.

Reproduces Pi's ``harness/compaction/branch-summarization.js`` (pi-agent-core 0.85.0):
``collectEntriesForBranchSummary``, ``prepareBranchEntries`` (the newest entries within
a token budget) and ``generateBranchSummary`` with Pi's prompt and preamble.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, final

import attrs

from pitrio import (
    AbortSignal,
    AgentMessage,
    AssistantMessage,
    Model,
    StreamFn,
    StreamOptions,
    Usage,
)

from ._compaction import entry_message, estimate_tokens
from ._compaction_utils import FileOperations, format_file_operations, serialize_conversation
from ._entries import SessionEntry
from ._errors import BranchSummaryError
from ._js_text import content_text
from ._messages import CompactionSummaryMessage, convert_to_llm
from ._retry import RetrySettings
from ._summary import raise_if_failed, summary_request

__all__ = [
    "BRANCH_SUMMARY_PREAMBLE",
    "BRANCH_SUMMARY_PROMPT",
    "BranchPreparation",
    "BranchSummaryResult",
    "collect_entries_for_branch_summary",
    "generate_branch_summary",
    "prepare_branch_entries",
    "summarize_branch",
]

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
    return entry_message(entry)


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
    return await summarize_branch(
        prepare_branch_entries(entries, window - reserve_tokens),
        stream_fn=stream_fn,
        model=model,
        custom_instructions=custom_instructions,
        replace_instructions=replace_instructions,
        stream_options=stream_options,
        signal=signal,
        retry=retry,
    )


async def summarize_branch(
    preparation: BranchPreparation,
    *,
    stream_fn: StreamFn,
    model: Model,
    custom_instructions: str | None = None,
    replace_instructions: bool = False,
    stream_options: StreamOptions | None = None,
    signal: AbortSignal | None = None,
    retry: RetrySettings | None = None,
    on_response: Callable[[AssistantMessage], Awaitable[object]] | None = None,
) -> BranchSummaryResult:
    """Summarise a prepared branch (Pi's ``generateBranchSummaryWithRequest``: one
    request; ``on_response`` is awaited with its response).

    Raises:
        BranchSummaryError: the request failed or was aborted.
    """
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
    response = await summary_request(
        stream_fn,
        model,
        f"<conversation>\n{conversation}\n</conversation>\n\n{instructions}",
        max_tokens=2048,
        thinking_level=None,
        stream_options=stream_options,
        signal=signal,
        retry=retry,
        on_response=on_response,
    )
    raise_if_failed(response, "Branch summary", BranchSummaryError)
    read_files, modified_files = preparation.file_ops.file_lists()
    summary = BRANCH_SUMMARY_PREAMBLE + content_text(response.content)
    summary += format_file_operations(read_files, modified_files)
    return BranchSummaryResult(
        summary=summary or "No summary generated",
        usage=response.usage,
        read_files=read_files,
        modified_files=modified_files,
    )
