"""The chaos and load run, shared by ``test_chaos.py`` and ``benchmarks/bench_worker.py``.

A fleet of Celery workers (``python -m pitrio worker``, solo pool, each in a process group
of its own so that a kill takes the whole worker) on real PostgreSQL and Redis. A driver
plays ``sessions`` users at once: each sends ``prompts`` prompts, one after the other,
each as a job (:func:`pitrio.worker.submit_prompt`, key ``SESSION:INDEX``), and waits for
the job's ``done`` marker on the session's Redis stream. Meanwhile workers may be
SIGKILLed at random and started again.

Each prompt runs two tools, then answers (a scripted model: no network): ``safe``
(replay-safe) and ``unsafe`` (``replay="never"``). Each tool call writes one line to the
effects file (``$PITRIO_CHAOS_EFFECTS``, one ``write`` with ``O_APPEND``, so that a kill
leaves whole lines) the moment it takes effect: ``TOOL SESSION CALL_ID PID``. The unsafe
tool writes first and then works; a kill in between leaves an effect whose outcome the
session never recorded, which the run recovery must not repeat.

:func:`make_harness` is the workers' harness factory (``_chaos:make_harness``, this
folder on ``PYTHONPATH``).
"""

from __future__ import annotations

import functools
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import attrs
import trio

from pitrio import (
    AssistantMessage,
    Context,
    Model,
    TextContent,
    Tool,
    ToolResultMessage,
    UserMessage,
    text_result,
)
from pitrio.harness import (
    CustomEntry,
    Harness,
    MessageEntry,
    PostgresSessionStore,
    Session,
)
from pitrio.testing import ScriptedModel, ScriptedResponse
from pitrio.worker import JOB_ENTRY, make_client_app, stream_for, submit_prompt

HERE: Final = Path(__file__).parent
MODEL: Final = Model(id="scripted", api="scripted", provider="local", context_window=200_000)


# --------------------------------------------------------------------------------------
# The workers' harness


def _prompt_of(context: Context) -> tuple[str, int]:
    """The last prompt's text and how many tool results followed it."""
    messages = context.messages
    last = max(i for i, m in enumerate(messages) if isinstance(m, UserMessage))
    user = messages[last]
    assert isinstance(user, UserMessage)
    results = sum(isinstance(m, ToolResultMessage) for m in messages[last + 1 :])
    return prompt_text(user), results


