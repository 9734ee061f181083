"""The conformance player: runs a Pi oracle scenario on pitrio and records the trace.

This implements the scenario format of the oracle's ``SCENARIOS.md`` (scripted model,
tools and hooks, script ops, triggered actions) and produces records in the oracle's
trace format, so that ``python3 compare.py expected.json actual.json`` can compare them.
The player is spread over modules along the format's seams:

* ``_scenario``: the scenario file (validation, message specs, the model object);
* ``_scenario_model``, ``_scenario_tools``, ``_scenario_hooks``: the scripted model,
  tools and hooks built from a scenario;
* ``_trace``: events and messages in Pi's trace format;
* ``_fifo``: the FIFO scheduling patch (the one place that touches Trio's internals);
* this module: the runner (script ops, triggered actions, the agent or loop run).

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
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import attrs
import trio
import trio.testing

from .._agent import Agent
from .._events import AgentEvent
from .._loop import agent_loop, agent_loop_continue, run_agent_loop, run_agent_loop_continue
from .._loop_config import AgentContext, LoopConfig, error_text
from .._messages import AgentMessage, UserMessage
from .._signal import AbortSignal
from .._wire import converter
from ._errors import RunProblem
from ._fifo import fifo_scheduling
from ._scenario import USER_UNION, make_message, make_model, text_blocks, validate_scenario
from ._scenario_hooks import ScenarioHooks
from ._scenario_model import ScenarioModel
from ._scenario_tools import ScenarioTools
from ._trace import Record, normalize_event, normalize_message, pi_text

__all__ = ["Player", "play"]


@attrs.define(eq=False)
class _Action:
    on: Record
    do: list[Record]
    count: int = 0
    fired: bool = False


class Player:
    """Runs one scenario; ``records`` is the trace, ``problems`` what went wrong.

    Raises:
        ScenarioError: the scenario is not valid.
    """

    def __init__(self, scenario: Record) -> None:
        validate_scenario(scenario)
        self.s = scenario
        self.mode: str = scenario["mode"]
        self.loop_api: str = scenario.get("loopApi", "stream")
        self.cfg: Record = scenario.get("config", {})
        self.base_model = make_model(scenario.get("modelId", "scripted-model"))
        self.records: list[Record] = []
        self.problems: list[str] = []
        self.actions = [_Action(on=a["on"], do=a["do"]) for a in scenario.get("actions", [])]
        self.tag_loop_side = self.mode == "loop" and self.loop_api == "stream"
        self.model = ScenarioModel(scenario["model"], self)
        self.hooks = ScenarioHooks(self.cfg, self)
        self.listener_depth = 0
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
        scripted_tools = ScenarioTools(self)
        self.tools = [scripted_tools.make_tool(t) for t in scenario.get("tools", [])]

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
            content=tuple(converter.structure(b, USER_UNION) for b in text_blocks(op["text"])),
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
            convert_to_llm=self.hooks.convert_to_llm,
            get_steering_messages=get_steering,
            get_follow_up_messages=get_follow_up,
            reasoning=thinking if thinking not in (None, "off") else None,
            tool_execution=cfg.get("toolExecution", "parallel"),
            transform_context=self.hooks.transform_context if "transformContext" in cfg else None,
            before_tool_call=self.hooks.before_tool_call if "beforeToolCall" in cfg else None,
            after_tool_call=self.hooks.after_tool_call if "afterToolCall" in cfg else None,
            should_stop_after_turn=self.hooks.should_stop_after_turn
            if "shouldStopAfterTurn" in cfg
            else None,
            prepare_next_turn=self.hooks.prepare_next_turn if "prepareNextTurn" in cfg else None,
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
                        self.model.stream_fn,
                    )
                else:
                    result = await run_agent_loop_continue(
                        context, config, emit, signal, self.model.stream_fn
                    )
            else:
                stream = (
                    agent_loop(
                        self._loop_prompts(op), context, config, signal, self.model.stream_fn
                    )
                    if name == "loop"
                    else agent_loop_continue(context, config, signal, self.model.stream_fn)
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
            stream_fn=self.model.stream_fn,
            convert_to_llm=self.hooks.convert_to_llm,
            transform_context=self.hooks.transform_context if "transformContext" in cfg else None,
            before_tool_call=self.hooks.before_tool_call if "beforeToolCall" in cfg else None,
            after_tool_call=self.hooks.after_tool_call if "afterToolCall" in cfg else None,
            should_stop_after_turn=self.hooks.should_stop_after_turn
            if "shouldStopAfterTurn" in cfg
            else None,
            prepare_next_turn=self.hooks.prepare_next_turn if "prepareNextTurn" in cfg else None,
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
        stopped: list[str] = []
        with trio.move_on_after(timeout) as scope:
            try:
                async with trio.open_nursery() as nursery:
                    self.nursery = nursery
                    for op in self.s["script"]:
                        await self.run_op(op)
                    if self.agent is not None:
                        await self.agent.wait_for_idle()
                if self.agent is not None:
                    await self.agent.wait_for_idle()
            except* RunProblem as group:
                # The scenario cannot go on: a problem (exit status 3), the trace so far kept.
                stopped = _messages(group)
        if stopped:
            self.problems.extend(stopped)
            return
        if scope.cancelled_caught:
            self.problems.append(
                f"scenario did not finish within {int(timeout * 1000)} ms (trace so far printed)"
            )
            return
        self.push(self.state_record(True))
        if self.model.used < len(self.model.responses):
            self.problems.append(
                f"{len(self.model.responses) - self.model.used} scripted model response(s) "
                "were never used "
                f"(model called {self.model.calls} time(s))"
            )
        unfired = [a for a in self.actions if not a.fired]
        if unfired:
            self.problems.append(
                "action(s) never triggered: " + ", ".join(json.dumps(a.on) for a in unfired)
            )


def _messages(group: BaseExceptionGroup[RunProblem]) -> list[str]:
    return [
        message
        for exc in group.exceptions
        for message in (_messages(exc) if isinstance(exc, BaseExceptionGroup) else [str(exc)])
    ]


def _run_to_completion(coro: Coroutine[Any, Any, None]) -> None:
    try:
        coro.send(None)
    except StopIteration:
        return
    coro.close()
    msg = "an action run from a listener tried to block; only non-blocking ops are allowed there"
    raise RunProblem(msg)


def play(scenario: Record) -> tuple[list[Record], list[str]]:
    """Run a scenario in virtual time with FIFO scheduling; returns (trace, problems)."""
    player = Player(scenario)
    with fifo_scheduling():
        trio.run(player.run, clock=trio.testing.MockClock(autojump_threshold=0))
    return player.records, player.problems
