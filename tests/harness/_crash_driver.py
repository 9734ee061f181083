"""The crash sweep's driver: a scripted harness run killed at each of its wait points.

Run by tests/harness/test_crash_sweep.py as
``python _crash_driver.py KIND TOOLS WORKDIR STEP [K,K,...]`` (``TOOLS``: ``sequential``
or ``parallel``; the optional list: only those points, for debugging).
The run (two prompts: a warm-up, then one whose model asks for an unsafe ``write`` and a
safe ``read``, is refused once with a retryable error and backs off, compacts at the
threshold, asks for ``write`` again and answers "finished") counts its *points*: before
and after each session write, each streamed update (mid-stream), the back-off, the
compaction's start, each tool before and after its effect. A traced run lists them; then
for every STEP-th point a forked child runs the scenario and SIGKILLs itself there, and
another forked child restores the session (``Harness.interrupted``, ``resume()``) and
finishes what is left. Everything Trio runs in forked children (the driver never starts
Trio, so each child starts clean), which makes a kill point cost two forks, not two
interpreter starts. Prints one JSON object: the points, the uninterrupted run's result
and each kill's.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import trio
import trio.testing

from pitrio import Model, Tool, ToolResult, text_result
from pitrio.harness import (
    CompactionEntry,
    CompactionSettings,
    Harness,
    JsonlSessionStore,
    MessageEntry,
    PiSessionStore,
    RetrySettings,
    SqliteSessionStore,
    _frames,
    current_invocation,
)
from pitrio.testing import ScriptedModel, ScriptedResponse

# The scripted stream is faster than any network: each frame write as soon as the last
# one ended, so that a kill mid-stream finds a committed partial.
_frames.FRAME_INTERVAL = 0

STORES: dict[str, Any] = {
    "jsonl": JsonlSessionStore,
    "sqlite": SqliteSessionStore,
    "pi": PiSessionStore,
}
MODEL = Model(id="scripted", api="scripted", provider="local", context_window=4000)
COMPACTION = CompactionSettings(reserve_tokens=1500, keep_recent_tokens=400)
RETRY = RetrySettings(base_delay=0.001, jitter=0)
PROMPTS = ("warm up", "go")
BIG = "r" * 12000  # the read's output: the context passes the compaction threshold

# The run's state (one run per process).
kill_at: int | None = None
trace: list[str] | None = None
counter = 0
effects_path = Path()
session: Any = None
tool_execution: Any = "sequential"
phase = "prompts"  # then "compact", then "navigate"


def point(name: str) -> None:
    global counter
    counter += 1
    if trace is not None:
        trace.append(name)
    if counter == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)


def effect(line: str) -> None:
    with effects_path.open("a") as f:
        f.write(line + "\n")


def effects() -> list[str]:
    return effects_path.read_text().splitlines() if effects_path.exists() else []


def _results() -> set[str]:
    return {
        e.message.tool_call_id
        for e in session.entries
        if isinstance(e, MessageEntry) and e.message.role == "toolResult"
    }


def respond(context: Any) -> ScriptedResponse:
    if context.system_prompt.startswith("You are a context summarization assistant"):
        prompt = context.messages[0].content[0].text
        if "conversation branch" in prompt:
            point("mid-navigation summary")
            return ScriptedResponse.text("BRANCH SUMMARY", chunk_size=8)
        if phase == "compact":
            point("mid-compaction summary request")
        else:  # the threshold compaction inside the run
            point("mid-threshold summary request")
        return ScriptedResponse.text("SUMMARY of the work", chunk_size=8)
    last_user = next((m for m in reversed(context.messages) if m.role == "user"), None)
    text = " ".join(getattr(b, "text", "") for b in getattr(last_user, "content", ()))
    if text == "warm up" and not any(m.role == "toolResult" for m in context.messages):
        return ScriptedResponse.text("warmed up", chunk_size=4)
    done = _results()
    if "c3" in done:
        # Streamed as a network answer is (a checkpoint before each event): its frames
        # are written as it streams, so a mid-stream kill leaves a committed partial.
        return ScriptedResponse.text("finished", chunk_size=3, checkpoint_each_event=True)
    if "c2" in done:
        if "error served" not in effects():
            effect("error served")
            return ScriptedResponse(stop_reason="error", error_message="overloaded_error")
        return ScriptedResponse.tool_calls(("c3", "write", {"n": 2}), chunk_size=6)
    return ScriptedResponse.tool_calls(("c1", "write", {"n": 1}), ("c2", "read", {}), chunk_size=6)


async def write(call_id: str, params: Any, sig: Any, on_update: Any) -> ToolResult:
    invocation = current_invocation()
    assert invocation is not None
    await invocation.checkpoint(text_result(f"about to write {params['n']}"))
    point(f"tool {call_id} before its effect")
    effect(f"write {params['n']}")
    point(f"tool {call_id} after its effect")
    return text_result(f"wrote {params['n']}")


async def read(call_id: str, params: Any, sig: Any, on_update: Any) -> ToolResult:
    invocation = current_invocation()
    assert invocation is not None
    if invocation.get_memo("read") is not None:
        effect("read again, memo seen")
    await invocation.set_memo("read", True)
    point(f"tool {call_id} before its effect")
    effect("read")
    point(f"tool {call_id} after its effect")
    return text_result(BIG)


TOOLS = [
    Tool(name="write", description="w", execute=write, parameters={"type": "object"}),
    Tool(name="read", description="r", execute=read, parameters={"type": "object"}, replay="safe"),
]


def _frames_only(pending: Any) -> bool:
    return all(
        write.get("namespace") == "pi.pending.assistant_frame"
        for transaction in pending
        for write in transaction
    )


class CountingWriter:
    """The session's writer, with a point before and after each write."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        if hasattr(inner, "write_and_sync"):
            self.write_and_sync = self._write_and_sync

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def write(self, owner: Any, pending: Any) -> Any:
        if _frames_only(pending):
            # How a stream's frames batch into writes is the scheduler's: their writes
            # are no points (the same points in every run); "mid-stream" is one.
            done = trio.Event()
            frame_writes.append(done)
            try:
                return await self._inner.write(owner, pending)
            finally:
                frame_writes.remove(done)
                done.set()
        point("before a session write")
        out = await self._inner.write(owner, pending)
        point("after a session write")
        return out

    async def _write_and_sync(self, owner: Any, pending: Any) -> Any:
        point("before a session write")
        out = await self._inner.write_and_sync(owner, pending)
        point("after a session write")
        return out


