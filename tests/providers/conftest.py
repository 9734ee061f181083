"""Shared helpers for the provider tests: scripted HTTP through ``httpx.MockTransport``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import httpx
import pytest
import trio

from pitrio import AssistantMessageEventStream
from pitrio._events import AssistantMessageEvent


class ScriptedBody(httpx.AsyncByteStream):
    """A response body yielding ``chunks`` (optionally pausing forever after
    ``hang_after`` of them); records whether it was closed."""

    def __init__(self, chunks: Sequence[bytes], *, hang_after: int | None = None) -> None:
        self.chunks = list(chunks)
        self.hang_after = hang_after
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for index, chunk in enumerate(self.chunks):
            if self.hang_after == index:
                await trio.sleep_forever()
            await trio.lowlevel.checkpoint()
            yield chunk
        if self.hang_after == len(self.chunks):
            await trio.sleep_forever()

    async def aclose(self) -> None:
        self.closed = True


def sse(*payloads: Any) -> list[bytes]:
    """One ``data:`` event per payload (JSON-encoded unless already a string), then [DONE]."""
    out = [f"data: {p if isinstance(p, str) else json.dumps(p)}\n\n".encode() for p in payloads]
    out.append(b"data: [DONE]\n\n")
    return out


def chunk(*, content: str | None = None, finish: str | None = None, **delta: Any) -> dict[str, Any]:
    """A chat-completions chunk with one choice."""
    d = dict(delta)
    if content is not None:
        d["content"] = content
    choice = {"index": 0, "delta": d, "finish_reason": finish}
    return {"id": "c1", "model": "m", "choices": [choice]}


class Recorder:
    """An ``httpx.MockTransport`` handler that records requests and plays responses."""

    def __init__(self, *responses: httpx.Response | Callable[[httpx.Request], Any]) -> None:
        self.responses = list(responses)
        self.requests: list[httpx.Request] = []
        self.bodies: list[dict[str, Any]] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        self.bodies.append(json.loads(await request.aread()))
        response = self.responses.pop(0)
        if callable(response) and not isinstance(response, httpx.Response):
            result = response(request)
            if hasattr(result, "__await__"):
                result = await result
            return result  # type: ignore[no-any-return]
        return response

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.MockTransport(self))


def stream_response(chunks: Sequence[bytes], **kwargs: Any) -> httpx.Response:
    """A 200 SSE response with a :class:`ScriptedBody`."""
    return httpx.Response(
        200,
        headers={"content-type": "text/event-stream"},
        stream=ScriptedBody(chunks, **kwargs),
    )


async def collect(stream: AssistantMessageEventStream) -> list[AssistantMessageEvent]:
    """Open the stream, return all its events."""
    events = []
    async with stream:
        async for event in stream:
            events.append(event)
    return events


@pytest.fixture
def recorder_factory() -> type[Recorder]:
    return Recorder


@pytest.fixture
def lacking_api(monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """``(provider, api)``: a catalog provider whose one API is made one pitrio lacks
    (every API of pi-ai 0.85.0's catalog is implemented; a later catalog may name one
    that is not, which is what this stands for)."""
    import pitrio.providers as providers

    provider, api = "google-vertex", "google-vertex"
    monkeypatch.delitem(providers._LAZY_APIS, api)
    monkeypatch.delitem(providers._APIS, api, raising=False)
    monkeypatch.setitem(providers._NOT_IMPLEMENTED_APIS, api, "Google Vertex AI")
    return provider, api


@pytest.fixture(autouse=True)
def _own_agent_dir(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The provider tests see no user's ``~/.pi/agent`` (``Models()`` reads the Radius
    models a login stored there): an empty agent directory unless a test sets its own."""
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(tmp_path_factory.mktemp("agent")))
