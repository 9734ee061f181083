"""What a tool built by :func:`pitrio.tool` can ask for besides its arguments.

A parameter annotated with one of these types is filled in by pitrio and left out of the
tool's JSON schema: :class:`RunContext` (the run's dependencies and the call), and
:data:`ToolCallId` (the call's id). The run's dependencies travel in a context variable
(``pitrio._deps``).
"""

from __future__ import annotations

from typing import Generic, NewType, TypeVar, final

import attrs

from ._signal import AbortSignal
from ._tools import ToolUpdateCallback

__all__ = ["RunContext", "ToolCallId"]

DepsT = TypeVar("DepsT")

ToolCallId = NewType("ToolCallId", str)
"""Annotate a parameter ``call_id: ToolCallId`` to receive the tool call's id."""

@final
@attrs.frozen(kw_only=True)
class RunContext(Generic[DepsT]):
    """Handed to a tool parameter annotated ``RunContext[Deps]`` (pydantic-ai's
    ``RunContext``): the run's dependencies and this call.

    Attributes:
        deps: the value given as ``Agent(deps=...)`` or ``agent.run(..., deps=...)``
            (``None`` when neither was given, or outside an agent run).
        tool_name: the tool's name.
        tool_call_id: the call's id.
        signal: the run's abort signal.
        on_update: reports a partial result (a ``tool_execution_update`` event).
    """

    deps: DepsT
    tool_name: str
    tool_call_id: str
    signal: AbortSignal
    on_update: ToolUpdateCallback
