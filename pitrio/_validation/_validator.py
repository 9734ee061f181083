"""The validator of one tool schema, its cache, and the errors it raises.

:class:`Validator` strings the steps together as Pi does: clone, normalize and coerce
(:mod:`._coerce`), check (the fast path of :mod:`._fast`, else :mod:`._typebox`), and
on failure TypeBox's error list (:mod:`._typebox_errors`) in a
:class:`ToolArgumentsError` carrying Pi's message.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any, ClassVar, Final, final

import trio

from .._errors import PitrioError
from .._messages import JSONValue
from .._signal import AbortSignal
from ._coerce import (
    _clone,
    _clone_fast,
    _Coercer,
    _has_function,
    _NotCloneable,
    _Odd,
    _Preparer,
    _strip_functions,
)
from ._fast import _compile_fast
from ._flat import compile_flat
from ._jsvalues import _strict_equal, js_json_dumps_capped
from ._typebox import _Compiler
from ._typebox_errors import MAX_ERRORS, _Sink, node_errors
from ._work import CHECK_UNITS, INLINE_UNITS, budget, exceeds

ECHO_LIMIT: Final = 32_000
"""At most this many characters of the arguments are echoed in a
:class:`ToolArgumentsError` message (Pi echoes all of them)."""

ECHO_CUT: Final = (
    f"\n[... cut by pitrio: the arguments are longer than {ECHO_LIMIT:,} characters of JSON;"
    " only their beginning is shown]"
)
"""What ends an echo cut at :data:`ECHO_LIMIT` characters."""


class ToolArgumentsError(PitrioError):
    """The arguments of a tool call do not satisfy the tool's schema.

    ``str(exc)`` is Pi's complete message, which the agent loop puts in the error
    tool result::

        Validation failed for tool "<name>":
          - <path>: <message>

        Received arguments:
        <the arguments as JSON.stringify(arguments, null, 2)>

    Pi echoes the arguments whole; pitrio echoes at most 32,000
    characters of them (any normal call fits) and ends a longer echo with a line
    saying it was cut (a model that sent 12 MB gets back a short, clear error instead of
    its 12 MB, and writing the message costs time bounded by the limit).

    Attributes:
        tool_name: The tool's name.
        errors: The ``"<path>: <message>"`` lines, in TypeBox's order (at most 8).
            Empty when TypeBox's error walk finds nothing although its compiled check
            failed; the message then says ``Unknown validation error``, as Pi's does.
        arguments: The arguments as received (before normalization and coercion),
            whole even when the message shows only their beginning.
    """

    tool_name: str
    errors: tuple[str, ...]
    arguments: JSONValue

    def __init__(self, tool_name: str, errors: tuple[str, ...], arguments: JSONValue) -> None:
        self.tool_name = tool_name
        self.errors = errors
        self.arguments = arguments
        lines = "\n".join(f"  - {e}" for e in errors) if errors else "Unknown validation error"
        echo, complete = js_json_dumps_capped(arguments, indent=2, limit=ECHO_LIMIT)
        if not complete:
            echo += ECHO_CUT
        super().__init__(
            f'Validation failed for tool "{tool_name}":\n{lines}\n\nReceived arguments:\n{echo}'
        )


class ValidationAborted(PitrioError):
    """The run's abort signal fired while a tool call's arguments were being validated
    in a worker thread (large arguments are validated off the event loop);
    ``str(exc)`` is Pi's ``Operation aborted``, the text an aborted tool call gets."""

    def __init__(self) -> None:
        super().__init__("Operation aborted")


class ToolSchemaError(PitrioError):
    """The tool's schema cannot be compiled, so every call of the tool fails.

    ``str(exc)`` is the message Pi's call would fail with (for an invalid regular
    expression, V8's ``Invalid regular expression: /<source>/u: <reason>``).
    """


# ======================================================================================
# Validator
# ======================================================================================