frame_writes: list[trio.Event] = []
"""The frame writes in flight (in a worker thread)."""


async def _mid_stream() -> None:
    # A kill mid-stream comes after the frames of the events so far have been handed to
    # the writer and the writes in flight have reached the file, so what it leaves hangs
    # neither on Trio's scheduling order nor on how fast a worker thread ran.
    await trio.testing.wait_all_tasks_blocked()
    while frame_writes:
        await frame_writes[0].wait()
    point("mid-stream")


def listener(event: Any) -> Awaitable[None] | None:
    kind = event.type
    if kind == "message_update":
        return _mid_stream()
    elif kind == "auto_retry_start":
        point("in the back-off")
    elif kind == "compaction_start":
        point("mid-compaction")
    elif kind == "compaction_end" and event.reason == "manual" and event.status == "completed":
        point("after the compaction entry")
    elif kind == "navigation_start":
        point("mid-navigation")
    elif kind == "navigation_end" and event.status == "completed":
        point("after the leaf move")
    return None


def _harness() -> Harness:
    harness = Harness(
        model=MODEL,
        stream_fn=ScriptedModel(respond),
        session=session,
        tools=TOOLS,
        compaction=COMPACTION,
        retry=RETRY,
        tool_execution=tool_execution,
    )
    harness.subscribe(listener)
    return harness


def _done(kind: str) -> bool:
    """Whether the session holds the end of the ``compaction`` or ``navigation`` step
    (its ``pi.result``)."""
    return any(
        namespace == "pi.result" and value[0].get("kind") == kind
        for (namespace, _), value in session._state.values.items()
    )


def _navigation_target() -> str:
    """The warm-up's answer: the navigation goes back there, summarising the run."""
    return next(
        e.id
        for e in session.entries
        if isinstance(e, MessageEntry) and e.message.role == "assistant"
    )


async def _structural(harness: Harness) -> None:
    """After the prompts: a manual compaction, then a summarised navigation back to the
    warm-up's answer (each skipped when the session holds its end already)."""
    global phase
    phase = "compact"
    if not _done("compaction"):
        await harness.compact()
    phase = "navigate"
    if not _done("navigation"):
        await harness.navigate_tree(_navigation_target(), summarize=True, label="warm")


async def run(kind: str, where: Path) -> None:
    global session
    store = STORES[kind](where, fsync="never")  # a killed process loses nothing written
    session = await store.create(cwd="/work/project", session_id="sweep")
    session._writer = CountingWriter(session._writer)
    harness = _harness()
    await harness.set_model(MODEL)
    for text in PROMPTS:
        await harness.prompt(text)
    await _structural(harness)
    await session.close()
    if kind == "sqlite":
        await store.aclose()


