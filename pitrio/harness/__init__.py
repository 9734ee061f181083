"""The harness: what an application needs on top of the Agent.

Sessions on disk (JSONL in Pi's format, or SQLite), hooks that shape each turn, automatic
retry, compaction, prompt templates and skills, and record/replay of a model's stream.
It sits above the kernel and uses only pitrio's public API.
"""

from __future__ import annotations

from ._branch_summary import (
    BranchSummaryResult as BranchSummaryResult,
    collect_entries_for_branch_summary as collect_entries_for_branch_summary,
    generate_branch_summary as generate_branch_summary,
)
from ._compaction import (
    CompactionPreparation as CompactionPreparation,
    CompactionSettings as CompactionSettings,
    ContextEstimate as ContextEstimate,
    estimate_context_tokens as estimate_context_tokens,
    estimate_tokens as estimate_tokens,
    prepare_compaction as prepare_compaction,
    should_compact as should_compact,
)
from ._entries import (
    BranchSummaryEntry as BranchSummaryEntry,
    CompactionEntry as CompactionEntry,
    CustomEntry as CustomEntry,
    MessageEntry as MessageEntry,
    ModelRef as ModelRef,
    SessionContext as SessionContext,
    SessionEntry as SessionEntry,
    build_session_context as build_session_context,
)
from ._errors import (
    BranchSummaryError as BranchSummaryError,
    CompactionError as CompactionError,
    SessionClosedError as SessionClosedError,
    SessionError as SessionError,
    SessionExistsError as SessionExistsError,
    SessionFormatError as SessionFormatError,
    SessionLockedError as SessionLockedError,
    SessionNotFoundError as SessionNotFoundError,
)
from ._events import (
    AutoRetryEnd as AutoRetryEnd,
    AutoRetryStart as AutoRetryStart,
    CompactionEnd as CompactionEnd,
    CompactionReason as CompactionReason,
    CompactionStart as CompactionStart,
    HarnessEvent as HarnessEvent,
    SavePoint as SavePoint,
    Settled as Settled,
)
from ._harness import Harness as Harness
from ._hooks import (
    BeforeAgentStartEvent as BeforeAgentStartEvent,
    BeforeAgentStartResult as BeforeAgentStartResult,
    ContextEvent as ContextEvent,
    HookError as HookError,
    HookName as HookName,
    Hooks as Hooks,
    ProviderPayloadEvent as ProviderPayloadEvent,
    ProviderRequestEvent as ProviderRequestEvent,
    ProviderRequestPatch as ProviderRequestPatch,
    ProviderResponseEvent as ProviderResponseEvent,
    ToolCallEvent as ToolCallEvent,
    ToolCallResult as ToolCallResult,
    ToolResultEvent as ToolResultEvent,
    ToolResultPatch as ToolResultPatch,
)
from ._jsonl import (
    JsonlSessionStore as JsonlSessionStore,
    SessionRecoveredWarning as SessionRecoveredWarning,
    default_sessions_root as default_sessions_root,
)
from ._listeners import HarnessListener as HarnessListener
from ._messages import (
    AppMessage as AppMessage,
    BashExecutionMessage as BashExecutionMessage,
    BranchSummaryMessage as BranchSummaryMessage,
    CompactionSummaryMessage as CompactionSummaryMessage,
    bash_execution_to_text as bash_execution_to_text,
    convert_to_llm as convert_to_llm,
)
from ._pi_sessions import (
    PiSessionStore as PiSessionStore,
    default_pi_sessions_root as default_pi_sessions_root,
)
from ._postgres import PostgresSessionStore as PostgresSessionStore
from ._replay import (
    RecordingStreamFn as RecordingStreamFn,
    ReplayedRaiseError as ReplayedRaiseError,
    ReplayFileError as ReplayFileError,
    ReplayMismatchError as ReplayMismatchError,
    ReplayStreamFn as ReplayStreamFn,
)
from ._resources import (
    ContextFile as ContextFile,
    PromptTemplate as PromptTemplate,
    ResourceDiagnostic as ResourceDiagnostic,
    Skill as Skill,
    SkillsResult as SkillsResult,
    TemplatesResult as TemplatesResult,
    expand_prompt_template as expand_prompt_template,
    expand_skill_command as expand_skill_command,
    format_context_files as format_context_files,
    format_skill_invocation as format_skill_invocation,
    format_skills_for_prompt as format_skills_for_prompt,
    load_context_files as load_context_files,
    load_prompt_templates as load_prompt_templates,
    load_skills as load_skills,
)
from ._retry import (
    RetrySettings as RetrySettings,
    is_context_overflow as is_context_overflow,
    is_retryable as is_retryable,
    retry_delay as retry_delay,
    server_retry_delay as server_retry_delay,
)
from ._session import Session as Session
from ._sqlite import SqliteSessionStore as SqliteSessionStore
from ._store import (
    InMemorySessionStore as InMemorySessionStore,
    SessionInfo as SessionInfo,
    SessionStore as SessionStore,
)
from ._summary import (
    CompactionResult as CompactionResult,
    compact as compact,
)
from ._turn import (
    Resources as Resources,
    SystemPromptFn as SystemPromptFn,
    ToolContext as ToolContext,
    ToolFactory as ToolFactory,
    TurnState as TurnState,
)

