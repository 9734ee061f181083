"""``pitrio serve --store postgresql://... --queue redis://...``: the web UI in front of
real workers. A real server (in this process), a real worker (``python -m pitrio worker``,
a Celery prefork pool), real PostgreSQL and Redis (``tests/_services.py``), and
WebSocket clients speaking the page's protocol: a prompt typed in a page runs as a job on
the worker and the page follows it live; a page that connects in the middle of a run
replays it from the stream, then follows it; Stop reaches the worker, whose run settles
as aborted."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
import trio
from _services import Server, fresh_schema

from pitrio import AssistantMessage, TextContent, ToolResultMessage, UserMessage
from pitrio.harness import CustomEntry, MessageEntry, PostgresSessionStore
from pitrio.web._serve import ServerInfo, main, serve
from pitrio.worker._jobs import _job_states

from ._worker import worker_process

pytest.importorskip("trio_websocket", reason="the web UI tests need pip install 'pitrio[web]'")

HERE = Path(__file__).parent


def open_socket(info: ServerInfo, origin: str | None = None) -> Any:
    import trio_websocket

    return trio_websocket.open_websocket_url(
        f"ws://{info.host}:{info.port}/ws?token={info.token}",
        extra_headers=[(b"Origin", (origin or f"http://{info.host}:{info.port}").encode())],
    )


class Page:
    """A WebSocket client keeping the view as the page would: items by id."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.items: dict[str, dict[str, Any]] = {}
        self.working = False
        self.session: str | None = None
        self.seen: list[dict[str, Any]] = []
        self.pending: list[dict[str, Any]] = []
        self.resets = 0

    async def receive(self) -> dict[str, Any]:
        """Apply the next message (a frame may hold several: one at a time, so that a
        condition is checked after each)."""
        while not self.pending:
            data = json.loads(await self.ws.get_message())
            self.pending.extend(data if isinstance(data, list) else [data])
        self.apply(self.pending.pop(0))
        return self.seen[-1]

    def apply(self, m: dict[str, Any]) -> None:
        self.seen.append(m)
        kind = m["type"]
        if kind == "reset":
            self.resets += 1
            self.items.clear()
            self.session = m["session"]
        elif kind == "append":
            self.items[m["id"]] = {"kind": m["kind"], "text": m["text"], "title": m.get("title")}
        elif kind == "appendDelta":
            self.items[m["id"]]["text"] += m["delta"]
        elif kind == "replace":
            self.items[m["id"]].update(text=m["text"], state=m["state"])
        elif kind == "status":
            self.working = m["working"]

    async def until(self, condition: Any) -> None:
        while not condition(self):
            await self.receive()

    async def send(self, **command: Any) -> None:
        await self.ws.send_message(json.dumps(command))

    def shown(self) -> list[tuple[str, str]]:
        """The items a person sees (an answer with only tool calls shows none)."""
        return [
            (i["kind"], i["title"] or i["text"])
            for i in self.items.values()
            if i["title"] or i["text"]
        ]


def reread(resets: int) -> Any:
    """A condition: the run ended and the view was read again from the session (a
    snapshot after the first ``resets`` ones, up to its closing ``status``)."""

    def condition(page: Page) -> bool:
        tail = page.seen[-1] if page.seen else {}
        return page.resets > resets and not page.working and tail.get("type") == "status"

    return condition