async def restore(kind: str, where: Path) -> dict[str, Any]:
    global session
    store = STORES[kind](where, fsync="never")
    try:
        session = await store.open("sweep")
    except Exception:  # killed before the session was created
        session = await store.create(cwd="/work/project", session_id="sweep")
    harness = _harness()
    interrupted = harness.interrupted
    if interrupted is not None:
        await harness.resume()
    prompted = {
        " ".join(getattr(b, "text", "") for b in e.message.content)
        for e in session.entries
        if isinstance(e, MessageEntry) and e.message.role == "user"
    }
    if session.model is None:
        await harness.set_model(MODEL)
    for text in PROMPTS:
        if text not in prompted:
            await harness.prompt(text)
    await _structural(harness)
    # The run's transcript: the branch the navigation left; then where it went.
    navigation = next(
        (v[0] for (ns, _), v in session._state.values.items()
         if ns == "pi.result" and v[0].get("kind") == "navigation"),
        None,
    )  # fmt: skip
    leaf = session.get_entry(session.leaf_id) if session.leaf_id else None
    moved = None
    if navigation is not None and leaf is not None:
        moved = {
            "status": navigation["status"],
            "tip": leaf.type,
            "parent": leaf.parent_id == _navigation_target(),
            "label": session.labels.get(_navigation_target()),
        }
    rows = []
    compactions = 0
    source = navigation["fromTipId"] if navigation is not None else None
    for entry in session.get_branch(source):
        if isinstance(entry, CompactionEntry):
            compactions += 1
            continue
        if not isinstance(entry, MessageEntry):
            continue
        m = entry.message
        role = m.role
        if role == "assistant" and m.stop_reason in ("error", "aborted"):
            role = "failed assistant"
        content = m.content if not isinstance(m.content, str) else ()
        text = " ".join(str(getattr(b, "text", None) or getattr(b, "id", "")) for b in content)
        rows.append([role, getattr(m, "tool_call_id", None), text[:60]])
    lane = session.get_value("pi.lane.state", "main") or {}
    last = lane.get("lastOperationId")
    result = session.get_value("pi.result", last) if last else None
    leftovers = sorted(
        {ns for (ns, _) in session._state.values if ns.startswith(("pi.op.", "pi.pending."))}
    )
    out = {
        "interrupted": None if interrupted is None else interrupted.at,
        "rows": rows,
        "compactions": compactions,
        "current": lane.get("currentOperationId"),
        "inbox": lane.get("inbox"),
        "result": None if result is None else result["status"],
        "navigation": moved,
        "leftovers": leftovers,
    }
    await session.close()
    if kind == "sqlite":
        await store.aclose()
    return out


def _fork(fn: Any) -> int:
    """Run ``fn()`` in a forked child; its wait status."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            fn()
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return status


def main() -> None:
    global tool_execution
    kind, tool_execution = sys.argv[1], sys.argv[2]
    work, step_arg = Path(sys.argv[3]), int(sys.argv[4])
    out: dict[str, Any] = {}

    def traced() -> None:
        global trace, effects_path
        trace = []
        effects_path = work / "whole" / "effects"
        trio.run(run, kind, work / "whole" / "store")
        (work / "whole" / "trace.json").write_text(json.dumps(trace))

    def restored(case: Path) -> None:
        global effects_path
        effects_path = case / "effects"
        result = trio.run(restore, kind, case / "store")
        (case / "restored.json").write_text(json.dumps(result))

    (work / "whole").mkdir(parents=True)
    status = _fork(traced)
    if status != 0:
        raise SystemExit(f"the uninterrupted run failed (status {status})")
    points = json.loads((work / "whole" / "trace.json").read_text())
    status = _fork(lambda: restored(work / "whole"))
    if status != 0:
        raise SystemExit(f"reading the uninterrupted run failed (status {status})")
    out["points"] = points
    out["whole"] = json.loads((work / "whole" / "restored.json").read_text())
    out["whole"]["effects"] = (work / "whole" / "effects").read_text().splitlines()
    cases = []
    only = {int(k) for k in sys.argv[5].split(",")} if len(sys.argv) > 5 else None
    for k in range(1, len(points) + 1, step_arg):
        if only is not None and k not in only:
            continue
        case = work / f"kill-{k}"
        case.mkdir()

        def killed(k: int = k, case: Path = case) -> None:
            global kill_at, effects_path
            kill_at, effects_path = k, case / "effects"
            trio.run(run, kind, case / "store")

        kill_status = _fork(killed)
        before = (case / "effects").read_text().splitlines() if (case / "effects").exists() else []
        if kind == "jsonl" and (case / "store").exists():
            shutil.copytree(case / "store", case / "killed")  # for Pi's restore
        files = {
            name: next((str(p) for p in (case / name).rglob("*.jsonl")), None)
            for name in ("killed", "store")
        }
        restore_status = _fork(lambda case=case: restored(case))
        result: dict[str, Any] = {
            "k": k,
            "point": points[k - 1],
            "killed": os.WIFSIGNALED(kill_status) and os.WTERMSIG(kill_status) == signal.SIGKILL,
            "restore_status": restore_status,
            "effects_before": before,
            "killed_file": files["killed"],
            "final_file": files["store"] if kind == "jsonl" else None,
            "effects": (case / "effects").read_text().splitlines()
            if (case / "effects").exists()
            else [],
        }
        if restore_status == 0:
            result.update(json.loads((case / "restored.json").read_text()))
        cases.append(result)
    out["cases"] = cases
    print(json.dumps(out))


if __name__ == "__main__":
    main()
