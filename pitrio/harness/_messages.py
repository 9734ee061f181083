"""The harness's own message roles, and how the model sees them.

Pi's harness adds four roles to the transcript (``harness/messages.ts`` in
pi-agent-core 0.85.0). They are stored in sessions like any message but are not
understood by a model, so :func:`convert_to_llm` turns them into user messages before
each request, with Pi's exact texts:

======================  ======================================  ==========================
wire role               class                                   the model sees
======================  ======================================  ==========================
``compactionSummary``   :class:`CompactionSummaryMessage`       the summary in ``<summary>``
``branchSummary``       :class:`BranchSummaryMessage`           the summary in ``<summary>``
``bashExecution``       :class:`BashExecutionMessage`           "Ran `cmd`" and its output
``custom``              :class:`AppMessage`                     its content, verbatim
======================  ======================================  ==========================

Importing this module registers the four roles with :func:`pitrio.register_message_role`,
so :func:`pitrio.wire.structure_message` reads Pi's JSON for them into these classes.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Any, ClassVar, Literal, final

import attrs

from pitrio import (
    AgentMessage,
    CustomMessage,
    ImageContent,
    TextContent,
    UserMessage,
    WireFormatError,
    register_message_role,
    wire,
)

__all__ = [
    "BRANCH_SUMMARY_PREFIX",
    "BRANCH_SUMMARY_SUFFIX",
    "COMPACTION_SUMMARY_PREFIX",
    "COMPACTION_SUMMARY_SUFFIX",
    "AppMessage",
    "BashExecutionMessage",
    "BranchSummaryMessage",
    "CompactionSummaryMessage",
    "bash_execution_to_text",
    "convert_to_llm",
    "timestamp_ms",
]

COMPACTION_SUMMARY_PREFIX = (
    "The conversation history before this point was compacted into the following summary:"
    "\n\n<summary>\n"
)
COMPACTION_SUMMARY_SUFFIX = "\n</summary>"
BRANCH_SUMMARY_PREFIX = (
    "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n"
)
BRANCH_SUMMARY_SUFFIX = "</summary>"


@final
@register_message_role
@attrs.frozen(kw_only=True)
class CompactionSummaryMessage:
    """The summary that replaces the compacted start of a conversation.

    ``tokens_before`` is the context size (in tokens) when it was compacted.
    """

    role: ClassVar[Literal["compactionSummary"]] = "compactionSummary"
    summary: str
    tokens_before: int
    timestamp: int = 0


@final
@register_message_role
@attrs.frozen(kw_only=True)
class BranchSummaryMessage:
    """A summary of a branch the conversation came back from.

    ``from_id`` is the session entry the branch left from (``None``: written as JSON
    ``null``, as Pi does).
    """

    role: ClassVar[Literal["branchSummary"]] = "branchSummary"
    summary: str
    from_id: str | None
    timestamp: int = 0


@final
@register_message_role
@attrs.frozen(kw_only=True)
class BashExecutionMessage:
    """A shell command the user ran themselves (Pi's ``!command``), and its output.

    ``exit_code`` is ``None`` when the command did not exit on its own. A message with
    ``exclude_from_context`` stays in the session but is not shown to the model.
    """

    role: ClassVar[Literal["bashExecution"]] = "bashExecution"
    command: str
    output: str
    exit_code: int | None = None
    cancelled: bool = False
    truncated: bool = False
    full_output_path: str | None = None
    timestamp: int = 0
    exclude_from_context: bool | None = None


@final
@register_message_role
@attrs.frozen(kw_only=True)
class AppMessage:
    """Pi's ``custom`` role: a message an application injects into the conversation.

    ``custom_type`` names its kind for the application; ``display`` says whether a UI
    shows it; ``details`` is the application's own JSON, never sent to the model.
    The model sees ``content`` as a user message.
    """

    role: ClassVar[Literal["custom"]] = "custom"
    custom_type: str
    content: str | tuple[TextContent | ImageContent, ...]
    display: bool = True
    details: Any = None
    timestamp: int = 0


HARNESS_ROLES: dict[str, type[Any]] = {
    "compactionSummary": CompactionSummaryMessage,
    "branchSummary": BranchSummaryMessage,
    "bashExecution": BashExecutionMessage,
    "custom": AppMessage,
}


def timestamp_ms(value: str | float) -> int:
    """A timestamp in milliseconds since the epoch, from a number or an ISO-8601 string.

    Session entries carry ISO strings; messages carry milliseconds (as Pi's
    ``create*Message`` helpers convert them).
    """
    if isinstance(value, int | float):
        return int(value)
    text = value[:-1] + "+00:00" if value.endswith("Z") else value
    try:
        parsed = datetime.datetime.fromisoformat(text)
    except ValueError:
        msg = f"timestamp {value!r} is neither milliseconds nor an ISO-8601 date"
        raise WireFormatError(msg) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.UTC)
    return round(parsed.timestamp() * 1000)


def bash_execution_to_text(message: BashExecutionMessage) -> str:
    """What the model reads for a user's shell command (Pi's ``bashExecutionToText``)."""
    text = f"Ran `{message.command}`\n"
    if message.output:
        text += f"```\n{message.output}\n```"
    else:
        text += "(no output)"
    if message.cancelled:
        text += "\n\n(command cancelled)"
    elif message.exit_code is not None and message.exit_code != 0:
        text += f"\n\nCommand exited with code {message.exit_code}"
    if message.truncated and message.full_output_path:
        text += f"\n\n[Output truncated. Full output: {message.full_output_path}]"
    return text


def _as_user(text: str, timestamp: int) -> UserMessage:
    return UserMessage(content=(TextContent(text=text),), timestamp=timestamp)


def convert_to_llm(messages: Iterable[AgentMessage]) -> list[Any]:
    """The transcript as the model sees it (Pi's harness ``convertToLlm``).

    ``user``, ``assistant`` and ``toolResult`` messages pass through; the harness roles
    become user messages (a summary inside Pi's ``<summary>`` wrapper, a shell command
    with its output, an application message's content); a ``bashExecution`` marked
    ``exclude_from_context`` and any other role are left out. Pass it as the Agent's
    ``convert_to_llm``.
    """
    out: list[Any] = []
    for message in messages:
        role = message.role
        if role in ("user", "assistant", "toolResult"):
            out.append(message)
            continue
        if role not in HARNESS_ROLES:
            continue
        if isinstance(message, CustomMessage):
            # Read before the roles were registered: give it its class now.
            message = wire.structure_message(wire.unstructure(message))
        match message:
            case CompactionSummaryMessage(summary=summary, timestamp=timestamp):
                text = COMPACTION_SUMMARY_PREFIX + summary + COMPACTION_SUMMARY_SUFFIX
                out.append(_as_user(text, timestamp))
            case BranchSummaryMessage(summary=summary, timestamp=timestamp):
                text = BRANCH_SUMMARY_PREFIX + summary + BRANCH_SUMMARY_SUFFIX
                out.append(_as_user(text, timestamp))
            case BashExecutionMessage():
                if not message.exclude_from_context:
                    out.append(_as_user(bash_execution_to_text(message), message.timestamp))
            case AppMessage(content=content, timestamp=timestamp):
                blocks = (TextContent(text=content),) if isinstance(content, str) else content
                out.append(UserMessage(content=blocks, timestamp=timestamp))
            case _:
                pass
    return out
