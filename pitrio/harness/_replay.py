"""Record a model's stream to a file, and play it back offline.

:class:`RecordingStreamFn` wraps any stream function (a provider, a
:class:`~pitrio.testing.ScriptedModel`) and writes every request and every response
event to a JSON Lines file; :class:`ReplayStreamFn` is a stream function that answers
from that file, so a recorded run can be reproduced without a network or an API key::

    agent = Agent(model=model, stream_fn=RecordingStreamFn(provider_stream_fn, "run.jsonl"))
    ...
    agent = Agent(model=model, stream_fn=ReplayStreamFn("run.jsonl"))  # same events

The file format (version 1), one JSON object per line:

- first line, the header: ``{"kind": "pitrio-replay", "version": 1}``;
- then one line per finished request, in the order they finished::

    {"kind": "exchange", "index": 0,
     "request": {"model": {"provider", "api", "id"}, "systemPrompt", "messages",
                 "tools": [{"name", "description", "parameters"}], "options": {...}},
     "events": [...], "interrupted": false}

  ``index`` counts requests in the order they were made. When a request's messages
  begin with the previous request's, ``messages`` is replaced by ``"messagesDelta":
  {"base": index - 1, "keep": n, "append": [...]}`` (the first ``n`` messages of the
  previous request, then these), so a long conversation costs a file linear in its
  length. ``request`` is otherwise Pi's wire form
  (camelCase), without message timestamps (they differ between two runs of the same
  conversation) and with only the options that shape a response (``reasoning``,
  ``maxTokens``, ``temperature``, ``toolChoice``, ``thinkingBudgets``,
  ``cacheRetention``, ``samplingParams``, ``metadata``, ``deferred``); keys, headers
  and callbacks are never written. ``events`` are Pi's wire events; to keep the file
  linear in the response's length, each event's ``partial`` message is stored as a
  ``partialPatch`` against the previous event's partial (a list of
  ``{"p": path, "set": value}``, ``{"p": path, "append": text}`` and
  ``{"p": path, "truncate": length}`` operations; the first is a ``set`` of the whole
  message). ``interrupted`` is true when the run was aborted before the response
  finished (``abortMessage`` is then the text the aborted response ended with): a replay
  plays the recorded events and waits, as the provider did, until the replaying run is
  aborted too. A stream function that raised instead of
  returning a stream is recorded as ``"raised": "its message"``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Iterable
from typing import Any, Final, final

import attrs
import trio

from pitrio import (
    AssistantMessage,
    AssistantMessageEventStream,
    Context,
    EventStream,
    HarnessError,
    Model,
    StreamFn,
    StreamOptions,
    TextContent,
    ThinkingContent,
    ToolCall,
    wire,
)

__all__ = [
    "REPLAY_FORMAT_VERSION",
    "RecordingStreamFn",
    "ReplayFileError",
    "ReplayMismatchError",
    "ReplayStreamFn",
    "ReplayedRaiseError",
    "request_to_wire",
]

REPLAY_FORMAT_VERSION: Final = 1
_HEADER_KIND: Final = "pitrio-replay"

_OPTION_FIELDS: Final = (
    ("reasoning", "reasoning"),
    ("max_tokens", "maxTokens"),
    ("temperature", "temperature"),
    ("tool_choice", "toolChoice"),
    ("response_format", "responseFormat"),  # pitrio's own option
    ("thinking_budgets", "thinkingBudgets"),
    ("cache_retention", "cacheRetention"),
    ("sampling_params", "samplingParams"),
    ("metadata", "metadata"),
    ("deferred", "deferred"),
)


class ReplayFileError(HarnessError, ValueError):
    """A replay file cannot be read (missing, empty, torn, or not a replay file)."""


class ReplayedRaiseError(HarnessError, RuntimeError):
    """The recorded stream function raised instead of returning a stream; replaying that
    request raises this, with the recorded exception's message."""


