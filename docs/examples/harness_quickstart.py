from collections.abc import Callable
from typing import Any

import trio

from pitrio import AbortSignal, Model, Tool, ToolResult, text_result
from pitrio.harness import (
    Harness,
    InMemorySessionStore,
    RetrySettings,
    ToolCallEvent,
    ToolCallResult,
    ToolContext,
    TurnState,
)
from pitrio.testing import ScriptedModel, ScriptedResponse


def where_tool(context: ToolContext) -> Tool:
    # A tool factory: the harness binds it to its working directory.
    async def execute(
        call_id: str, params: Any, signal: AbortSignal, on_update: Callable[[ToolResult], None]
    ) -> ToolResult:
        return text_result(f"you are in {context.cwd}")

    return Tool(name="where", description="Where am I?", execute=execute,
                parameters={"type": "object"})


def system_prompt(turn: TurnState) -> str:
    # Called before every model request, with that request's state.
    tools = ", ".join(tool.name for tool in turn.tools)
    return f"You are a helpful agent on {turn.model.id}. Tools: {tools}."


def no_rm(event: ToolCallEvent) -> ToolCallResult | None:
    if event.tool_name == "rm":
        return ToolCallResult(block=True, reason="rm is not allowed")
    return None


model = ScriptedModel([
    ScriptedResponse(stop_reason="error", error_message="503 Service Unavailable"),
    ScriptedResponse.tool_calls(("c1", "where", {})),
    ScriptedResponse.text("You are in /srv/project."),
])


async def main() -> None:
    store = InMemorySessionStore()
    session = await store.create(cwd="/srv/project")
    harness = Harness(
        model=Model(id="scripted-1", provider="scripted"),
        stream_fn=model,
        session=session,
        tools=[where_tool],
        cwd="/srv/project",
        system_prompt=system_prompt,
        retry=RetrySettings(base_delay=0.5),
    )
    harness.hooks.on("tool_call", no_rm)
    harness.subscribe(lambda event: print(event.type))

    await harness.prompt("Where am I?")
    print(harness.messages[-1].text)

    # The session holds the conversation; reopen it as a new process would.
    await session.close()
    reopened = await store.open(session.id)
    for message in reopened.build_context().messages:
        print(message.role)


if __name__ == "__main__":
    trio.run(main)