__all__: list[str] = [
    "AppMessage",
    "AutoRetryEnd",
    "AutoRetryStart",
    "BashExecutionMessage",
    "BeforeAgentStartEvent",
    "BeforeAgentStartResult",
    "BranchSummaryEntry",
    "BranchSummaryError",
    "BranchSummaryMessage",
    "BranchSummaryResult",
    "CompactionEnd",
    "CompactionEntry",
    "CompactionError",
    "CompactionPreparation",
    "CompactionReason",
    "CompactionResult",
    "CompactionSettings",
    "CompactionStart",
    "CompactionSummaryMessage",
    "ContextEstimate",
    "ContextEvent",
    "ContextFile",
    "CustomEntry",
    "Harness",
    "HarnessEvent",
    "HarnessListener",
    "HookError",
    "HookName",
    "Hooks",
    "InMemorySessionStore",
    "JsonlSessionStore",
    "PiSessionStore",
    "PostgresSessionStore",
    "MessageEntry",
    "ModelRef",
    "PromptTemplate",
    "ProviderPayloadEvent",
    "ProviderRequestEvent",
    "ProviderRequestPatch",
    "ProviderResponseEvent",
    "RecordingStreamFn",
    "ReplayFileError",
    "ReplayMismatchError",
    "ReplayStreamFn",
    "ReplayedRaiseError",
    "ResourceDiagnostic",
    "Resources",
    "RetrySettings",
    "SavePoint",
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
    "SessionRecoveredWarning",
    "SessionStore",
    "Settled",
    "Skill",
    "SkillsResult",
    "SqliteSessionStore",
    "SystemPromptFn",
    "TemplatesResult",
    "ToolCallEvent",
    "ToolCallResult",
    "ToolContext",
    "ToolFactory",
    "ToolResultEvent",
    "ToolResultPatch",
    "TurnState",
    "bash_execution_to_text",
    "build_session_context",
    "collect_entries_for_branch_summary",
    "compact",
    "convert_to_llm",
    "default_pi_sessions_root",
    "default_sessions_root",
    "estimate_context_tokens",
    "estimate_tokens",
    "expand_prompt_template",
    "expand_skill_command",
    "format_context_files",
    "format_skill_invocation",
    "format_skills_for_prompt",
    "generate_branch_summary",
    "is_context_overflow",
    "is_retryable",
    "load_context_files",
    "load_prompt_templates",
    "load_skills",
    "prepare_compaction",
    "retry_delay",
    "server_retry_delay",
    "should_compact",
]