class ReplayMismatchError(HarnessError):
    """A request made during a strict replay differs from the recorded one.

    Attributes:
        index: which request (0 = the first of the run).
        path: where the two differ, as a JSON path (``$.messages[2].content``).
        recorded: the recorded value there (``None`` if it is missing).
        actual: the value in the request made now.
    """

    def __init__(self, index: int, path: str, recorded: Any, actual: Any) -> None:
        self.index = index
        self.path = path
        self.recorded = recorded
        self.actual = actual
        super().__init__(
            f"replay: request {index} differs from the recording at {path}: "
            f"recorded {_short(recorded)}, got {_short(actual)} "
            f"(pass strict=False to replay responses regardless)"
        )


def _short(value: Any, limit: int = 200) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _plain(value: Any) -> Any:
    """JSON-normal form: tuples to lists, mappings to dicts, keys as strings."""
    return json.loads(json.dumps(value, default=_json_default))


def _json_default(value: Any) -> Any:
    if hasattr(value, "items"):
        return dict(value.items())
    if isinstance(value, tuple | set | frozenset):
        return list(value)
    return wire.unstructure(value)


def request_to_wire(model: Model, context: Context, options: StreamOptions) -> dict[str, Any]:
    """The part of one model request a recording keeps and a strict replay compares."""
    messages = []
    for message in context.messages:
        data = wire.unstructure(message)
        data.pop("timestamp", None)
        messages.append(data)
    tools = [
        {"name": t.name, "description": t.description, "parameters": t.parameters}
        for t in context.tools
    ]
    chosen: dict[str, Any] = {}
    for name, wire_name in _OPTION_FIELDS:
        value = getattr(options, name)
        if value is not None:
            chosen[wire_name] = value
    request = {
        "model": {"provider": model.provider, "api": model.api, "id": model.id},
        "systemPrompt": context.system_prompt,
        "messages": messages,
        "tools": tools,
        "options": chosen,
    }
    plain: dict[str, Any] = _plain(request)
    return plain


# -- partial-message patches ------------------------------------------------------------


def _diff(old: Any, new: Any, path: list[Any], ops: list[dict[str, Any]]) -> None:
    if old == new:
        return
    if isinstance(old, dict) and isinstance(new, dict) and old.keys() <= new.keys():
        for key, value in new.items():
            if key in old:
                _diff(old[key], value, [*path, key], ops)
            else:
                ops.append({"p": [*path, key], "set": value})
        return
    if isinstance(old, list) and isinstance(new, list):
        if len(new) < len(old):
            ops.append({"p": path, "truncate": len(new)})
        for index, value in enumerate(new):
            if index < len(old):
                _diff(old[index], value, [*path, index], ops)
            else:
                ops.append({"p": [*path, index], "set": value})
        return
    if isinstance(old, str) and isinstance(new, str) and new.startswith(old) and old:
        ops.append({"p": path, "append": new[len(old) :]})
        return
    ops.append({"p": path, "set": new})


def _apply(target: Any, ops: list[dict[str, Any]]) -> Any:
    for op in ops:
        path = op["p"]
        if not path:
            if "set" in op:
                target = _copy(op["set"])
                continue
            if "append" in op:
                target = target + op["append"]
                continue
            del target[op["truncate"] :]
            continue
        parent = target
        for key in path[:-1]:
            parent = parent[key]
        last = path[-1]
        if "set" in op:
            value = _copy(op["set"])
            if isinstance(parent, list) and last == len(parent):
                parent.append(value)
            else:
                parent[last] = value
        elif "append" in op:
            parent[last] = parent[last] + op["append"]
        else:
            del parent[last][op["truncate"] :]
    return target


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


_PLACEHOLDER: Final = AssistantMessage(stop_reason="pending")
_TOP_FIELDS: Final = tuple(f.name for f in attrs.fields(AssistantMessage) if f.name != "content")


