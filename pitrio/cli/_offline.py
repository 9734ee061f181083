"""The offline default: a recorded session replayed on a copy of a sample project.

``python -m pitrio`` with no model configured (or with ``--offline``) copies the small
project in ``_sample/project`` to a temporary directory and replays
``_sample/demo.replay.jsonl`` (the harness's record/replay format) as the model. The
tools are real: they read, run and edit the copy. The recording was made from
:func:`pitrio.testing.ScriptedModel` by ``tests/cli/record_offline_demo.py``: a
scripted session, not a language model (:data:`RECORDED_FROM` says so, and the banner
repeats it).
"""

from __future__ import annotations

import shutil
from typing import Final, final

import trio

from pitrio import (
    AssistantMessage,
    AssistantMessageEventStream,
    Context,
    DoneEvent,
    Model,
    StartEvent,
    StreamOptions,
    TextContent,
    TextDeltaEvent,
    TextEndEvent,
    TextStartEvent,
)

__all__ = [
    "DEMO_PROMPT",
    "OFFLINE_MODEL",
    "RECORDED_FROM",
    "OfflineStreamFn",
    "copy_sample_project",
    "recording_path",
    "sample_project",
]

DEMO_PROMPT: Final = "check_greet.py fails. Find out why and fix greet.py so it passes."
"""The prompt the recording answers (run when the offline demo is given no prompt)."""

RECORDED_FROM: Final = "a scripted model (pitrio.testing.ScriptedModel), not a language model"
"""What made the recording, said in the banner."""

OFFLINE_MODEL: Final = Model(
    id="offline-replay", name="pitrio offline replay", api="replay", provider="pitrio"
)

_EVENT_DELAY: Final = 0.004
"""Seconds between two replayed events, so the replay reads like a stream."""


def sample_project() -> str:
    """The path of the sample project shipped with pitrio (do not modify it)."""
    from importlib import resources  # the offline demo's: a run with a model needs neither

    return str(resources.files("pitrio.cli").joinpath("_sample", "project"))


def recording_path() -> str:
    """The path of the shipped recording."""
    from importlib import resources

    return str(resources.files("pitrio.cli").joinpath("_sample", "demo.replay.jsonl"))


def copy_sample_project(destination: str) -> str:
    """Copy the sample project into ``destination`` (a new directory); returns it."""
    shutil.copytree(
        sample_project(),
        destination,
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    return destination


@final
class OfflineStreamFn:
    """The recording's responses, one per request, paced like a stream.

    Requests are not compared with the recorded ones (``strict=False``: the working
    directory differs on every run). Once the recording is used up, every further
    request gets an answer saying so, instead of an error.
    """

    __slots__ = ("_replay", "delay")

    def __init__(self, path: str | None = None, *, delay: float = _EVENT_DELAY) -> None:
        from pitrio.harness import ReplayStreamFn

        self._replay = ReplayStreamFn(path or recording_path(), strict=False)
        self.delay = delay

    @property
    def remaining(self) -> int:
        """How many recorded responses are left."""
        return self._replay.remaining

    def __call__(
        self, model: Model, context: Context, options: StreamOptions
    ) -> AssistantMessageEventStream:
        template = AssistantMessage(
            api=model.api, provider=model.provider, model=model.id, stop_reason="pending"
        )
        if self._replay.remaining == 0:
            return _text_stream(template, _EXHAUSTED)
        recorded = self._replay(model, context, options)
        delay = self.delay

        async def relay(stream: AssistantMessageEventStream) -> None:
            async for event in recorded:
                if delay:
                    await trio.sleep(delay)
                stream.push(event)

        async def produce(stream: AssistantMessageEventStream) -> None:
            if recorded.has_producer:
                async with recorded:
                    await relay(stream)
            else:
                await relay(stream)

        return AssistantMessageEventStream(produce, template=template)


_EXHAUSTED: Final = (
    "(The offline recording has ended: this is a replay of a scripted session, so there "
    "is nothing more to say. For a real conversation, set ANTHROPIC_API_KEY or "
    "OPENAI_API_KEY, or point --base-url at a local OpenAI-compatible server; "
    "`pitrio --help` shows how.)"
)


def _text_stream(template: AssistantMessage, text: str) -> AssistantMessageEventStream:
    stream = AssistantMessageEventStream(template=template)
    empty = template
    partial = AssistantMessage(
        api=empty.api, provider=empty.provider, model=empty.model, stop_reason="pending"
    )
    with_text = AssistantMessage(
        content=(TextContent(text=text),),
        api=empty.api,
        provider=empty.provider,
        model=empty.model,
        stop_reason="pending",
    )
    final = AssistantMessage(
        content=(TextContent(text=text),),
        api=empty.api,
        provider=empty.provider,
        model=empty.model,
        stop_reason="stop",
    )
    stream.push(StartEvent(partial=partial))
    stream.push(TextStartEvent(content_index=0, partial=partial))
    stream.push(TextDeltaEvent(content_index=0, delta=text, partial=with_text))
    stream.push(TextEndEvent(content_index=0, content=text, partial=with_text))
    stream.push(DoneEvent(reason="stop", message=final))
    return stream
