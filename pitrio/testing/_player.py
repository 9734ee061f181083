"""The conformance player: runs a Pi oracle scenario on pitrio and records the trace.

This implements the scenario format of the oracle's ``SCENARIOS.md`` (scripted model,
tools and hooks, script ops, triggered actions) and produces records in the oracle's
trace format, so that ``python3 compare.py expected.json actual.json`` can compare them.

How JavaScript's scheduling is reproduced:

* Scenarios run in virtual time (``MockClock(autojump_threshold=0)``) under
  :func:`fifo_scheduling`, so tasks that wake together run in the order they woke, as
  JavaScript's event loop does.
* The oracle's scripted provider yields one macrotask turn (``setImmediate``) before
  every event, which lets every pending microtask run; here that is
  :func:`trio.testing.wait_all_tasks_blocked`.
* Scripted tools handle the abort signal themselves (as Pi's tools must): they shield
  their body from the loop's cancel scope and watch the signal, so their abort
  message and timing are the scenario's.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, Literal, assert_never, cast

import attrs
import trio
import trio.testing

from .._agent import Agent
from .._events import (
    AgentEnd,
    AgentEvent,
    AgentStart,
    DoneEvent,
    ErrorEvent,
    MessageEnd,
    MessageStart,
    MessageUpdate,
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
    ToolExecutionEnd,
    ToolExecutionStart,
    ToolExecutionUpdate,
    ToolResult,
    TurnEnd,
    TurnStart,
    UpdateEvent,
)
from .._loop import agent_loop, agent_loop_continue, run_agent_loop, run_agent_loop_continue
from .._loop_config import AgentContext, LoopConfig, NextTurn, TurnContext, error_text
from .._messages import (
    AgentMessage,
    AssistantMessage,
    CustomMessage,
    StopReason,
    ToolResultMessage,
    UserMessage,
)
from .._model import Context, Model, StreamOptions
from .._signal import AbortSignal
from .._stream import AssistantMessageEventStream
from .._tools import AfterToolCallResult, BeforeToolCallResult
from .._validation import js_json_dumps
from .._wire import converter, unstructure
from ._fifo import fifo_scheduling

PI_TEXTS: tuple[tuple[str, str], ...] = (
    (
        "Use steer() or follow_up() to queue messages",
        "Use steer() or followUp() to queue messages",
    ),
    (
        "Pass stream_fn= explicitly or call pitrio.set_default_stream_fn().",
        "Pass streamFn explicitly or call setDefaultStreamFn().",
    ),
)
"""Where pitrio's error texts name Python API and Pi's name JavaScript API: pairs of
(pitrio's words, Pi's words). The runtime speaks Python; :func:`pi_text` turns its
texts back into Pi's when a trace is compared with the oracle's (``docs/testing.md``)."""


def pi_text(text: str) -> str:
    """``text`` with pitrio's Python API names replaced by Pi's (:data:`PI_TEXTS`)."""
    for python, pi in PI_TEXTS:
        if python in text:
            text = text.replace(python, pi)
    return text


__all__ = ["RunProblem", "ScenarioError", "normalize_event", "normalize_message", "play"]

Record = dict[str, Any]

ZERO_USAGE_WIRE: dict[str, Any] = {
    "input": 0,
    "output": 0,
    "cacheRead": 0,
    "cacheWrite": 0,
    "totalTokens": 0,
    "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
}
_ASSISTANT_DROPPED = ("api", "provider", "model", "responseId", "responseModel")
_LLM_ROLES = ("user", "assistant", "toolResult")


class ScenarioError(Exception):
    """The scenario file is not valid (exit status 2)."""


class RunProblem(Exception):
    """The scenario ran but misbehaved (exit status 3)."""


# --------------------------------------------------------------------------------------
# Normalization into trace form


def _is_zero_usage(value: Any) -> bool:
    return isinstance(value, dict) and value == ZERO_USAGE_WIRE


def _norm_obj(wire: Any) -> Any:
    if not isinstance(wire, dict):
        return wire
    return {
        k: (None if v is JS_NULL else v)
        for k, v in wire.items()
        if v is not None and k != "timestamp" and not (k == "usage" and _is_zero_usage(v))
    }


def normalize_message(message: AgentMessage) -> Record:
    """A message as the oracle writes it (no timestamps, zero usage or provider ids)."""
    if isinstance(message, CustomMessage):
        # Every field of a custom message is the application's: a None is JSON null.
        return {k: v for k, v in unstructure(message).items() if k != "timestamp"}
    out: Record = _norm_obj(unstructure(message))
    content: object = getattr(message, "content", "")
    if isinstance(message, UserMessage) and content is None:
        out["content"] = None  # a custom message's null content, mapped to a user message
    if out.get("role") == "assistant":
        for key in _ASSISTANT_DROPPED:
            out.pop(key, None)
    return out


def _norm_tool_result(result: ToolResult) -> Record:
    record: Record = _norm_obj(unstructure(result))  # a ToolResult unstructures to a dict
    return record


def _norm_assistant_event(event: UpdateEvent) -> Record:
    out: Record = {"type": event.type, "contentIndex": event.content_index}
    match event:
        case TextDeltaEvent() | ThinkingDeltaEvent() | ToolCallDeltaEvent():
            out["delta"] = event.delta
        case TextEndEvent() | ThinkingEndEvent():
            out["content"] = event.content
        case ToolCallEndEvent():
            out["toolCall"] = unstructure(event.tool_call)
        case TextStartEvent() | ThinkingStartEvent() | ToolCallStartEvent():
            pass
        case _:
            assert_never(event)
    return out


def normalize_event(event: AgentEvent) -> Record:
    """An agent event as a trace record."""
    kind = event.type
    match event:
        case AgentStart() | TurnStart():
            return {"type": kind}
        case MessageStart() | MessageEnd():
            return {"type": kind, "message": normalize_message(event.message)}
        case MessageUpdate():
            return {
                "type": kind,
                "event": _norm_assistant_event(event.assistant_message_event),
                "message": normalize_message(event.message),
            }
        case ToolExecutionStart():
            return {
                "type": kind,
                "toolCallId": event.tool_call_id,
                "toolName": event.tool_name,
                "args": copy.deepcopy(event.args),
            }
        case ToolExecutionUpdate():
            return {
                "type": kind,
                "toolCallId": event.tool_call_id,
                "toolName": event.tool_name,
                "args": copy.deepcopy(event.args),
                "partialResult": _norm_tool_result(event.partial_result),
            }
        case ToolExecutionEnd():
            return {
                "type": kind,
                "toolCallId": event.tool_call_id,
                "toolName": event.tool_name,
                "result": _norm_tool_result(event.result),
                "isError": event.is_error,
            }
        case TurnEnd():
            return {
                "type": kind,
                "message": normalize_message(event.message),
                "toolResults": [normalize_message(m) for m in event.tool_results],
            }
        case AgentEnd():
            return {"type": kind, "messages": [normalize_message(m) for m in event.messages]}
        case _:
            assert_never(event)


_LEADING = ("type", "role", "op", "hook")


def canonical(value: Any) -> Any:
    """Keys sorted as the oracle prints them (``type``, ``role``, ``op``, ``hook`` first)."""
    if isinstance(value, list):
        return [canonical(v) for v in value]
    if not isinstance(value, dict):
        return value
    # A None here is JSON null (absent fields were left out when the record was built).
    keys = sorted(value, key=lambda k: (_LEADING.index(k) if k in _LEADING else 99, k))
    return {k: canonical(value[k]) for k in keys}


def format_trace(records: Sequence[Record]) -> str:
    """The trace as the oracle prints it: a JSON array, one record per line."""
    lines = [json.dumps(canonical(r), ensure_ascii=False, separators=(",", ":")) for r in records]
    return "[\n" + ",\n".join(lines) + "\n]\n" if lines else "[]\n"


# --------------------------------------------------------------------------------------
# Scenario helpers

_TOP_KEYS = {
    "name",
    "description",
    "mode",
    "loopApi",
    "systemPrompt",
    "thinkingLevel",
    "modelId",
    "messages",
    "tools",
    "model",
    "config",
    "script",
    "actions",
    "timeoutMs",
    "note",
}


def _validate(s: Any) -> None:
    if not isinstance(s, dict):
        msg = "scenario: must be an object"
        raise ScenarioError(msg)
    for key in s:
        if key not in _TOP_KEYS:
            msg = f'scenario: unknown key "{key}" (allowed: {", ".join(sorted(_TOP_KEYS))})'
            raise ScenarioError(msg)
    if s.get("mode") not in ("agent", "loop"):
        msg = "scenario.mode: must be one of agent | loop"
        raise ScenarioError(msg)
    if not isinstance(s.get("model"), dict) or not isinstance(s["model"].get("responses"), list):
        msg = 'scenario.model: is required: {"responses": [...]}'
        raise ScenarioError(msg)
    if not isinstance(s.get("script"), list) or not s["script"]:
        msg = "scenario.script: must be a non-empty array"
        raise ScenarioError(msg)
    if s.get("loopApi") is not None and s["mode"] != "loop":
        msg = 'scenario.loopApi: only valid with mode "loop"'
        raise ScenarioError(msg)


def make_model(model_id: str) -> Model:
    """The oracle's scripted model object."""
    return Model(
        id=model_id,
        name=model_id,
        api="scripted",
        provider="scripted",
        base_url="",
        reasoning=True,
        input=("text",),
        context_window=100000,
        max_tokens=4096,
    )


