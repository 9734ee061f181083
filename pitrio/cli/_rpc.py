"""``--mode rpc``: JSON-line commands on stdin, in the shapes of Pi's coding-agent RPC mode.

Each command is one JSON object on one line (split on LF only; a trailing CR is
dropped), with an optional ``id`` echoed in its response. Every command gets one
response line ``{"type": "response", "command": ..., "success": true|false, ...}``;
events are written to stdout as JSON lines as they happen, as Pi's coding agent sends
them (:func:`pitrio.cli._app.event_to_pi`: ``auto_compaction_*``, ``auto_retry_*``).
Supported commands: ``prompt`` (``message``, optional ``images`` and, while the agent
works, ``streamingBehavior``: ``"steer"`` or ``"followUp"``), ``steer``,
``follow_up``, ``abort``, ``get_state``, ``get_messages``, ``set_model``
(``provider``, ``modelId``), ``set_thinking_level`` (``level``), ``compact``
(optional ``customInstructions``) and ``new_session``. End of input waits for the
running prompt, then exits.

Nobody can be asked for consent here: without ``--yes`` (or a policy file allowing
them) ``bash``, ``write`` and ``edit`` calls end as error results saying so.
"""

from __future__ import annotations

import json
from typing import Any, BinaryIO, TextIO, get_args

import trio

from pitrio import ImageContent, Model, ThinkingLevel, UsageError, wire
from pitrio.harness import CompactionEnd, CompactionStart, HarnessEvent, SessionError

from ._app import App, event_to_pi
from ._args import EXIT_OK
from ._errors import RpcCommandError

__all__ = ["model_to_pi", "run_rpc"]


def _binary(stdin: TextIO) -> BinaryIO | None:
    buffer = getattr(stdin, "buffer", None)
    return buffer if buffer is not None else None


async def run_rpc(app: App, stdin: TextIO, out: TextIO) -> int:
    """Serve commands from ``stdin`` until it ends; returns the exit status."""

    def write(data: dict[str, Any]) -> None:
        out.write(json.dumps(data, ensure_ascii=False) + "\n")
        out.flush()

    compacting = [False]  # get_state's isCompacting

    def emit(event: HarnessEvent) -> None:
        if isinstance(event, (CompactionStart, CompactionEnd)):
            compacting[0] = isinstance(event, CompactionStart)
        data = event_to_pi(event, app.session)
        if data is not None:
            write(data)

    app.subscribe(emit)
    raw = _binary(stdin)

    def read_line() -> str | None:
        if raw is not None:
            data = raw.readline()
            if not data:
                return None
            return data.decode("utf-8", errors="replace").removesuffix("\n").removesuffix("\r")
        line = stdin.readline()
        if not line:
            return None
        return line.removesuffix("\n").removesuffix("\r")

    async with trio.open_nursery() as nursery:
        while True:
            line = await trio.to_thread.run_sync(read_line, abandon_on_cancel=True)
            if line is None:
                break
            if not line.strip():
                continue
            try:
                command = json.loads(line)
                if not isinstance(command, dict):
                    msg = "a command is a JSON object"
                    raise RpcCommandError(msg)
            except (ValueError, RpcCommandError) as exc:
                write(
                    {
                        "type": "response",
                        "command": "parse",
                        "success": False,
                        "error": f"Failed to parse command: {exc}",
                    }
                )
                continue
            name = command.get("type")
            response: dict[str, Any] = {"type": "response", "command": name}
            if "id" in command:
                response = {"id": command["id"], **response}
            try:
                data = await _handle(app, nursery, command, compacting=compacting[0])
            except (RpcCommandError, UsageError, SessionError, ValueError) as exc:
                write({**response, "success": False, "error": str(exc)})
            else:
                result = {**response, "success": True}
                if data is not None:
                    result["data"] = data
                write(result)
        await app.harness.wait_for_idle()
    return EXIT_OK


def model_to_pi(model: Model) -> dict[str, Any]:
    """A model as Pi's RPC mode sends it: camelCase keys, absent optional fields left out."""
    data: dict[str, Any] = {}
    for key, value in wire.unstructure(model).items():
        if value is None:
            continue
        if key == "cost":
            value = {_camel(k): v for k, v in value.items()}
        data[_camel(key)] = value
    return data


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _images(command: dict[str, Any]) -> list[ImageContent]:
    images = command.get("images") or []
    if not isinstance(images, list):
        msg = "images must be a list of {type: image, data, mimeType}"
        raise RpcCommandError(msg)
    result = []
    for item in images:
        if not isinstance(item, dict) or "data" not in item or "mimeType" not in item:
            msg = "each image needs data (base64) and mimeType"
            raise RpcCommandError(msg)
        result.append(ImageContent(data=str(item["data"]), mime_type=str(item["mimeType"])))
    return result