def prompt_text(message: UserMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(b.text for b in content if isinstance(b, TextContent))


def _script(context: Context) -> ScriptedResponse:
    prompt, results = _prompt_of(context)
    if results == 0:
        return ScriptedResponse.tool_calls((f"{prompt}-safe", "safe", {"tag": prompt}))
    if results == 1:
        return ScriptedResponse.tool_calls((f"{prompt}-unsafe", "unsafe", {"tag": prompt}))
    return ScriptedResponse.text(f"done {prompt}")


def _effect(tool: str, session_id: str, call_id: str) -> None:
    line = f"{tool} {session_id} {call_id} {os.getpid()}\n".encode()
    fd = os.open(os.environ["PITRIO_CHAOS_EFFECTS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def make_harness(session: Session) -> Harness:
    """The harness of one job: the scripted model and the two tools."""
    stream_fn, tools = harness_parts(session.id)
    return Harness(model=MODEL, stream_fn=stream_fn, session=session, tools=tools)


def harness_parts(session_id: str) -> tuple[ScriptedModel, list[Tool]]:
    """The scripted model and the two tools (their effects name ``session_id``)."""
    work = float(os.environ.get("PITRIO_CHAOS_TOOL_SECONDS", "0"))

    async def safe(call_id: str, params: Any, signal: Any, on_update: Any) -> Any:
        await trio.sleep(random.uniform(0, work))
        _effect("safe", session_id, call_id)
        return text_result(f"safe {params['tag']}")

    async def unsafe(call_id: str, params: Any, signal: Any, on_update: Any) -> Any:
        _effect("unsafe", session_id, call_id)
        await trio.sleep(random.uniform(0, work))
        return text_result(f"unsafe {params['tag']}")

    schema = {"type": "object", "properties": {"tag": {"type": "string"}}}
    tools = [
        Tool(name="safe", description="safe", parameters=schema, execute=safe, replay="safe"),
        Tool(name="unsafe", description="unsafe", parameters=schema, execute=unsafe),
    ]
    return ScriptedModel(_script), tools


# --------------------------------------------------------------------------------------
# The fleet


@attrs.define
class Fleet:
    """``size`` workers; :meth:`kill` one (its whole process group) and start it again."""

    size: int
    env: dict[str, str]
    workdir: Path
    processes: list[trio.Process | None] = attrs.field(factory=list)
    kills: int = 0
    _logs: list[Any] = attrs.field(factory=list)

    async def start(self, index: int) -> None:
        log = (self.workdir / f"worker-{index}.log").open("a")
        self._logs.append(log)
        command = [sys.executable, "-m", "pitrio", "worker", "--pool=solo"]
        command += [f"--hostname=w{index}-{self.kills}@chaos", "--loglevel=WARNING"]
        command += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
        process = await trio.lowlevel.open_process(
            command,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.workdir,
            start_new_session=True,
        )
        while len(self.processes) <= index:
            self.processes.append(None)
        self.processes[index] = process

    async def start_all(self) -> None:
        for index in range(self.size):
            await self.start(index)

    async def kill(self, index: int) -> None:
        """SIGKILL worker ``index`` (mid-job or not) and start another in its place."""
        process = self.processes[index]
        assert process is not None
        if process.returncode is None:
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()
        self.kills += 1
        await self.start(index)

    def logs(self) -> str:
        """The end of each worker's log (what a failed run shows)."""
        return "\n".join(
            f"--- worker {i}\n" + (self.workdir / f"worker-{i}.log").read_text()[-2000:]
            for i in range(self.size)
        )

    def dead(self) -> list[str]:
        """Workers that ended by themselves (a crash is a failure of the run)."""
        return [
            f"worker {i} ended with {p.returncode}: "
            + (self.workdir / f"worker-{i}.log").read_text()[-3000:]
            for i, p in enumerate(self.processes)
            if p is not None and p.returncode is not None
        ]

    async def stop(self) -> None:
        with trio.CancelScope(shield=True):
            for process in self.processes:
                if process is not None and process.returncode is None:
                    os.killpg(process.pid, signal.SIGTERM)
            for process in self.processes:
                if process is None:
                    continue
                with trio.move_on_after(20):
                    await process.wait()
                if process.returncode is None:
                    os.killpg(process.pid, signal.SIGKILL)
                    await process.wait()
            for log in self._logs:
                log.close()


def worker_env(
    broker_url: str, postgres_url: str, schema: str, effects: Path, *, tool_seconds: float
) -> dict[str, str]:
    # Not the coverage of pytest-cov's children (COV_CORE_*): a worker killed every few
    # seconds would spend its short life starting the tracer, and leave data files behind.
    inherited = {
        k: v for k, v in os.environ.items() if not k.startswith(("COV_CORE_", "COVERAGE_"))
    }
    return {
        **inherited,
        "PITRIO_BROKER_URL": broker_url,
        "PITRIO_POSTGRES_URL": postgres_url,
        "PITRIO_POSTGRES_SCHEMA": schema,
        "PITRIO_HARNESS_FACTORY": "_chaos:make_harness",
        # A killed worker's job is given to another after this many seconds unacknowledged.
        "PITRIO_VISIBILITY_TIMEOUT": "6",
        "PITRIO_CHAOS_EFFECTS": str(effects),
        "PITRIO_CHAOS_TOOL_SECONDS": str(tool_seconds),
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }


# --------------------------------------------------------------------------------------
# The driver


@attrs.define
class Report:
    """What a run measured: each prompt's latency (submit to done), the wall time."""

    latencies: list[float]
    seconds: float
    kills: int
    failures: list[str]

    def percentile(self, p: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


class _Markers:
    """The ``done`` markers of every session's stream, read by one task."""

    def __init__(self, redis_url: str, sessions: Sequence[str]) -> None:
        import redis

        self.client = redis.Redis.from_url(redis_url)
        self.last: dict[Any, Any] = {stream_for(s): "0" for s in sessions}
        self.waiting: dict[str, trio.Event] = {}
        self.ended: dict[str, tuple[float, str]] = {}

    async def run(self) -> None:
        while True:
            reply: Any = await trio.to_thread.run_sync(
                lambda: self.client.xread(dict(self.last), block=100)
            )
            now = time.monotonic()
            for raw_stream, entries in reply or ():
                for raw_id, fields in entries:
                    self.last[raw_stream.decode()] = raw_id.decode()
                    data = json.loads(fields[b"event"])
                    if data.get("type") == JOB_ENTRY and data.get("state") in ("done", "failed"):
                        key = str(data["key"])
                        self.ended.setdefault(key, (now, str(data.get("error", ""))))
                        event = self.waiting.pop(key, None)
                        if event is not None:
                            event.set()

    async def wait(self, key: str) -> tuple[float, str]:
        if key not in self.ended:
            event = self.waiting[key] = trio.Event()
            await event.wait()
        return self.ended[key]


async def drive(
    broker_url: str,
    events_url: str,
    *,
    fleet: Fleet,
    sessions: int,
    prompts: int,
    kill_every: tuple[float, float] | None,
    seed: int = 0,
    prefix: str = "s",
    give_up_after: float = float("inf"),
) -> Report:
    """Play the users (and kill workers every ``kill_every`` seconds, drawn uniformly)
    until every prompt's job ended, or ``give_up_after`` seconds (the report's failures then
    name the prompts whose jobs did not end); the report. Sessions are ``PREFIX0000``,
    ..."""
    ids = [f"{prefix}{i:04d}" for i in range(sessions)]
    markers = _Markers(events_url, ids)
    app = make_client_app(broker_url)
    latencies: list[float] = []
    failures: list[str] = []
    rng = random.Random(seed)

    async def user(session_id: str) -> None:
        for index in range(prompts):
            key = f"{session_id}:{index}"
            started = time.monotonic()
            submit = functools.partial(submit_prompt, app, session_id, f"p{index}", key=key)
            await trio.to_thread.run_sync(submit)
            ended, error = await markers.wait(key)
            if error:
                failures.append(f"{key}: {error}")
            latencies.append(ended - started)

    async def chaos() -> None:
        assert kill_every is not None
        while True:
            await trio.sleep(rng.uniform(*kill_every))
            await fleet.kill(rng.randrange(fleet.size))

    began = time.monotonic()
    try:
        with trio.move_on_after(give_up_after) as bounded:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(markers.run)
                if kill_every is not None:
                    nursery.start_soon(chaos)
                async with trio.open_nursery() as users:
                    for session_id in ids:
                        users.start_soon(user, session_id)
                nursery.cancel_scope.cancel()
        if bounded.cancelled_caught:
            waiting = sorted(markers.waiting)
            failures.append(f"no job ended within {give_up_after:g} s for {waiting}")
    finally:
        markers.client.close()
        app.close()
    return Report(latencies, time.monotonic() - began, fleet.kills, failures)


# --------------------------------------------------------------------------------------
# The checks


def _effects(path: Path) -> dict[tuple[str, str, str], int]:
    counts: dict[tuple[str, str, str], int] = {}
    text = path.read_text() if path.exists() else ""
    for line in text.splitlines():
        tool, session_id, call_id, _pid = line.split(" ")
        counts[tool, session_id, call_id] = counts.get((tool, session_id, call_id), 0) + 1
    return counts


async def check(
    postgres_url: str,
    schema: str,
    effects: Path,
    *,
    sessions: int,
    prompts: int,
    prefix: str = "s",
) -> list[str]:
    """Every way the run went wrong (empty: every prompt ran exactly once, every session
    loads, no unsafe effect was repeated, each answered)."""
    problems: list[str] = []
    counts = _effects(effects)
    async with PostgresSessionStore(postgres_url, schema=schema) as store:
        for i in range(sessions):
            session_id = f"{prefix}{i:04d}"
            session = await store.open(session_id, read_only=True)
            await session.close()
            problems += _check_session(session, prompts, counts)
    for (tool, session_id, call_id), n in counts.items():
        if tool == "unsafe" and n > 1:
            problems.append(f"{session_id}: unsafe {call_id} took effect {n} times")
    return problems


def _check_session(
    session: Session, prompts: int, counts: dict[tuple[str, str, str], int]
) -> list[str]:
    sid = session.id
    problems: list[str] = []
    users: list[str] = []
    results: dict[str, ToolResultMessage] = {}
    for entry in session.entries:
        if isinstance(entry, MessageEntry):
            message = entry.message
            if isinstance(message, UserMessage):
                users.append(prompt_text(message))
            elif isinstance(message, ToolResultMessage):
                if message.tool_call_id in results:
                    problems.append(f"{sid}: two results for {message.tool_call_id}")
                results[message.tool_call_id] = message
    wanted = [f"p{i}" for i in range(prompts)]
    if users != wanted:
        problems.append(f"{sid}: prompts {users}, not {wanted} (a lost or repeated turn)")
    states: dict[str, list[str]] = {}
    for entry in session.entries:
        if isinstance(entry, CustomEntry) and entry.custom_type == JOB_ENTRY:
            data = entry.data
            assert isinstance(data, dict)
            states.setdefault(str(data["key"]), []).append(str(data["state"]))
    for i in range(prompts):
        key = f"{sid}:{i}"
        if states.get(key) != ["started", "done"]:
            problems.append(f"{sid}: job {key} recorded {states.get(key)}")
    answers = [
        m.text
        for m in session.build_context().messages
        if isinstance(m, AssistantMessage) and m.text
    ]
    if answers != [f"done {p}" for p in wanted]:
        problems.append(f"{sid}: answers {answers}")
    for prompt in wanted:
        for tool in ("safe", "unsafe"):
            call_id = f"{prompt}-{tool}"
            result = results.get(call_id)
            n = counts.get((tool, sid, call_id), 0)
            if result is None:
                problems.append(f"{sid}: no result for {call_id}")
            elif tool == "unsafe" and "interrupted" in str(result.content):
                if n > 1:
                    problems.append(f"{sid}: interrupted {call_id} took effect {n} times")
            elif result.is_error:
                problems.append(f"{sid}: {call_id} failed: {result.content}")
            elif n < 1:
                problems.append(f"{sid}: {call_id} succeeded without taking effect")
    return problems


async def copy_to_jsonl(
    postgres_url: str, schema: str, session_ids: Sequence[str], root: Path
) -> list[tuple[Session, Session]]:
    """Each session's branch (its messages and job entries) appended, in order, to a new
    session of a :class:`~pitrio.harness.JsonlSessionStore` under ``root`` (Pi's
    harness's own format); the (PostgreSQL, JSONL) pairs, both closed."""
    from pitrio.harness import JsonlSessionStore

    pairs: list[tuple[Session, Session]] = []
    target = JsonlSessionStore(root)
    async with PostgresSessionStore(postgres_url, schema=schema) as store:
        for session_id in session_ids:
            source = await store.open(session_id, read_only=True)
            await source.close()
            copy = await target.create(cwd=source.cwd)
            for entry in source.get_branch():
                if isinstance(entry, MessageEntry):
                    await copy.append_message(entry.message)
                elif isinstance(entry, CustomEntry):
                    await copy.append_custom(entry.custom_type, entry.data)
            await copy.close()
            pairs.append((source, copy))
    return pairs


async def samples(postgres_url: str, schema: str, *, sessions: int, most: int = 3) -> list[str]:
    """A few sessions to show Pi: those holding a call cut off by a kill (its
    interrupted result) first, then the first session."""
    cut: list[str] = []
    async with PostgresSessionStore(postgres_url, schema=schema) as store:
        for i in range(sessions):
            session = await store.open(f"s{i:04d}", read_only=True)
            await session.close()
            if any(
                isinstance(e, MessageEntry)
                and isinstance(e.message, ToolResultMessage)
                and "interrupted" in str(e.message.content)
                for e in session.entries
            ):
                cut.append(session.id)
    return [*cut[: most - 1], *(["s0000"] if "s0000" not in cut[: most - 1] else [])]