def _text_blocks(text: str) -> list[Record]:
    return [{"type": "text", "text": text}]


def _merge_usage(usage: Any) -> Record:
    merged = copy.deepcopy(ZERO_USAGE_WIRE)
    if usage:
        cost = {**merged["cost"], **(usage.get("cost") or {})}
        merged.update(copy.deepcopy(usage))
        merged["cost"] = cost
    return merged


def _default_stop(content: Sequence[Record]) -> str:
    return "toolUse" if any(b.get("type") == "toolCall" for b in content) else "stop"


def _blocks(data: Any) -> Any:
    if isinstance(data, str):
        return data
    return tuple(converter.structure(b, _BLOCK_UNION) for b in data)


from .._messages import AssistantContent, UserContent  # noqa: E402

_BLOCK_UNION: Any = AssistantContent
_USER_UNION: Any = UserContent


def make_message(spec: Record, model: Model) -> AgentMessage:
    """A scenario message spec as a runtime message (SCENARIOS.md §2)."""
    role = spec.get("role")
    if role == "user":
        content = _text_blocks(spec["text"]) if "text" in spec else copy.deepcopy(spec["content"])
        return UserMessage(
            content=content
            if isinstance(content, str)
            else tuple(converter.structure(b, _USER_UNION) for b in content),
            timestamp=0,
        )
    if role == "assistant":
        content = (
            _text_blocks(spec["text"]) if "text" in spec else copy.deepcopy(spec.get("content", []))
        )
        return AssistantMessage(
            content=_blocks(content),
            api=model.api,
            provider=model.provider,
            model=model.id,
            usage=converter.structure(_merge_usage(spec.get("usage")), _Usage),
            stop_reason=cast(StopReason, spec.get("stopReason") or _default_stop(content)),
            error_message=spec.get("errorMessage"),
            timestamp=0,
        )
    if role == "toolResult":
        content = (
            _text_blocks(spec["text"]) if "text" in spec else copy.deepcopy(spec.get("content", []))
        )
        return ToolResultMessage(
            tool_call_id=spec["toolCallId"],
            tool_name=spec["toolName"],
            content=tuple(converter.structure(b, _USER_UNION) for b in content),
            details=JS_NULL
            if "details" in spec and spec["details"] is None
            else copy.deepcopy(spec.get("details")),
            is_error=spec.get("isError", False),
            timestamp=0,
        )
    fields = {k: copy.deepcopy(v) for k, v in spec.items() if k != "role"}
    fields["timestamp"] = 0
    return CustomMessage(role=str(role), fields=fields)


