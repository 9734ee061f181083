"""The request lifecycle the three HTTP APIs share (``pitrio/providers/_request.py``):
idle timeout, the end at the terminal event, a JSON body answering a streaming request,
retry on a dead pooled connection, error texts. Each test runs on every API."""

from __future__ import annotations

import ast
import json
import warnings
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio
import trio.testing

import pitrio.providers
from pitrio import AssistantMessage, AssistantMessageEventStream, TextContent, UserMessage
from pitrio._events import TextDeltaEvent, TextEndEvent, TextStartEvent
from pitrio._model import Context, Model, StreamOptions
from pitrio.providers import get_api, register_api
from pitrio.providers._options import MaxTokensClampedWarning, clamp_max_tokens_to_context
from pitrio.providers._request import (
    DEFAULT_IDLE_TIMEOUT,
    Exchange,
    HttpRequest,
    ProviderFailure,
    exchange_stream,
)
from pitrio.providers._sse import ServerSentEvent

from .conftest import Recorder, ScriptedBody, collect


@attrs.frozen
class Api:
    """One wire API: a model, a streamed text answer (``Hi``), the same answer as one
    JSON object, and a JSON event that cannot be parsed."""

    name: str
    model: Model
    events: Sequence[bytes]
    complete: dict[str, Any]


def _named(events: Sequence[dict[str, Any]]) -> list[bytes]:
    return [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events]


COMPLETIONS = Api(
    "openai-completions",
    Model(id="m", api="openai-completions", provider="local", base_url="http://llm.test/v1"),
    [
        b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n',
        b'data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
        b"data: [DONE]\n\n",
    ],
    {
        "id": "c",
        "object": "chat.completion",
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    },
)
ANTHROPIC = Api(
    "anthropic-messages",
    Model(id="claude", api="anthropic-messages", provider="anthropic", base_url="http://a.test"),
    _named(
        [
            {
                "type": "message_start",
                "message": {"id": "msg", "model": "claude", "usage": {"input_tokens": 3}},
            },
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}},
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "Hi"},
            },
            {"type": "content_block_stop", "index": 0},
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {}},
            {"type": "message_stop"},
        ]
    ),
    {
        "id": "msg",
        "type": "message",
        "role": "assistant",
        "model": "claude",
        "content": [{"type": "text", "text": "Hi"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 3, "output_tokens": 1},
    },
)
_MESSAGE_ITEM = {"id": "msg_1", "type": "message", "role": "assistant", "content": []}
_MESSAGE_DONE = {**_MESSAGE_ITEM, "content": [{"type": "output_text", "text": "Hi"}]}
RESPONSES = Api(
    "openai-responses",
    Model(id="gpt", api="openai-responses", provider="openai", base_url="http://o.test/v1"),
    _named(
        [
            {"type": "response.created", "response": {"id": "r", "status": "in_progress"}},
            {"type": "response.output_item.added", "output_index": 0, "item": _MESSAGE_ITEM},
            {
                "type": "response.output_text.delta",
                "item_id": "msg_1",
                "output_index": 0,
                "delta": "Hi",
            },
            {"type": "response.output_item.done", "output_index": 0, "item": _MESSAGE_DONE},
            {"type": "response.completed", "response": {"id": "r", "status": "completed"}},
        ]
    ),
    {"id": "r", "object": "response", "status": "completed", "output": [_MESSAGE_DONE]},
)
APIS = [COMPLETIONS, ANTHROPIC, RESPONSES]
each_api = pytest.mark.parametrize("api", APIS, ids=[a.name for a in APIS])

CONTEXT = Context(messages=[UserMessage(content="hi")])


def sse_response(chunks: Sequence[bytes], *, hang_after: int | None = None) -> httpx.Response:
    return httpx.Response(
        200,
        headers={"content-type": "text/event-stream"},
        stream=ScriptedBody(chunks, hang_after=hang_after),
    )


async def run(
    api: Api, *responses: httpx.Response | Callable[[httpx.Request], Any], **options: Any
) -> tuple[list[str], AssistantMessage, Recorder]:
    options.setdefault("api_key", "sk-test")
    recorder = Recorder(*responses)
    async with recorder.client() as client:
        stream = get_api(api.name)(client, api.model, CONTEXT, StreamOptions(**options))
        events = await collect(stream)
        message = await stream.result()
    return [e.type for e in events], message, recorder


# -- the end of a stream ------------------------------------------------------------------


