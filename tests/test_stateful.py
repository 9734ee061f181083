"""A Hypothesis state machine driving one Agent through many runs, checked against a model.

The model is a plain re-statement of Pi's loop order for the parts that are simple
to state: queue modes, the initial steering poll (steering queued before a prompt is
delivered right after it, in the first turn), the steering poll after every turn,
follow-ups when the agent would stop, terminating tool batches, ``resume()`` from each
kind of tail, and ``reset()``. Runs happen in virtual time (one :func:`run_virtual`
per step); messages pushed while a run is active are pushed from a listener at a drawn
``turn_end`` (a deterministic point), and an abort comes from a sibling task at a
drawn virtual time. An abort makes the exact outcome timing-dependent, so after an
aborted run the model checks what must still hold (nothing lost, duplicated or
reordered; the run ends with an aborted answer unless the abort came too late to
matter) and then adopts the agent's state.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, TypeAlias

import attrs
import pytest
import trio
from hypothesis import (
    currently_in_test_context,
    event as hypothesis_event,
    settings,
    strategies as st,
)
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from pitrio import (
    AbortSignal,
    Agent,
    AgentBusyError,
    AgentEvent,
    AssistantMessage,
    Context,
    Tool,
    ToolResult,
    ToolResultMessage,
    UsageError,
    UserMessage,
    text_result,
)
from pitrio.testing import ScriptedModel, ScriptedResponse, check_trace, run_virtual

HANG_LIMIT = 10_000.0
QueueMode: TypeAlias = Literal["one-at-a-time", "all"]
Key: TypeAlias = tuple[str, str]
"""A transcript entry as the model sees it: (role, text or tool call id)."""


def note_event(text: str) -> None:
    """Count ``text`` in Hypothesis' statistics (``--hypothesis-show-statistics``)."""
    if currently_in_test_context():
        hypothesis_event(text)


def key(message: Any) -> Key:
    if isinstance(message, ToolResultMessage):
        return ("toolResult", message.tool_call_id)
    if isinstance(message, AssistantMessage):
        said = message.tool_calls[0].id if message.tool_calls else message.text
        if message.stop_reason in ("error", "aborted"):
            said += f" [{message.stop_reason}]"
        return ("assistant", said)
    content = message.content
    text = content if isinstance(content, str) else "".join(b.text for b in content)
    return (message.role, text)


@attrs.define
class Script:
    """What the scripted model and the tool do during one run."""

    tool_turns: int = 0  # the first N requests answer with one tool call each
    terminate_last: bool = False  # the last tool call's result asks to terminate
    response_delay: int = 0
    tool_delay: int = 0


@attrs.define
class Push:
    """A message a listener pushes at the ``turn_end`` of turn ``turn`` (0-based, per run)."""

    turn: int
    queue: Literal["steer", "follow_up"]
    message: UserMessage


@attrs.define
class Prediction:
    added: list[Key]
    steering: list[UserMessage]
    follow_ups: list[UserMessage]


def _all_tasks() -> set[trio.lowlevel.Task]:
    tasks, stack = set(), [trio.lowlevel.current_root_task()]
    while stack:
        task = stack.pop()
        if task is not None:
            tasks.add(task)
            stack.extend(t for n in task.child_nurseries for t in n.child_tasks)
    return tasks


def _drain(queue: list[UserMessage], mode: QueueMode) -> list[UserMessage]:
    if not queue:
        return []
    if mode == "all":
        drained = list(queue)
        queue.clear()
        return drained
    return [queue.pop(0)]


scripts = st.builds(
    Script,
    tool_turns=st.integers(0, 2),
    terminate_last=st.booleans(),
    response_delay=st.integers(0, 2),
    tool_delay=st.integers(0, 2),
)
abort_times = st.none() | st.integers(0, 32).map(lambda quarter: quarter / 4)
push_plans = st.lists(
    st.tuples(st.integers(0, 3), st.sampled_from(["steer", "follow_up"])), max_size=3
)
modes = st.sampled_from(["one-at-a-time", "all"])


class AgentMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.requests = 0
        self.script = Script()
        self.tools_left = 0
        self.agent = Agent(
            stream_fn=ScriptedModel(self._respond, record_requests=False),
            tools=[
                Tool(
                    name="echo",
                    parameters={"type": "object", "properties": {"terminate": {"type": "boolean"}}},
                    execute=self._echo,
                )
            ],
        )
        self.transcript: list[Key] = []
        self.steering: list[UserMessage] = []
        self.follow_ups: list[UserMessage] = []
        self.steering_mode: QueueMode = "one-at-a-time"
        self.follow_up_mode: QueueMode = "one-at-a-time"
        self.error_message: str | None = None
        self.texts = 0
        self.runs = 0
        self.aborted_runs = 0

    # -- the scripted world ------------------------------------------------------------

    def _respond(self, context: Context) -> ScriptedResponse:
        n = self.requests
        self.requests += 1
        delay = self.script.response_delay
        if self.tools_left > 0:
            self.tools_left -= 1
            terminate = self.tools_left == 0 and self.script.terminate_last
            return ScriptedResponse.tool_calls(
                (f"call{n}", "echo", {"terminate": terminate}), delay=delay
            )
        return ScriptedResponse.text(f"answer {n}", delay=delay, chunk_size=4)

    async def _echo(
        self,
        call_id: str,
        params: Any,
        signal: AbortSignal,
        on_update: Callable[[ToolResult], None],
    ) -> ToolResult:
        await trio.sleep(self.script.tool_delay)
        return text_result(f"echo {call_id}", terminate=True if params["terminate"] else None)

    def _message(self, label: str) -> UserMessage:
        self.texts += 1
        return UserMessage(content=f"{label} {self.texts}")

    # -- the model ---------------------------------------------------------------------

    def _predict(
        self,
        prompts: Sequence[Key],
        *,
        skip_initial_poll: bool,
        script: Script,
        pushes: Sequence[Push],
    ) -> Prediction:
        """The outcome of an undisturbed run, following Pi's loop step by step."""
        steering, follow_ups = list(self.steering), list(self.follow_ups)
        added: list[Key] = list(prompts)
        request = self.requests
        tools_left = script.tool_turns
        turn = 0
        pending = [] if skip_initial_poll else _drain(steering, self.steering_mode)
        while True:
            has_more = True
            while has_more or pending:
                if turn > 0 and not pending:
                    pending = _drain(steering, self.steering_mode)
                added += [key(m) for m in pending]
                pending = []
                if tools_left > 0:
                    tools_left -= 1
                    call_id = f"call{request}"
                    added += [("assistant", call_id), ("toolResult", call_id)]
                    has_more = not (tools_left == 0 and script.terminate_last)
                else:
                    added.append(("assistant", f"answer {request}"))
                    has_more = False
                request += 1
                for push in pushes:  # pushed by a listener at this turn's turn_end
                    if push.turn == turn:
                        (steering if push.queue == "steer" else follow_ups).append(push.message)
                turn += 1
                pending = _drain(steering, self.steering_mode)
            pending = _drain(follow_ups, self.follow_up_mode)
            if not pending:
                return Prediction(added, steering, follow_ups)

    # -- playing one run ---------------------------------------------------------------

    def _play(
        self,
        start: Callable[..., Awaitable[None]],
        prompts: Sequence[Key],
        *,
        skip_initial_poll: bool,
        script: Script,
        pushes: Sequence[Push],
        abort_at: float | None,
    ) -> None:
        prediction = self._predict(
            prompts, skip_initial_poll=skip_initial_poll, script=script, pushes=pushes
        )
        before = list(self.agent.state.messages)
        steering_before, follow_ups_before = list(self.steering), list(self.follow_ups)
        self.script = script
        self.tools_left = script.tool_turns
        events: list[AgentEvent] = []
        pushed: list[Push] = []  # only turns that happened push their messages
        abort_hit = False
        turn = 0

        def listener(event: AgentEvent, signal: AbortSignal) -> None:
            nonlocal turn
            events.append(event)
            if event.type == "turn_end":
                for push in pushes:
                    if push.turn == turn:
                        pushed.append(push)
                        if push.queue == "steer":
                            self.agent.steer(push.message)
                        else:
                            self.agent.follow_up(push.message)
                turn += 1

        async def main() -> None:
            nonlocal abort_hit
            agent = self.agent
            tasks_before = _all_tasks()
            with trio.fail_after(HANG_LIMIT):
                async with trio.open_nursery() as nursery:
                    await nursery.start(start)
                    # Active once started: agent_start is out (as when Pi's prompt() returns).
                    assert events[0].type == "agent_start"
                    if agent.is_running:
                        # One run at a time; the state cannot be reset under a run.
                        with pytest.raises(AgentBusyError):
                            agent.reset()
                        with pytest.raises(AgentBusyError):
                            await agent.prompt("busy")
                        with pytest.raises(AgentBusyError):
                            await agent.resume()
                    if abort_at is not None:
                        await trio.sleep(abort_at)
                        abort_hit = agent.is_running
                        agent.abort()  # a no-op once the run is over
            assert _all_tasks() == tasks_before  # the run left nothing behind

        unsubscribe = self.agent.subscribe(listener)
        try:
            run_virtual(main)
        finally:
            unsubscribe()
        self.runs += 1
        assert check_trace(events) == []

        after = list(self.agent.state.messages)
        added = after[len(before) :]
        assert len(after) >= len(before)
        assert all(a is b for a, b in zip(after, before, strict=False))
        assert [key(m) for m in added[: len(prompts)]] == list(prompts)
        # Nothing pushed is lost, duplicated or reordered (both queues drain oldest first).
        pushed_steering = [p.message for p in pushed if p.queue == "steer"]
        pushed_follow_ups = [p.message for p in pushed if p.queue == "follow_up"]
        for queued_before, new, left in (
            (steering_before, pushed_steering, self.agent.queued_steering),
            (follow_ups_before, pushed_follow_ups, self.agent.queued_follow_up),
        ):
            everything = [*queued_before, *new]
            delivered = [m for m in added if any(m is x for x in everything)]
            assert len(delivered) + len(left) == len(everything)
            assert all(a is b for a, b in zip([*delivered, *left], everything, strict=True))

        exact = (
            [key(m) for m in added] == prediction.added
            and list(self.agent.queued_steering) == prediction.steering
            and list(self.agent.queued_follow_up) == prediction.follow_ups
        )
        if not abort_hit:
            assert [key(m) for m in added] == prediction.added
            assert list(self.agent.queued_steering) == prediction.steering
            assert list(self.agent.queued_follow_up) == prediction.follow_ups
        note_event(f"pushed during the run: {bool(pushed)}")
        note_event(f"abort during the run: {abort_hit}, changed it: {not exact}")
        if exact:
            self.transcript += prediction.added
            self.steering, self.follow_ups = prediction.steering, prediction.follow_ups
            self.error_message = None
            return
        # The abort changed the run: it ended with an aborted answer.
        self.aborted_runs += 1
        last = added[-1]
        assert isinstance(last, AssistantMessage)
        assert last.stop_reason == "aborted"
        assert last.error_message == "Request was aborted"
        self.transcript = [key(m) for m in after]
        self.steering = list(self.agent.queued_steering)
        self.follow_ups = list(self.agent.queued_follow_up)
        self.error_message = "Request was aborted"

    def _pushes(self, plan: Sequence[tuple[int, str]]) -> list[Push]:
        return [
            Push(turn, "steer" if q == "steer" else "follow_up", self._message(f"{q} at {turn}"))
            for turn, q in plan
        ]

    # -- rules -------------------------------------------------------------------------

    @rule(queue=st.sampled_from(["steer", "follow_up"]), count=st.integers(1, 2))
    def queue_messages(self, queue: str, count: int) -> None:
        for _ in range(count):
            if queue == "steer":
                message = self._message("steer")
                self.agent.steer(message)
                self.steering.append(message)
            else:
                message = self._message("follow-up")
                self.agent.follow_up(message)
                self.follow_ups.append(message)

    @rule(queue=st.sampled_from(["steering", "follow-up"]), mode=modes)
    def set_mode(self, queue: str, mode: QueueMode) -> None:
        if queue == "steering":
            self.agent.steering_mode = mode
            self.steering_mode = mode
        else:
            self.agent.follow_up_mode = mode
            self.follow_up_mode = mode

    @rule(which=st.sampled_from(["steering", "follow-up", "all"]))
    def clear_queue(self, which: str) -> None:
        if which == "steering":
            self.agent.clear_steering_queue()
            self.steering = []
        elif which == "follow-up":
            self.agent.clear_follow_up_queue()
            self.follow_ups = []
        else:
            self.agent.clear_all_queues()
            self.steering, self.follow_ups = [], []

    @rule()
    def abort_while_idle(self) -> None:
        self.agent.abort()  # nothing to abort: changes nothing

    @rule()
    def reset(self) -> None:
        self.agent.reset()
        self.transcript, self.steering, self.follow_ups = [], [], []
        self.error_message = None

    @rule()
    def append_user_message(self) -> None:
        """Edit the transcript directly (the state setter copies the sequence)."""
        message = self._message("appended")
        self.agent.state.messages = [*self.agent.state.messages, message]
        self.transcript.append(key(message))

    @rule(
        shape=st.sampled_from(["text", "message", "list"]),
        script=scripts,
        push_plan=push_plans,
        abort_at=abort_times,
    )
    def prompt(
        self,
        shape: str,
        script: Script,
        push_plan: list[tuple[int, str]],
        abort_at: float | None,
    ) -> None:
        agent = self.agent
        input: str | UserMessage | list[UserMessage]
        if shape == "text":
            self.texts += 1
            input = f"prompt {self.texts}"
            prompts = [("user", input)]
        elif shape == "message":
            input = self._message("prompt")
            prompts = [key(input)]
        else:
            input = [self._message("prompt"), self._message("prompt")]
            prompts = [key(m) for m in input]

        async def start(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            await agent.prompt(input, task_status=task_status)

        self._play(
            start,
            prompts,
            skip_initial_poll=False,
            script=script,
            pushes=self._pushes(push_plan),
            abort_at=abort_at,
        )

    @rule(script=scripts, push_plan=push_plans, abort_at=abort_times)
    def resume(
        self, script: Script, push_plan: list[tuple[int, str]], abort_at: float | None
    ) -> None:
        agent = self.agent
        tail = self.transcript[-1][0] if self.transcript else "empty"
        note_event(f"resume from {tail} tail, steering: {bool(self.steering)}")
        if not self.transcript:
            with pytest.raises(UsageError, match="No messages to continue from"):
                run_virtual(agent.resume)
            return
        prompts: list[Key] = []
        skip = False
        if self.transcript[-1][0] == "assistant":
            # From an assistant tail, queued steering (else follow-ups) become the prompts.
            if self.steering:
                drained = _drain(self.steering, self.steering_mode)
                skip = True  # Pi skips the initial steering poll here
            else:
                drained = _drain(self.follow_ups, self.follow_up_mode)
            if not drained:
                with pytest.raises(UsageError, match="Cannot continue from message role"):
                    run_virtual(agent.resume)
                return
            prompts = [key(m) for m in drained]

        self._play(
            agent.resume,
            prompts,
            skip_initial_poll=skip,
            script=script,
            pushes=self._pushes(push_plan),
            abort_at=abort_at,
        )

    # -- invariants --------------------------------------------------------------------

    @invariant()
    def idle(self) -> None:
        agent = self.agent
        assert not agent.is_running
        assert agent.signal is None
        assert not agent.state.is_streaming
        assert agent.state.streaming_message is None
        assert agent.state.pending_tool_calls == frozenset()

    @invariant()
    def matches_the_model(self) -> None:
        agent = self.agent
        assert [key(m) for m in agent.state.messages] == self.transcript
        assert list(agent.queued_steering) == self.steering
        assert list(agent.queued_follow_up) == self.follow_ups
        assert agent.has_queued_messages() == bool(self.steering or self.follow_ups)
        assert agent.steering_mode == self.steering_mode
        assert agent.follow_up_mode == self.follow_up_mode
        assert agent.state.error_message == self.error_message


AgentMachine.TestCase.settings = settings(AgentMachine.TestCase.settings, stateful_step_count=20)
TestAgentMachine = AgentMachine.TestCase


# --------------------------------------------------------------------------------------
# The model's claims, pinned on fixed runs


def _fixed(*steps: Callable[[AgentMachine], None]) -> AgentMachine:
    machine = AgentMachine()
    for step in steps:
        step(machine)
        machine.idle()
        machine.matches_the_model()
    return machine


def _prompt(
    script: Script | None = None, abort_at: float | None = None
) -> Callable[[AgentMachine], None]:
    return lambda m: m.prompt("text", script or Script(), [], abort_at)


def _queue(queue: str, count: int) -> Callable[[AgentMachine], None]:
    return lambda m: m.queue_messages(queue, count)


def _resume(script: Script | None = None) -> Callable[[AgentMachine], None]:
    return lambda m: m.resume(script or Script(), [], None)


def test_steering_queued_before_a_prompt_is_delivered_in_the_first_turn() -> None:
    machine = _fixed(_queue("steer", 2), _prompt())
    # one-at-a-time: the first steering message right after the prompt (first turn), the
    # second after that turn, in a turn of its own.
    assert [k[0] for k in machine.transcript] == ["user", "user", "assistant", "user", "assistant"]
    assert machine.transcript[1] == ("user", "steer 1")


def test_reset_clears_transcript_queues_and_error() -> None:
    machine = _fixed(
        _prompt(Script(tool_turns=1, tool_delay=2), abort_at=1),
        _queue("steer", 1),
        _queue("follow_up", 1),
    )
    assert machine.error_message == "Request was aborted"
    assert machine.aborted_runs == 1
    machine.reset()
    assert machine.agent.state.messages == []
    assert machine.agent.state.error_message is None
    assert not machine.agent.has_queued_messages()


@pytest.mark.parametrize("mode", ["one-at-a-time", "all"])
def test_resume_from_an_assistant_tail_runs_queued_steering_as_prompts(mode: QueueMode) -> None:
    machine = _fixed(
        _prompt(),
        lambda m: m.set_mode("steering", mode),
        _queue("steer", 2),
        _queue("follow_up", 1),
        _resume(),
    )
    roles = [k[0] for k in machine.transcript]
    if mode == "all":
        # Both steering messages are the prompts; the follow-up gets a turn at the end.
        assert roles == ["user", "assistant", "user", "user", "assistant", "user", "assistant"]
    else:
        # One is the prompt (the initial poll is skipped), the other comes after the
        # first turn, then the follow-up.
        assert roles == [
            *["user", "assistant"],
            *["user", "assistant", "user", "assistant", "user", "assistant"],
        ]
    assert not machine.steering
    assert not machine.follow_ups


def test_resume_from_a_tool_result_tail_continues_the_loop() -> None:
    machine = _fixed(_prompt(Script(tool_turns=1, terminate_last=True)), _resume())
    assert [k[0] for k in machine.transcript] == ["user", "assistant", "toolResult", "assistant"]


def test_resume_errors() -> None:
    machine = _fixed(_resume())  # empty transcript: UsageError, nothing changes
    machine = _fixed(_prompt(), _resume())  # assistant tail, empty queues: UsageError
    assert len(machine.transcript) == 2
