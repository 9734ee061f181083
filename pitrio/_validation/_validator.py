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
from typing import Any, Final, final

from .._errors import PitrioError
from .._messages import JSONValue
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
from ._jsvalues import _strict_equal, js_json_dumps
from ._typebox import _Compiler
from ._typebox_errors import MAX_ERRORS, _Sink, node_errors


class ToolArgumentsError(PitrioError):
    """The arguments of a tool call do not satisfy the tool's schema.

    ``str(exc)`` is Pi's complete message, which the agent loop puts in the error
    tool result::

        Validation failed for tool "<name>":
          - <path>: <message>

        Received arguments:
        <the arguments as JSON.stringify(arguments, null, 2)>

    Attributes:
        tool_name: The tool's name.
        errors: The ``"<path>: <message>"`` lines, in TypeBox's order (at most 8).
            Empty when TypeBox's error walk finds nothing although its compiled check
            failed; the message then says ``Unknown validation error``, as Pi's does.
        arguments: The arguments as received (before normalization and coercion).
    """

    tool_name: str
    errors: tuple[str, ...]
    arguments: JSONValue

    def __init__(self, tool_name: str, errors: tuple[str, ...], arguments: JSONValue) -> None:
        self.tool_name = tool_name
        self.errors = errors
        self.arguments = arguments
        lines = "\n".join(f"  - {e}" for e in errors) if errors else "Unknown validation error"
        super().__init__(
            f'Validation failed for tool "{tool_name}":\n{lines}\n\n'
            f"Received arguments:\n{js_json_dumps(arguments, indent=2)}"
        )


class ToolSchemaError(PitrioError):
    """The tool's schema cannot be compiled, so every call of the tool fails.

    ``str(exc)`` is the message Pi's call would fail with (for an invalid regular
    expression, V8's ``Invalid regular expression: /<source>/u: <reason>``).
    """


# ======================================================================================
# Validator
# ======================================================================================


@final
class Validator:
    """The compiled validation of one tool schema; build with :func:`compile_validator`.

    Thread-safe for concurrent :meth:`validate` calls once built.
    """

    __slots__ = (
        "_coercer", "_engine", "_fast", "_prep", "_prep_dict", "_schema", "_schema_error", "_strip"
    )  # fmt: skip

    def __init__(self, schema: Mapping[str, Any] | bool) -> None:
        self._schema: Any = schema if isinstance(schema, dict | bool) else _clone(schema)
        engine = _Compiler(self._schema)
        self._engine = engine.top
        self._schema_error = engine.error or engine.unsupported
        self._fast = None if self._schema_error else _compile_fast(self._schema)
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


def validate_tool_arguments(
    tool_name: str, schema: Mapping[str, Any], arguments: JSONValue
) -> JSONValue:
    """Pi's ``validateToolArguments``: :meth:`Validator.validate` with the cached
    validator of ``schema``."""
    return compile_validator(schema).validate(tool_name, arguments)
