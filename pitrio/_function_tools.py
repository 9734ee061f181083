"""Tools from typed Python functions: :func:`tool`.

``@tool`` turns a function into a :class:`pitrio.Tool`::

    @tool
    async def add(a: float, b: float) -> str:
        \"\"\"Add two numbers.

        Args:
            a: the first number.
            b: the second number.
        \"\"\"
        return str(a + b)

What it builds, and how (pydantic-ai's ``@agent.tool_plain`` / ``@agent.tool`` is the model;
the differences are listed in ``docs/deviations.md``, "Tools from typed functions"):

- **The schema** comes from the annotations (:func:`json_schema_of`): ``str``, ``int``,
  ``float``, ``bool``, ``None``, ``Any``; ``X | None`` and other unions (``anyOf``);
  ``Literal`` and ``Enum`` (``enum``/``const``); ``list``/``Sequence``, ``tuple`` (fixed or
  ``...``), ``set``/``frozenset`` (``uniqueItems``); ``dict[str, X]``/``Mapping``;
  ``TypedDict`` (``total``, ``Required``, ``NotRequired``), dataclasses and attrs classes,
  nested; ``Annotated[X, ...]`` is ``X``. A parameter with a default is not required and
  its schema carries ``"default"``. Nested classes are written out in place (no
  ``$ref``), so a recursive class is refused. The top-level object has
  ``additionalProperties: false``, as pydantic-ai's.
- **Descriptions** come from the docstring (Google, NumPy or Sphinx style: the summary
  is the tool's description, each documented parameter's text its ``description``).
- **Arguments** are validated as every tool's are (Pi's validator and error texts: the
  schema is the tool's ``parameters``), then converted into the annotated types
  (dataclasses, attrs classes, enums, tuples, sets... with cattrs); a plain ``str``,
  ``bool`` or ``Any`` parameter is passed as validated, a ``float`` as a float, an ``int``
  as an int (JSON's ``5.0`` passes Pi's ``integer`` check: it arrives as ``5``).
- **Parameters pitrio fills in** are recognised by their annotation and kept out of the
  schema: :class:`pitrio.AbortSignal` (the run's signal), ``Callable[[ToolResult], None]``
  (the update callback), :class:`RunContext` (the run's dependencies and the call) and
  :data:`ToolCallId` (the call's id).
- **The return value**: a ``str`` is the result's text; a :class:`pitrio.ToolResult` is
  used as it is; a content block or a list of them is the content; anything else is
  dumped as compact JSON text (dataclasses and attrs classes unstructured first).
- **Sync functions** run inline in the run's task (they block it while they run), or in
  a worker thread with ``@tool(thread=True)`` (``trio.to_thread.run_sync``; the run waits
  for the thread; ``on_update`` and the signal may be used from it).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
import json
import types
import typing
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, Literal, TypeVar, overload

import attrs
import trio

from ._deps import RUN_DEPS
from ._docstrings import parse_docstring
from ._errors import ArgumentTypeError
from ._events import ToolResult
from ._messages import ImageContent, TextContent
from ._run_context import RunContext, ToolCallId
from ._signal import AbortSignal
from ._tools import ExecutionMode, Tool, ToolUpdateCallback

__all__ = ["json_schema_of", "tool"]

F = TypeVar("F", bound=Callable[..., Any])

_NONE_TYPE: Final = type(None)
_SCALARS: Final[dict[object, dict[str, Any]]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    _NONE_TYPE: {"type": "null"},
}
_LITERAL_TYPES: Final[dict[type, str]] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
}


class _SchemaError(Exception):
    """An annotation with no schema (turned into an ArgumentTypeError naming the tool)."""


# --------------------------------------------------------------------------------------
# Schemas


def json_schema_of(annotation: object) -> dict[str, Any]:
    """The JSON schema :func:`tool` writes for a parameter annotated ``annotation``.

    Raises:
        ArgumentTypeError: the annotation has no JSON schema (the message says which
            part and what to use instead).
    """
    try:
        return _schema(annotation, ())
    except _SchemaError as exc:
        raise ArgumentTypeError(str(exc)) from None


def _strip_annotated(tp: object) -> object:
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    return tp


def _is_union(origin: object) -> bool:
    return origin is typing.Union or origin is types.UnionType


def _schema(tp: object, stack: tuple[object, ...]) -> dict[str, Any]:
    tp = _strip_annotated(tp)
    if tp is Any or tp is object:
        return {}
    scalar = _SCALARS.get(tp) if isinstance(tp, type) or tp is None else None
    if tp is None:
        return {"type": "null"}
    if scalar is not None:
        return dict(scalar)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if _is_union(origin):
        return {"anyOf": [_schema(arg, stack) for arg in args]}
    if origin is Literal:
        return _literal_schema(args)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _literal_schema(tuple(member.value for member in tp))
    if isinstance(tp, typing.NewType):
        return _schema(tp.__supertype__, stack)
    if origin in (list, Sequence, typing.Sequence) or tp in (list, Sequence):
        return {"type": "array", "items": _schema(args[0], stack) if args else {}}
    if tp is tuple:
        return {"type": "array", "items": {}}
    if origin is tuple:
        return _tuple_schema(args, stack)
    if origin in (set, frozenset) or tp in (set, frozenset):
        item = _schema(args[0], stack) if args else {}
        return {"type": "array", "items": item, "uniqueItems": True}
    if origin in (dict, Mapping) or tp in (dict, Mapping):
        return _dict_schema(args, stack)
    if isinstance(tp, type) and (
        _is_typeddict(tp) or dataclasses.is_dataclass(tp) or attrs.has(tp)
    ):
        if tp in stack:
            msg = (
                f"{tp.__qualname__} contains itself; pitrio writes nested classes out in "
                "place and cannot describe a recursive one (flatten it, or write the schema "
                "by hand with pitrio.Tool)"
            )
            raise _SchemaError(msg)
        return _class_schema(tp, (*stack, tp))
    msg = (
        f"{_type_name(tp)} has no JSON schema (use str, int, float, bool, None, Any, "
        "a union, Literal, an Enum, list, tuple, set, dict[str, X], a TypedDict, a "
        "dataclass or an attrs class)"
    )
    raise _SchemaError(msg)


def _is_typeddict(tp: type) -> bool:
    # typing.is_typeddict() misses typing_extensions' TypedDict before Python 3.12.
    return issubclass(tp, dict) and hasattr(tp, "__required_keys__")


def _type_name(tp: object) -> str:
    if isinstance(tp, type):
        return tp.__qualname__
    return repr(tp)


def _literal_schema(values: tuple[object, ...]) -> dict[str, Any]:
    for value in values:
        if type(value) not in _LITERAL_TYPES and value is not None:
            msg = f"literal value {value!r} is not a str, int, float, bool or None"
            raise _SchemaError(msg)
    kinds = {_LITERAL_TYPES.get(type(v), "null") for v in values}
    schema: dict[str, Any] = (
        {"const": values[0]} if len(values) == 1 else {"enum": list(values)}
    )
    if len(kinds) == 1:
        schema["type"] = kinds.pop()
    return schema


def _tuple_schema(args: tuple[object, ...], stack: tuple[object, ...]) -> dict[str, Any]:
    if len(args) == 2 and args[1] is Ellipsis:
        return {"type": "array", "items": _schema(args[0], stack)}
    if not args or args == ((),):  # tuple[()] (spelled ((),) before Python 3.11)
        return {"type": "array", "minItems": 0, "maxItems": 0}
    return {
        "type": "array",
        "prefixItems": [_schema(arg, stack) for arg in args],
        "minItems": len(args),
        "maxItems": len(args),
    }


def _dict_schema(args: tuple[object, ...], stack: tuple[object, ...]) -> dict[str, Any]:
    if not args:
        return {"type": "object", "additionalProperties": True}
    key = _strip_annotated(args[0])
    if key is not str:
        msg = f"dict keys must be str (JSON object keys); got {_type_name(key)}"
        raise _SchemaError(msg)
    value = _schema(args[1], stack)
    return {"type": "object", "additionalProperties": value if value else True}


def _class_schema(cls: type, stack: tuple[object, ...]) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, annotation, has_default, default in _class_fields(cls):
        schema = _schema(annotation, stack)
        if has_default:
            _add_default(schema, default)
        else:
            required.append(name)
        properties[name] = schema
    out: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        out["required"] = required
    return out


_NO_DEFAULT: Final = object()
"""A field whose default comes from a factory: not required, no ``"default"``."""


def _class_fields(cls: type) -> list[tuple[str, object, bool, object]]:
    """``(name, annotation, has_default, default)`` of each field a caller may give."""
    hints = typing.get_type_hints(cls, include_extras=True)
    if _is_typeddict(cls):
        required_keys: frozenset[str] = getattr(cls, "__required_keys__", frozenset())
        fields = []
        for name, annotation in hints.items():
            # Required/NotRequired as resolved here: the class's own key sets miss them
            # when the annotations are strings (``from __future__ import annotations``).
            required = name in required_keys
            bare = annotation
            while typing.get_origin(bare) in (
                typing.Required,
                typing.NotRequired,
                typing.Annotated,
            ):
                if typing.get_origin(bare) is typing.Required:
                    required = True
                elif typing.get_origin(bare) is typing.NotRequired:
                    required = False
                bare = typing.get_args(bare)[0]
            fields.append((name, bare, not required, _NO_DEFAULT))
        return fields
    if dataclasses.is_dataclass(cls):
        out: list[tuple[str, object, bool, object]] = []
        for field in dataclasses.fields(cls):
            if not field.init:
                continue
            if field.default is not dataclasses.MISSING:
                out.append((field.name, hints[field.name], True, field.default))
            elif field.default_factory is not dataclasses.MISSING:
                out.append((field.name, hints[field.name], True, _NO_DEFAULT))
            else:
                out.append((field.name, hints[field.name], False, None))
        return out
    attrs_out: list[tuple[str, object, bool, object]] = []
    for a in attrs.fields(cls):
        if not a.init:
            continue
        annotation = hints.get(a.name, a.type if a.type is not None else Any)
        name = a.alias or a.name
        if a.default is attrs.NOTHING:
            attrs_out.append((name, annotation, False, None))
        elif isinstance(a.default, attrs.Factory):  # type: ignore[arg-type]  # attrs' stub: Factory is a function
            attrs_out.append((name, annotation, True, _NO_DEFAULT))
        else:
            attrs_out.append((name, annotation, True, a.default))
    return attrs_out


def _add_default(schema: dict[str, Any], default: object) -> None:
    if default is _NO_DEFAULT:
        return
    value = _json_value(default)
    if value is not _NO_DEFAULT:
        schema["default"] = value


def _json_value(value: object) -> object:
    """``value`` as JSON (enums by value, tuples and sets as lists, classes as objects),
    or ``_NO_DEFAULT`` when it has no JSON form."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, enum.Enum):
        return _json_value(value.value)
    if isinstance(value, list | tuple | set | frozenset):
        items = [_json_value(v) for v in value]
        return _NO_DEFAULT if _NO_DEFAULT in items else items
    if isinstance(value, dict):
        out = {str(k): _json_value(v) for k, v in value.items()}
        return _NO_DEFAULT if _NO_DEFAULT in out.values() else out
    if dataclasses.is_dataclass(value) or attrs.has(type(value)):
        return _json_value(_converter().unstructure(value))
    return _NO_DEFAULT


