"""The harness: what an application needs on top of the Agent.

Sessions on disk (JSONL in Pi's format, or SQLite), hooks that shape each turn, automatic
retry, compaction, prompt templates and skills, and record/replay of a model's stream.
It sits above the kernel and uses only pitrio's public API.
"""

from __future__ import annotations

from ._messages import (
    AppMessage as AppMessage,
    BashExecutionMessage as BashExecutionMessage,
    BranchSummaryMessage as BranchSummaryMessage,
    CompactionSummaryMessage as CompactionSummaryMessage,
    bash_execution_to_text as bash_execution_to_text,
    convert_to_llm as convert_to_llm,
)
from ._replay import (
    RecordingStreamFn as RecordingStreamFn,
    ReplayFileError as ReplayFileError,
    ReplayMismatchError as ReplayMismatchError,
    ReplayStreamFn as ReplayStreamFn,
)
from ._session import (
    BranchSummaryEntry as BranchSummaryEntry,
    CompactionEntry as CompactionEntry,
    CustomEntry as CustomEntry,
    InMemorySessionStore as InMemorySessionStore,
    MessageEntry as MessageEntry,
    ModelRef as ModelRef,
    Session as Session,
    SessionClosedError as SessionClosedError,
    SessionContext as SessionContext,
    SessionEntry as SessionEntry,
    SessionError as SessionError,
    SessionExistsError as SessionExistsError,
    SessionFormatError as SessionFormatError,
    SessionInfo as SessionInfo,
    SessionLockedError as SessionLockedError,
    SessionNotFoundError as SessionNotFoundError,
    SessionStore as SessionStore,
    build_session_context as build_session_context,
)

__all__: list[str] = [
    "AppMessage",
    "BashExecutionMessage",
    "BranchSummaryEntry",
    "BranchSummaryMessage",
    "CompactionEntry",
    "CompactionSummaryMessage",
    "CustomEntry",
    "InMemorySessionStore",
    "MessageEntry",
    "ModelRef",
    "RecordingStreamFn",
    "ReplayFileError",
    "ReplayMismatchError",
    "ReplayStreamFn",
    "Session",
    "SessionClosedError",
    "SessionContext",
    "SessionEntry",
    "SessionError",
    "SessionExistsError",
    "SessionFormatError",
    "SessionInfo",
    "SessionLockedError",
    "SessionNotFoundError",
    "SessionStore",
    "bash_execution_to_text",
    "build_session_context",
    "convert_to_llm",
]
