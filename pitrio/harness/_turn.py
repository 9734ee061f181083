"""Per-turn state: what each model request of a harness is made with.

The settings a :class:`~pitrio.harness.Harness` holds between requests (model, thinking
level, tools and which of them are active, the tools' :class:`ToolContext`, resources,
system prompt) live in one :class:`TurnConfig`. Before each request it builds a frozen
:class:`TurnState` (tool factories bound to the context, cached until the tools or the
context change) and resolves the system prompt, which may be a function of that state.
:class:`Applied` remembers what the loop is currently using: :meth:`TurnConfig.next_turn`
tells the loop only what changed, and an unchanged turn is not rebuilt at all.

Reproduces the request preparation of Pi's ``harness/runtime/drive/generation.js``
(pi-agent-core 0.85.0): ``resolveSystemPrompt`` (a string, or a function of the tool
context called for each request) and the lane configuration a request is made with
(``runtime/types.js``'s ``Config``: tools, resources, tool context, system prompt).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TypeAlias, cast, final

import attrs

from pitrio import (
    Agent,
    AgentContext,
    AgentMessage,
    AgentTool,
    ArgumentTypeError,
    HarnessError,
    Model,
    NextTurn,
    ThinkingLevel,
)

from ._resources import ContextFile, PromptTemplate, Skill
from ._session import Session

__all__ = [
    "Applied",
    "Resources",
    "SystemPromptFn",
    "ToolContext",
    "ToolFactory",
    "TurnConfig",
    "TurnState",
]


@final
@attrs.frozen(kw_only=True)
class ToolContext:
    """What the harness binds tools to: the working directory and the data directory."""

    cwd: str
    data_dir: str | None = None


ToolFactory: TypeAlias = Callable[[ToolContext], "AgentTool | Sequence[AgentTool]"]
"""Builds tools for a :class:`ToolContext` (``lambda ctx: coding_tools(ctx.cwd)``).

