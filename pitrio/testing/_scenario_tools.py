"""The scenario's scripted tools: ``tools[]`` of a scenario as pitrio tools (SCENARIOS.md §4).

Each tool picks its behaviour per call (``byCallId``, ``calls[n]``, ``default``),
records a ``tool_execute`` record, then sends updates, sleeps, throws or returns as
scripted. Pi's tools see an abort only through the signal, so the body is shielded
from the loop's cancel scope and watches the signal the way the oracle's tools do:
the abort message and its timing are the scenario's.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import attrs
import trio

from .._events import ToolResult
from .._signal import AbortSignal
from .._validation import js_json_dumps
from .._wire import converter
from ._scenario import Recorder, js_or, spec_details, text_blocks
from ._trace import Record

__all__ = ["ScenarioTools"]


class ScenarioTools:
    """Builds the scripted tools of one scenario run (:meth:`make_tool`)."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.tool_call_counts: dict[str, int] = {}
        self.timer_seq = 0

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

    def make_tool(self, t: Record) -> Any:
        """The pitrio tool for one ``tools[]`` entry of the scenario."""
        scripted = self

        async def execute(
            tool_call_id: str,
            params: Any,
            signal: AbortSignal,
            on_update: Callable[[ToolResult], None],
        ) -> ToolResult:
            b = scripted._pick_behaviour(t, tool_call_id)
            await scripted.recorder.emit(
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
                result = await scripted._tool_body(t, b, params, signal, on_update)
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
            self.recorder.problems.append(f"{what} waited 5000 ms for an abort that never came")
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
            content = u["content"] if "content" in u else text_blocks(js_or(u.get("text"), ""))
            on_update(
                converter.structure(
                    {
                        "content": copy.deepcopy(content),
                        "details": spec_details(u),
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
            text = js_json_dumps(params) if b.get("echoArgs") else js_or(b.get("text"), "ok")
            content = text_blocks(text)
        result: Record = {
            "content": content,
            "details": spec_details(b),
        }
        if "terminate" in b:
            result["terminate"] = b["terminate"]
        if "addedToolNames" in b:
            result["addedToolNames"] = list(b["addedToolNames"])
        return converter.structure(result, ToolResult)


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