@each_api
async def test_the_message_ends_at_the_terminal_event(
    api: Api, autojump_clock: trio.testing.MockClock
) -> None:
    """A server that never closes the body after its terminal event: the ``done`` event
    comes at once (no wait for the body's end, nor for the idle timeout); the body gets
    a short grace to end (so the connection could be reused), then it is closed."""
    start = trio.current_time()
    body = ScriptedBody(api.events, hang_after=len(api.events))
    response = httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=body)
    recorder = Recorder(response)
    done_at: list[float] = []
    async with recorder.client() as client:
        stream = get_api(api.name)(client, api.model, CONTEXT, StreamOptions(api_key="k"))
        async with stream:
            async for event in stream:
                if event.type == "done":
                    done_at.append(trio.current_time())
        message = await stream.result()
    assert message.stop_reason == "stop", message.error_message
    assert message.text == "Hi"
    assert done_at == [start]
    # The grace for the body to end (1 s), then open_body's bound on finishing httpx's
    # generators (this mock body ignores the close; a real connection ends at once).
    assert trio.current_time() - start <= 2
    assert body.closed


@each_api
async def test_a_stalled_stream_ends_after_the_idle_timeout(
    api: Api, autojump_clock: trio.testing.MockClock
) -> None:
    """Headers and one event, then nothing: an error after ``idle_timeout`` seconds
    (virtual time), keeping what arrived; the default is the SDKs' 600 s."""
    start = trio.current_time()
    _, message, _ = await run(api, sse_response(api.events, hang_after=2), idle_timeout=30)
    assert message.stop_reason == "error"
    assert message.error_message is not None
    assert "no data for 30 s" in message.error_message
    assert "idle_timeout" in message.error_message
    assert trio.current_time() - start == pytest.approx(30)

    start = trio.current_time()
    _, message, _ = await run(api, sse_response(api.events, hang_after=2))
    assert message.stop_reason == "error"
    assert trio.current_time() - start == pytest.approx(DEFAULT_IDLE_TIMEOUT)
    assert DEFAULT_IDLE_TIMEOUT == 600


@each_api
async def test_a_slow_stream_within_the_idle_timeout_completes(
    api: Api, autojump_clock: trio.testing.MockClock
) -> None:
    """The timeout is per read, not for the whole body: a pause shorter than it is
    fine, however long the stream lasts in total."""

    class SlowBody(ScriptedBody):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            for chunk in self.chunks:
                await trio.sleep(20)
                yield chunk

    response = httpx.Response(
        200, headers={"content-type": "text/event-stream"}, stream=SlowBody(api.events)
    )
    start = trio.current_time()
    _, message, _ = await run(api, response, idle_timeout=30)
    assert message.stop_reason == "stop", message.error_message
    assert trio.current_time() - start == pytest.approx(20 * len(api.events))


# -- a JSON body answering a streaming request --------------------------------------------


@each_api
async def test_a_json_body_is_read_as_the_complete_response(api: Api) -> None:
    """A server that does not stream answers with the whole response as JSON: it is
    the message (not "stream ended without a stop reason")."""
    types, message, _ = await run(api, httpx.Response(200, json=api.complete))
    assert message.stop_reason == "stop", message.error_message
    assert message.text == "Hi"
    assert types[0] == "start"
    assert types[-1] == "done"
    assert "text_delta" in types


@each_api
async def test_a_json_body_that_is_no_response_is_a_clear_error(api: Api) -> None:
    _, message, _ = await run(api, httpx.Response(200, json={"hello": "world"}))
    assert message.stop_reason == "error"
    assert message.error_message is not None
    assert "JSON body that is not a response" in message.error_message
    assert '{"hello":"world"}' in message.error_message

    _, message, _ = await run(api, httpx.Response(200, json={"error": {"message": "no slot"}}))
    assert message.error_message is not None
    assert message.error_message.endswith("the server answered with an error: no slot")


@each_api
async def test_an_event_stream_labelled_json_is_still_read_as_events(api: Api) -> None:
    response = httpx.Response(
        200, headers={"content-type": "application/json"}, stream=ScriptedBody(api.events)
    )
    _, message, _ = await run(api, response)
    assert message.stop_reason == "stop", message.error_message
    assert message.text == "Hi"


async def test_a_json_completion_with_tool_calls() -> None:
    """Tool calls of a whole chat.completion object keep their arguments."""
    complete = {
        "id": "c",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "read", "arguments": '{"path":"a"}'},
                        },
                        {
                            "id": "call_2",
                            "type": "function",
                            "function": {"name": "read", "arguments": '{"path":"b"}'},
                        },
                    ],
                },
            }
        ],
    }
    _, message, _ = await run(COMPLETIONS, httpx.Response(200, json=complete))
    assert message.stop_reason == "toolUse", message.error_message
    calls = [(b.id, b.arguments) for b in message.content if b.type == "toolCall"]
    assert calls == [("call_1", {"path": "a"}), ("call_2", {"path": "b"})]