# --------------------------------------------------------------------------------------
# Arguments: validated by the loop, then converted here


_CONVERTER: Any = None


def _converter() -> Any:
    """The cattrs converter for tool arguments (built on first use: importing cattrs
    costs milliseconds that ``import pitrio`` does not pay)."""
    global _CONVERTER
    if _CONVERTER is None:
        import cattrs

        conv = cattrs.Converter()
        conv.register_structure_hook_func(
            lambda tp: _is_union(typing.get_origin(tp)), functools.partial(_structure_union, conv)
        )
        _CONVERTER = conv
    return _CONVERTER


def _structure_union(conv: Any, value: object, tp: object) -> object:
    """The first member of the union that takes the value (exact JSON types first)."""
    members = typing.get_args(tp)
    for member in members:
        bare = _strip_annotated(member)
        if bare is _NONE_TYPE and value is None:
            return None
        if bare in _SCALARS and type(value) is bare:
            return value
    if type(value) is int and float in members:
        return float(value)
    errors: list[str] = []
    for member in members:
        if _strip_annotated(member) is _NONE_TYPE:
            continue
        try:
            return conv.structure(value, member)
        except Exception as exc:
            errors.append(f"{_type_name(member)}: {exc}")
    msg = f"{value!r} matches no member of {tp!r} ({'; '.join(errors)})"
    raise ValueError(msg)