class _PartialEncoder:
    """Patches from one partial message to the next, looking only at what changed:
    consecutive partials share their unchanged blocks (frozen values), so a delta costs
    the block it grows, not the whole message."""

    def __init__(self) -> None:
        self._message: AssistantMessage | None = None
        self._top: dict[str, Any] = {}
        self._blocks: list[Any] = []

    def patch(self, message: AssistantMessage) -> list[dict[str, Any]]:
        previous = self._message
        if previous is None:
            self._top = self._top_of(message)
            self._blocks = [wire.unstructure(b) for b in message.content]
            self._message = message
            return [{"p": [], "set": {**self._top, "content": list(self._blocks)}}]
        ops: list[dict[str, Any]] = []
        if any(getattr(message, f) != getattr(previous, f) for f in _TOP_FIELDS):
            top = self._top_of(message)
            _diff(self._top, top, [], ops)
            self._top = top
        old_blocks = previous.content
        if len(message.content) < len(old_blocks):
            ops.append({"p": ["content"], "truncate": len(message.content)})
            del self._blocks[len(message.content) :]
        for index, block in enumerate(message.content):
            if index < len(old_blocks) and block is old_blocks[index]:
                continue
            data = wire.unstructure(block)  # plain JSON already: strings and dicts
            if index < len(self._blocks):
                _diff(self._blocks[index], data, ["content", index], ops)
                self._blocks[index] = data
            else:
                ops.append({"p": ["content", index], "set": data})
                self._blocks.append(data)
        self._message = message
        return ops

    @staticmethod
    def _top_of(message: AssistantMessage) -> dict[str, Any]:
        top: dict[str, Any] = _plain(wire.unstructure(attrs.evolve(message, content=())))
        del top["content"]
        return top