@final
class _TooBigInline:
    """The type of :data:`TOO_BIG_INLINE`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "TOO_BIG_INLINE"


TOO_BIG_INLINE: Final = _TooBigInline()
"""What :meth:`Validator.validate_inline` returns for arguments too big to validate
inline (:meth:`Validator.validate_async` takes them to a worker thread)."""


@final
class Validator:
    """The compiled validation of one tool schema; build with :func:`compile_validator`.

    Thread-safe for concurrent :meth:`validate` calls once built.
    """

    __slots__ = (
        "_coercer", "_engine", "_fast", "_flat", "_prep", "_prep_dict", "_schema", "_schema_error",
        "_strip",
    )  # fmt: skip

    TOO_BIG_INLINE: ClassVar[_TooBigInline] = TOO_BIG_INLINE
    """:data:`TOO_BIG_INLINE`, for callers that have not imported this module."""

    def __init__(self, schema: Mapping[str, Any] | bool) -> None:
        self._schema: Any = schema if isinstance(schema, dict | bool) else _clone(schema)
        engine = _Compiler(self._schema)
        self._engine = engine.top
        self._schema_error = engine.error or engine.unsupported
        self._fast = None if self._schema_error else _compile_fast(self._schema)
        # Flat object schemas: a valid call that needs no coercion is checked directly.
        self._flat = None if self._schema_error else compile_flat(self._schema)
        self._coercer = _Coercer()
        preparer = _Preparer(self._coercer)
        self._prep = preparer.get(self._schema, True, True)
        # For a dict, the top node's dict function directly (one call less).
        self._prep_dict = preparer.dict_preps.get((id(self._schema), True, True), self._prep)
        self._strip = preparer.may_insert_functions

    @property
    def schema(self) -> Any:
        """The schema this validator was compiled from."""
        return self._schema

    @property
    def uses_fast_path(self) -> bool:
        """Whether acceptance is decided by the compiled fastjsonschema validator."""
        return self._fast is not None

    def is_valid(self, value: JSONValue) -> bool:
        """TypeBox's ``Check`` of an already coerced value (Pi's compiled validator)."""
        fast = self._fast
        if fast is not None:
            try:
                _clone_fast(value)  # only plain JSON with finite numbers
                fast(value)
            except _Odd:
                pass
            except Exception:
                return self._engine.check(value)
            else:
                return True
        return self._engine.check(value)

    def errors(self, value: JSONValue) -> tuple[str, ...]:
        """TypeBox's ``Errors`` as Pi formats them (``"<path>: <message>"``, at most 8)."""
        sink = _Sink(MAX_ERRORS)
        node_errors(self._engine, value, "", sink)
        return tuple(e.line() for e in sink.errors)

    async def validate_async(
        self, tool_name: str, arguments: JSONValue, *, signal: AbortSignal | None = None
    ) -> JSONValue:
        """:meth:`validate`, without blocking the event loop when the arguments are big.

        Arguments up to :data:`INLINE_UNITS` in size (array items, object properties,
        string characters / 64) are validated inline: then this call does not
        checkpoint, as the plain call it replaces did not, and the loop's event order
        is Pi's. Bigger ones are validated in a worker thread
        (:func:`trio.to_thread.run_sync`); then this call is a checkpoint that the
        enclosing cancel scope, or ``signal``, can interrupt at any moment, and the
        worker stops at its next look at the stop flag (every :data:`CHECK_UNITS`
        units of work).

        Raises:
            ToolArgumentsError: As :meth:`validate`.
            ToolSchemaError: As :meth:`validate`.
            ValidationAborted: ``signal`` aborted during a validation in a worker.
            trio.Cancelled: The enclosing scope was cancelled during it.
        """
        valid = self.validate_inline(tool_name, arguments)
        if valid is not self.TOO_BIG_INLINE:
            return valid
        stop = threading.Event()
        with trio.CancelScope() as scope:
            remove = signal.add_callback(scope.cancel) if signal is not None else None
            try:
                return await trio.to_thread.run_sync(
                    _validate_in_worker, self, tool_name, arguments, stop, abandon_on_cancel=True
                )
            finally:
                stop.set()  # an abandoned worker stops at its next look
                if remove is not None:
                    remove()
        raise ValidationAborted  # only the signal cancels this scope

    def validate_inline(self, tool_name: str, arguments: JSONValue) -> JSONValue:
        """:meth:`validate` when :meth:`validate_async` would validate inline (the loop's
        common case, without a coroutine); :attr:`TOO_BIG_INLINE` when it would not.

        Raises:
            ToolArgumentsError: As :meth:`validate`.
            ToolSchemaError: As :meth:`validate`.
        """
        flat = self._flat
        if flat is not None and type(arguments) is dict:
            valid = flat(arguments)  # a flat schema's check is cheap whatever the size
            if valid is not None:
                return valid
        if not exceeds(arguments, INLINE_UNITS):
            return self.validate(tool_name, arguments)
        return TOO_BIG_INLINE

    def validate(self, tool_name: str, arguments: JSONValue) -> JSONValue:
        """Validate and coerce a tool call's arguments exactly as Pi does.

        Args:
            tool_name: The tool's name (used in the error message).
            arguments: The call's arguments (after the tool's ``prepare_arguments``).
                Never mutated.

        Returns:
            The normalized and coerced arguments, a new value the caller owns.

        Raises:
            ToolArgumentsError: The arguments do not satisfy the schema.
            ToolSchemaError: The schema cannot be compiled, or Pi's call would throw
                (V8's ``Maximum call stack size exceeded`` for a ``$ref`` cycle that
                never consumes the value, ``DataCloneError`` texts, ...).
        """
        flat = self._flat
        if flat is not None and type(arguments) is dict:
            valid = flat(arguments)
            if valid is not None:
                return valid
        try:
            return self._validate(tool_name, arguments)
        except RecursionError:
            msg = "Maximum call stack size exceeded"  # V8's RangeError
            raise ToolSchemaError(msg) from None

    def _validate(self, tool_name: str, arguments: JSONValue) -> JSONValue:
        if self._schema_error is not None:
            raise ToolSchemaError(self._schema_error)
        if type(arguments) is dict:
            try:
                args = self._prep_dict(arguments)
            except (_Odd, TypeError):  # TypeError: a key that is not a string
                pass
            except _NotCloneable as exc:
                raise ToolSchemaError(str(exc)) from None
            else:
                fast = self._fast
                if fast is not None:
                    try:
                        fast(args)
                    except Exception:
                        pass
                    else:
                        return args
                return self._finish(tool_name, arguments, args)
        return self._validate_exactly(tool_name, arguments)

    def _finish(self, tool_name: str, arguments: JSONValue, args: Any) -> Any:
        if self._engine.check(args):
            return _strip_functions(args) if self._strip else args
        raise ToolArgumentsError(tool_name, self.errors(args), arguments)

    def _validate_exactly(self, tool_name: str, arguments: JSONValue) -> JSONValue:
        """Pi's steps one after the other, for any value."""
        try:
            args = _clone(arguments)
            self._coercer.normalize(args, self._schema)
            coerced = self._coercer.coerce(args, self._schema)
        except _NotCloneable as exc:
            raise ToolSchemaError(str(exc)) from None
        if coerced is not args and not (
            # `coerced !== args` compares primitives by value
            not isinstance(args, dict | list) and _strict_equal(coerced, args)
        ):
            if isinstance(args, dict | list) and isinstance(coerced, dict | list):
                args = coerced
            else:
                # Pi returns a coerced primitive without reporting errors either way.
                return coerced if self.is_valid(coerced) else args
        if self.is_valid(args):
            return _strip_functions(args) if _has_function(args) else args
        raise ToolArgumentsError(tool_name, self.errors(args), arguments)


