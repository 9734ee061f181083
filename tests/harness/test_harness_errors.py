"""The harness's failures are in pitrio's error tree; a run's failures end as data."""

from __future__ import annotations

import re
from typing import Any

import pytest
import trio
import trio.testing

from pitrio import ArgumentTypeError, HarnessError, Model, PitrioError, UsageError
from pitrio.harness import Harness, Hooks, InMemorySessionStore, Resources, ToolContext, TurnState
from pitrio.harness._turn import TurnConfig
from pitrio.testing import ScriptedModel, ScriptedResponse

MODEL = Model(id="m", api="scripted", provider="scripted", context_window=200_000)


def _config(system_prompt: Any) -> TurnConfig:
    return TurnConfig(
        model=MODEL,
        thinking_level="off",
        tool_sources=(),
        active_tools=None,
        system_prompt=system_prompt,
        tool_context=ToolContext(cwd="/work"),
        resources=Resources(),
    )


async def test_a_raising_system_prompt_function_is_a_harness_error() -> None:
    def broken(turn: TurnState) -> str:
        raise KeyError("no prompt today")

    config = _config(broken)
    with pytest.raises(
        HarnessError, match="system prompt function failed: 'no prompt today'"
    ) as info:
        await config.resolve_system_prompt(config.build(None))
    assert isinstance(info.value, PitrioError)
    assert not isinstance(info.value, RuntimeError)
    assert isinstance(info.value.__cause__, KeyError)


async def test_a_system_prompt_function_returning_a_non_string_is_an_argument_type_error() -> None:
    config = _config(lambda turn: 42)
    with pytest.raises(ArgumentTypeError, match="must return a str; got 42") as info:
        await config.resolve_system_prompt(config.build(None))
    assert isinstance(info.value, UsageError)
    assert isinstance(info.value, TypeError)


async def test_an_async_system_prompt_function_sees_the_turn(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def prompt(turn: TurnState) -> str:
        await trio.sleep(1)
        return f"model {turn.model.id} in {turn.tool_context.cwd}"

    config = _config(prompt)
    assert await config.resolve_system_prompt(config.build(None)) == "model m in /work"
    config.prompt_system_prompt = "from a hook"
    assert await config.resolve_system_prompt(config.build(None)) == "from a hook"


async def test_a_bad_system_prompt_ends_the_run_as_an_error_message(
    autojump_clock: trio.testing.MockClock,
) -> None:
    def no_prompt(turn: TurnState) -> Any:
        return None

    scripted = ScriptedModel([ScriptedResponse.text("never")])
    harness = Harness(model=MODEL, stream_fn=scripted, system_prompt=no_prompt)
    await harness.prompt("hi")  # no exception: the failure is data
    assert scripted.calls == 0
    last = harness.messages[-1]
    assert last.role == "assistant"
    assert last.stop_reason == "error"
    assert "the system prompt function must return a str; got None" in (last.error_message or "")
    assert not harness.is_busy


async def test_replacing_the_hook_registry_takes_effect(
    autojump_clock: trio.testing.MockClock,
) -> None:
    scripted = ScriptedModel([ScriptedResponse.text("one"), ScriptedResponse.text("two")])
    harness = Harness(model=MODEL, stream_fn=scripted)
    seen: list[str] = []
    harness.hooks.on("context", lambda event: seen.append("old"))
    await harness.prompt("first")
    replacement = Hooks()
    replacement.on("context", lambda event: seen.append("new"))
    harness.hooks = replacement
    assert harness.hooks is replacement
    await harness.prompt("second")
    assert seen == ["old", "new"]


async def test_set_model_refuses_what_is_not_a_model() -> None:
    harness = Harness(model=MODEL, stream_fn=ScriptedModel([]))
    bad: Any = "scripted/m2"
    with pytest.raises(
        ArgumentTypeError, match=re.escape("model must be a pitrio.Model; got 'scripted/m2'")
    ):
        await harness.set_model(bad)
    assert harness.model is MODEL
    with pytest.raises(ArgumentTypeError, match=re.escape("model must be a pitrio.Model")):
        Harness(model=bad)


async def test_fork_refuses_an_unknown_position() -> None:
    store = InMemorySessionStore()
    session = await store.create(cwd="/work")
    first = await session.append_custom("note", {"n": 1})
    position: Any = "after"
    with pytest.raises(UsageError, match='position must be "at" or "before"; got \'after\''):
        await session.fork(first, position=position)
    assert len(await store.list()) == 1  # nothing was created
    forked = await session.fork(first, position="before")
    assert forked.entries == ()
