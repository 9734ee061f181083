"""The scenario's scripted model: a stream function that plays ``model.responses``.

It streams each scripted response as the oracle's scripted provider does (SCENARIOS.md
§3): one macrotask turn before every event (here
:func:`trio.testing.wait_all_tasks_blocked`), text and arguments in chunks, an
abort ending the response as ``aborted`` with the scenario's message, and a
``model_call`` record (what the model was sent) before each request.
"""

from __future__ import annotations

import copy
from typing import Any, Literal

import attrs
import trio
import trio.testing

from .._events import (
    DoneEvent,
    ErrorEvent,
    StartEvent,
    TextDeltaEvent,
    TextEndEvent,
    TextStartEvent,
    ThinkingDeltaEvent,
    ThinkingEndEvent,
    ThinkingStartEvent,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
)
from .._messages import AssistantMessage, Usage
from .._model import Context, Model, StreamOptions
from .._signal import AbortSignal
from .._stream import AssistantMessageEventStream
from .._validation import js_json_dumps
from .._wire import converter
from ._scenario import (
    BLOCK_UNION,
    DEFAULT_ERRORS,
    Recorder,
    assistant_blocks,
    chunk,
    default_stop,
    final_block,
    merge_usage,
)
from ._trace import Record, normalize_message

__all__ = ["ScenarioModel"]


class ScenarioModel:
    """The scripted model of one scenario run; :meth:`stream_fn` is the stream function.

    Attributes:
        calls: how many requests were made.
        used: how many scripted responses were used.
    """

    def __init__(self, spec: Record, recorder: Recorder) -> None:
        self.recorder = recorder
        self.responses: list[Record] = spec["responses"]
        self.default_chunk: int = (spec.get("stream") or {}).get("chunkSize", 8)
        self.calls = 0
        self.used = 0

    async def stream_fn(
        self, model: Model, context: Context, options: StreamOptions
    ) -> AssistantMessageEventStream:
        self.calls += 1
        signal = options.signal
        rec: Record = {
            "type": "model_call",
            "index": self.calls,
            "model": model.id,
            "systemPrompt": context.system_prompt,
            "messages": [normalize_message(m) for m in context.messages],
            "tools": [t.name for t in context.tools],
        }
        if options.reasoning is not None:
            rec["reasoning"] = options.reasoning
        await self.recorder.emit(rec, loop_side=True)
        template = AssistantMessage(
            api=model.api, provider=model.provider, model=model.id, stop_reason="pending"
        )

        def failing(reason: Literal["error", "aborted"], text: str) -> AssistantMessageEventStream:
            message = attrs.evolve(template, stop_reason=reason, error_message=text)

            async def produce(stream: AssistantMessageEventStream) -> None:
                await trio.testing.wait_all_tasks_blocked()
                stream.push(ErrorEvent(reason=reason, error=message))

            return AssistantMessageEventStream(produce, template=template)

        if signal is not None and signal.aborted:
            return failing("aborted", "Request was aborted")
        if self.used >= len(self.responses):
            self.recorder.problems.append(
                f"model called {self.calls} time(s) but only "
                f"{len(self.responses)} response(s) are scripted"
            )
            return failing("error", f"oracle: no scripted response for model call {self.calls}")
        r = self.responses[self.used]
        self.used += 1
        if "throw" in r:
            raise Exception(r["throw"])
        return AssistantMessageEventStream(
            lambda stream: self._produce(stream, r, template, signal), template=template
        )

    async def _produce(
        self,
        stream: AssistantMessageEventStream,
        r: Record,
        template: AssistantMessage,
        signal: AbortSignal | None,
    ) -> None:
        blocks: list[Record] = (
            [{"type": "text", "text": r["text"]}] if "text" in r else r.get("content", [])
        )
        final_content = [final_block(b) for b in blocks]
        stop_reason: Any = r.get("stopReason") or default_stop(final_content)
        st = r.get("stream") or {}
        size = st.get("chunkSize", self.default_chunk)
        partial_content: list[Record] = []
        abort_message = r.get("abortMessage", "Request was aborted")

        def snap() -> AssistantMessage:
            return attrs.evolve(template, content=assistant_blocks(copy.deepcopy(partial_content)))

        try:
            if st.get("start", True):
                await trio.testing.wait_all_tasks_blocked()
                stream.push(StartEvent(partial=snap()))
            if st.get("blocks", True):
                for i, b in enumerate(blocks):
                    fb = final_content[i]
                    if b["type"] in ("text", "thinking"):
                        key = b["type"]
                        is_text = key == "text"
                        await trio.testing.wait_all_tasks_blocked()
                        partial_content.append({**fb, key: ""})
                        stream.push(
                            (TextStartEvent if is_text else ThinkingStartEvent)(
                                content_index=i, partial=snap()
                            )
                        )
                        for c in chunk(fb[key], size, b.get("chunks")):
                            await trio.testing.wait_all_tasks_blocked()
                            partial_content[i][key] += c
                            stream.push(
                                (TextDeltaEvent if is_text else ThinkingDeltaEvent)(
                                    content_index=i, delta=c, partial=snap()
                                )
                            )
                        await trio.testing.wait_all_tasks_blocked()
                        partial_content[i] = copy.deepcopy(fb)
                        stream.push(
                            (TextEndEvent if is_text else ThinkingEndEvent)(
                                content_index=i, content=fb[key], partial=snap()
                            )
                        )
                    else:
                        await trio.testing.wait_all_tasks_blocked()
                        partial_content.append(
                            {
                                "type": "toolCall",
                                "id": fb["id"],
                                "name": fb["name"],
                                "arguments": {},
                            }
                        )
                        stream.push(ToolCallStartEvent(content_index=i, partial=snap()))
                        args_json = js_json_dumps(fb["arguments"])
                        for c in chunk(args_json, size, b.get("chunks")):
                            await trio.testing.wait_all_tasks_blocked()
                            stream.push(
                                ToolCallDeltaEvent(content_index=i, delta=c, partial=snap())
                            )
                        await trio.testing.wait_all_tasks_blocked()
                        partial_content[i] = copy.deepcopy(fb)
                        stream.push(
                            ToolCallEndEvent(
                                content_index=i,
                                tool_call=converter.structure(copy.deepcopy(fb), BLOCK_UNION),
                                partial=snap(),
                            )
                        )
            else:
                partial_content[:] = copy.deepcopy(final_content)
            if r.get("delayMs"):
                await trio.sleep(r["delayMs"] / 1000)
            if r.get("untilAborted"):
                with trio.move_on_after(5):
                    await trio.sleep_forever()
                self.recorder.problems.append(
                    f"model response #{self.calls} waited 5000 ms for an abort that never came"
                )
            await trio.testing.wait_all_tasks_blocked()
        except trio.Cancelled:
            # The run was aborted: end the response the way the oracle's provider does.
            message = attrs.evolve(snap(), stop_reason="aborted", error_message=abort_message)
            stream.push(ErrorEvent(reason="aborted", error=message))
            raise
        final = attrs.evolve(
            template,
            content=assistant_blocks(copy.deepcopy(final_content)),
            usage=converter.structure(merge_usage(r.get("usage")), Usage),
            stop_reason=stop_reason,
            error_message=r.get("errorMessage", DEFAULT_ERRORS.get(stop_reason)),
        )
        if st.get("terminal", True) is False:
            stream.end(final)
        elif stop_reason in ("error", "aborted"):
            stream.push(ErrorEvent(reason=stop_reason, error=final))
        else:
            stream.push(DoneEvent(reason=stop_reason, message=final))
