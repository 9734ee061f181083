"""Messages and events stay frozen attrs values with the fast constructor of
``pitrio._messages.fast_construct``: every behaviour attrs' own ``__init__`` gave them."""

from __future__ import annotations

import copy
import inspect
import pickle
from typing import Any, get_args

import attrs
import pytest

from pitrio import _events, _messages
from pitrio._messages import LazyValue, TextContent, ToolCall, ToolResultMessage, fast_construct

CLASSES: list[type[Any]] = [
    _messages.TextContent,
    _messages.ThinkingContent,
    _messages.ImageContent,
    _messages.ToolCall,
    _messages.Cost,
    _messages.Usage,
    _messages.DeferredHandle,
    _messages.UserMessage,
    _messages.AssistantMessage,
    _messages.ToolResultMessage,
    _messages.CustomMessage,
    _events.ToolResult,
    *get_args(_events.AssistantMessageEvent),
    *get_args(_events.AgentEvent),
]


def _sample(cls: type[Any]) -> dict[str, Any]:
    """Keyword arguments giving every field of ``cls`` a distinct non-default value."""
    values: dict[str, Any] = {}
    for number, field in enumerate(attrs.fields(cls)):
        values[field.name] = f"value-{number}"
    return values


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_constructor_keeps_attrs_semantics(cls: type[Any]) -> None:
    kwargs = _sample(cls)
    value = cls(**kwargs)
    assert type(value) is cls
    assert {f.name: getattr(value, f.name) for f in attrs.fields(cls)} == kwargs
    # Equal by value, hashable, frozen.
    twin = cls(**kwargs)
    assert value == twin
    assert hash(value) == hash(twin)
    for name in kwargs:
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            setattr(value, name, "changed")
        other = cls(**{**kwargs, name: "other"})
        assert other != value
    # repr names every field; evolve, copy, deepcopy and pickle round-trip.
    assert all(f"{name}={kwargs[name]!r}" in repr(value) for name in kwargs)
    if kwargs:
        first = next(iter(kwargs))
        assert getattr(attrs.evolve(value, **{first: "new"}), first) == "new"
    assert copy.copy(value) == value
    assert copy.deepcopy(value) == value
    assert pickle.loads(pickle.dumps(value)) == value
    assert type(pickle.loads(pickle.dumps(value))) is cls


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_signature_is_the_attrs_one(cls: type[Any]) -> None:
    parameters = inspect.signature(cls).parameters
    fields = attrs.fields(cls)
    assert list(parameters) == [f.name for f in fields]
    for field in fields:
        parameter = parameters[field.name]
        assert parameter.kind is inspect.Parameter.KEYWORD_ONLY
        if field.default is attrs.NOTHING:
            assert parameter.default is inspect.Parameter.empty
        elif not isinstance(field.default, type(attrs.Factory(dict))):
            assert parameter.default is field.default
    if fields and fields[0].default is attrs.NOTHING:
        with pytest.raises(TypeError, match=fields[0].name):
            cls()
    with pytest.raises(TypeError, match="unexpected keyword"):
        cls(**_sample(cls), not_a_field=1)


def test_defaults_and_fresh_factories() -> None:
    message = ToolResultMessage(tool_call_id="a", tool_name="b")
    assert (message.content, message.details, message.is_error, message.timestamp) == (
        (),
        None,
        False,
        0,
    )
    first, second = ToolCall(id="1", name="n"), ToolCall(id="2", name="n")
    assert first.arguments == {}
    assert first.arguments is not second.arguments


def test_lazy_fields_still_build_on_first_read() -> None:
    calls: list[int] = []

    def build() -> str:
        calls.append(1)
        return "joined"

    lazy: Any = LazyValue(build)
    block = TextContent(text=lazy)
    assert calls == []
    assert block.text == "joined"
    assert block.text == "joined"
    assert calls == [1]
    assert block == TextContent(text="joined")


def test_class_patterns_match() -> None:
    partial = _messages.AssistantMessage(stop_reason="pending")
    event: Any = _events.TextDeltaEvent(content_index=2, delta="x", partial=partial)
    match event:
        case _events.TextDeltaEvent(content_index=index, delta=delta):
            assert (index, delta) == (2, "x")
        case _:
            pytest.fail("no match")