It is called again when the tools or the context change, and, for a factory with a
``tools_revision`` attribute (an MCP toolset's), when that value does."""


def _revisions(sources: tuple[AgentTool | ToolFactory, ...]) -> tuple[object, ...]:
    """The sources' ``tools_revision`` values (``None`` for a source without one)."""
    return tuple(getattr(source, "tools_revision", None) for source in sources)


def _skills(value: Iterable[Skill]) -> tuple[Skill, ...]:
    return tuple(value)


def _templates(value: Iterable[PromptTemplate]) -> tuple[PromptTemplate, ...]:
    return tuple(value)


def _context_files(value: Iterable[ContextFile]) -> tuple[ContextFile, ...]:
    return tuple(value)


@final
@attrs.frozen(kw_only=True)
class Resources:
    """What the system prompt may list: skills, prompt templates and context files
    (from :func:`load_skills`, :func:`load_prompt_templates`, :func:`load_context_files`)."""

    skills: tuple[Skill, ...] = attrs.field(default=(), converter=_skills)
    prompt_templates: tuple[PromptTemplate, ...] = attrs.field(default=(), converter=_templates)
    context_files: tuple[ContextFile, ...] = attrs.field(default=(), converter=_context_files)


@final
@attrs.frozen(kw_only=True)
class TurnState:
    """The state one model request is made with, rebuilt before each request.

    Attributes:
        session: the harness's session (``None`` without one).
        model: the model requested.
        thinking_level: the reasoning level requested.
        tools: the active tools, bound to ``tool_context``.
        resources: skills, templates and context files.
        tool_context: what the tools are bound to.
    """

    session: Session | None
    model: Model
    thinking_level: ThinkingLevel
    tools: tuple[AgentTool, ...]
    resources: Resources
    tool_context: ToolContext


SystemPromptFn: TypeAlias = Callable[[TurnState], "str | Awaitable[str]"]
"""Builds the system prompt for one request from the turn's state."""


@final
class TurnConfig:
    """The harness's settings for the next request, and the state built from them."""

    __slots__ = (
        "_bound",
        "_wrapped",
        "active_tools",
        "applied",
        "model",
        "prompt_system_prompt",
        "resources",
        "system_prompt",
        "thinking_level",
        "tool_context",
        "tool_sources",
        "turn",
        "wrap",
    )

    def __init__(
        self,
        *,
        model: Model,
        thinking_level: ThinkingLevel,
        tool_sources: tuple[AgentTool | ToolFactory, ...],
        active_tools: tuple[str, ...] | None,
        system_prompt: str | SystemPromptFn,
        tool_context: ToolContext,
        resources: Resources,
    ) -> None:
        self.model = model
        self.thinking_level = thinking_level
        self.tool_sources = tool_sources
        self.active_tools = active_tools
        self.system_prompt = system_prompt
        self.tool_context = tool_context
        self.resources = resources
        self.prompt_system_prompt: str | None = None
        """A ``before_agent_start`` hook's system prompt, for the current prompt only."""
        self.turn: TurnState | None = None
        """The state of the latest request (``None`` before the first)."""
        self.applied: Applied | None = None
        """What the loop is using since the last request was prepared."""
        self._bound: (
            tuple[object, ToolContext, tuple[object, ...], tuple[AgentTool, ...]] | None
        ) = None
        self.wrap: Callable[[AgentTool], AgentTool] | None = None
        """What the Agent is given instead of each tool (the harness's invocations)."""
        self._wrapped: dict[int, tuple[AgentTool, AgentTool]] = {}

    def rebind(
        self,
        *,
        cwd: str | os.PathLike[str] | None = None,
        data_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        """A new tool context; ``None`` keeps the current value."""
        current = self.tool_context
        self.tool_context = ToolContext(
            cwd=os.fspath(cwd) if cwd is not None else current.cwd,
            data_dir=os.fspath(data_dir) if data_dir is not None else current.data_dir,
        )

    def build(self, session: Session | None) -> TurnState:
        """The next request's state (tool factories are called again only when the tools
        or the tool context changed)."""
        context = self.tool_context
        sources = self.tool_sources
        bound = self._bound
        revisions = _revisions(sources)
        if (
            bound is None
            or bound[0] is not sources
            or bound[1] != context
            or bound[2] != revisions
        ):
            tools: list[AgentTool] = []
            for source in sources:
                if hasattr(source, "execute"):
                    tools.append(cast("AgentTool", source))
                    continue
                made = source(context)
                if hasattr(made, "execute"):
                    tools.append(cast("AgentTool", made))
                else:
                    tools.extend(made)
            bound = self._bound = (sources, context, revisions, tuple(tools))
            self._wrapped = {}
        active = self.active_tools
        tools_now = bound[3] if active is None else tuple(t for t in bound[3] if t.name in active)
        turn = TurnState(
            session=session,
            model=self.model,
            thinking_level=self.thinking_level,
            tools=tools_now,
            resources=self.resources,
            tool_context=context,
        )
        self.turn = turn
        return turn

    def agent_tools(self, tools: tuple[AgentTool, ...]) -> list[AgentTool]:
        """The tools as the Agent runs them (each wrapped by :attr:`wrap`, once)."""
        wrap = self.wrap
        if wrap is None:
            return list(tools)
        out = []
        wrapped = self._wrapped
        for tool in tools:
            known = wrapped.get(id(tool))
            if known is None or known[0] is not tool:
                known = wrapped[id(tool)] = (tool, wrap(tool))
            out.append(known[1])
        return out

    async def resolve_system_prompt(self, turn: TurnState) -> str:
        """The system prompt for ``turn``: the prompt's override, the string, or what the
        function returns.

        Raises:
            HarnessError: the function raised (the exception is its ``__cause__``).
            ArgumentTypeError: the function returned something other than a string.
        """
        if self.prompt_system_prompt is not None:
            return self.prompt_system_prompt
        source = self.system_prompt
        if isinstance(source, str):
            return source
        try:
            value: object = source(turn)
            if hasattr(type(value), "__await__"):
                value = await cast("Awaitable[object]", value)
        except Exception as exc:
            msg = f"system prompt function failed: {exc}"
            raise HarnessError(msg) from exc
        if not isinstance(value, str):
            msg = f"the system prompt function must return a str; got {value!r}"
            raise ArgumentTypeError(msg)
        return value

    async def apply(self, agent: Agent, session: Session | None) -> None:
        """Set the Agent up for a run's first request: system prompt, tools, model and
        thinking level (the last two even when building the turn raised)."""
        self.applied = None
        try:
            turn = self.build(session)
            system_prompt = await self.resolve_system_prompt(turn)
            agent.state.system_prompt = system_prompt
            agent.state.tools = self.agent_tools(turn.tools)
            self.applied = Applied(self, turn.tools, system_prompt)
        finally:
            agent.state.model = self.model
            agent.state.thinking_level = self.thinking_level

    def unchanged(self) -> bool:
        """Whether the next request can go on as the last one (a fixed system prompt and
        no setting changed since)."""
        applied = self.applied
        return isinstance(self.system_prompt, str) and applied is not None and applied.matches(self)

    async def next_turn(
        self, session: Session | None, messages: list[AgentMessage], *, replaced: bool
    ) -> NextTurn | None:
        """What the loop's next request must change (``None``: nothing): the context when
        the tools, the system prompt or (``replaced``, after a compaction) the messages
        changed, the model and thinking level when they did."""
        state = self.build(session)
        system_prompt = await self.resolve_system_prompt(state)
        previous = self.applied
        self.applied = Applied(self, state.tools, system_prompt)
        context = None
        if (
            replaced
            or previous is None
            or previous.tools != state.tools
            or previous.system_prompt != system_prompt
        ):
            context = AgentContext(
                system_prompt=system_prompt,
                messages=messages,
                tools=self.agent_tools(state.tools),
            )
        model = None if previous is not None and previous.model is self.model else self.model
        thinking = (
            None
            if previous is not None and previous.thinking_level == self.thinking_level
            else self.thinking_level
        )
        if context is None and model is None and thinking is None:
            return None
        return NextTurn(context=context, model=model, thinking_level=thinking)


@final
class Applied:
    """What the loop is currently using (to skip rebuilding an unchanged turn)."""

    __slots__ = (
        "active_tools",
        "model",
        "resources",
        "revisions",
        "sources",
        "system_prompt",
        "thinking_level",
        "tool_context",
        "tools",
    )

    def __init__(
        self, config: TurnConfig, tools: tuple[AgentTool, ...], system_prompt: str
    ) -> None:
        self.model = config.model
        self.thinking_level = config.thinking_level
        self.sources = config.tool_sources
        self.revisions = _revisions(config.tool_sources)
        self.active_tools = config.active_tools
        self.tool_context = config.tool_context
        self.resources = config.resources
        self.tools = tools
        self.system_prompt = system_prompt

    def matches(self, config: TurnConfig) -> bool:
        """Whether nothing the next request depends on changed since."""
        return (
            self.model is config.model
            and self.thinking_level == config.thinking_level
            and self.sources is config.tool_sources
            and self.revisions == _revisions(config.tool_sources)
            and self.active_tools == config.active_tools
            and self.tool_context == config.tool_context
            and self.resources is config.resources
            and self.system_prompt == (config.prompt_system_prompt or config.system_prompt)
        )
