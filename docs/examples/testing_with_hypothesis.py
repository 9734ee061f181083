from collections.abc import Callable
from typing import Any

from hypothesis import given, settings, strategies as st

from pitrio import AbortSignal, Agent, AgentEvent, StreamFn, Tool, ToolResult, text_result
from pitrio.testing import (
    ScriptedModel,
    ScriptedResponse,
    check_trace,
    event_stream_prefixes,
    run_virtual,
    scripted_runs,
)


# --- the application under test: an agent with two tools, and a UI's status line ---------
async def search(
    call_id: str, params: Any, signal: AbortSignal, on_update: Callable[[ToolResult], None]
) -> ToolResult:
    on_update(text_result(f"searching for {params['q']}..."))
    return text_result("3 results")


async def fetch(
    call_id: str, params: Any, signal: AbortSignal, on_update: Callable[[ToolResult], None]
) -> ToolResult:
    if not params["url"].startswith("https://"):
        raise ValueError("only https:// pages can be fetched")
    return text_result("the page's text")


def make_agent(stream_fn: StreamFn) -> Agent:
    return Agent(
        system_prompt="You research things.",
        stream_fn=stream_fn,
        tools=[
            Tool(name="search", execute=search,
                 parameters={"type": "object", "properties": {"q": {"type": "string"}},
                             "required": ["q"]}),
            Tool(name="fetch", execute=fetch,
                 parameters={"type": "object", "properties": {"url": {"type": "string"}},
                             "required": ["url"]}),
        ],
    )


class StatusLine:
    """What a UI shows while a run goes on: the tools still running, and whether it ended."""

    def __init__(self) -> None:
        self.running: set[str] = set()
        self.finished = False

    def handle(self, event: AgentEvent) -> None:
        if event.type == "tool_execution_start":
            self.running.add(event.tool_call_id)
        elif event.type == "tool_execution_end":
            self.running.discard(event.tool_call_id)
        elif event.type == "agent_end":
            self.finished = True


# --- property tests: many model behaviours, and many event streams ------------------------
# The model may call either tool, with arguments drawn here, for up to four turns.
SCRIPTS = scripted_runs({
    "search": st.fixed_dictionaries({"q": st.sampled_from(["trio", "structured concurrency"])}),
    "fetch": st.fixed_dictionaries({"url": st.sampled_from(["https://trio.rtfd.io", "ftp://x"])}),
})


@settings(max_examples=25, deadline=None)
@given(SCRIPTS)
def test_any_script_ends_in_a_settled_run(script: list[ScriptedResponse]) -> None:
    async def run() -> tuple[Agent, ScriptedModel, list[AgentEvent]]:
        model = ScriptedModel(script)
        agent = make_agent(model)
        events: list[AgentEvent] = []
        agent.subscribe(lambda event, signal: events.append(event))
        await agent.prompt("What is Trio?")
        return agent, model, events

    agent, model, events = run_virtual(run)  # a Hypothesis test is sync: run it here
    assert check_trace(events) == []          # every run keeps the event invariants
    assert model.calls == len(script)         # the agent asked for every scripted answer
    assert agent.state.messages[-1].role == "assistant"  # the run ended on an answer
    assert not agent.state.pending_tool_calls


@settings(deadline=None)
@given(event_stream_prefixes(["search", "fetch"]))
def test_the_status_line_follows_any_run_so_far(events: list[AgentEvent]) -> None:
    status = StatusLine()
    for event in events:
        status.handle(event)
    started = {e.tool_call_id for e in events if e.type == "tool_execution_start"}
    ended = {e.tool_call_id for e in events if e.type == "tool_execution_end"}
    assert status.running == started - ended
    assert status.finished == (bool(events) and events[-1].type == "agent_end")


def main() -> None:
    test_any_script_ends_in_a_settled_run()
    print("test_any_script_ends_in_a_settled_run passed")
    test_the_status_line_follows_any_run_so_far()
    print("test_the_status_line_follows_any_run_so_far passed")


if __name__ == "__main__":
    main()  # or run the two tests with pytest