from .._messages import Usage as _Usage  # noqa: E402


def _roles(messages: Sequence[AgentMessage]) -> list[str]:
    return [m.role for m in messages]


# --------------------------------------------------------------------------------------
# The player


@attrs.define(eq=False)
class _Action:
    on: Record
    do: list[Record]
    count: int = 0
    fired: bool = False


class Player:
    """Runs one scenario; ``records`` is the trace, ``problems`` what went wrong."""

    def __init__(self, scenario: Record) -> None:
        _validate(scenario)
        self.s = scenario
        self.mode: str = scenario["mode"]
        self.loop_api: str = scenario.get("loopApi", "stream")
        self.cfg: Record = scenario.get("config", {})
        self.base_model = make_model(scenario.get("modelId", "scripted-model"))
        self.records: list[Record] = []
        self.problems: list[str] = []
        self.actions = [_Action(on=a["on"], do=a["do"]) for a in scenario.get("actions", [])]
        self.tag_loop_side = self.mode == "loop" and self.loop_api == "stream"
        self.tool_call_counts: dict[str, int] = {}
        self.responses: list[Record] = scenario["model"]["responses"]
        self.model_calls = 0
        self.responses_used = 0
        self.default_chunk: int = (scenario["model"].get("stream") or {}).get("chunkSize", 8)
        self.stop_calls = 0
        self.timer_seq = 0
        self.listener_depth = 0
        self.prepare_calls = 0
        self.agent: Agent | None = None
        self.loop_transcript: list[AgentMessage] = [
            make_message(m, self.base_model) for m in scenario.get("messages", [])
        ]
        self.steering_queue: list[AgentMessage] = []
        self.follow_up_queue: list[AgentMessage] = []
        self.steering_mode: str = self.cfg.get("steeringMode", "one-at-a-time")
        self.follow_up_mode: str = self.cfg.get("followUpMode", "one-at-a-time")
        self.loop_signal: AbortSignal | None = None
        self.nursery: trio.Nursery | None = None
        self.tools = [self._make_tool(t) for t in scenario.get("tools", [])]

    # -- records and actions -------------------------------------------------------------

    def _matches(self, on: Record, rec: Record) -> bool:
        if rec.get("type") != on["type"]:
            return False
        for key in ("toolName", "toolCallId", "hook", "op"):
            if key in on and rec.get(key) != on[key]:
                return False
        if "event" in on and (rec.get("event") or {}).get("type") != on["event"]:
            return False
        return not ("role" in on and (rec.get("message") or {}).get("role") != on["role"])

    def push(self, rec: Record, *, loop_side: bool = False) -> list[_Action]:
        if self.tag_loop_side and loop_side:
            rec["side"] = "loop"
        self.records.append(rec)
        fired = []
        for action in self.actions:
            if action.fired or not self._matches(action.on, rec):
                continue
            action.count += 1
            if action.count == action.on.get("nth", 1):
                action.fired = True
                fired.append(action)
        return fired

    async def emit(self, rec: Record, *, loop_side: bool = False) -> None:
        """Record, then run the ops of the actions it triggers, in order."""
        for action in self.push(rec, loop_side=loop_side):
            for op in action.do:
                await self.run_op(op, on=action.on, loop_side=loop_side)

    # -- tools ---------------------------------------------------------------------------

    def _pick_behaviour(self, t: Record, tool_call_id: str) -> Record:
        n = self.tool_call_counts.get(t["name"], 0) + 1
        self.tool_call_counts[t["name"]] = n
        by_id: dict[str, Record] = t.get("byCallId") or {}
        if tool_call_id in by_id:
            return by_id[tool_call_id]
        calls: list[Record | None] = t.get("calls") or []
        chosen = calls[n - 1] if n - 1 < len(calls) else None
        if chosen is not None:  # {} is truthy in JS
            return chosen
        default: Record = t.get("default") or {}
        return default

    def _make_tool(self, t: Record) -> Any:
        player = self

        async def execute(
            tool_call_id: str,
            params: Any,
            signal: AbortSignal,
            on_update: Callable[[ToolResult], None],
        ) -> ToolResult:
            b = player._pick_behaviour(t, tool_call_id)
            await player.emit(
                {
                    "type": "tool_execute",
                    "toolCallId": tool_call_id,
                    "toolName": t["name"],
                    "params": copy.deepcopy(params),
                },
                loop_side=True,
            )
            # Pi's tools see the abort only through the signal; shield the body from the
            # loop's cancel scope and watch the signal the way the oracle's tools do.
            with trio.CancelScope(shield=True):
                result = await player._tool_body(t, b, params, signal, on_update)
            return result

        def prepare_arguments(args: Any) -> Any:
            pa = t.get("prepareArguments")
            if pa is None or not isinstance(args, dict):
                return args
            out = dict(args)
            changed = False
            for src, dst in (pa.get("rename") or {}).items():
                if src in out:
                    # out[to] = out[from]; delete out[from]: an existing key keeps its place
                    out[dst] = out[src]
                    del out[src]
                    changed = True
            for key, value in (pa.get("defaults") or {}).items():
                if key not in out:
                    out[key] = copy.deepcopy(value)
                    changed = True
            return out if changed else args

        return _ScriptedTool(
            name=t["name"],
            label=str(t.get("label", t["name"])),
            description=t.get("description", f"{t['name']} tool"),
            parameters=copy.deepcopy(t.get("parameters", {"type": "object", "properties": {}})),
            execution_mode=t.get("executionMode"),
            execute_fn=execute,
            prepare_fn=prepare_arguments if t.get("prepareArguments") else None,
        )

    async def _abortable_sleep(self, ms: float, signal: AbortSignal | None) -> bool:
        """Sleep; returns True when cut short by the abort (the oracle's abortableSleep)."""
        # Node fires timers of equal duration in creation order, each with its microtasks
        # run to the end: a creation-ordered microsecond keeps equal deadlines apart.
        self.timer_seq += 1
        seconds = ms / 1000 + self.timer_seq * 1e-6
        if signal is None:
            await trio.sleep(seconds)
            return False
        if signal.aborted:
            await trio.lowlevel.checkpoint()  # `await Promise.resolve(true)`: one tick
            return True
        woke = trio.Event()
        remove = signal.add_callback(woke.set)
        with trio.move_on_after(seconds):
            await woke.wait()
        remove()
        return woke.is_set()

    async def _wait_for_abort(self, signal: AbortSignal, what: str) -> bool:
        if signal.aborted:
            await trio.lowlevel.checkpoint()
            return True
        woke = trio.Event()
        remove = signal.add_callback(woke.set)
        with trio.move_on_after(5):
            await woke.wait()
        remove()
        if not woke.is_set():
            self.problems.append(f"{what} waited 5000 ms for an abort that never came")
        return woke.is_set()

    async def _tool_body(
        self,
        t: Record,
        b: Record,
        params: Any,
        signal: AbortSignal,
        on_update: Callable[[ToolResult], None],
    ) -> ToolResult:
        respect = b.get("onAbort", "throw") == "throw"
        sig = signal if respect else None
        abort_message = b.get("abortMessage", "Operation aborted")
        if respect and signal.aborted:
            raise Exception(abort_message)
        for u in b.get("updates") or []:
            if u.get("delayMs") and await self._abortable_sleep(u["delayMs"], sig):
                raise Exception(abort_message)
            content = u["content"] if "content" in u else _text_blocks(_js_or(u.get("text"), ""))
            on_update(
                converter.structure(
                    {
                        "content": copy.deepcopy(content),
                        "details": _details(u),
                    },
                    ToolResult,
                )
            )
        if b.get("delayMs") and await self._abortable_sleep(b["delayMs"], sig):
            raise Exception(abort_message)
        if b.get("untilAborted"):
            await self._wait_for_abort(signal, f"tool {t['name']}")
            raise Exception(abort_message)
        if respect and signal.aborted:
            raise Exception(abort_message)
        if "throw" in b:
            raise Exception(b["throw"])
        if "content" in b:
            content = copy.deepcopy(b["content"])
        else:
            text = js_json_dumps(params) if b.get("echoArgs") else _js_or(b.get("text"), "ok")
            content = _text_blocks(text)
        result: Record = {
            "content": content,
            "details": _details(b),
        }
        if "terminate" in b:
            result["terminate"] = b["terminate"]
        if "addedToolNames" in b:
            result["addedToolNames"] = list(b["addedToolNames"])
        return converter.structure(result, ToolResult)

    # -- the scripted model --------------------------------------------------------------

    async def stream_fn(
        self, model: Model, context: Context, options: StreamOptions
    ) -> AssistantMessageEventStream:
        self.model_calls += 1
        signal = options.signal
        rec: Record = {
            "type": "model_call",
            "index": self.model_calls,
            "model": model.id,
            "systemPrompt": context.system_prompt,
            "messages": [normalize_message(m) for m in context.messages],
            "tools": [t.name for t in context.tools],
        }
        if options.reasoning is not None:
            rec["reasoning"] = options.reasoning
        await self.emit(rec, loop_side=True)
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
        if self.responses_used >= len(self.responses):
            self.problems.append(
                f"model called {self.model_calls} time(s) but only "
                f"{len(self.responses)} response(s) are scripted"
            )
            return failing(
                "error", f"oracle: no scripted response for model call {self.model_calls}"
            )
        r = self.responses[self.responses_used]
        self.responses_used += 1
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
        final_content = [_final_block(b) for b in blocks]
        stop_reason: Any = r.get("stopReason") or _default_stop(final_content)
        st = r.get("stream") or {}
        size = st.get("chunkSize", self.default_chunk)
        partial_content: list[Record] = []
        abort_message = r.get("abortMessage", "Request was aborted")

        def snap() -> AssistantMessage:
            return attrs.evolve(template, content=_blocks(copy.deepcopy(partial_content)))

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
                        for c in _chunk(fb[key], size, b.get("chunks")):
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
                        for c in _chunk(args_json, size, b.get("chunks")):
                            await trio.testing.wait_all_tasks_blocked()
                            stream.push(
                                ToolCallDeltaEvent(content_index=i, delta=c, partial=snap())
                            )
                        await trio.testing.wait_all_tasks_blocked()
                        partial_content[i] = copy.deepcopy(fb)
                        stream.push(
                            ToolCallEndEvent(
                                content_index=i,
                                tool_call=converter.structure(copy.deepcopy(fb), _BLOCK_UNION),
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
                self.problems.append(
                    f"model response #{self.model_calls} waited 5000 ms "
                    "for an abort that never came"
                )
            await trio.testing.wait_all_tasks_blocked()
        except trio.Cancelled:
            # The run was aborted: end the response the way the oracle's provider does.
            message = attrs.evolve(snap(), stop_reason="aborted", error_message=abort_message)
            stream.push(ErrorEvent(reason="aborted", error=message))
            raise
        final = attrs.evolve(
            template,
            content=_blocks(copy.deepcopy(final_content)),
            usage=converter.structure(_merge_usage(r.get("usage")), _Usage),
            stop_reason=stop_reason,
            error_message=r.get("errorMessage", _DEFAULT_ERRORS.get(stop_reason)),
        )
        if st.get("terminal", True) is False:
            stream.end(final)
        elif stop_reason in ("error", "aborted"):
            stream.push(ErrorEvent(reason=stop_reason, error=final))
        else:
            stream.push(DoneEvent(reason=stop_reason, message=final))

    # -- hooks ---------------------------------------------------------------------------

    @staticmethod
    def _rule_for(rules: list[Record], tool_call: Any) -> Record | None:
        for r in rules:
            if ("toolName" not in r or r["toolName"] == tool_call.name) and (
                "toolCallId" not in r or r["toolCallId"] == tool_call.id
            ):
                return r
        return None

    async def before_tool_call(self, ctx: Any, signal: AbortSignal | None) -> Any:
        rule = self._rule_for(self.cfg["beforeToolCall"], ctx.tool_call)
        returned: Record | None = None
        if (
            rule
            and "throw" not in rule
            and any(k in rule for k in ("block", "reason", "terminate"))
        ):
            returned = {k: rule[k] for k in ("block", "reason", "terminate") if k in rule}
        rec: Record = {
            "type": "hook",
            "hook": "beforeToolCall",
            "toolCallId": ctx.tool_call.id,
            "toolName": ctx.tool_call.name,
            "args": copy.deepcopy(ctx.args),
        }
        if rule and "throw" in rule:
            rec["throws"] = rule["throw"]
        else:
            rec["returned"] = returned
        await self.emit(rec, loop_side=True)
        if rule and "throw" in rule:
            raise Exception(rule["throw"])
        if returned is None:
            return None
        return BeforeToolCallResult(
            block=bool(returned.get("block", False)),
            reason=returned.get("reason"),
            terminate=returned.get("terminate"),
        )

    async def after_tool_call(self, ctx: Any, signal: AbortSignal | None) -> Any:
        rule = self._rule_for(self.cfg["afterToolCall"], ctx.tool_call)
        returned: Record | None = None
        if rule and "throw" not in rule:
            returned = {}
            if "text" in rule:
                returned["content"] = _text_blocks(rule["text"])
            if "content" in rule:
                returned["content"] = copy.deepcopy(rule["content"])
            for key in ("details", "isError", "terminate"):
                if key in rule:
                    returned[key] = copy.deepcopy(rule[key])
        rec: Record = {
            "type": "hook",
            "hook": "afterToolCall",
            "toolCallId": ctx.tool_call.id,
            "toolName": ctx.tool_call.name,
            "args": copy.deepcopy(ctx.args),
            "result": _norm_tool_result(ctx.result),
            "isError": ctx.is_error,
        }
        if rule and "throw" in rule:
            rec["throws"] = rule["throw"]
        else:
            rec["returned"] = returned
        await self.emit(rec, loop_side=True)
        if rule and "throw" in rule:
            raise Exception(rule["throw"])
        if returned is None:
            return None
        return AfterToolCallResult(
            content=tuple(converter.structure(b, _USER_UNION) for b in returned["content"])
            if returned.get("content") is not None
            else None,
            details=returned.get("details"),
            is_error=returned.get("isError"),
            terminate=returned.get("terminate"),
        )

    async def should_stop_after_turn(self, ctx: TurnContext, signal: Any = None) -> bool:
        self.stop_calls += 1
        returned = self.stop_calls in self.cfg["shouldStopAfterTurn"].get("stopOnCalls", [])
        await self.emit(
            {
                "type": "hook",
                "hook": "shouldStopAfterTurn",
                "call": self.stop_calls,
                "stopReason": ctx.message.stop_reason,
                "toolResults": len(ctx.tool_results),
                "newMessages": len(ctx.new_messages),
                "returned": returned,
            },
            loop_side=True,
        )
        return returned

    async def prepare_next_turn(self, ctx: TurnContext, signal: Any = None) -> NextTurn | None:
        self.prepare_calls += 1
        rule = next(
            (r for r in self.cfg["prepareNextTurn"] if r.get("call") == self.prepare_calls), None
        )
        update: NextTurn | None = None
        summary: Record | None = None
        if rule is not None:
            summary = {}
            context = None
            if any(k in rule for k in ("systemPrompt", "keepLast", "dropRoles")):
                msgs = list(ctx.context.messages)
                if rule.get("dropRoles"):
                    msgs = [m for m in msgs if m.role not in rule["dropRoles"]]
                if "keepLast" in rule:
                    msgs = msgs[max(0, len(msgs) - rule["keepLast"]) :]
                context = AgentContext(
                    system_prompt=rule.get("systemPrompt", ctx.context.system_prompt),
                    messages=msgs,
                    tools=ctx.context.tools,
                )
                summary["systemPrompt"] = context.system_prompt
                summary["messages"] = _roles(msgs)
            model = None
            if "modelId" in rule:
                model = make_model(rule["modelId"])
                summary["model"] = rule["modelId"]
            if "thinkingLevel" in rule:
                summary["thinkingLevel"] = rule["thinkingLevel"]
            update = NextTurn(
                context=context, model=model, thinking_level=rule.get("thinkingLevel")
            )
        await self.emit(
            {
                "type": "hook",
                "hook": "prepareNextTurn",
                "call": self.prepare_calls,
                "stopReason": ctx.message.stop_reason,
                "toolResults": len(ctx.tool_results),
                "returned": summary,
            },
            loop_side=True,
        )
        return update

    async def transform_context(
        self, messages: list[AgentMessage], signal: Any = None
    ) -> list[AgentMessage]:
        tc = self.cfg["transformContext"]
        out = list(messages)
        if tc.get("dropRoles"):
            out = [m for m in out if m.role not in tc["dropRoles"]]
        if "keepLast" in tc:
            out = out[max(0, len(out) - tc["keepLast"]) :]
        await self.emit(
            {
                "type": "hook",
                "hook": "transformContext",
                "input": _roles(messages),
                "returned": _roles(out),
            },
            loop_side=True,
        )
        return out

    def _convert(self, messages: list[AgentMessage]) -> list[AgentMessage]:
        cv = self.cfg.get("convertToLlm")
        out: list[AgentMessage] = []
        for m in messages:
            if m.role in _LLM_ROLES:
                out.append(m)
            elif cv and m.role in (cv.get("toUser") or []):
                fields = m.fields if isinstance(m, CustomMessage) else attrs.asdict(m)
                # m.content !== undefined ? m.content : (m.text ?? "")
                raw = fields["content"] if "content" in fields else fields.get("text")
                if raw is None and "content" not in fields:
                    raw = ""
                if isinstance(raw, str):
                    content: Any = tuple(
                        converter.structure(b, _USER_UNION)
                        for b in _text_blocks(cv.get("prefix", "") + raw)
                    )
                elif isinstance(raw, list):
                    content = tuple(converter.structure(b, _USER_UNION) for b in raw)
                else:
                    content = copy.deepcopy(raw)  # passed through as the oracle does
                out.append(UserMessage(content=content, timestamp=fields.get("timestamp", 0) or 0))
        return out

    async def convert_to_llm(self, messages: list[AgentMessage]) -> list[AgentMessage]:
        out = self._convert(messages)
        await self.emit(
            {
                "type": "hook",
                "hook": "convertToLlm",
                "input": _roles(messages),
                "returned": _roles(out),
            },
            loop_side=True,
        )
        return out

    # -- state ---------------------------------------------------------------------------

    def state_record(self, final: bool) -> Record:
        if self.mode == "agent":
            assert self.agent is not None
            st = self.agent.state
            return {
                "type": "state",
                "final": final,
                "systemPrompt": st.system_prompt,
                "messages": [normalize_message(m) for m in st.messages],
                "isStreaming": st.is_streaming,
                "streamingMessage": normalize_message(st.streaming_message)
                if st.streaming_message is not None
                else None,
                "pendingToolCalls": sorted(st.pending_tool_calls),
                "errorMessage": st.error_message,
                "hasQueuedMessages": self.agent.has_queued_messages(),
            }
        return {
            "type": "state",
            "final": final,
            "messages": [normalize_message(m) for m in self.loop_transcript],
            "queuedSteering": len(self.steering_queue),
            "queuedFollowUp": len(self.follow_up_queue),
        }

    # -- ops -----------------------------------------------------------------------------

    def _op_message(self, op: Record) -> AgentMessage:
        if "message" in op:
            return make_message(op["message"], self.base_model)
        return UserMessage(
            content=tuple(converter.structure(b, _USER_UNION) for b in _text_blocks(op["text"])),
            timestamp=0,
        )

    def _loop_prompts(self, op: Record) -> list[AgentMessage]:
        if "text" in op:
            return [self._op_message(op)]
        if "message" in op:
            return [make_message(op["message"], self.base_model)]
        return [make_message(m, self.base_model) for m in op["messages"]]

    def _record_now(self, rec: Record) -> Coroutine[Any, Any, None] | None:
        """Record from a synchronous observer (a listener, the loop's emit).

        The record and the synchronous ops it triggers happen now. A triggered
        ``prompt``/``continue`` (which fails while a run is active) is recorded now, but
        the failing call and the ops after it are returned as a coroutine, as the
        oracle's observer returns the promise of its async op.
        """
        self.listener_depth += 1
        try:
            ops = [(op, a.on) for a in self.push(rec) for op in a.do]
            for index, (op, on) in enumerate(ops):
                if op["op"] in ("prompt", "continue") and self.mode == "agent":
                    _run_to_completion(self.emit(self._action_record(op, on)))
                    return self._finish_ops(op, ops[index + 1 :])
                _run_to_completion(self.run_op(op, on=on))
            return None
        finally:
            self.listener_depth -= 1

    async def _finish_ops(self, op: Record, rest: list[tuple[Record, Record]]) -> None:
        await self._agent_op(op, False)
        for later, on in rest:
            await self.run_op(later, on=on)

    async def _emit_error(
        self, op_name: str, exc: BaseException, *, loop_side: bool = False
    ) -> None:
        if (
            op_name in ("prompt", "continue")
            and self.listener_depth == 0
            and self.agent is not None
            and self.agent.is_running
        ):
            # The oracle's prompt()/continue() are async: their rejection is recorded a
            # few microtasks later, while the run goes on.
            await trio.lowlevel.checkpoint()
        await self.emit(
            {"type": "error", "op": op_name, "message": pi_text(error_text(exc))},
            loop_side=loop_side,
        )

    def _action_record(self, op: Record, on: Record | None) -> Record:
        name = op["op"]
        rec: Record = {"type": "action", "op": name}
        if on is not None:
            rec["on"] = copy.deepcopy(on)
        if name in ("steer", "followUp"):
            rec["message"] = normalize_message(self._op_message(op))
        if name in ("prompt", "loop", "setMessages"):
            if "text" in op:
                rec["text"] = op["text"]
            if "message" in op:
                rec["message"] = normalize_message(make_message(op["message"], self.base_model))
            if "messages" in op:
                rec["messages"] = [
                    normalize_message(make_message(m, self.base_model)) for m in op["messages"]
                ]
        if "mode" in op:
            rec["mode"] = op["mode"]
        if "ms" in op:
            rec["ms"] = op["ms"]
        if name == "fail":
            rec["message"] = op["message"]
        if op.get("await") is False:
            rec["await"] = False
        return rec

    async def run_op(
        self, op: Record, *, on: Record | None = None, loop_side: bool = False
    ) -> None:
        name = op["op"]
        rec = self._action_record(op, on)
        if name == "waitForIdle":
            assert self.agent is not None
            await self.agent.wait_for_idle()
            await self.emit(rec, loop_side=loop_side)
            return
        await self.emit(rec, loop_side=loop_side)
        if self.mode == "agent":
            await self._agent_op(op, loop_side)
        else:
            await self._loop_op(op, loop_side)

    async def _agent_op(self, op: Record, loop_side: bool) -> None:
        agent = self.agent
        assert agent is not None
        name = op["op"]
        if name == "fail":
            # The observer that made the triggering record (a listener) raises; see
            # tests/data/oracle-extra-3/README.md for this op of the extended oracle.
            raise RuntimeError(op["message"])
        if name in ("prompt", "continue"):
            if name == "prompt":
                if "text" in op:
                    args: tuple[Any, ...] = (op["text"],)
                elif "message" in op:
                    args = (make_message(op["message"], self.base_model),)
                else:
                    args = ([make_message(m, self.base_model) for m in op["messages"]],)
                call: Callable[..., Any] = lambda ts: agent.prompt(*args, task_status=ts)  # noqa: E731
            else:
                call = lambda ts: agent.resume(task_status=ts)  # noqa: E731

            async def guarded(
                task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
            ) -> None:
                started = False

                class _Status:
                    def started(self, value: None = None) -> None:
                        nonlocal started
                        started = True
                        task_status.started()

                try:
                    await call(_Status())
                except RunProblem as exc:
                    self.problems.append(str(exc))
                except Exception as exc:
                    if not started:
                        started = True
                        task_status.started()
                    await self._emit_error(name, exc, loop_side=loop_side)
                finally:
                    if not started:
                        task_status.started()

            if op.get("await") is False:
                assert self.nursery is not None
                await self.nursery.start(guarded)
            else:
                await guarded()
            return
        try:
            if name == "steer":
                agent.steer(self._op_message(op))
            elif name == "followUp":
                agent.follow_up(self._op_message(op))
            elif name == "abort":
                agent.abort()
            elif name == "reset":
                agent.reset()
            elif name == "clearSteeringQueue":
                agent.clear_steering_queue()
            elif name == "clearFollowUpQueue":
                agent.clear_follow_up_queue()
            elif name == "clearAllQueues":
                agent.clear_all_queues()
            elif name == "setSteeringMode":
                agent.steering_mode = op["mode"]
            elif name == "setFollowUpMode":
                agent.follow_up_mode = op["mode"]
            elif name == "setMessages":
                agent.state.messages = [make_message(m, self.base_model) for m in op["messages"]]
            elif name == "state":
                await self.emit(self.state_record(False), loop_side=loop_side)
            elif name == "sleep":
                await trio.sleep(op["ms"] / 1000)
        except Exception as exc:
            await self._emit_error(name, exc, loop_side=loop_side)

    def _drain(self, queue: list[AgentMessage], mode: str) -> list[AgentMessage]:
        if mode == "all":
            out = list(queue)
            queue.clear()
            return out
        return [queue.pop(0)] if queue else []

    async def _loop_op(self, op: Record, loop_side: bool) -> None:
        name = op["op"]
        if name in ("loop", "loopContinue"):
            await self._run_loop_op(op)
        elif name == "steer":
            self.steering_queue.append(self._op_message(op))
        elif name == "followUp":
            self.follow_up_queue.append(self._op_message(op))
        elif name == "abort":
            if self.loop_signal is not None:
                self.loop_signal.abort()
        elif name == "clearSteeringQueue":
            self.steering_queue.clear()
        elif name == "clearFollowUpQueue":
            self.follow_up_queue.clear()
        elif name == "clearAllQueues":
            self.steering_queue.clear()
            self.follow_up_queue.clear()
        elif name == "setSteeringMode":
            self.steering_mode = op["mode"]
        elif name == "setFollowUpMode":
            self.follow_up_mode = op["mode"]
        elif name == "setMessages":
            self.loop_transcript = [make_message(m, self.base_model) for m in op["messages"]]
        elif name == "state":
            await self.emit(self.state_record(False), loop_side=loop_side)
        elif name == "sleep":
            await trio.sleep(op["ms"] / 1000)

    def _recorded_poll(
        self, hook: str, poll: Callable[[], Any], *, loop_side: bool = False
    ) -> Callable[[], Awaitable[list[AgentMessage]]]:
        """A queue poll that records what it returned (a ``hook`` record), as the oracle's."""

        async def recorded() -> list[AgentMessage]:
            out = list(poll())
            await self.emit(
                {"type": "hook", "hook": hook, "returned": [normalize_message(m) for m in out]},
                loop_side=loop_side,
            )
            return out

        return recorded

    def _loop_config(self) -> LoopConfig:
        get_steering = self._recorded_poll(
            "getSteeringMessages",
            lambda: self._drain(self.steering_queue, self.steering_mode),
            loop_side=True,
        )
        get_follow_up = self._recorded_poll(
            "getFollowUpMessages",
            lambda: self._drain(self.follow_up_queue, self.follow_up_mode),
            loop_side=True,
        )

        thinking = self.s.get("thinkingLevel")
        cfg = self.cfg
        return LoopConfig(
            model=self.base_model,
            convert_to_llm=self.convert_to_llm,
            get_steering_messages=get_steering,
            get_follow_up_messages=get_follow_up,
            reasoning=thinking if thinking not in (None, "off") else None,
            tool_execution=cfg.get("toolExecution", "parallel"),
            transform_context=self.transform_context if "transformContext" in cfg else None,
            before_tool_call=self.before_tool_call if "beforeToolCall" in cfg else None,
            after_tool_call=self.after_tool_call if "afterToolCall" in cfg else None,
            should_stop_after_turn=self.should_stop_after_turn
            if "shouldStopAfterTurn" in cfg
            else None,
            prepare_next_turn=self.prepare_next_turn if "prepareNextTurn" in cfg else None,
        )

    async def _run_loop_op(self, op: Record) -> None:
        context = AgentContext(
            system_prompt=self.s.get("systemPrompt", ""),
            messages=list(self.loop_transcript),
            tools=list(self.tools),
        )
        signal = self.loop_signal = AbortSignal()
        config = self._loop_config()
        name = op["op"]
        try:
            if self.loop_api == "run":

                def emit(event: AgentEvent) -> Coroutine[Any, Any, None] | None:
                    # The oracle's emit records synchronously (tool updates included).
                    return self._record_now(normalize_event(event))

                if name == "loop":
                    result = await run_agent_loop(
                        self._loop_prompts(op),
                        context,
                        config,
                        emit,
                        signal,
                        self.stream_fn,
                    )
                else:
                    result = await run_agent_loop_continue(
                        context, config, emit, signal, self.stream_fn
                    )
            else:
                stream = (
                    agent_loop(self._loop_prompts(op), context, config, signal, self.stream_fn)
                    if name == "loop"
                    else agent_loop_continue(context, config, signal, self.stream_fn)
                )
                async with stream:
                    async for event in stream:
                        await self.emit(normalize_event(event))
                result = await stream.result()
        except RunProblem:
            raise
        except Exception as exc:
            await self._emit_error(name, exc)
            self.loop_signal = None
            return
        self.loop_signal = None
        self.loop_transcript = self.loop_transcript + list(result)
        await self.emit(
            {"type": "result", "op": name, "messages": [normalize_message(m) for m in result]}
        )

    # -- the run -------------------------------------------------------------------------

    def _make_agent(self) -> Agent:
        s, cfg = self.s, self.cfg
        agent = Agent(
            system_prompt=s.get("systemPrompt", ""),
            model=self.base_model,
            thinking_level=s.get("thinkingLevel", "off"),
            tools=self.tools,
            messages=[make_message(m, self.base_model) for m in s.get("messages", [])],
            stream_fn=self.stream_fn,
            convert_to_llm=self.convert_to_llm,
            transform_context=self.transform_context if "transformContext" in cfg else None,
            before_tool_call=self.before_tool_call if "beforeToolCall" in cfg else None,
            after_tool_call=self.after_tool_call if "afterToolCall" in cfg else None,
            should_stop_after_turn=self.should_stop_after_turn
            if "shouldStopAfterTurn" in cfg
            else None,
            prepare_next_turn=self.prepare_next_turn if "prepareNextTurn" in cfg else None,
            steering_mode=cfg.get("steeringMode", "one-at-a-time"),
            follow_up_mode=cfg.get("followUpMode", "one-at-a-time"),
            tool_execution=cfg.get("toolExecution", "parallel"),
        )
        # Instrument the queue polls, as the oracle wraps Pi's createLoopConfig.
        original = agent._loop_config
        player = self

        def instrumented(skip: bool) -> LoopConfig:
            config = original(skip)
            steering, follow_up = config.get_steering_messages, config.get_follow_up_messages
            assert steering is not None
            assert follow_up is not None

            get_steering = player._recorded_poll("getSteeringMessages", steering)
            get_follow_up = player._recorded_poll("getFollowUpMessages", follow_up)

            config.get_steering_messages = get_steering
            config.get_follow_up_messages = get_follow_up
            return config

        agent._loop_config = instrumented  # type: ignore[method-assign,assignment]  # instrumentation

        def listener(event: AgentEvent, signal: AbortSignal) -> Coroutine[Any, Any, None] | None:
            # The oracle's listener records synchronously, and the ops an action may run
            # from a listener never block (prompt/continue fail at once while a run is
            # active), so the recording coroutine is run to completion right here.
            return player._record_now(normalize_event(event))

        agent.subscribe(listener)
        return agent

    async def run(self) -> None:
        if self.mode == "agent":
            self.agent = self._make_agent()
        timeout = self.s.get("timeoutMs", 20000) / 1000
        with trio.move_on_after(timeout) as scope:
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                for op in self.s["script"]:
                    await self.run_op(op)
                if self.agent is not None:
                    await self.agent.wait_for_idle()
            if self.agent is not None:
                await self.agent.wait_for_idle()
        if scope.cancelled_caught:
            self.problems.append(
                f"scenario did not finish within {int(timeout * 1000)} ms (trace so far printed)"
            )
            return
        self.push(self.state_record(True))
        if self.responses_used < len(self.responses):
            self.problems.append(
                f"{len(self.responses) - self.responses_used} scripted model response(s) "
                "were never used "
                f"(model called {self.model_calls} time(s))"
            )
        unfired = [a for a in self.actions if not a.fired]
        if unfired:
            self.problems.append(
                "action(s) never triggered: " + ", ".join(json.dumps(a.on) for a in unfired)
            )


@attrs.frozen(kw_only=True)
class _ScriptedTool:
    name: str
    label: str
    description: str
    parameters: dict[str, Any]
    execution_mode: Any
    execute_fn: Any
    prepare_fn: Any

    def prepare_arguments(self, arguments: Any) -> Any:
        return self.prepare_fn(arguments) if self.prepare_fn is not None else arguments

    async def execute(
        self, tool_call_id: str, params: Any, signal: AbortSignal, on_update: Any
    ) -> ToolResult:
        result: ToolResult = await self.execute_fn(tool_call_id, params, signal, on_update)
        return result


def _run_to_completion(coro: Coroutine[Any, Any, None]) -> None:
    try:
        coro.send(None)
    except StopIteration:
        return
    coro.close()
    msg = "an action run from a listener tried to block; only non-blocking ops are allowed there"
    raise RunProblem(msg)


class _JsNull:
    """JSON ``null`` where pitrio's ``None`` would mean "absent" (JavaScript's
    ``undefined``): a scripted ``details: null`` travels through the loop as this and is
    written back as ``null`` in records."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "null"


JS_NULL: Any = _JsNull()


def _js_or(value: Any, default: Any) -> Any:
    """JavaScript's ``value ?? default`` for a decoded JSON value."""
    return default if value is None else value


def _details(spec: Record) -> Any:
    if "details" not in spec:
        return {}
    details = spec["details"]
    return JS_NULL if details is None else copy.deepcopy(details)


_DEFAULT_ERRORS = {"error": "An unknown error occurred", "aborted": "Request was aborted"}


def _final_block(b: Record) -> Record:
    if b["type"] == "text":
        return {"type": "text", "text": b.get("text", "")}
    if b["type"] == "thinking":
        out: Record = {"type": "thinking", "thinking": b["thinking"]}
        if "thinkingSignature" in b:
            out["thinkingSignature"] = b["thinkingSignature"]
        if "redacted" in b:
            out["redacted"] = b["redacted"]
        return out
    return {
        "type": "toolCall",
        "id": b["id"],
        "name": b["name"],
        "arguments": copy.deepcopy(b.get("arguments", {})),
    }


def _chunk(text: str, size: int, explicit: list[str] | None) -> list[str]:
    if explicit:
        return list(explicit)
    if not text:
        return [""]
    return [text[i : i + size] for i in range(0, len(text), size)]


def play(scenario: Record) -> tuple[list[Record], list[str]]:
    """Run a scenario in virtual time with FIFO scheduling; returns (trace, problems)."""
    player = Player(scenario)
    with fifo_scheduling():
        trio.run(player.run, clock=trio.testing.MockClock(autojump_threshold=0))
    return player.records, player.problems
