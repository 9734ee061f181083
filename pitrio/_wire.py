"""Pi's JSON wire form, in one cattrs converter.

Every camelCase name and every ``role``/``type`` tag lives here and nowhere else, so
transcripts written by pitrio can be read by Pi and the other way round.

>>> from pitrio import wire
>>> wire.unstructure(UserMessage(content="hi"))
{'role': 'user', 'content': 'hi', 'timestamp': 0}

Fields that are ``None`` (JavaScript's ``undefined``) are left out. Dictionaries that
belong to the application (tool ``arguments``, result ``details``) are copied verbatim.

The converter is built the first time it is used (``import pitrio`` does not import
cattrs), and the (un)structuring function of each class is generated the first time a
value of that class is converted: a program that never touches the wire pays nothing
for it, one that writes only events pays only for the event classes it writes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, get_args

import attrs

from . import _events
from ._errors import ArgumentTypeError, UsageError, WireFormatError
from ._events import ToolResult
from ._messages import (
    AgentMessage,
    AssistantMessage,
    Cost,
    CustomMessage,
    DeferredHandle,
    ImageContent,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)

if TYPE_CHECKING:
    import cattrs

    converter: cattrs.Converter
    """The converter between pitrio values and Pi's JSON (plain dicts and lists)."""

__all__ = [
    "converter",
    "register_message_role",
    "structure_event",
    "structure_message",
    "unstructure",
]

T = TypeVar("T")

_CAMEL_OVERRIDES: dict[str, str] = {"cache_write_1h": "cacheWrite1h"}


def _camel(name: str) -> str:
    name = name.lstrip("_")
    head, *rest = name.split("_")
    out = head + "".join(p[:1].upper() + p[1:] for p in rest)
    return _CAMEL_OVERRIDES.get(name, out)


# The attrs classes written in camelCase, and the key of their wire tag (``type`` for
# blocks and events, ``role`` for messages, none for plain values).
_TAGGED: dict[type[Any], str | None] = {}
for _value_cls in (Cost, Usage, DeferredHandle, ToolResult):
    _TAGGED[_value_cls] = None
for _block_cls in (TextContent, ThinkingContent, ImageContent, ToolCall):
    _TAGGED[_block_cls] = "type"
for _message_cls in (UserMessage, AssistantMessage, ToolResultMessage):
    _TAGGED[_message_cls] = "role"

_BLOCK_TYPES: dict[str, type[Any]] = {
    "text": TextContent,
    "thinking": ThinkingContent,
    "image": ImageContent,
    "toolCall": ToolCall,
}

# Events: provider stream events and agent events, tagged with their ``type``. The tag
# table is built from the two unions themselves: a new event class is on the wire as
# soon as it joins its union (and every dispatch on the union fails mypy until it is
# handled there too).
_EVENT_TYPES: dict[str, type[Any]] = {}
for _event_cls in (
    *get_args(_events.AssistantMessageEvent),
    *get_args(_events.AgentEvent),
):
    _TAGGED[_event_cls] = "type"
    _EVENT_TYPES[_event_cls.type] = _event_cls

_ROLES: dict[str, type[Any]] = {
    "user": UserMessage,
    "assistant": AssistantMessage,
    "toolResult": ToolResultMessage,
}

_converter: cattrs.Converter | None = None


def __getattr__(name: str) -> Any:
    if name == "converter":
        return _get_converter()
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)


def _get_converter() -> cattrs.Converter:
    global _converter  # built once, on first use
    if _converter is None:
        _converter = _build_converter()
        globals()["converter"] = _converter  # later reads skip __getattr__
    return _converter


def _unstructure_fn(conv: cattrs.Converter, cls: type[Any]) -> Callable[[Any], Any]:
    from cattrs.gen import make_dict_unstructure_fn

    unstructure_fn = make_dict_unstructure_fn(cls, conv, **_overrides(cls))
    tag_key = _TAGGED[cls]
    if tag_key is None:
        return unstructure_fn
    tag_value = getattr(cls, tag_key)

    def tagged_unstructure(obj: Any) -> dict[str, Any]:
        out = {tag_key: tag_value}
        out.update(unstructure_fn(obj))
        return out

    return tagged_unstructure


def _structure_fn(conv: cattrs.Converter, cls: type[Any]) -> Callable[[Any, Any], Any]:
    from cattrs.gen import make_dict_structure_fn

    structure_fn = make_dict_structure_fn(cls, conv, **_overrides(cls))
    tag_key = _TAGGED[cls]

    def strip_tag(data: Mapping[str, Any], _: Any) -> Any:
        if isinstance(data, cls):  # already read (an event's message, read by its role)
            return data
        if tag_key is not None and tag_key in data:
            data = {k: v for k, v in data.items() if k != tag_key}
        return structure_fn(data, cls)

    return strip_tag


def _overrides(cls: type[Any]) -> dict[str, Any]:
    """camelCase names; fields whose default is ``None`` are left out when ``None``."""
    from cattrs.gen import override

    return {
        field.name: override(rename=_camel(field.name), omit_if_default=field.default is None)
        for field in attrs.fields(cls)
    }


def _is_tagged(cls: Any) -> bool:
    return isinstance(cls, type) and cls in _TAGGED


