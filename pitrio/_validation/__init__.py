"""Tool-argument validation: an exact port of pi-ai 0.85.0's ``validateToolArguments``.

Pi validates a tool call like this (``pi-ai/dist/utils/validation.js``):

1. ``args = structuredClone(toolCall.arguments)``;
2. ``normalizeOptionalNulls``: an optional property whose value is ``null`` and whose
   schema rejects ``null`` (and is not a ``$ref``) is deleted;
3. ``coerceWithJsonSchema``: primitives are converted towards the schema's ``type``
   (``"5"`` -> ``5``, ``1`` -> ``true``, ``5`` -> ``"5"``, ``null`` -> ``0``/``""``/...),
   through ``allOf``/``anyOf``/``oneOf``, nested objects, ``additionalProperties`` and
   arrays;
4. TypeBox 1.3.7's compiled ``Check``; on failure an ``Error`` listing TypeBox's
   ``Errors()`` (at most 8, TypeBox's order and English texts).

Here the check runs first through a :mod:`fastjsonschema` validator compiled once per
schema (the fast path), built from a rewritten copy of the schema whose meaning for
JSON values is exactly TypeBox's (string keywords become one custom ``format`` that
implements TypeBox's grapheme lengths, JavaScript regular expressions and formats).
Schemas using a keyword whose meaning differs and cannot be rewritten (``multipleOf``,
``uniqueItems``, ``patternProperties``, non-scalar ``enum``/``const``, ...) are checked
by the precise engine below instead. Only when the check fails does the precise engine
walk the value to reproduce TypeBox's error list.

JavaScript details that are reproduced: key order of objects (integer-like keys first),
``Number(string)``/``String(number)``, ``JSON.stringify`` number formatting, TypeBox's
grapheme counting for ``minLength``/``maxLength``, its hash-based ``uniqueItems``, its
``multipleOf`` tolerance, regular expressions compiled with the ``u`` flag (translated
to :mod:`re`; an invalid one fails every call with V8's message), the formats TypeBox
registers, ``$ref`` resolution, and the ``in`` operator seeing ``Object.prototype``
members (a property named ``toString`` or ``constructor`` is "present" in every object).

Known gaps (documented, not reproduced): ``unevaluatedProperties``/``unevaluatedItems``,
``$recursiveRef`` and ``$dynamicRef`` are ignored (more lenient than TypeBox); TypeBox
schemas carrying ``~kind`` (``Value.Convert``) are treated as plain JSON schemas;
integers beyond 2**53 are compared exactly (JavaScript would have rounded them when
parsing); the ``iri``/``iri-reference``/``idn-*`` formats approximate WHATWG URL parsing
and Unicode scripts; ``\\p{Script=...}`` and binary Unicode properties in patterns are
not supported (such a schema fails every call with a pitrio message); Python's recursion
limit is lower than V8's stack; a JavaScript function that Pi would hand to a tool (an
``Object.prototype`` member copied into the arguments by coercion) is dropped from the
returned arguments.

The package, in the order Pi's steps need it:

- :mod:`._jsvalues`: JavaScript value semantics (``undefined``, the ``in`` operator,
  ``Number(string)``, ``String(number)``, ``JSON.stringify``, grapheme lengths, hashing);
- :mod:`._jsregex`: JavaScript regular expressions translated to :mod:`re`;
- :mod:`._formats`: the string formats TypeBox registers;
- :mod:`._typebox`: the schema compiled into nodes and TypeBox's ``Check``;
- :mod:`._typebox_errors`: TypeBox's ``Errors()`` walk and its English texts;
- :mod:`._flat`: the flat-object shortcut (an object of scalar properties whose values
  already have their types needs no coercion: checked by one generated function);
- :mod:`._fast`: the fastjsonschema fast path;
- :mod:`._coerce`: Pi's ``structuredClone``, ``normalizeOptionalNulls`` and coercion;
- :mod:`._validator`: :class:`Validator`, its cache, the exceptions, and the async
  entry point the agent loop awaits;
- :mod:`._work`: the size that moves a validation to a worker thread, and the budget
  that lets a worker stop when its caller is cancelled or aborted.

A tool-argument error echoes at most 32,000 characters of the arguments (Pi echoes all).

The costs of model-controlled input (huge arguments, backtracking patterns) are in
``docs/validation.md``.
"""

from ._jsvalues import js_json_dumps as js_json_dumps, js_number_to_string as js_number_to_string
from ._typebox_errors import MAX_ERRORS as MAX_ERRORS
from ._validator import (
    ToolArgumentsError as ToolArgumentsError,
    ToolSchemaError as ToolSchemaError,
    ValidationAborted as ValidationAborted,
    Validator as Validator,
    compile_validator as compile_validator,
    validate_tool_arguments as validate_tool_arguments,
)

__all__ = [
    "ToolArgumentsError",
    "ToolSchemaError",
    "ValidationAborted",
    "Validator",
    "compile_validator",
    "validate_tool_arguments",
]
