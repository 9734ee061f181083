"""The exception tree: one base, the tree drawn in ``pitrio._errors`` is the classes'
real hierarchy, and representative public calls raise the documented class with a
message that says what was wrong and how to fix it."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from typing import Any

import pytest
import trio
import trio.testing

import pitrio
import pitrio._errors
import pitrio._loop
import pitrio.cli
import pitrio.coding
import pitrio.harness
import pitrio.mcp
import pitrio.providers
import pitrio.providers.auth
import pitrio.testing.conformance
import pitrio.testing.provider_conformance
import pitrio.worker
from pitrio import (
    Agent,
    AgentBusyError,
    AgentContext,
    ArgumentTypeError,
    EventStream,
    HarnessError,
    IncompleteStreamError,
    InvalidStateError,
    Model,
    PitrioError,
    UnknownApiError,
    UsageError,
    WireFormatError,
    run_agent_loop_continue,
    wire,
)
from pitrio.harness import InMemorySessionStore, SessionNotFoundError
from pitrio.providers import Models, get_api
from pitrio.providers._deferred import DeferredError
from pitrio.providers._http import (
    APIConnectionError,
    APIConnectionTimeoutError,
    APIError,
    MissingApiKeyError,
    RetryDelayTooLongError,
)
from pitrio.providers._sse import SSEEventTooLargeError
from pitrio.testing import ScriptedModel, ScriptedResponse

MODEL = Model(id="m", api="scripted", provider="scripted")

_BUILTINS = {"ValueError": ValueError, "TypeError": TypeError, "RuntimeError": RuntimeError,
             "LookupError": LookupError}  # fmt: skip

_INTERNAL = {
    c.__name__: c
    for c in (
        APIConnectionError,
        APIConnectionTimeoutError,
        APIError,
        DeferredError,
        MissingApiKeyError,
        RetryDelayTooLongError,
        SSEEventTooLargeError,
    )
}
"""The provider classes the tree shows but no package exports (a run turns them into
error messages)."""


def _documented_tree() -> list[tuple[str, str | None, tuple[str, ...]]]:
    """(class, parent in the drawing, builtin bases in parentheses) per line."""
    doc = pitrio._errors.__doc__
    assert doc is not None
    drawing = doc.split("```")[1].strip("\n").splitlines()
    stack: list[str] = []
    rows = []
    for line in drawing:
        match = re.match(r"^([│ ├└─]*?)(\w+)(?: \(([\w, ]+)\))?\s", line + " ")
        assert match, line
        depth = len(match.group(1)) // 4
        name = match.group(2)
        builtins = tuple(b.strip() for b in (match.group(3) or "").split(",") if b.strip())
        del stack[depth:]
        rows.append((name, stack[-1] if stack else None, builtins))
        stack.append(name)
    return rows


def _resolve(name: str) -> type[BaseException]:
    for namespace in (
        pitrio,
        pitrio.providers,
        pitrio.providers.auth,
        pitrio.harness,
        pitrio.coding,
        pitrio.cli,
        pitrio.mcp,
        pitrio.worker,
        pitrio.testing.conformance,
        pitrio.testing.provider_conformance,
    ):
        if name in getattr(namespace, "__all__", ()):
            cls = getattr(namespace, name)
            assert isinstance(cls, type)
            return cls
    return _INTERNAL[name]


def test_the_drawn_tree_is_the_class_hierarchy() -> None:
    """Each class in the drawing is a direct subclass of the class drawn above it, with
    the builtin named in parentheses as a base too."""
    rows = _documented_tree()
    assert rows[0] == ("PitrioError", None, ())
    assert len(rows) > 20
    for name, parent, builtins in rows[1:]:
        cls = _resolve(name)
        assert parent is not None
        assert _resolve(parent) in cls.__bases__, (name, parent, cls.__bases__)
        for builtin in builtins:
            assert issubclass(cls, _BUILTINS[builtin]), (name, builtin)


def _pitrio_modules() -> list[Any]:
    modules = [pitrio]
    for info in pkgutil.walk_packages(pitrio.__path__, "pitrio."):
        if info.name.endswith("__main__"):
            continue
        modules.append(importlib.import_module(info.name))
    return modules


def test_every_pitrio_error_class_is_drawn() -> None:
    """No PitrioError subclass outside the drawing (except private ``_`` classes)."""
    drawn = {name for name, _, _ in _documented_tree()}
    found = set()
    for module in _pitrio_modules():
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, PitrioError) and not name.startswith("_"):
                found.add(cls.__name__)
    assert found - drawn == set()
    assert drawn - found == set()


@pytest.mark.parametrize("package", [pitrio, pitrio.providers, pitrio.harness, pitrio.coding])
def test_every_exported_error_is_a_pitrio_error(package: Any) -> None:
    """The public exception classes of every package share the one base."""
    errors = [
        getattr(package, name)
        for name in package.__all__
        if isinstance(getattr(package, name), type)
        and issubclass(getattr(package, name), BaseException)
        and not issubclass(getattr(package, name), Warning)
    ]
    assert errors, package.__name__
    for cls in errors:
        assert issubclass(cls, PitrioError), cls


def test_builtin_bases_keep_old_handlers_working() -> None:
    """Code that caught the builtin before catches the new class."""
    assert issubclass(UsageError, ValueError)
    assert issubclass(AgentBusyError, ValueError)
    assert issubclass(AgentBusyError, RuntimeError)
    assert issubclass(UnknownApiError, LookupError)
    assert issubclass(SSEEventTooLargeError, ValueError)
    assert issubclass(SessionNotFoundError, LookupError)
    assert issubclass(SessionNotFoundError, HarnessError)


# --------------------------------------------------------------------------------------
# Representative public calls


def test_agent_without_a_stream_function(monkeypatch: pytest.MonkeyPatch) -> None:
    """The message names the Python API to use (not Pi's streamFn/setDefaultStreamFn)."""
    monkeypatch.setattr(pitrio._loop, "_default_stream_fn", None)
    with pytest.raises(InvalidStateError) as info:
        Agent(model=MODEL)
    text = str(info.value)
    assert "stream_fn=" in text
    assert "set_default_stream_fn()" in text
    assert "streamFn" not in text
    assert "setDefault" not in text


async def test_busy_agent_names_follow_up(autojump_clock: trio.testing.MockClock) -> None:
    agent = Agent(stream_fn=ScriptedModel([ScriptedResponse.text("slow", delay=5)]), model=MODEL)
    async with trio.open_nursery() as nursery:
        await nursery.start(agent.prompt, "first")
        with pytest.raises(AgentBusyError) as info:
            await agent.prompt("second")
        agent.abort()
    assert "steer() or follow_up()" in str(info.value)
    assert "followUp" not in str(info.value)


def test_bad_queue_mode_and_message() -> None:
    agent = Agent(stream_fn=ScriptedModel([]), model=MODEL)
    with pytest.raises(UsageError, match=r"'one-at-a-time' or 'all'; got 'fifo'"):
        agent.steering_mode = "fifo"  # type: ignore[assignment]
    with pytest.raises(ArgumentTypeError, match=r"expected a message .* or a string; got 42"):
        agent.follow_up(42)


async def test_continue_from_nothing() -> None:
    with pytest.raises(UsageError, match=r"^Cannot continue: no messages in context$"):
        await run_agent_loop_continue(AgentContext(), pitrio.LoopConfig(model=MODEL), _ignore)


async def _ignore(event: object) -> None:
    pass


def test_wire_reading_errors() -> None:
    with pytest.raises(WireFormatError, match=r"'user' message: the field 'content' is missing"):
        wire.structure_message({"role": "user"})
    with pytest.raises(ArgumentTypeError, match=r"needs an attrs class"):
        pitrio.register_message_role(int)


def test_unknown_api_and_closed_models() -> None:
    with pytest.raises(UnknownApiError, match="No API provider registered for api: nope"):
        get_api("nope")
    with pytest.raises(InvalidStateError, match=r"async with Models\(\) as models:"):
        Models().client  # noqa: B018


async def test_stream_errors() -> None:
    stream: EventStream[int, int] = EventStream(lambda e: False, lambda e: e)
    stream.end()
    with pytest.raises(IncompleteStreamError, match="ended without a result"):
        await stream.result()


async def test_missing_session_is_a_harness_error() -> None:
    store = InMemorySessionStore()
    with pytest.raises(SessionNotFoundError):
        await store.open("no-such-session")


def test_pi_texts_table_is_documented() -> None:
    """Each translation the conformance player makes is a row of docs/conformance.md."""
    from pathlib import Path

    from pitrio.testing._trace import PI_TEXTS, pi_text

    doc = (Path(__file__).parent.parent / "docs" / "conformance.md").read_text()
    assert PI_TEXTS
    for python, pi in PI_TEXTS:
        assert f"| `{python}` | `{pi}` |" in doc
        assert pi_text(f"x {python} y") == f"x {pi} y"


def test_harness_argument_errors() -> None:
    """The harness's argument checks raise the usage classes, naming the fix."""
    from pitrio.harness import Hooks, RetrySettings

    with pytest.raises(UsageError, match=r"unknown hook 'nope'; hooks are: .*tool_call"):
        Hooks().on("nope", print)  # type: ignore[call-overload]
    with pytest.raises(ArgumentTypeError, match="must be callable; got 3"):
        Hooks().on("tool_call", 3)  # type: ignore[call-overload]
    with pytest.raises(UsageError, match=r"RetrySettings\.max_retries must be an int >= 0"):
        RetrySettings(max_retries=-1)


def test_stream_options_speak_python_and_seconds() -> None:
    """No camelCase and no millisecond fields in StreamOptions (pi-ai's ``timeoutMs`` and
    ``maxRetryDelayMs`` are ``timeout`` and ``max_retry_delay``, in seconds)."""
    import attrs

    from pitrio import StreamOptions

    names = [field.name for field in attrs.fields(StreamOptions)]
    assert {"timeout", "max_retry_delay", "idle_timeout"} <= set(names)
    for name in names:
        assert name == name.lower(), name
        assert not name.endswith("_ms"), name


async def test_replaying_a_recorded_raise(tmp_path: Any) -> None:
    """A recorded stream function that raised raises again on replay, as ReplayedRaiseError
    (a HarnessError and a RuntimeError) with the recorded message."""
    from pitrio import Context, StreamOptions
    from pitrio.harness import RecordingStreamFn, ReplayedRaiseError, ReplayStreamFn

    path = tmp_path / "run.jsonl"

    def broken(model: Model, context: Context, options: StreamOptions) -> Any:
        raise ConnectionError("no route to host")

    agent = Agent(stream_fn=RecordingStreamFn(broken, path), model=MODEL)
    await agent.prompt("hi")
    await agent.wait_for_idle()
    replay = ReplayStreamFn(path)
    with pytest.raises(ReplayedRaiseError, match=r"^no route to host$") as info:
        replay(MODEL, Context(messages=agent.state.messages[:1]), StreamOptions())
    assert isinstance(info.value, RuntimeError)
    assert isinstance(info.value, HarnessError)