def _encode_events(events: list[Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    encoder = _PartialEncoder()
    for event in events:
        partial = getattr(event, "partial", None)
        if isinstance(partial, AssistantMessage):
            data = _plain(wire.unstructure(attrs.evolve(event, partial=_PLACEHOLDER)))
            del data["partial"]
            data["partialPatch"] = encoder.patch(partial)
        else:
            data = _plain(wire.unstructure(event))
        out.append(data)
    return out


class _PartialDecoder:
    """Applies patches to the wire form, and rebuilds only the blocks they touched."""

    def __init__(self) -> None:
        self._data: dict[str, Any] = {}
        self._top: AssistantMessage = _PLACEHOLDER
        self._blocks: list[Any] = []

    def apply(self, ops: list[dict[str, Any]]) -> AssistantMessage:
        touched: set[int] = set()
        rebuild_top = False
        rebuild_all = False
        for op in ops:
            path = op["p"]
            if not path:
                rebuild_all = True
            elif path[0] != "content":
                rebuild_top = True
            elif len(path) == 1:
                rebuild_all = True
            else:
                touched.add(path[1])
        self._data = _apply(self._data, ops)
        if rebuild_all or rebuild_top:
            top = {k: v for k, v in self._data.items() if k != "content"}
            self._top = wire.structure_message({**top, "content": []})
        content = self._data["content"]
        if rebuild_all:
            self._blocks = [_structure_block(b) for b in content]
        else:
            for index in sorted(touched):
                if index < len(self._blocks):
                    self._blocks[index] = _structure_block(content[index])
                else:
                    self._blocks.append(_structure_block(content[index]))
        return attrs.evolve(self._top, content=tuple(self._blocks))


_ASSISTANT_BLOCK: Any = TextContent | ThinkingContent | ToolCall


def _structure_block(data: Any) -> Any:
    return wire.converter.structure(data, _ASSISTANT_BLOCK)


def _decode_events(records: list[dict[str, Any]]) -> list[Any]:
    events = []
    decoder = _PartialDecoder()
    for record in records:
        ops = record.get("partialPatch")
        if ops is None:
            events.append(wire.structure_event(record))
            continue
        data = {k: v for k, v in record.items() if k != "partialPatch"}
        data["partial"] = _PLACEHOLDER  # an object is kept as it is: cheaper than a dict
        event = wire.structure_event(data)
        events.append(attrs.evolve(event, partial=decoder.apply(ops)))
    return events


# -- recording ----------------------------------------------------------------------------


@final
@attrs.define(eq=False)
class RecordingStreamFn:
    """A stream function that passes requests to ``inner`` and records them to ``path``.

    Every event ``inner`` streams reaches the caller unchanged and as it arrives; the
    exchange (the request and its events) is appended to the file once the response
    has finished or the run was aborted. The file is started afresh by the first
    request to finish. The format is
    described in the docstring of the private module ``pitrio.harness._replay``, which
    also holds the format's version number.

    Attributes:
        requests: how many requests were made so far.
    """

    inner: StreamFn
    path: str | os.PathLike[str]
    requests: int = attrs.field(default=0, init=False)
    _started: bool = attrs.field(default=False, init=False)
    _lock: trio.Lock = attrs.field(factory=trio.Lock, init=False)
    _last_messages: list[Any] = attrs.field(factory=list, init=False)

    def __call__(
        self, model: Model, context: Context, options: StreamOptions
    ) -> AssistantMessageEventStream | Awaitable[AssistantMessageEventStream]:
        index = self.requests
        self.requests += 1
        request = request_to_wire(model, context, options)
        record: dict[str, Any] = {
            "kind": "exchange",
            "index": index,
            "request": self._delta(index, request),
        }
        template = AssistantMessage(
            api=model.api, provider=model.provider, model=model.id, stop_reason="pending"
        )
        # ``inner`` is called now, as the caller would have called it: a stream function
        # that raises still raises (after the exchange is written), and an async one is
        # awaited by the caller.
        try:
            returned = self.inner(model, context, options)
        except Exception as exc:
            return self._raise(record, exc)
        if isinstance(returned, EventStream):
            return self._relay(returned, record, template)
        return self._await(returned, record, template)

    def _delta(self, index: int, request: dict[str, Any]) -> dict[str, Any]:
        """The request with its messages written as the previous request's plus the new
        ones (a conversation only grows between requests, so the file stays linear)."""
        messages = request["messages"]
        previous = self._last_messages
        keep = 0
        for old, new in zip(previous, messages, strict=False):
            if old != new:
                break
            keep += 1
        self._last_messages = messages
        if index == 0 or keep == 0:
            return request
        delta = {k: v for k, v in request.items() if k != "messages"}
        delta["messagesDelta"] = {"base": index - 1, "keep": keep, "append": messages[keep:]}
        return delta

    async def _raise(self, record: dict[str, Any], exc: Exception) -> AssistantMessageEventStream:
        record["raised"] = str(exc) or exc.__class__.__name__
        record["events"] = []
        record["interrupted"] = False
        with trio.CancelScope(shield=True):
            await self._write(record)
        raise exc

    async def _await(
        self,
        returned: Awaitable[EventStream[Any, AssistantMessage]],
        record: dict[str, Any],
        template: AssistantMessage,
    ) -> AssistantMessageEventStream:
        try:
            inner = await returned
        except Exception as exc:
            return await self._raise(record, exc)
        return self._relay(inner, record, template)

    def _relay(
        self,
        inner: EventStream[Any, AssistantMessage],
        record: dict[str, Any],
        template: AssistantMessage,
    ) -> AssistantMessageEventStream:
        async def produce(stream: AssistantMessageEventStream) -> None:
            events: list[Any] = []
            try:
                if inner.has_producer:
                    async with inner:
                        await _relay(inner, stream, events)
                else:
                    await _relay(inner, stream, events)
            finally:
                record["events"] = _encode_events(events)
                record["interrupted"] = not stream.done
                if record["interrupted"]:
                    record["abortMessage"] = stream.abort_message
                with trio.CancelScope(shield=True):
                    await self._write(record)

        if isinstance(inner, AssistantMessageEventStream):
            # An abort then ends the response as the inner stream would have ended it.
            return AssistantMessageEventStream(
                produce, template=inner.template, abort_message=inner.abort_message
            )
        return AssistantMessageEventStream(produce, template=template)

    async def _write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"
        async with self._lock:
            mode = "a"
            if not self._started:
                self._started = True
                mode = "w"
                header = {"kind": _HEADER_KIND, "version": REPLAY_FORMAT_VERSION}
                line = json.dumps(header) + "\n" + line
            await trio.to_thread.run_sync(_append_private, self.path, line, mode == "w")


def _append_private(path: str | os.PathLike[str], text: str, truncate: bool) -> None:
    """Write (or append) ``text`` to a recording, created ``0600``: it holds the whole
    conversation."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if truncate else os.O_APPEND)
    fd = os.open(path, flags, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(text)


async def _relay(
    inner: EventStream[Any, AssistantMessage],
    outer: AssistantMessageEventStream,
    events: list[Any],
) -> None:
    async for event in inner:
        events.append(event)
        outer.push(event)


# -- replay -------------------------------------------------------------------------------


@attrs.frozen
class _Exchange:
    request: dict[str, Any]
    events: list[Any]
    interrupted: bool
    raised: str | None
    abort_message: str | None


def _read_exchanges(path: str | os.PathLike[str]) -> list[_Exchange]:
    name = os.fspath(path)
    try:
        with open(name, encoding="utf-8") as file:
            lines = file.read().split("\n")
    except FileNotFoundError:
        msg = f"replay file {name!r} does not exist; record one with RecordingStreamFn"
        raise ReplayFileError(msg) from None
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        msg = f"replay file {name!r} is empty: the recorded run made no requests"
        raise ReplayFileError(msg)
    records = []
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            where = "its last line is torn" if number == len(lines) else f"line {number} is"
            msg = (
                f"replay file {name!r} is damaged: {where} not valid JSON ({exc.msg}); "
                f"the recording was cut short, record the run again"
            )
            raise ReplayFileError(msg) from None
        if not isinstance(record, dict):
            msg = f"replay file {name!r}: line {number} is not a JSON object"
            raise ReplayFileError(msg)
        records.append(record)
    header = records[0]
    if header.get("kind") != _HEADER_KIND:
        msg = (
            f"replay file {name!r} does not start with a pitrio-replay header "
            f"(first line: {_short(header, 80)})"
        )
        raise ReplayFileError(msg)
    if header.get("version") != REPLAY_FORMAT_VERSION:
        msg = (
            f"replay file {name!r} has format version {header.get('version')!r}; "
            f"this pitrio reads version {REPLAY_FORMAT_VERSION}"
        )
        raise ReplayFileError(msg)
    by_index: dict[int, _Exchange] = {}
    for number, record in enumerate(records[1:], 2):
        try:
            index = record["index"]
            exchange = _Exchange(
                request=record["request"],
                events=_decode_events(record.get("events", [])),
                interrupted=bool(record.get("interrupted", False)),
                raised=record.get("raised"),
                abort_message=record.get("abortMessage"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            msg = f"replay file {name!r}: line {number} is not a valid exchange ({exc})"
            raise ReplayFileError(msg) from None
        by_index[index] = exchange
    expected = list(range(len(by_index)))
    if sorted(by_index) != expected:
        missing = sorted(set(expected) - set(by_index))
        msg = f"replay file {name!r} is missing the exchanges for requests {missing}"
        raise ReplayFileError(msg)
    exchanges = [by_index[i] for i in expected]
    for index, exchange in enumerate(exchanges):
        delta = exchange.request.pop("messagesDelta", None)
        if delta is None:
            continue
        try:
            base = exchanges[delta["base"]].request["messages"]
            if not 0 <= delta["base"] < index or len(base) < delta["keep"]:
                raise ValueError  # reported below
            exchange.request["messages"] = base[: delta["keep"]] + delta["append"]
        except (KeyError, TypeError, IndexError, ValueError):
            msg = f"replay file {name!r}: request {index} refers to messages it cannot find"
            raise ReplayFileError(msg) from None
    return exchanges


def _first_difference(
    recorded: Any, actual: Any, ignore: frozenset[str], path: str = "$"
) -> tuple[str, Any, Any] | None:
    if recorded == actual or path in ignore:
        return None
    if isinstance(recorded, dict) and isinstance(actual, dict):
        for key in sorted(recorded.keys() | actual.keys()):
            child = f"{path}.{key}" if key.isidentifier() else f"{path}[{json.dumps(key)}]"
            if child in ignore:
                continue
            if key not in recorded or key not in actual:
                return child, recorded.get(key), actual.get(key)
            found = _first_difference(recorded[key], actual[key], ignore, child)
            if found is not None:
                return found
        return None
    if isinstance(recorded, list) and isinstance(actual, list):
        for index, (a, b) in enumerate(zip(recorded, actual, strict=False)):
            found = _first_difference(a, b, ignore, f"{path}[{index}]")
            if found is not None:
                return found
        if len(recorded) != len(actual):
            return f"{path}.length", len(recorded), len(actual)
        return None
    return path, recorded, actual


@final
class ReplayStreamFn:
    """A stream function answering each request from a recording (:class:`RecordingStreamFn`).

    The ``n``-th request gets the ``n``-th recorded response, its events streamed as
    recorded (at once: recorded delays are not reproduced). With ``strict`` (the
    default) each request must equal the recorded one, else the call raises
    :class:`ReplayMismatchError` naming the request and the first JSON path where the
    two differ (an Agent turns it into an error message ending the run). A request
    beyond the recording raises :class:`ReplayMismatchError` too. ``ignore`` names
    JSON paths left out of the comparison, e.g. ``{"$.systemPrompt"}`` when the system
    prompt carries the current date, or ``{"$.options.metadata"}``.

    The file is read when the object is made; :class:`ReplayFileError` says what is
    wrong with a missing, empty, torn or foreign file.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        strict: bool = True,
        ignore: Iterable[str] = (),
    ) -> None:
        self.path = path
        self.strict = strict
        self.ignore = frozenset(ignore)
        self._exchanges = _read_exchanges(path)
        self._next = 0

    @property
    def remaining(self) -> int:
        """How many recorded responses have not been played yet."""
        return len(self._exchanges) - self._next

    def __call__(
        self, model: Model, context: Context, options: StreamOptions
    ) -> AssistantMessageEventStream:
        index = self._next
        if index >= len(self._exchanges):
            raise ReplayMismatchError(
                index, "$", None, f"a request beyond the {len(self._exchanges)} recorded"
            )
        exchange = self._exchanges[index]
        if self.strict:
            actual = request_to_wire(model, context, options)
            found = _first_difference(exchange.request, actual, self.ignore)
            if found is not None:
                raise ReplayMismatchError(index, *found)
        self._next += 1
        if exchange.raised is not None:
            msg = exchange.raised
            raise ReplayedRaiseError(msg)
        template = AssistantMessage(
            api=model.api, provider=model.provider, model=model.id, stop_reason="pending"
        )
        if not exchange.interrupted:
            stream = AssistantMessageEventStream(template=template)
            for event in exchange.events:
                stream.push(event)
            return stream

        async def produce(stream: AssistantMessageEventStream) -> None:
            for event in exchange.events:
                stream.push(event)
            await trio.sleep_forever()  # the recorded run was aborted here

        return AssistantMessageEventStream(
            produce,
            template=template,
            abort_message=exchange.abort_message or "Request was aborted",
        )
