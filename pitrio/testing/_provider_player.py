"""The provider fixture player: a run of pitrio's provider against the scripted server.

:func:`play_fixture` is the whole run: it validates the fixture, serves its scripted
responses from ``127.0.0.1`` (random port, :mod:`._provider_server`), runs the
fixture's API through the provider registry, records every request and event
(:mod:`._provider_trace`), and returns the records with the problems seen (the
oracle's exit status 3). The fixture format itself is :mod:`._provider_fixture`.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, final

import attrs
import httpx
import trio

from .._events import AssistantMessageEvent
from .._signal import AbortSignal
from .._stream import AssistantMessageEventStream
from ..providers import stream_simple
from ..providers._options import MaxTokensClampedWarning
from ._provider_fixture import (
    build_context,
    build_model,
    build_options,
    fill_placeholders,
    validate_fixture,
)
from ._provider_server import ScriptedServer
from ._provider_trace import normalize_event, normalize_message

__all__ = ["PlayResult", "play_fixture"]


@final
@attrs.frozen
class PlayResult:
    """What a fixture run produced: the trace records and the problems (exit 3)."""

    records: list[dict[str, Any]]
    problems: list[str]


async def play_fixture(
    fixture: Mapping[str, Any], *, client: httpx.AsyncClient | None = None
) -> PlayResult:
    """Run one fixture against pitrio's provider for its API.

    Args:
        fixture: the decoded fixture JSON.
        client: the HTTP client to use (default: a fresh one, closed afterwards).

    Raises:
        FixtureError: the fixture is malformed.
    """
    validate_fixture(fixture)
    records: list[dict[str, Any]] = []
    problems: list[str] = []
    abort_spec: Mapping[str, Any] | None = fixture.get("abort")
    signal = AbortSignal()
    stream_box: list[AssistantMessageEventStream] = []
    fired = False
    limit = fixture.get("timeoutMs", 10000) / 1000

    async with trio.open_nursery() as nursery:

        def do_abort() -> None:
            assert abort_spec is not None
            records.append({"type": "abort", "trigger": dict(abort_spec)})
            signal.abort()

        async def abort_later(delay: float) -> None:
            await trio.sleep(delay)
            do_abort()

        def fire_abort() -> None:
            nonlocal fired
            if fired or abort_spec is None:
                return
            fired = True
            if abort_spec.get("delayMs"):
                nursery.start_soon(abort_later, abort_spec["delayMs"] / 1000)
            else:
                do_abort()

        def on_request(n: int) -> None:
            if abort_spec is not None and abort_spec.get("request") == n:
                fire_abort()

        server = ScriptedServer(fixture["responses"], records, problems, on_request)
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        server_scope = trio.CancelScope()

        async def run_server() -> None:
            with server_scope:
                await trio.serve_listeners(server.handle, listeners)

        nursery.start_soon(run_server)
        own_client = client is None
        http = client or httpx.AsyncClient(
            timeout=httpx.Timeout(None), trust_env=False, verify=False
        )
        files_dir = _write_files(fixture, port)
        try:
            # pi-ai clamps max_tokens silently; pitrio warns (MaxTokensClampedWarning),
            # which is not part of the trace. The player runs one fixture at a time.
            with warnings.catch_warnings(), trio.move_on_after(limit) as timeout_scope:
                warnings.simplefilter("ignore", MaxTokensClampedWarning)
                await _consume(
                    fixture,
                    (port, files_dir),
                    http,
                    signal,
                    abort_spec,
                    records,
                    problems,
                    fire_abort,
                    stream_box,
                )
            if timeout_scope.cancelled_caught:
                problems.append(
                    f"fixture did not finish within {fixture.get('timeoutMs', 10000)} ms "
                    "(trace so far printed)"
                )
        finally:
            shutil.rmtree(files_dir, ignore_errors=True)
            if own_client:
                with trio.CancelScope(shield=True):
                    await http.aclose()
            server_scope.cancel()
            nursery.cancel_scope.cancel()
    if server.count < len(fixture["responses"]):
        problems.append(
            f"{len(fixture['responses']) - server.count} scripted response(s) never requested "
            f"({server.count} request(s) made)"
        )
    if abort_spec is not None and not fired:
        problems.append(f"abort trigger never fired: {json.dumps(abort_spec)}")
    return PlayResult(records, problems)


def _write_files(fixture: Mapping[str, Any], port: int) -> str:
    """A fresh folder holding the fixture's ``files`` (placeholders filled)."""
    files_dir = tempfile.mkdtemp(prefix="pitrio-fixture-")
    for name, content in fixture.get("files", {}).items():
        text = json.dumps(fill_placeholders(content, f"http://127.0.0.1:{port}", files_dir))
        (Path(files_dir) / name).write_text(text, "utf-8")
    return files_dir


async def _consume(
    fixture: Mapping[str, Any],
    where: tuple[int, str],
    http: httpx.AsyncClient,
    signal: AbortSignal,
    abort_spec: Mapping[str, Any] | None,
    records: list[dict[str, Any]],
    problems: list[str],
    fire_abort: Callable[[], None],
    stream_box: list[AssistantMessageEventStream],
) -> None:
    port, files_dir = where  # the scripted server's port, the fixture's files
    model = build_model(fixture, port)
    context = build_context(fixture, model)
    base_url = f"http://127.0.0.1:{port}"
    options = build_options(fixture, signal, base_url=base_url, files_dir=files_dir)
    stream = stream_simple(http, model, context, options)
    stream_box.append(stream)
    remove = signal.add_callback(stream.cancel)
    total = 0
    per_type: dict[str, int] = {}
    terminal: AssistantMessageEvent | None = None
    try:
        async with stream:
            async for event in stream:
                records.append(normalize_event(event))
                if terminal is not None:
                    problems.append(f'event "{event.type}" after the terminal event')
                if event.type in ("done", "error"):
                    terminal = event
                total += 1
                per_type[event.type] = per_type.get(event.type, 0) + 1
                if abort_spec is not None and "request" not in abort_spec:
                    want = abort_spec.get("event", "any")
                    count = total if want == "any" else per_type.get(event.type, 0)
                    if (want in ("any", event.type)) and count == abort_spec.get("nth", 1):
                        fire_abort()
            result = await stream.result()
    finally:
        remove()
    if terminal is None:
        problems.append("the event stream ended without a done/error event")
    else:
        terminal_message = getattr(terminal, "message", None) or getattr(terminal, "error", None)
        if result is not terminal_message:
            problems.append("stream.result() is not the terminal event's message")
    records.append({"type": "result", "message": normalize_message(result)})
    pattern = fixture.get("errorMessagePattern")
    if pattern is not None and (
        not isinstance(result.error_message, str) or not re.search(pattern, result.error_message)
    ):
        problems.append(
            f"errorMessagePattern {pattern} does not match errorMessage "
            f"{json.dumps(result.error_message)}"
        )
