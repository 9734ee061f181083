"""The scenario's scripted hooks: ``config`` of a scenario as loop hooks (SCENARIOS.md §5).

``beforeToolCall``/``afterToolCall`` rules (matched by tool name and call id),
``shouldStopAfterTurn`` and ``prepareNextTurn`` by call number, ``transformContext``
and ``convertToLlm`` as filters: each records a ``hook`` record with what it returned
(or threw) before returning it to the loop, as the oracle's hooks do.
"""

from __future__ import annotations

import copy
from typing import Any

import attrs

from .._loop_config import AgentContext, NextTurn, TurnContext
from .._messages import AgentMessage, CustomMessage, UserMessage
from .._signal import AbortSignal
from .._tools import AfterToolCallResult, BeforeToolCallResult
from .._wire import converter
from ._scenario import USER_UNION, Recorder, make_model, roles, text_blocks
from ._trace import Record, normalize_tool_result

__all__ = ["ScenarioHooks"]

_LLM_ROLES = ("user", "assistant", "toolResult")


class ScenarioHooks:
    """The hooks of one scenario run, configured by the scenario's ``config``."""

    def __init__(self, config: Record, recorder: Recorder) -> None:
        self.cfg = config
        self.recorder = recorder
        self.stop_calls = 0
        self.prepare_calls = 0

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
        await self.recorder.emit(rec, loop_side=True)
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
                returned["content"] = text_blocks(rule["text"])
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
            "result": normalize_tool_result(ctx.result),
            "isError": ctx.is_error,
        }
        if rule and "throw" in rule:
            rec["throws"] = rule["throw"]
        else:
            rec["returned"] = returned
        await self.recorder.emit(rec, loop_side=True)
        if rule and "throw" in rule:
            raise Exception(rule["throw"])
        if returned is None:
            return None
        return AfterToolCallResult(
            content=tuple(converter.structure(b, USER_UNION) for b in returned["content"])
            if returned.get("content") is not None
            else None,
            details=returned.get("details"),
            is_error=returned.get("isError"),
            terminate=returned.get("terminate"),
        )

    async def should_stop_after_turn(self, ctx: TurnContext, signal: Any = None) -> bool:
        self.stop_calls += 1
        returned = self.stop_calls in self.cfg["shouldStopAfterTurn"].get("stopOnCalls", [])
        await self.recorder.emit(
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
                summary["messages"] = roles(msgs)
            model = None
            if "modelId" in rule:
                model = make_model(rule["modelId"])
                summary["model"] = rule["modelId"]
            if "thinkingLevel" in rule:
                summary["thinkingLevel"] = rule["thinkingLevel"]
            update = NextTurn(
                context=context, model=model, thinking_level=rule.get("thinkingLevel")
            )
        await self.recorder.emit(
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
        await self.recorder.emit(
            {
                "type": "hook",
                "hook": "transformContext",
                "input": roles(messages),
                "returned": roles(out),
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
                        converter.structure(b, USER_UNION)
                        for b in text_blocks(cv.get("prefix", "") + raw)
                    )
                elif isinstance(raw, list):
                    content = tuple(converter.structure(b, USER_UNION) for b in raw)
                else:
                    content = copy.deepcopy(raw)  # passed through as the oracle does
                out.append(UserMessage(content=content, timestamp=fields.get("timestamp", 0) or 0))
        return out

    async def convert_to_llm(self, messages: list[AgentMessage]) -> list[AgentMessage]:
        out = self._convert(messages)
        await self.recorder.emit(
            {
                "type": "hook",
                "hook": "convertToLlm",
                "input": roles(messages),
                "returned": roles(out),
            },
            loop_side=True,
        )
        return out
