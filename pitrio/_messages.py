"""Messages and content blocks: the frozen values everything else passes around.

These mirror pi-ai 0.85.0's ``types.d.ts`` field for field, with Python names
(``stop_reason`` for ``stopReason``). The JSON wire form (camelCase, ``role`` and
``type`` tags) lives only in :mod:`pitrio._wire`.

Values are frozen: a streaming partial message is replaced, never mutated, so the
same object can be shared by every event that carries it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal, TypeAlias, TypeVar, final

import attrs

JSONValue: TypeAlias = Any
"""A JSON value as decoded by :func:`json.loads` (kept loose on purpose)."""

StopReason: TypeAlias = Literal[
    "pending", "stop", "length", "toolUse", "error", "aborted", "deferred"
]
"""Why an assistant message ended; ``pending`` while it is still streaming."""

STOP_REASONS: tuple[str, ...] = (
    "pending",
    "stop",
    "length",
    "toolUse",
    "error",
    "aborted",
    "deferred",
)

ThinkingLevel: TypeAlias = Literal["off", "minimal", "low", "medium", "high", "xhigh", "max"]


@final
@attrs.frozen(kw_only=True, weakref_slot=False, repr=False)
class TextContent:
    """A block of text."""

    type: ClassVar[Literal["text"]] = "text"
    text: str
    text_signature: str | None = None


@final
@attrs.frozen(kw_only=True, weakref_slot=False, repr=False)
class ThinkingContent:
    """Model reasoning; ``thinking_signature`` carries the provider's opaque token."""

    type: ClassVar[Literal["thinking"]] = "thinking"
    thinking: str
    thinking_signature: str | None = None
    redacted: bool | None = None


@final
@attrs.frozen(kw_only=True, weakref_slot=False, repr=False)
class ImageContent:
    """An image as base64 ``data`` with its MIME type."""

    type: ClassVar[Literal["image"]] = "image"
    data: str
    mime_type: str


@final
@attrs.frozen(kw_only=True, weakref_slot=False, repr=False)
class ToolCall:
    """A tool call requested by the model. ``arguments`` is the decoded JSON object."""

    type: ClassVar[Literal["toolCall"]] = "toolCall"
    id: str
    name: str
    arguments: dict[str, JSONValue] = attrs.field(factory=dict)
    thought_signature: str | None = None
    namespace: str | None = None


ContentBlock: TypeAlias = TextContent | ThinkingContent | ImageContent | ToolCall
UserContent: TypeAlias = TextContent | ImageContent
AssistantContent: TypeAlias = TextContent | ThinkingContent | ToolCall


@final
@attrs.frozen(kw_only=True, weakref_slot=False, repr=False)
class Cost:
    """Cost in dollars, split like :class:`Usage`."""

    input: float = 0
    output: float = 0
    cache_read: float = 0
    cache_write: float = 0
    total: float = 0


ZERO_COST = Cost()


