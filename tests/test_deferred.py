"""Deferred responses (pi-ai's protocol) through Models, with the scripted provider."""

from __future__ import annotations

import attrs
import pytest

from pitrio import (
    AssistantMessage,
    Context,
    DeferredHandle,
    Model,
    StreamOptions,
    UsageError,
    user_text,
)
from pitrio.providers import Models
from pitrio.testing import ScriptedModel, ScriptedResponse

MODEL = Model(id="scripted-deferred", api="scripted-deferred", provider="scripted")
CONTEXT = Context(messages=(user_text("summarise the corpus"),))


async def test_deferred_request_fetch_pending_then_final() -> None:
    """A deferred request ends with a handle; fetches say pending, then deliver."""
    scripted = ScriptedModel([ScriptedResponse.text("the summary", pending_fetches=1)])
    scripted.register("scripted-deferred")
    async with Models(builtin=False) as models:
        stream = models.stream_simple(MODEL, CONTEXT, StreamOptions(deferred=True))
        async with stream:
            kinds = [e.type async for e in stream]
        first = await stream.result()
        assert kinds == ["start", "done"]
        assert first.stop_reason == "deferred"
        assert first.content == ()
        handle = first.deferred
        assert handle is not None
        assert (handle.provider, handle.model_id, handle.api) == ("scripted", MODEL.id, MODEL.api)

        pending = await models.fetch_deferred(MODEL, handle)
        assert pending.stop_reason == "deferred"
        assert pending.deferred == handle
        final = await models.fetch_deferred(MODEL, handle)
        assert final.stop_reason == "stop"
        assert final.text == "the summary"


async def test_cancelled_and_unknown_handles_end_as_errors() -> None:
    """After cancel_deferred a fetch fails; an unknown handle fails with its id."""
    scripted = ScriptedModel([ScriptedResponse.text("never")])
    scripted.register("scripted-deferred")
    async with Models(builtin=False) as models:
        stream = models.stream_simple(MODEL, CONTEXT, StreamOptions(deferred=True))
        async with stream:
            pass
        handle = (await stream.result()).deferred
        assert handle is not None
        await models.cancel_deferred(MODEL, handle)
        assert scripted.cancelled_deferred == [handle]
        cancelled = await models.fetch_deferred(MODEL, handle)
        assert cancelled.stop_reason == "error"
        assert cancelled.error_message == f"Scripted deferred response was cancelled: {handle.id}"
        other = await models.fetch_deferred(MODEL, attrs_evolve_id(handle, "nope"))
        assert other.error_message == "Unknown scripted deferred response: nope"


async def test_apis_without_deferred_responses_say_so() -> None:
    """Fetching through an API that has no deferred responses is a usage error."""
    plain = Model(id="m", api="openai-completions", provider="vllm")
    scripted = ScriptedModel([])
    scripted.register("scripted-deferred")
    handle = (await _deferred_handle()).deferred
    assert handle is not None
    async with Models(builtin=False) as models:
        with pytest.raises(
            UsageError, match=r"^Provider vllm does not support deferred responses$"
        ):
            await models.fetch_deferred(plain, handle)
        with pytest.raises(UsageError, match="does not support deferred responses"):
            await models.cancel_deferred(plain, handle)


async def _deferred_handle() -> AssistantMessage:
    scripted = ScriptedModel([ScriptedResponse.text("x")])
    stream = scripted(MODEL, CONTEXT, StreamOptions(deferred=True))
    async with stream:
        pass
    return await stream.result()


def attrs_evolve_id(handle: DeferredHandle, new_id: str) -> DeferredHandle:
    return attrs.evolve(handle, id=new_id)