def test_refuses_classes_it_cannot_build() -> None:
    @attrs.frozen(kw_only=True, weakref_slot=False)
    class Validated:
        x: int = attrs.field(validator=attrs.validators.instance_of(int))

    with pytest.raises(TypeError, match=r"Validated\.x"):
        fast_construct(Validated)


def test_repr_is_attrs_format() -> None:
    details: dict[str, Any] = {}
    message = ToolResultMessage(tool_call_id="a", tool_name="b", details=details)
    details["self"] = message  # a value inside itself is shown as ...
    assert repr(message) == (
        "ToolResultMessage(tool_call_id='a', tool_name='b', content=(), "
        "details={'self': ...}, usage=None, added_tool_names=None, is_error=False, "
        "timestamp=0)"
    )
    assert repr(_events.TurnStart()) == "TurnStart()"


@pytest.mark.parametrize("cls", [c for c in CLASSES if attrs.fields(c)], ids=lambda c: c.__name__)
def test_the_plain_constructor_builds_what_the_class_builds(cls: type[Any]) -> None:
    """``constructor(cls)`` is the class's constructor as a function: same value, same
    type, same defaults (a field left out), same refusal of a missing field."""
    make = _messages.constructor(cls)
    kwargs = _sample(cls)
    value = make(**kwargs)
    assert type(value) is cls
    assert value == cls(**kwargs)
    fields = attrs.fields(cls)
    optional = [f.name for f in fields if f.default is not attrs.NOTHING]
    if optional:
        left_out = {k: v for k, v in kwargs.items() if k != optional[0]}
        assert make(**left_out) == cls(**left_out)
    required = [f.name for f in fields if f.default is attrs.NOTHING]
    if required:
        with pytest.raises(TypeError, match=required[0]):
            make(**{k: v for k, v in kwargs.items() if k != required[0]})


def test_the_plain_constructor_of_a_mutable_class() -> None:
    """A mutable slotted attrs class gets one compiled at the first call: aliases are its
    keywords, factories run per instance, defaults are shared."""

    @attrs.define(kw_only=True)
    class Config:
        name: str
        _items: list[int] = attrs.field(factory=list, alias="items")
        mode: str = "parallel"

    make = _messages.constructor(Config)
    assert _messages.constructor(Config) is make  # compiled once
    one, two = make(name="a"), make(name="b", items=[1], mode="sequential")
    assert (one.name, one._items, one.mode) == ("a", [], "parallel")
    assert (two.name, two._items, two.mode) == ("b", [1], "sequential")
    assert make(name="c")._items is not one._items
    assert type(one) is Config
    with pytest.raises(TypeError, match="name"):
        make()  # type: ignore[call-arg]  # the missing field, on purpose

    @attrs.define
    class Mixed:
        a: int
        b: int = 2
        c: int = attrs.field(kw_only=True, default=3)

    mixed = _messages.constructor(Mixed)
    assert attrs.asdict(mixed(1)) == attrs.asdict(Mixed(1)) == {"a": 1, "b": 2, "c": 3}
    assert attrs.asdict(mixed(1, 5, c=6)) == {"a": 1, "b": 5, "c": 6}
    with pytest.raises(TypeError):
        mixed(1, 5, 6)  # type: ignore[call-arg]  # c is keyword-only, as attrs makes it


def test_the_plain_constructor_refuses_what_it_cannot_build() -> None:
    @attrs.define(kw_only=True)
    class Validated:
        x: int = attrs.field(validator=attrs.validators.instance_of(int))

    @attrs.define(kw_only=True, on_setattr=attrs.setters.NO_OP)
    class ValidatedOnce:
        x: int = attrs.field(validator=attrs.validators.instance_of(int))

    @attrs.define
    class NotInit:
        x: int = attrs.field(init=False, default=0)

    @attrs.define(kw_only=True)
    class PostInit:
        x: int

        def __attrs_post_init__(self) -> None:
            pass

    @attrs.frozen(kw_only=True)
    class Frozen:
        x: int

    for cls, why in (
        (Validated, "on_setattr"),  # attrs checks the validator on every assignment
        (ValidatedOnce, "its field x"),
        (NotInit, "its field x"),
        (PostInit, "__attrs_post_init__"),
        (Frozen, "frozen"),
        (dict, "not a slotted attrs class"),
    ):
        with pytest.raises(TypeError, match=why):
            _messages.constructor(cls)