@final
@attrs.frozen(kw_only=True, weakref_slot=False, repr=False)
class Usage:
    """Token counts of one model response, and what they cost."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    total_tokens: int = 0
    cost: Cost = ZERO_COST
    cache_write_1h: int | None = None
    reasoning: int | None = None


ZERO_USAGE = Usage()


@final
@attrs.frozen(kw_only=True, weakref_slot=False, repr=False)
class DeferredHandle:
    """A durable handle to a response that a provider finishes asynchronously."""

    provider: str
    model_id: str
    api: str
    id: str
    expires_at: int | None = None
    poll_after_ms: int | None = None
    data: JSONValue = None


@final
@attrs.frozen(kw_only=True, weakref_slot=False, repr=False)
class UserMessage:
    """What the user said. ``content`` may be a plain string, as in Pi."""

    role: ClassVar[Literal["user"]] = "user"
    content: str | tuple[UserContent, ...]
    timestamp: int = 0


@final
@attrs.frozen(kw_only=True, weakref_slot=False, repr=False)
class AssistantMessage:
    """A model response, final or (with ``stop_reason="pending"``) partial."""

    role: ClassVar[Literal["assistant"]] = "assistant"
    content: tuple[AssistantContent, ...] = ()
    api: str = ""
    provider: str = ""
    model: str = ""
    usage: Usage = ZERO_USAGE
    stop_reason: StopReason = "stop"
    error_message: str | None = None
    timestamp: int = 0
    response_id: str | None = None
    response_model: str | None = None
    provider_thinking_level: str | None = None
    raw_stop_reason: str | None = None
    end_turn: bool | None = None
    deferred: DeferredHandle | None = None
    diagnostics: tuple[JSONValue, ...] | None = None

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        """The ``toolCall`` blocks, in source order."""
        return tuple(b for b in self.content if isinstance(b, ToolCall))

    @property
    def text(self) -> str:
        """All text blocks joined (thinking and tool calls left out)."""
        return "".join(b.text for b in self.content if isinstance(b, TextContent))


@final
@attrs.frozen(kw_only=True, weakref_slot=False, repr=False)
class ToolResultMessage:
    """The result of one tool call, as the model will see it."""

    role: ClassVar[Literal["toolResult"]] = "toolResult"
    tool_call_id: str
    tool_name: str
    content: tuple[UserContent, ...] = ()
    details: JSONValue = None
    usage: Usage | None = None
    added_tool_names: tuple[str, ...] | None = None
    is_error: bool = False
    timestamp: int = 0


@final
@attrs.frozen(kw_only=True, weakref_slot=False, repr=False)
class CustomMessage:
    """An application-defined message (any role other than the three LLM roles).

    ``fields`` holds every wire field except ``role``, verbatim. Applications that
    want typed custom messages register an attrs class with
    :func:`pitrio.register_message_role`; this class is the fallback that keeps
    unknown roles lossless.
    """

    role: str
    fields: Mapping[str, JSONValue] = attrs.field(factory=dict)

    def __getitem__(self, key: str) -> JSONValue:
        return self.fields[key]

    def get(self, key: str, default: JSONValue = None) -> JSONValue:
        """The field ``key``, or ``default``."""
        return self.fields.get(key, default)


# ---------------------------------------------------------------------------------------
# Values built on first read (structure sharing for streamed partial messages)


@final
class LazyValue:
    """A field value computed on first read (``function(*args)``) and then cached in
    the field: private to pitrio's providers, never seen by users.

    A streamed message carries a frozen snapshot per delta. Built eagerly, a long
    answer would copy its text once per delta (O(n^2)); instead the providers put a
    ``LazyValue`` that joins shared chunks into ``TextContent.text``,
    ``ThinkingContent.thinking`` and ``ToolCall.arguments``. Reading the field (equality,
    hashing, ``repr``, the wire form all read it) builds the value once; a snapshot
    nobody reads costs O(1).
    """

    __slots__ = ("args", "function")

    def __init__(self, function: Callable[..., Any], *args: Any) -> None:
        self.function = function
        self.args = args


@final
class _LazyField:
    """Wraps a slot so that a :class:`LazyValue` stored in it is built on first read."""

    __slots__ = ("_get", "_set", "_slot")

    def __init__(self, slot: Any) -> None:
        self._slot = slot
        self._get = slot.__get__
        self._set = slot.__set__

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        if obj is None:
            return self._slot
        value = self._get(obj, owner)
        if type(value) is LazyValue:
            value = value.function(*value.args)
            self._set(obj, value)
        return value

    def __set__(self, obj: Any, value: Any) -> None:
        self._set(obj, value)

    def __delete__(self, obj: Any) -> None:
        self._slot.__delete__(obj)


for _cls, _name in ((TextContent, "text"), (ThinkingContent, "thinking"), (ToolCall, "arguments")):
    setattr(_cls, _name, _LazyField(_cls.__dict__[_name]))


# ---------------------------------------------------------------------------------------
# Fast construction of frozen values


_FACTORY: type[Any] = type(attrs.Factory(dict))


def fast_construct(*classes: type[Any]) -> None:
    """Give frozen attrs classes a constructor that costs what a plain slotted class's does.

    attrs fills a frozen instance through ``object.__setattr__`` once per field (the
    class's own ``__setattr__`` refuses), which makes a frozen value two to three times
    as dear to build as a mutable one; messages and events are built for every delta
    and every step of a turn. Here each class gets a ``__new__`` that fills an instance
    of a private *mutable* twin with the same slots (plain, specialised stores) and then
    turns it into the frozen class (``__class__`` assignment, allowed between
    classes of the same layout). ``__init__`` becomes ``object.__init__``.

    Everything else is still attrs': the fields, ``__setattr__`` refusing mutation,
    ``__eq__``, ``__hash__``, ``__repr__``, ``__match_args__``, ``attrs.evolve``; the
    signature (keyword-only, same defaults) is the one attrs would generate, and
    pickling/copying go through ``__reduce__``. The classes must be slotted, frozen,
    ``kw_only``, declared with ``weakref_slot=False`` (a ``__weakref__`` slot makes
    the layouts incompatible), and have no validators, converters or aliases. All the
    constructors of one call are compiled together (one ``compile()`` at import).
    """
    namespace: dict[str, Any] = {"_new": object.__new__, "_NOTHING": attrs.NOTHING}
    lines: list[str] = []
    built: list[tuple[type[Any], str, tuple[str, ...]]] = []
    for number, cls in enumerate(classes):
        fields = attrs.fields(cls)
        names = tuple(field.name for field in fields)
        if "__repr__" not in cls.__dict__:  # declared with repr=False: attrs' format
            setattr(cls, "__repr__", _make_repr(names))  # noqa: B010  # mypy: a method
        if not names:
            continue  # object.__new__ already builds a field-less instance
        twin = type(f"_{cls.__name__}Fields", (), {"__slots__": names})
        namespace[f"_twin{number}"] = twin
        params: list[str] = []
        body: list[str] = []
        for field in fields:
            name = field.name
            if (
                not field.kw_only
                or field.validator is not None
                or field.converter is not None
                or field.alias != name
                or not field.init
            ):
                msg = f"fast_construct() cannot build {cls.__name__}.{name}"
                raise TypeError(msg)
            default = field.default
            if default is attrs.NOTHING:
                params.append(name)
            elif isinstance(default, _FACTORY):
                if default.takes_self:
                    msg = f"fast_construct() cannot build {cls.__name__}.{name}"
                    raise TypeError(msg)
                namespace[f"_factory{number}_{name}"] = default.factory
                params.append(f"{name}=_NOTHING")
                body.append(
                    f"    if {name} is _NOTHING:\n        {name} = _factory{number}_{name}()"
                )
            else:
                namespace[f"_default{number}_{name}"] = default
                params.append(f"{name}=_default{number}_{name}")
        body.extend(f"    self.{name} = {name}" for name in names)
        namespace[f"_cls{number}"] = cls
        for head, target in ((f"_new{number}(cls, ", "cls"), (f"_make{number}(", f"_cls{number}")):
            lines.append(
                f"def {head}*, {', '.join(params)}):\n"
                f"    self = _new(_twin{number})\n" + "\n".join(body) + "\n"
                f"    self.__class__ = {target}\n"
                "    return self\n"
            )
        built.append((cls, f"_new{number}", names))
    code = compile("\n".join(lines), f"<pitrio constructors of {classes[0].__module__}>", "exec")
    exec(code, namespace)  # source built above from attrs field names only
    for cls, function_name, names in built:
        cls.__new__ = staticmethod(namespace[function_name])
        cls.__init__ = object.__init__
        setattr(cls, "__reduce__", _make_reduce(names))  # noqa: B010  # mypy: a method
        _CONSTRUCTORS[cls] = namespace[function_name.replace("_new", "_make", 1)]


_CONSTRUCTORS: dict[type[Any], Callable[..., Any]] = {}

_T = TypeVar("_T")


def constructor(cls: type[_T]) -> type[_T]:
    """The constructor of ``cls`` as a plain function, for the hot paths.

    Calling a class goes through ``type.__call__``: its ``__new__`` is looked up and
    called with the keywords packed into a dict, then ``__init__``, with the same dict:
    ~3,400 instructions for a two-field event, against ~1,000 for a call of a function
    with the same keywords. The loop builds its events and messages this way at every
    step and every delta. For a frozen class it is the one :func:`fast_construct` made;
    for a mutable attrs class with slots and plain fields (no validators, converters,
    hooks or ``__attrs_post_init__``) one is compiled at the first call.
    Typed as the class, so that mypy checks each call's keywords against the class's
    fields: call it, never use it as a type (``isinstance``). A frozen class without
    fields has none (use one shared instance).

    Raises:
        TypeError: ``cls`` is neither.
    """
    made = _CONSTRUCTORS.get(cls)
    if made is None:
        made = _CONSTRUCTORS[cls] = _mutable_constructor(cls)
    return made  # type: ignore[return-value]  # same signature as the class


def _mutable_constructor(cls: type[Any]) -> Callable[..., Any]:
    """A plain function that builds a mutable slotted attrs instance as its ``__init__``
    would (aliases as the keywords, defaults and factories), for :func:`constructor`."""
    why = _not_plain(cls)
    if why is not None:
        msg = f"constructor() cannot build {cls.__name__}: {why}"
        raise TypeError(msg)
    namespace: dict[str, Any] = {"_new": object.__new__, "_cls": cls, "_NOTHING": attrs.NOTHING}
    positional: list[str] = []  # attrs' order: the positional fields, then the keywords
    keywords: list[str] = []
    body: list[str] = []
    for field in attrs.fields(cls):
        name, alias = field.name, field.alias
        params = keywords if field.kw_only else positional
        default = field.default
        if default is attrs.NOTHING:
            params.append(alias)
        elif isinstance(default, _FACTORY):
            namespace[f"_factory_{name}"] = default.factory
            params.append(f"{alias}=_NOTHING")
            body.append(f"    if {alias} is _NOTHING:\n        {alias} = _factory_{name}()")
        else:
            namespace[f"_default_{name}"] = default
            params.append(f"{alias}=_default_{name}")
        body.append(f"    self.{name} = {alias}")
    signature = ", ".join([*positional, *(["*", *keywords] if keywords else [])])
    source = (
        f"def make({signature}):\n    self = _new(_cls)\n"
        + "\n".join(body)
        + "\n    return self\n"
    )
    # source built from the attrs field names only
    exec(compile(source, f"<pitrio constructor of {cls.__qualname__}>", "exec"), namespace)
    made: Callable[..., Any] = namespace["make"]
    return made


def _not_plain(cls: type[Any]) -> str | None:
    """Why :func:`_mutable_constructor` cannot build ``cls``, or ``None``."""
    if not attrs.has(cls) or "__slots__" not in cls.__dict__:
        return "not a slotted attrs class"
    if cls.__setattr__ is not object.__setattr__:
        return "frozen, or its fields have on_setattr hooks"
    if hasattr(cls, "__attrs_post_init__") or hasattr(cls, "__attrs_pre_init__"):
        return "it has an __attrs_post_init__ or __attrs_pre_init__"
    for field in attrs.fields(cls):
        default = field.default
        if (
            not field.init
            or field.validator is not None
            or field.converter is not None
            or (isinstance(default, _FACTORY) and default.takes_self)
        ):
            return f"its field {field.name} is not a plain field"
    return None


_repr_context = threading.local()


def _make_repr(names: tuple[str, ...]) -> Callable[[Any], str]:
    """attrs' ``__repr__`` (same text, same ``...`` for a value inside itself), shared
    code instead of one generated per class: ~0.9M instructions less per class at import.
    """

    def __repr__(self: Any) -> str:  # installed as the method
        running: set[int] | None = getattr(_repr_context, "running", None)
        if running is None:
            running = _repr_context.running = set()
        key = id(self)
        if key in running:
            return "..."
        running.add(key)
        try:
            fields = ", ".join([f"{name}={getattr(self, name)!r}" for name in names])
        finally:
            running.discard(key)
        return f"{self.__class__.__qualname__.rsplit('>.', 1)[-1]}({fields})"

    return __repr__


def _make_reduce(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    def __reduce__(self: Any) -> tuple[Any, ...]:  # installed as the method
        return _rebuild, (self.__class__, names, tuple(getattr(self, n) for n in names))

    return __reduce__


def _rebuild(cls: type[Any], names: tuple[str, ...], values: tuple[Any, ...]) -> Any:
    """Unpickle/copy a value built by :func:`fast_construct`."""
    return cls(**dict(zip(names, values, strict=True)))


fast_construct(
    TextContent,
    ThinkingContent,
    ImageContent,
    ToolCall,
    Cost,
    Usage,
    DeferredHandle,
    UserMessage,
    AssistantMessage,
    ToolResultMessage,
    CustomMessage,
)


LlmMessage: TypeAlias = UserMessage | AssistantMessage | ToolResultMessage
"""The messages a model understands."""

AgentMessage: TypeAlias = Any
"""Any transcript entry: an :data:`LlmMessage`, a :class:`CustomMessage`, or an
instance of a registered custom role class (anything with a ``role`` attribute)."""

LLM_ROLES = frozenset({"user", "assistant", "toolResult"})


def user_text(
    text: str, *, images: tuple[ImageContent, ...] = (), timestamp: int = 0
) -> UserMessage:
    """A user message with one text block (and optional images), as ``Agent.prompt`` builds it."""
    return UserMessage(content=(TextContent(text=text), *images), timestamp=timestamp)


def role_of(message: AgentMessage) -> str:
    """The role of any transcript entry."""
    role: str = message.role
    return role