async def test_prompts_from_the_page_run_on_a_worker_and_stop_reaches_it(
    postgres_server: Server, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pid_file, block_file = tmp_path / "pid", tmp_path / "block"
    monkeypatch.setenv("PITRIO_TEST_PID_FILE", str(pid_file))
    monkeypatch.setenv("PITRIO_TEST_BLOCK_FILE", str(block_file))
    schema = fresh_schema()
    project = tmp_path / "project"
    project.mkdir()
    argv = ["--port", "0", "--store", postgres_server.url, "--queue", redis_url]
    argv += ["--schema", schema, "--cwd", str(project)]
    out = io.StringIO()
    with trio.fail_after(240):
        async with (
            worker_process(postgres_server, redis_url, schema, tmp_path) as worker,
            trio.open_nursery() as nursery,
        ):
            info: ServerInfo = await nursery.start(
                lambda task_status: serve(argv, out=out, task_status=task_status)
            )
            assert "prompts as jobs of" in out.getvalue()
            async with open_socket(info) as ws:
                page = Page(ws)
                await page.until(lambda p: p.seen and p.seen[-1]["type"] == "status")
                info_message = page.seen[0]
                assert info_message["type"] == "info"
                assert info_message["model"] == "workers"
                first = page.session
                assert first is not None
                # A prompt becomes a job; the page follows the worker's run live.
                before = page.resets
                await page.send(type="prompt", text="go")
                await page.until(lambda p: ("assistant", "finished") in p.shown())
                live = list(page.seen)
                await page.until(reread(before))
                assert page.shown() == [("user", "go"), ("tool", "slow"), ("assistant", "finished")]
                # The run's items came as events (appendDelta while streaming), not only in
                # the snapshot read from the session at the end.
                assert any(m["type"] == "appendDelta" for m in live)
                assert pid_file.exists()
                assert int(pid_file.read_text()) != os.getpid()  # run by the worker
                assert worker.returncode is None
                # Slash commands and the model switch need the server's own harness.
                await page.send(type="prompt", text="/model x")
                await page.until(lambda p: p.seen[-1]["type"] == "error")
                assert "not available here" in page.seen[-1]["text"]

                # A new session, whose run blocks in its tool until Stop.
                block_file.write_text("")
                pid_file.unlink()
                await page.send(type="new")
                await page.until(lambda p: p.session != first and p.seen[-1]["type"] == "sessions")
                second = page.session
                assert second is not None
                before = page.resets
                await page.send(type="prompt", text="wait for it")
                await page.until(lambda p: ("tool", "slow") in p.shown())
                while not pid_file.exists():  # noqa: ASYNC110 - the worker's tool started
                    await trio.sleep(0.05)

                # A page that connects now replays the run so far from the stream.
                async with open_socket(info) as late_ws:
                    late = Page(late_ws)
                    await late.until(lambda p: p.seen and p.seen[-1]["type"] == "status")
                    assert late.session == second
                    assert late.working
                    assert late.shown() == [("user", "wait for it"), ("tool", "slow")]
                    # Stop from the late page reaches the worker: the run settles, aborted.
                    await late.send(type="abort")
                    await late.until(reread(late.resets))
                    await page.until(reread(before))
                    assert block_file.exists()  # slow never finished by itself
                    tool = next(i for i in late.items.values() if i["kind"] == "tool")
                    assert tool["state"] == "error"
                    assert page.shown() == late.shown()
            nursery.cancel_scope.cancel()
    async with PostgresSessionStore(postgres_server.url, schema=schema) as store:
        session = await store.open(second, read_only=True)
    results = [
        e.message
        for e in session.entries
        if isinstance(e, MessageEntry) and isinstance(e.message, ToolResultMessage)
    ]
    assert len(results) == 1
    assert results[0].is_error
    [job] = {
        e.data["key"]
        for e in session.entries
        if isinstance(e, CustomEntry) and e.custom_type == "pitrio.job" and isinstance(e.data, dict)
    }
    assert _job_states(session, job) == ["started", "done"]


async def test_the_cluster_server_checks_host_origin_and_token(
    postgres_server: Server, redis_url: str, tmp_path: Path
) -> None:
    from web.test_web_security import request, upgrade

    argv = ["--port", "0", "--store", postgres_server.url, "--queue", redis_url]
    argv += ["--schema", fresh_schema(), "--cwd", str(tmp_path)]
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            info: ServerInfo = await nursery.start(
                lambda task_status: serve(argv, out=io.StringIO(), task_status=task_status)
            )
            own = f"http://{info.host}:{info.port}"
            target = f"/ws?token={info.token}"
            status, _, _ = await request(info, target, upgrade(info, Origin=own))
            assert status == 101
            for headers in (
                upgrade(info, Origin="http://evil.example"),
                upgrade(info, Origin=own, Host=f"evil.example:{info.port}"),
                upgrade(info),  # no Origin
            ):
                status, _, _ = await request(info, target, headers)
                assert status == 403
            status, _, _ = await request(info, "/ws?token=wrong", upgrade(info, Origin=own))
            assert status == 403
            nursery.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--store", "postgresql://x/y"], "--store and --queue go together"),
        (["--store", "sqlite:///x", "--queue", "redis://x"], "--store must be a postgresql://"),
        (["--store", "postgresql://x/y", "--queue", "http://x"], "--queue must be a redis://"),
        (["--store", "postgresql://x/y", "--queue", "redis://x", "-m", "m"], "--model: not with"),
        (["--events", "redis://x"], "--events goes with --store and --queue"),
    ],
)
def test_cluster_arguments_are_checked(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert says in capsys.readouterr().err


async def test_a_page_of_a_server_started_mid_run_replays_the_run_and_commands_are_checked(
    postgres_server: Server, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server starts on a session whose job is running (in this process, blocked in
    its tool): the page shows the history before the job and the job's events replayed
    from the stream, then the rest live; bad commands get errors; a failed job says so."""
    from pitrio.worker import WorkerConfig, open_event_publisher, run_prompt_job, stream_for

    from ._factory import make_harness

    pid_file, block_file = tmp_path / "pid", tmp_path / "block"
    monkeypatch.setenv("PITRIO_TEST_PID_FILE", str(pid_file))
    monkeypatch.setenv("PITRIO_TEST_BLOCK_FILE", str(block_file))
    schema = fresh_schema()
    config = WorkerConfig(
        postgres_url=postgres_server.url, events_url=redis_url, factory=make_harness, schema=schema
    )
    with trio.fail_after(120):
        async with PostgresSessionStore(postgres_server.url, schema=schema) as store:
            earlier = await store.create(session_id="mid", cwd=str(tmp_path))
            await earlier.append_message(UserMessage(content="first"))
            await earlier.append_message(
                AssistantMessage(
                    content=(TextContent(text="hello"),),
                    api="scripted",
                    provider="local",
                    model="scripted",
                    stop_reason="stop",
                )
            )
            await earlier.close()
        block_file.write_text("")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_prompt_job, config, "mid", "second", "k2")
            while not pid_file.exists():  # noqa: ASYNC110 - the tool started
                await trio.sleep(0.05)
            argv = ["--port", "0", "--store", postgres_server.url, "--queue", redis_url]
            argv += ["--schema", schema, "--cwd", str(tmp_path), "-r", "mid"]
            info: ServerInfo = await nursery.start(
                lambda task_status: serve(argv, out=io.StringIO(), task_status=task_status)
            )
            async with open_socket(info) as ws:
                page = Page(ws)
                await page.until(lambda p: p.seen and p.seen[-1]["type"] == "status")
                assert page.session == "mid"
                # The stream may not hold the running job's first events yet: then they
                # come live.
                await page.until(lambda p: p.working and ("user", "second") in p.shown())
                # What came before the job from the session; the job, still in its tool,
                # from the stream.
                await page.until(lambda p: ("tool", "slow") in p.shown())
                assert page.shown() == [
                    ("user", "first"),
                    ("assistant", "hello"),
                    ("user", "second"),
                    ("tool", "slow"),
                ]
                block_file.unlink()
                await page.until(reread(page.resets))
                assert page.shown()[-1] == ("assistant", "finished")

                async def error_for(raw: str) -> str:
                    await ws.send_message(raw)
                    await page.until(lambda p: p.seen[-1]["type"] == "error")
                    text: str = page.seen[-1]["text"]
                    page.seen.append({"type": "-"})
                    return text

                assert await error_for("{not json") == "a command must be JSON"
                assert "unknown command type 'nope'" in await error_for('{"type": "nope"}')
                assert "not available here" in await error_for('{"type": "set_thinking"}')
                assert "non-empty 'text'" in await error_for('{"type": "prompt", "text": " "}')
                assert "'before' item id" in await error_for('{"type": "history", "before": 1}')
                assert "cannot open session" in await error_for('{"type": "open", "id": "no"}')
                assert "a session 'id'" in await error_for('{"type": "open", "id": 5}')
                await page.send(type="history", before=next(iter(page.items)), limit=5)
                await page.until(lambda p: p.seen[-1]["type"] == "history")
                assert page.seen[-1]["messages"] == []  # nothing before the first item
                await page.send(type="sessions")
                await page.until(lambda p: p.seen[-1]["type"] == "sessions")
                [listed] = page.seen[-1]["items"]
                assert listed == {**listed, "id": "mid", "title": "first", "current": True}
                await page.send(type="abort")  # nothing runs: nothing to do
                # A job that fails on its worker: the page is told, and shows the session.
                async with open_event_publisher(redis_url, stream=stream_for("mid")) as pub:
                    pub.publish({"type": "pitrio.job", "state": "started", "key": "k3"})
                    pub.publish(
                        {"type": "pitrio.job", "state": "failed", "key": "k3", "error": "boom"}
                    )
                await page.until(lambda p: p.seen[-1]["type"] == "error")
                assert page.seen[-1]["text"] == "the job failed: boom"
                # Opening the session again (as a reloaded page would).
                await page.send(type="open", id="mid")
                await page.until(lambda p: p.seen[-1]["type"] == "sessions")
                assert ("user", "second") in page.shown()
            nursery.cancel_scope.cancel()


def test_a_queue_that_cannot_be_reached_is_named(
    postgres_server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``pitrio serve --queue`` at a port nothing listens on stops with exit status 2 and
    says which Redis it could not read."""
    from _services import free_port

    queue = f"redis://127.0.0.1:{free_port()}/0"
    argv = ["--port", "0", "--store", postgres_server.url, "--queue", queue]
    argv += ["--schema", fresh_schema(), "--cwd", str(tmp_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("pitrio serve: reading Redis stream 'pitrio:session:")
    assert "ConnectionError" in err
