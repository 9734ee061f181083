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

__all__: list[str] = [
    "AppMessage",
    "BashExecutionMessage",
    "BranchSummaryMessage",
    "CompactionSummaryMessage",
    "bash_execution_to_text",
    "convert_to_llm",
]