def _passthrough(value: object) -> object:
    return value


def _to_float(value: object) -> object:
    return float(value) if type(value) is int else value


def _to_int(value: object) -> object:
    # JSON's 5.0 is an integer to Pi's validator (a JavaScript number), a float here.
    return int(value) if type(value) is float else value


def _converter_for(annotation: object) -> Callable[[object], object]:
    """The conversion of one validated argument into its annotated type."""
    bare = _strip_annotated(annotation)
    if bare in (str, bool, Any, object):
        return _passthrough
    if bare is int:
        return _to_int
    if bare is float:
        return _to_float
    conv = _converter()
    hook = conv.get_structure_hook(bare)
    return functools.partial(_structure, hook, bare)


def _structure(hook: Callable[[object, object], object], tp: object, value: object) -> object:
    return hook(value, tp)


def _describe(exc: BaseException) -> str:
    """What a failed conversion says: the leaf errors of cattrs' exception groups (a
    type's own check, such as ``__post_init__``, with its message)."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    return str(exc) or type(exc).__name__


# --------------------------------------------------------------------------------------
# Parameters pitrio fills in


_Injected = Literal["signal", "on_update", "context", "call_id"]


def _injected(annotation: object) -> _Injected | None:
    bare = _strip_annotated(annotation)
    if bare is AbortSignal:
        return "signal"
    if bare is ToolCallId:
        return "call_id"
    if bare is RunContext or typing.get_origin(bare) is RunContext:
        return "context"
    if typing.get_origin(bare) is Callable or bare is ToolUpdateCallback:
        args = typing.get_args(bare)
        if len(args) == 2 and args[0] == [ToolResult] and args[1] in (None, _NONE_TYPE):
            return "on_update"
    return None


# --------------------------------------------------------------------------------------
# Results


def _to_result(name: str, value: object) -> ToolResult:
    if type(value) is str:
        return ToolResult(content=(TextContent(text=value),))
    if isinstance(value, ToolResult):
        return value
    if isinstance(value, TextContent | ImageContent):
        return ToolResult(content=(value,))
    if (
        isinstance(value, list | tuple)
        and value
        and all(isinstance(v, TextContent | ImageContent) for v in value)
    ):
        return ToolResult(content=tuple(value))
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):
        try:
            text = json.dumps(
                _converter().unstructure(value), ensure_ascii=False, separators=(",", ":")
            )
        except (TypeError, ValueError):
            msg = (
                f"tool {name!r} returned a {type(value).__name__}, which has no JSON form; "
                "return a str, a ToolResult, content blocks or a JSON-able value"
            )
            raise ArgumentTypeError(msg) from None
    return ToolResult(content=(TextContent(text=text),))


# --------------------------------------------------------------------------------------
# The tool


@attrs.frozen
class _Param:
    name: str
    convert: Callable[[object], object]
    has_default: bool


def _build(
    fn: Callable[..., Any],
    *,
    name: str | None,
    description: str | None,
    thread: bool,
    execution_mode: ExecutionMode | None,
    label: str,
) -> Tool:
    given: object = fn  # checked at run time: the type is a promise only
    if not callable(given):
        msg = f"tool(fn): expected a function; got {type(given).__name__}"
        raise ArgumentTypeError(msg)
    tool_name = name if name is not None else getattr(fn, "__name__", "")
    if not tool_name or tool_name == "<lambda>":
        msg = "tool(fn): a lambda has no usable name; pass name='...'"
        raise ArgumentTypeError(msg)
    summary, documented = parse_docstring(inspect.getdoc(fn))
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:
        msg = f"tool {tool_name!r}: cannot resolve the annotations of {fn!r}: {exc}"
        raise ArgumentTypeError(msg) from None
    properties: dict[str, Any] = {}
    required: list[str] = []
    params: list[_Param] = []
    injected: list[tuple[str, _Injected]] = []
    for parameter in inspect.signature(fn).parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            msg = (
                f"tool {tool_name!r}: *{parameter.name} / **{parameter.name} cannot be "
                "described to a model; name each parameter"
            )
            raise ArgumentTypeError(msg)
        if parameter.kind is parameter.POSITIONAL_ONLY:
            msg = f"tool {tool_name!r}: parameter {parameter.name!r} is positional-only"
            raise ArgumentTypeError(msg)
        if parameter.name not in hints:
            msg = (
                f"tool {tool_name!r}: parameter {parameter.name!r} has no annotation; the "
                "annotation is its JSON schema (write e.g. `{parameter.name}: str`)"
            )
            raise ArgumentTypeError(msg)
        annotation = hints[parameter.name]
        kind = _injected(annotation)
        if kind is not None:
            injected.append((parameter.name, kind))
            continue
        try:
            schema = _schema(annotation, ())
        except _SchemaError as exc:
            msg = f"tool {tool_name!r}: parameter {parameter.name!r}: {exc}"
            raise ArgumentTypeError(msg) from None
        if parameter.name in documented:
            schema["description"] = documented[parameter.name]
        has_default = parameter.default is not parameter.empty
        if has_default:
            _add_default(schema, parameter.default)
        else:
            required.append(parameter.name)
        properties[parameter.name] = schema
        params.append(_Param(parameter.name, _converter_for(annotation), has_default))
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }
    if required:
        parameters["required"] = required
    execute = _executor(fn, tool_name, tuple(params), tuple(injected), thread)
    return Tool(
        name=tool_name,
        description=description if description is not None else summary,
        parameters=parameters,
        execute=execute,
        label=label,
        execution_mode=execution_mode,
    )


def _executor(
    fn: Callable[..., Any],
    name: str,
    params: tuple[_Param, ...],
    injected: tuple[tuple[str, _Injected], ...],
    thread: bool,
) -> Callable[[str, Any, AbortSignal, ToolUpdateCallback], Awaitable[ToolResult]]:
    is_async = inspect.iscoroutinefunction(fn)
    if is_async and thread:
        msg = f"tool {name!r}: thread=True is for sync functions; {fn!r} is async"
        raise ArgumentTypeError(msg)
    # This runs for every call: the common cases get short paths (an async function
    # whose arguments need no conversion; then one needing only conversions).
    converters = tuple((p.name, p.convert) for p in params if p.convert is not _passthrough)
    if not converters and not injected and is_async:

        async def execute_plain(
            tool_call_id: str, args: Any, signal: AbortSignal, on_update: ToolUpdateCallback
        ) -> ToolResult:
            value = await fn(**args)
            if type(value) is str:
                return ToolResult(content=(TextContent(text=value),))
            return _to_result(name, value)

        return execute_plain

    # (name, conversion): int and float (the usual ones) are done inline, without a call.
    plan = tuple(
        (param_name, 0 if conv is _to_int else 1 if conv is _to_float else 2, conv)
        for param_name, conv in converters
    )

    def convert(args: Mapping[str, object]) -> Mapping[str, object]:
        """The keyword arguments (``args`` itself when nothing changes: it is not
        modified, as the hooks see it too)."""
        kwargs: dict[str, object] | None = None
        for param_name, kind, conv in plan:
            if param_name not in args:
                continue
            value = args[param_name]
            if kind == 0:
                if type(value) is not float:
                    continue
                new: object = int(value)
            elif kind == 1:
                if type(value) is not int:
                    continue
                new = float(value)
            else:
                try:
                    new = conv(value)
                except Exception as exc:
                    msg = f"Invalid argument {param_name!r} for tool {name!r}: {_describe(exc)}"
                    raise ArgumentTypeError(msg) from None
            if kwargs is None:
                kwargs = dict(args)
            kwargs[param_name] = new
        return args if kwargs is None else kwargs

    if not injected and is_async:

        async def execute_converted(
            tool_call_id: str, args: Any, signal: AbortSignal, on_update: ToolUpdateCallback
        ) -> ToolResult:
            value = await fn(**convert(args))
            if type(value) is str:
                return ToolResult(content=(TextContent(text=value),))
            return _to_result(name, value)

        return execute_converted

    async def execute(
        tool_call_id: str, args: Any, signal: AbortSignal, on_update: ToolUpdateCallback
    ) -> ToolResult:
        kwargs = dict(convert(args))
        update = on_update
        if thread:
            # Called from the worker thread: hand the update to the run's task.
            def update(result: ToolResult) -> None:
                trio.from_thread.run_sync(on_update, result)

        for param_name, kind in injected:
            if kind == "signal":
                kwargs[param_name] = signal
            elif kind == "on_update":
                kwargs[param_name] = update
            elif kind == "call_id":
                kwargs[param_name] = tool_call_id
            else:
                kwargs[param_name] = RunContext(
                    deps=RUN_DEPS.get(),
                    tool_name=name,
                    tool_call_id=tool_call_id,
                    signal=signal,
                    on_update=update,
                )
        if is_async:
            value = await fn(**kwargs)
        elif thread:
            value = await trio.to_thread.run_sync(functools.partial(fn, **kwargs))
        else:
            value = fn(**kwargs)
        return _to_result(name, value)

    return execute


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    fn: Callable[..., Any],
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    thread: bool = False,
    execution_mode: ExecutionMode | None = None,
    label: str = "",
) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    thread: bool = False,
    execution_mode: ExecutionMode | None = None,
    label: str = "",
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    thread: bool = False,
    execution_mode: ExecutionMode | None = None,
    label: str = "",
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """A :class:`pitrio.Tool` from a typed function: as ``@tool``, ``@tool(name=...)``
    or ``tool(fn, name=...)``.

    The JSON schema of the arguments comes from the annotations, the descriptions from
    the docstring; arguments are validated (Pi's validator) and converted into the
    annotated types; parameters annotated :class:`pitrio.AbortSignal`,
    ``Callable[[ToolResult], None]``, :class:`pitrio.RunContext` or
    :data:`pitrio.ToolCallId` are filled in by pitrio. The module docs of
    ``pitrio._function_tools`` list every rule.

    Args:
        fn: an async or sync function whose parameters are all annotated.
        name: the tool's name (default: the function's name).
        description: the description the model reads (default: the docstring's summary).
        thread: run a sync function in a worker thread instead of inline.
        execution_mode: ``"sequential"`` or ``"parallel"`` for this tool (default: the
            agent's).
        label: a human-readable label (``Tool.label``).

    Raises:
        ArgumentTypeError: a parameter without an annotation, or with one that has no
            JSON schema (the message names the parameter and what to use).
    """
    if fn is None:
        return functools.partial(
            _build,
            name=name,
            description=description,
            thread=thread,
            execution_mode=execution_mode,
            label=label,
        )
    return _build(
        fn,
        name=name,
        description=description,
        thread=thread,
        execution_mode=execution_mode,
        label=label,
    )