def _message(command: dict[str, Any]) -> str:
    message = command.get("message")
    if not isinstance(message, str):
        msg = f"{command.get('type')} needs a message (a string)"
        raise RpcCommandError(msg)
    return message


async def _handle(
    app: App, nursery: trio.Nursery, command: dict[str, Any], *, compacting: bool
) -> Any:
    harness = app.harness
    name = command.get("type")
    if name == "prompt":
        from pitrio.harness import expand_prompt_template

        text = expand_prompt_template(_message(command), app.templates)
        images = _images(command)
        if harness.is_busy:
            behavior = command.get("streamingBehavior")
            if behavior == "steer":
                harness.steer(text)
            elif behavior == "followUp":
                harness.follow_up(text)
            else:
                msg = (
                    "Agent is already processing. Specify streamingBehavior "
                    "('steer' or 'followUp') to queue the message."
                )
                raise RpcCommandError(msg)
            return None
        if images:
            from pitrio import TextContent, UserMessage

            await nursery.start(
                harness.prompt,
                UserMessage(content=(TextContent(text=text), *images)),
            )
        else:
            await nursery.start(harness.prompt, text)
        return None
    if name == "steer":
        harness.steer(_message(command))
        return None
    if name == "follow_up":
        harness.follow_up(_message(command))
        return None
    if name == "abort":
        harness.abort()
        await harness.wait_for_idle()
        return None
    if name == "get_state":
        agent = harness.agent
        session = app.session
        return {
            "model": model_to_pi(app.model),
            "thinkingLevel": app.thinking,
            "isStreaming": harness.is_busy,
            "isCompacting": compacting,
            "steeringMode": agent.steering_mode,
            "followUpMode": agent.follow_up_mode,
            "sessionFile": await _session_file(app),
            "sessionId": session.id if session is not None else None,
            "autoCompactionEnabled": session is not None,
            "messageCount": len(harness.messages),
            "pendingMessageCount": len(agent.queued_steering) + len(agent.queued_follow_up),
        }
    if name == "get_messages":
        return {"messages": [wire.unstructure(m) for m in harness.messages]}
    if name == "set_model":
        return await _set_model(app, command)
    if name == "set_thinking_level":
        level = command.get("level")
        if level not in get_args(ThinkingLevel):
            msg = f"unknown thinking level {level!r}; one of {', '.join(get_args(ThinkingLevel))}"
            raise RpcCommandError(msg)
        await app.set_thinking(level)  # type: ignore[arg-type]  # checked above
        return None
    if name == "compact":
        if app.session is None:
            msg = "compact needs a session (this run has --no-session)"
            raise RpcCommandError(msg)
        instructions = command.get("customInstructions")
        end = await harness.compact(instructions if isinstance(instructions, str) else None)
        if end.status not in ("completed", "declined"):
            raise RpcCommandError(end.error_message or f"compaction {end.status}")
        first_kept = None
        if end.entry_id is not None:
            entry = app.session.get_entry(end.entry_id)
            first_kept = getattr(entry, "first_kept_entry_id", None)
        return {
            "summary": end.summary,
            "firstKeptEntryId": first_kept,
            "tokensBefore": end.tokens_before,
            "details": end.details,
        }
    if name == "new_session":
        if harness.is_busy:
            msg = "new_session waits until the agent is idle (abort first)"
            raise RpcCommandError(msg)
        session = await app.store.create(cwd=app.cwd) if app.store is not None else None
        await app.switch_session(session)
        return {"cancelled": False}
    msg = f"Unknown command: {name}"
    raise RpcCommandError(msg)


async def _session_file(app: App) -> str | None:
    if app.session is None or app.store is None:
        return None
    for info in await app.store.list(cwd=app.cwd):
        if info.id == app.session.id:
            return info.path
    return None


async def _set_model(app: App, command: dict[str, Any]) -> Any:
    provider = command.get("provider")
    model_id = command.get("modelId")
    if not isinstance(provider, str) or not isinstance(model_id, str):
        msg = "set_model needs provider and modelId (strings)"
        raise RpcCommandError(msg)
    if app.settings.offline or app.settings.stream_fn is not None or app.settings.base_url:
        if provider == app.model.provider and model_id == app.model.id:
            return model_to_pi(app.model)
        msg = (
            f"Model not found: {provider}/{model_id} (this run uses a fixed model: "
            "the offline replay, a --base-url server or a test model)"
        )
        raise RpcCommandError(msg)
    from pitrio.providers import Models

    model = Models(env=app.settings.env).get(provider, model_id)
    if model is None:
        msg = f"Model not found: {provider}/{model_id}"
        raise RpcCommandError(msg)
    await app.set_model(model)
    return model_to_pi(model)