_cache_lock = threading.Lock()
_cache_by_id: dict[int, tuple[Mapping[str, Any], Validator]] = {}
_cache_by_text: dict[str, Validator] = {}
_CACHE_LIMIT: Final = 2048


def compile_validator(schema: Mapping[str, Any]) -> Validator:
    """The validator of a tool schema, compiled once.

    Cached by the schema object's identity (the object is kept alive by the cache) and
    by its JSON text, so equal schemas built separately share one validator. The schema
    must not be mutated afterwards.
    """
    key = id(schema)
    entry = _cache_by_id.get(key)
    if entry is not None and entry[0] is schema:
        return entry[1]
    with _cache_lock:
        entry = _cache_by_id.get(key)
        if entry is not None and entry[0] is schema:
            return entry[1]
        try:
            text: str | None = json.dumps(schema, sort_keys=False, separators=(",", ":"))
        except (TypeError, ValueError):
            text = None
        validator = _cache_by_text.get(text) if text is not None else None
        if validator is None:
            validator = Validator(schema)
            if text is not None:
                if len(_cache_by_text) >= _CACHE_LIMIT:
                    _cache_by_text.clear()
                _cache_by_text[text] = validator
        # Entries keep their schema alive (so its id stays unique); bound them for
        # callers that build a new schema object per call.
        if len(_cache_by_id) >= _CACHE_LIMIT:
            _cache_by_id.clear()
        _cache_by_id[key] = (schema, validator)
        return validator


def _validate_in_worker(
    validator: Validator, tool_name: str, arguments: JSONValue, stop: threading.Event
) -> JSONValue:
    """The body of a worker thread of :meth:`Validator.validate_async`."""
    with budget(CHECK_UNITS, stop):
        return validator.validate(tool_name, arguments)


def validate_tool_arguments(
    tool_name: str, schema: Mapping[str, Any], arguments: JSONValue
) -> JSONValue:
    """Pi's ``validateToolArguments``: :meth:`Validator.validate` with the cached
    validator of ``schema``."""
    return compile_validator(schema).validate(tool_name, arguments)