def _build_converter() -> cattrs.Converter:
    import cattrs

    conv = cattrs.Converter(detailed_validation=False)
    # Each class's functions are generated the first time one of its values is converted.
    conv.register_unstructure_hook_factory(_is_tagged, lambda cls: _unstructure_fn(conv, cls))
    conv.register_structure_hook_factory(_is_tagged, lambda cls: _structure_fn(conv, cls))
    # Unions of content blocks, and the user's "string or blocks".
    conv.register_structure_hook(TextContent | ImageContent, _structure_block)
    conv.register_structure_hook(TextContent | ThinkingContent | ToolCall, _structure_block)
    conv.register_structure_hook_func(
        lambda t: t == (str | tuple[TextContent | ImageContent, ...]), _structure_user_content
    )
    # JSON values stay as they are.
    conv.register_structure_hook_func(lambda t: t is Any, lambda v, _: v)
    for union in (_events.AssistantMessageEvent, _events.UpdateEvent, _events.AgentEvent):
        conv.register_structure_hook(union, _structure_event)
    conv.register_unstructure_hook(CustomMessage, _unstructure_custom)
    conv.register_structure_hook(CustomMessage, _structure_custom)
    return conv


def _structure_block(data: Mapping[str, Any], _: Any = None) -> Any:
    kind = data.get("type")
    cls = _BLOCK_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        msg = f"unknown content block type {kind!r}; expected one of {sorted(_BLOCK_TYPES)}"
        raise WireFormatError(msg)
    return _get_converter().structure(data, cls)


def _structure_blocks(data: Any, _: Any = None) -> tuple[Any, ...]:
    return tuple(_structure_block(item) for item in data)


def _structure_user_content(data: Any, _: Any = None) -> Any:
    if isinstance(data, str):
        return data
    return _structure_blocks(data)


def _structure_event(data: Mapping[str, Any], _: Any = None) -> Any:
    kind = data.get("type")
    cls = _EVENT_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        msg = f"unknown event type {kind!r}"
        raise WireFormatError(msg)
    # Messages are typed loosely (any role), so read them here, by their role.
    data = dict(data)
    if isinstance(data.get("message"), Mapping):
        data["message"] = structure_message(data["message"])
    if isinstance(data.get("messages"), list):
        data["messages"] = tuple(structure_message(m) for m in data["messages"])
    return _get_converter().structure(data, cls)


def structure_event(data: Mapping[str, Any]) -> Any:
    """Turn one wire event (a dict with a ``type``) into a pitrio event."""
    return _structure_event(data)


def _unstructure_custom(message: CustomMessage) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message.role}
    out.update(message.fields)
    return out


def _structure_custom(data: Mapping[str, Any], _: Any = None) -> CustomMessage:
    return CustomMessage(role=data["role"], fields={k: v for k, v in data.items() if k != "role"})


def register_message_role(cls: type[T]) -> type[T]:
    """Register an attrs class as a custom message role (usable as a decorator).

    The class needs a ``role`` class variable naming its wire role; its fields are
    written in camelCase like Pi's own messages::

        @register_message_role
        @attrs.frozen(kw_only=True)
        class BashExecution:
            role: ClassVar[str] = "bashExecution"
            command: str
            output: str
            exit_code: int | None = None
            timestamp: int = 0
    """
    role = getattr(cls, "role", None)
    if not isinstance(role, str) or not attrs.has(cls):
        msg = (
            f"register_message_role() needs an attrs class with a string class variable "
            f"'role'; got {cls!r}"
        )
        raise ArgumentTypeError(msg)
    if role in ("user", "assistant", "toolResult"):
        msg = f"role {role!r} is built in; choose another name for a custom message"
        raise UsageError(msg)
    _TAGGED[cls] = "role"
    _ROLES[role] = cls
    if _converter is not None:
        # Registering drops the converter's dispatch caches, which may already hold
        # this class (converted before it was registered).
        _converter.register_unstructure_hook(cls, _unstructure_fn(_converter, cls))
        _converter.register_structure_hook(cls, _structure_fn(_converter, cls))
    return cls  # type: ignore[return-value]  # attrs.has() narrowed it; it is still T


def structure_message(data: Mapping[str, Any]) -> AgentMessage:
    """Turn one wire message (a dict with a ``role``) into a pitrio message.

    Roles nobody registered become :class:`CustomMessage`, so nothing is lost.
    """
    role = data.get("role")
    if not isinstance(role, str):
        msg = f"a message needs a string 'role'; got {data!r}"
        raise WireFormatError(msg)
    cls = _ROLES.get(role)
    if cls is None:
        return _structure_custom(data)
    try:
        return _get_converter().structure(data, cls)
    except KeyError as exc:
        msg = f"cannot read a {role!r} message: the field {exc.args[0]!r} is missing"
        raise WireFormatError(msg) from None
    except (TypeError, AttributeError) as exc:
        msg = f"cannot read a {role!r} message: {exc}"
        raise WireFormatError(msg) from None


def unstructure(value: Any) -> Any:
    """Turn a pitrio value (message, block, event, or a list of them) into Pi's JSON."""
    return (_converter or _get_converter()).unstructure(value)


def messages_to_wire(messages: Any) -> list[Any]:
    """A list of messages as wire dicts."""
    unstructure_one = (_converter or _get_converter()).unstructure
    return [unstructure_one(m) for m in messages]


def messages_from_wire(data: Any) -> list[AgentMessage]:
    """Wire dicts back to messages."""
    return [structure_message(d) for d in data]