async def test_a_json_anthropic_message_with_tool_use() -> None:
    complete = {
        **ANTHROPIC.complete,
        "content": [
            {"type": "text", "text": "Reading."},
            {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a"}},
        ],
        "stop_reason": "tool_use",
    }
    _, message, _ = await run(ANTHROPIC, httpx.Response(200, json=complete))
    assert message.stop_reason == "toolUse", message.error_message
    assert message.text == "Reading."
    call = message.content[1]
    assert call.type == "toolCall"
    assert (call.id, call.arguments) == ("toolu_1", {"path": "a"})


# -- error texts ---------------------------------------------------------------------------


@each_api
async def test_an_sse_error_body_is_not_pasted_raw(api: Api) -> None:
    """A 500 whose body is an SSE stream: the text is the event's error, not the
    stream's bytes."""
    error = {"error": {"message": "model crashed", "type": "server_error"}}
    body = f"event: error\ndata: {json.dumps(error)}\n\n".encode()
    response = httpx.Response(500, headers={"content-type": "text/event-stream"}, content=body)
    _, message, _ = await run(api, response)
    assert message.stop_reason == "error"
    assert message.error_message is not None
    assert "model crashed" in message.error_message
    assert "data:" not in message.error_message
    assert "event:" not in message.error_message


@pytest.mark.parametrize("api", [COMPLETIONS, RESPONSES], ids=["completions", "responses"])
async def test_invalid_json_names_the_provider_and_the_event(api: Api) -> None:
    body = [api.events[0], b"event: delta\ndata: {oops\n\n"]
    _, message, _ = await run(api, sse_response(body))
    assert message.stop_reason == "error"
    assert message.error_message is not None
    label = "OpenAI Completions" if api is COMPLETIONS else "OpenAI Responses"
    assert message.error_message.startswith(f"Could not parse {label} SSE event delta: ")
    assert message.error_message.endswith("; data={oops")


@each_api
async def test_a_connection_error_names_the_url_and_the_cause(api: Api) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    _, message, recorder = await run(api, refuse)
    assert message.stop_reason == "error"
    assert message.error_message is not None
    assert message.error_message.startswith("Connection error. POST ")
    assert str(recorder.requests[0].url) in message.error_message
    assert "ConnectError: [Errno 111] Connection refused" in message.error_message
    assert len(recorder.requests) == 1  # a refused connection is not sent again


# -- a dead pooled connection ----------------------------------------------------------------


@each_api
@pytest.mark.parametrize(
    "error",
    [
        httpx.RemoteProtocolError("Server disconnected without sending a response."),
        httpx.ReadError("[Errno 104] Connection reset by peer"),
    ],
    ids=["disconnected", "reset"],
)
async def test_a_dead_pooled_connection_is_retried_once(api: Api, error: Exception) -> None:
    """The server closed the pooled connection (a streamed reply without ``Connection:
    close``): nothing of the response arrived, so the request goes once more, even with
    ``max_retries=0``."""

    def dead(request: httpx.Request) -> httpx.Response:
        raise error

    _, message, recorder = await run(api, dead, sse_response(api.events), max_retries=0)
    assert message.stop_reason == "stop", message.error_message
    assert len(recorder.requests) == 2
    assert recorder.bodies[0] == recorder.bodies[1]

    # Once only: a second failure is the error.
    _, message, recorder = await run(api, dead, dead, sse_response(api.events), max_retries=0)
    assert message.stop_reason == "error"
    assert len(recorder.requests) == 2


@each_api
async def test_a_protocol_error_after_the_response_started_is_not_resent(api: Api) -> None:
    def broken(request: httpx.Request) -> httpx.Response:
        raise httpx.RemoteProtocolError("malformed status line")

    _, message, recorder = await run(api, broken, sse_response(api.events))
    assert message.stop_reason == "error"
    assert len(recorder.requests) == 1


# -- the max_tokens clamp ------------------------------------------------------------------


def test_the_max_tokens_clamp_warns_with_its_numbers() -> None:
    """pi-ai's clamp is kept (with a 4,096-token window, 64 becomes 1) and warns."""
    model = attrs.evolve(COMPLETIONS.model, context_window=4096)
    with pytest.warns(MaxTokensClampedWarning) as caught:
        assert clamp_max_tokens_to_context(model, CONTEXT, 64) == 1
    text = str(caught[0].message)
    assert "max_tokens=64" in text
    assert "local/m" in text
    assert "context_window of 4096" in text
    assert "real context_window" in text

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        roomy = attrs.evolve(model, context_window=128_000)
        assert clamp_max_tokens_to_context(roomy, CONTEXT, 64) == 64


@each_api
async def test_the_clamp_warns_once_per_model_through_a_provider(api: Api) -> None:
    model = attrs.evolve(api.model, context_window=4096, max_tokens=64)
    api = attrs.evolve(api, model=model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for _ in range(3):
            await run(api, sse_response(api.events))
    clamped = [w for w in caught if issubclass(w.category, MaxTokensClampedWarning)]
    assert len(clamped) == 1


# -- a new API is one Exchange -------------------------------------------------------------


class _ToyExchange(Exchange):
    """A whole API in a few lines: ``data: {"text": ...}`` events, then ``{"stop": ...}``."""

    api_label = "Toy"

    def build_request(self) -> HttpRequest:
        return HttpRequest(
            url=f"{self.model.base_url}/generate",
            headers={"content-type": "application/json"},
            body={"model": self.model.id, "stream": True},
        )

    def handle_sse(self, sse: ServerSentEvent) -> bool:
        event = json.loads(sse.data)
        output = self.output
        if "text" in event:
            if not output.content:
                output.add_block(TextContent(text=""))
                self.stream.push(TextStartEvent(content_index=0, partial=output.snapshot()))
            output.append_text(0, event["text"])
            self.stream.push(
                TextDeltaEvent(content_index=0, delta=event["text"], partial=output.snapshot())
            )
            return False
        output.stop_reason = event["stop"]
        text = output.snapshot().text
        self.stream.push(TextEndEvent(content_index=0, content=text, partial=output.snapshot()))
        return True

    def check_end(self) -> None:
        if self.output.stop_reason == "pending":
            raise ProviderFailure("Toy stream ended without a stop reason")


def _stream_toy(
    client: httpx.AsyncClient, model: Model, context: Context, options: StreamOptions
) -> AssistantMessageEventStream:
    return exchange_stream(_ToyExchange, client, model, options)


@pytest.fixture
def toy_api() -> Iterator[None]:
    register_api("toy", _stream_toy)
    yield
    pitrio.providers._APIS.pop("toy", None)


@pytest.mark.usefixtures("toy_api")
async def test_a_new_api_is_one_exchange(autojump_clock: trio.testing.MockClock) -> None:
    """An Exchange and ``register_api`` make a working API: hooks, abort and error
    mapping, the idle timeout and the terminal event come from the shared lifecycle."""
    toy = Api("toy", Model(id="t", api="toy", provider="toy", base_url="http://toy.test"), [], {})
    seen: list[Any] = []
    body = [
        b'data: {"text": "He"}\n\n',
        b'data: {"text": "llo"}\n\n',
        b'data: {"stop": "stop"}\n\n',
    ]
    types, message, recorder = await run(
        toy,
        sse_response(body, hang_after=len(body)),  # never closes: the stop event ends it
        on_payload=lambda payload, model: {**payload, "extra": 1},
        on_response=lambda status, headers, model: seen.append(status),
    )
    assert types == ["start", "text_start", "text_delta", "text_delta", "text_end", "done"]
    assert message.text == "Hello"
    assert message.stop_reason == "stop"
    assert recorder.bodies == [{"model": "t", "stream": True, "extra": 1}]
    assert seen == [200]

    _, message, _ = await run(toy, sse_response(body[:1]))
    assert message.stop_reason == "error"
    assert message.error_message == "Toy stream ended without a stop reason"

    _, message, _ = await run(toy, sse_response(body, hang_after=1), idle_timeout=5)
    assert message.error_message is not None
    assert message.error_message.startswith("Toy stream stalled: no data for 5 s")
    assert message.text == "He"


# -- layering ------------------------------------------------------------------------------


_PROVIDERS = Path(pitrio.providers.__file__).parent


def _sources(module: str) -> list[Path]:
    """The files of a module of :mod:`pitrio.providers`: one file, or a package's files."""
    package = _PROVIDERS / module
    return sorted(package.glob("*.py")) if package.is_dir() else [_PROVIDERS / f"{module}.py"]


def _imports(module: str) -> set[str]:
    """The modules of :mod:`pitrio.providers` that ``module`` imports (a package's
    imports of its own modules left out)."""
    found: set[str] = set()
    for path in _sources(module):
        depth = 0 if path.parent == _PROVIDERS else 1
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level - depth == 1:
                if node.module:
                    found.add(node.module.split(".")[0])
                else:
                    found.update(alias.name for alias in node.names)
    return found


def test_the_api_modules_share_one_lifecycle_and_no_cycle() -> None:
    """Each API module builds on ``_request``; none defines its own copy of the
    lifecycle helpers; ``_deferred`` uses ``_openai_responses``, never the reverse."""
    for module in ("_openai_completions", "_anthropic_messages", "_openai_responses"):
        assert "_request" in _imports(module), module
        assert "_deferred" not in _imports(module), module
        source = "".join(path.read_text("utf-8") for path in _sources(module))
        assert "def _maybe_await" not in source
        assert "cancel_scope()" not in source
        assert "send_with_retries" not in source
    assert "_openai_responses" in _imports("_deferred")
    assert _imports("_request") <= {"_http", "_json", "_output", "_sse"}
