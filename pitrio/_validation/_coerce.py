"""Pi's steps before the check: ``structuredClone``, ``normalizeOptionalNulls`` and
``coerceWithJsonSchema`` (``pi-ai/dist/utils/validation.js``).

The coerced value is what the tool receives, so the conversions (``"5"`` -> ``5``,
``1`` -> ``true``, ``null`` -> ``0``/``""``, ...) and the paths they take through
``allOf``/``anyOf``/``oneOf``, nested objects, ``additionalProperties`` and arrays
follow Pi's code step by step, with JavaScript's property lookup (a key such as
``toString`` finds ``Object.prototype``). ``_Coercer`` is the literal port for any
value; ``_Preparer`` builds, once per schema, specialised functions that clone,
normalize and coerce a plain JSON object in one pass (the common case), raising
``_Odd`` to fall back to the literal port where the shortcut would differ.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from ._jsvalues import (
    _JS_WHITESPACE,
    _PROTO_VALUES,
    _UNDEF,
    _from_js_number,
    _is_integer,
    _is_js_number,
    _js_get,
    _js_in,
    _js_key_order,
    _js_string_to_number,
    _js_to_string,
    _JSFunction,
)
from ._typebox import _Compiler, _js_items, _Node
from ._work import current_work


class _NotCloneable(Exception):
    """``structuredClone`` met a function (DataCloneError)."""


def _js_key(k: object) -> str:
    """The property key JavaScript makes of a Python dict key."""
    if isinstance(k, str):
        return k
    if isinstance(k, bool) or _is_js_number(k):
        return _js_to_string(k)
    return "null" if k is None else str(k)


def _clone(v: Any) -> Any:
    """``structuredClone`` of a decoded JSON value (tuples become lists, and object keys
    take JavaScript's order)."""
    t = type(v)
    if t is dict:
        work = current_work()
        if work is not None:
            work.spend(len(v))
        out = {_js_key(k): _clone(x) for k, x in v.items()}
        for k in out:
            if "0" <= k[:1] <= "9":
                return {k: out[k] for k in _js_key_order(list(out))}
        return out
    if t is list or t is tuple:
        work = current_work()
        if work is not None:
            work.spend(len(v))
        return [_clone(x) for x in v]
    if t is _JSFunction:
        msg = f"{v.source} could not be cloned."
        raise _NotCloneable(msg)
    if isinstance(v, Mapping):
        return _clone(dict(v))
    return v


def _get_types(schema: dict[str, Any]) -> tuple[str, ...]:
    t = schema.get("type")
    if isinstance(t, str):
        return (t,)
    if isinstance(t, list):
        return tuple(x for x in t if isinstance(x, str))
    return ()


def _matches_json_type(v: object, t: str) -> bool:
    if t == "number":
        return _is_js_number(v)
    if t == "integer":
        return _is_integer(v)
    if t == "boolean":
        return isinstance(v, bool)
    if t == "string":
        return isinstance(v, str)
    if t == "null":
        return v is None
    if t == "array":
        return isinstance(v, list)
    if t == "object":
        return isinstance(v, dict)
    return False


def _coerce_primitive(v: Any, t: str) -> Any:
    if t in ("number", "integer"):
        if v is None:
            return 0
        if isinstance(v, str) and v.strip(_JS_WHITESPACE):
            parsed = _js_string_to_number(v)
            if math.isfinite(parsed) if t == "number" else parsed.is_integer():
                return _from_js_number(parsed)
        if isinstance(v, bool):
            return 1 if v else 0
        return v
    if t == "boolean":
        if v is None:
            return False
        if v == "true" and isinstance(v, str):
            return True
        if v == "false" and isinstance(v, str):
            return False
        if _is_js_number(v):
            if v == 1:
                return True
            if v == 0:
                return False
        return v
    if t == "string":
        if v is None:
            return ""
        if isinstance(v, bool) or _is_js_number(v):
            return _js_to_string(v)
        return v
    if t == "null":
        if (isinstance(v, str) and v == "") or v is False or (_is_js_number(v) and v == 0):
            return None
        return v
    return v


class _Coercer:
    """Pi's ``normalizeOptionalNulls`` and ``coerceWithJsonSchema`` for one tool schema.

    Sub-schema checks (``getSubSchemaValidator(s).Check(v)``) compile the sub-schema on
    its own, as Pi does: a ``$ref`` inside it resolves against the sub-schema, not the
    tool schema.
    """

    def __init__(self) -> None:
        self._sub: dict[int, tuple[object, _Node | None]] = {}
        self._nullable: dict[int, bool | None] = {}

    def sub_check(self, schema: object, v: Any) -> bool | None:
        """``getSubSchemaValidator(schema)?.Check(v)``: None when Pi has no validator,
        which is the case for a schema that is not an object (its ``WeakMap`` cache
        throws on a primitive key) or that does not compile."""
        if not isinstance(schema, dict | list):
            return None
        entry = self._sub.get(id(schema))
        if entry is None:
            comp = _Compiler(schema)
            node = None if comp.error is not None or comp.unsupported is not None else comp.top
            entry = (schema, node)
            self._sub[id(schema)] = entry
        node = entry[1]
        return None if node is None else node.check(v)

    def accepts_null(self, schema: object) -> bool | None:
        key = id(schema)
        if key not in self._nullable:
            self._nullable[key] = self.sub_check(schema, None)
        return self._nullable[key]

    # ---- normalizeOptionalNulls (in place on the clone)
    def normalize(self, v: Any, schema: Any) -> None:
        if isinstance(v, list):
            items = schema.get("items") if isinstance(schema, dict) else None
            if isinstance(items, list):
                for x, item_schema in zip(v, items, strict=False):
                    if item_schema:
                        self.normalize(x, item_schema)
            elif items:
                for x in v:
                    self.normalize(x, items)
            return
        if not isinstance(v, dict) or not isinstance(schema, dict):
            return
        props = schema.get("properties")
        if not props or not isinstance(props, dict):
            return
        required = schema.get("required")
        required_set = set(required) if isinstance(required, list | str) else set()
        for key, prop_schema in _js_items(props):
            if not _js_in(v, key):
                continue
            x = _js_get(v, key)
            if (
                x is None
                and key not in required_set
                and not (isinstance(prop_schema, dict) and isinstance(prop_schema.get("$ref"), str))
                and self.accepts_null(prop_schema) is False
            ):
                del v[key]
            else:
                self.normalize(x, prop_schema)

    # ---- coerceWithJsonSchema (in place for objects and arrays)
    def coerce(self, v: Any, schema: Any) -> Any:
        if not isinstance(schema, dict):
            return v
        nxt = v
        all_of = schema.get("allOf")
        if isinstance(all_of, list):
            for nested in all_of:
                nxt = self.coerce(nxt, nested)
        for key in ("anyOf", "oneOf"):
            members = schema.get(key)
            if isinstance(members, list):
                nxt = self._union(nxt, members)
        types = _get_types(schema)
        if types and not (len(types) > 1 and any(_matches_json_type(nxt, t) for t in types)):
            for t in types:
                candidate = _coerce_primitive(nxt, t)
                if candidate is not nxt or (isinstance(nxt, float) and nxt != nxt):
                    nxt = candidate
                    break
        if "object" in types and isinstance(nxt, dict):
            self._coerce_object(nxt, schema)
        if "array" in types and isinstance(nxt, list):
            items = schema.get("items")
            if isinstance(items, list):
                for i in range(min(len(nxt), len(items))):
                    if items[i]:
                        nxt[i] = self.coerce(nxt[i], items[i])
            elif items and isinstance(items, dict):
                for i in range(len(nxt)):
                    nxt[i] = self.coerce(nxt[i], items)
        return nxt

    def _coerce_object(self, v: dict[str, Any], schema: dict[str, Any]) -> None:
        props = schema.get("properties")
        defined: frozenset[str] = frozenset()
        if isinstance(props, dict):
            defined = frozenset(props)
            for key, prop_schema in _js_items(props):
                if _js_in(v, key):
                    v[key] = self.coerce(_js_get(v, key), prop_schema)
        addl = schema.get("additionalProperties")
        if addl and isinstance(addl, dict | list):
            for key, x in list(v.items()):
                if key not in defined:
                    v[key] = self.coerce(x, addl)

    def _union(self, v: Any, members: list[Any]) -> Any:
        for member in members:
            if self.sub_check(member, v):
                return v
        for member in members:
            candidate = self.coerce(_clone(v), member)
            if self.sub_check(member, candidate):
                return candidate
        return v


def _strip_functions(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _strip_functions(x) for k, x in v.items() if not isinstance(x, _JSFunction)}
    if isinstance(v, list):
        return [_strip_functions(x) for x in v]
    return v


def _has_function(v: Any) -> bool:
    if isinstance(v, _JSFunction):
        return True
    if isinstance(v, dict):
        return any(_has_function(x) for x in v.values())
    if isinstance(v, list):
        return any(_has_function(x) for x in v)
    return False


class _Odd(Exception):
    """A value the fused preparer leaves to the exact, slower path (NaN, infinities,
    tuples, non-JSON objects, ...)."""


def _clone_fast(v: Any) -> Any:
    """:func:`_clone` for plain decoded JSON; raises :class:`_Odd` for anything else."""
    t = type(v)
    if t is str or t is int or t is bool or v is None:
        return v
    if t is dict:
        work = current_work()
        if work is not None:
            work.spend(len(v))
        out = {k: _clone_fast(x) for k, x in v.items()}
        for k in out:
            if "0" <= k[:1] <= "9":
                return {k: out[k] for k in _js_key_order(list(out))}
        return out
    if t is list:
        work = current_work()
        if work is not None:
            work.spend(len(v))
        return [_clone_fast(x) for x in v]
    if t is float and not v - v:
        return v
    raise _Odd


_Prep = Callable[[Any], Any]


class _Preparer:
    """Compiles, per schema node, one function doing Pi's ``structuredClone``,
    ``normalizeOptionalNulls`` and ``coerceWithJsonSchema`` in a single pass.

    Normalization and coercion both only look at the sub-tree below a node, so doing
    both node by node gives what Pi gets by normalizing the whole value first. A node
    with ``allOf``/``anyOf``/``oneOf`` (whose coercion checks whole sub-values) is
    handed to the interpreted :class:`_Coercer`. Values the fast functions do not
    handle raise :class:`_Odd`.
    """

    def __init__(self, coercer: _Coercer) -> None:
        self._coercer = coercer
        self._memo: dict[tuple[int, bool, bool], _Prep | None] = {}
        # The one Python type a node's function returns unchanged (a shortcut that
        # saves a call per property in the common flat object schema).
        self._keep: dict[tuple[int, bool, bool], type | None] = {}
        self.dict_preps: dict[tuple[int, bool, bool], _Prep] = {}
        self.may_insert_functions = False

    def keep(self, s: Any, norm: bool, coerce: bool) -> type | None:
        if not isinstance(s, dict) or not (norm or coerce):
            return str
        return self._keep.get((id(s), norm, coerce))

    def get(self, s: Any, norm: bool, coerce: bool) -> _Prep:
        if not isinstance(s, dict) or not (norm or coerce):
            return _clone_fast
        key = (id(s), norm, coerce)
        if key in self._memo:
            prep = self._memo[key]
            return prep if prep is not None else self._interpreted(s, norm, coerce)
        self._memo[key] = None  # a cycle gets the interpreted version
        prep, keep = self._build(s, norm, coerce)
        self._memo[key] = prep
        self._keep[key] = keep
        return prep

    def _interpreted(self, s: dict[str, Any], norm: bool, coerce: bool) -> _Prep:
        coercer = self._coercer

        def prep(v: Any) -> Any:
            c = _clone_fast(v)
            if norm:
                coercer.normalize(c, s)
            return coercer.coerce(c, s) if coerce else c

        return prep

    def _build(self, s: dict[str, Any], norm: bool, coerce: bool) -> tuple[_Prep, type | None]:
        if coerce and any(isinstance(s.get(k), list) for k in ("allOf", "anyOf", "oneOf")):
            return self._interpreted(s, norm, coerce), None
        types = _get_types(s) if coerce else ()
        is_object = "object" in types
        is_array = "array" in types
        coerce_primitive = _primitive_coercion(types)
        props = s.get("properties")
        # key -> (function, the schema when a null value may be deleted, kept type)
        table: dict[str, tuple[_Prep, Any, type | None]] | None = None
        inserts: list[tuple[str, Any]] = []
        if isinstance(props, dict) and props and (norm or is_object):
            required = s.get("required")
            required_set = set(required) if isinstance(required, list | str) else set()
            table = {}
            for key, sub in props.items():
                deletable = (
                    norm
                    and key not in required_set
                    and not (isinstance(sub, dict) and isinstance(sub.get("$ref"), str))
                )
                table[key] = (
                    self.get(sub, norm, is_object),
                    sub if deletable else _UNDEF,
                    self.keep(sub, norm, is_object),
                )
                if is_object and key in _PROTO_VALUES:
                    inserts.append((key, sub))
            if inserts:
                self.may_insert_functions = True
        addl = s.get("additionalProperties")
        addl_prep = self.get(addl, False, True) if is_object and isinstance(addl, dict) else None
        items = s.get("items")
        item_preps: list[_Prep | None] | None = None
        item_prep: _Prep | None = None
        if norm or is_array:
            if isinstance(items, list):
                item_preps = [self.get(x, norm, is_array) if x else None for x in items]
            elif items and (isinstance(items, dict) or norm):
                item_prep = self.get(items, norm, is_array and isinstance(items, dict))
        coercer = self._coercer

        lookup = (table or {}).get

        def prep_dict(v: dict[str, Any]) -> dict[str, Any]:
            work = current_work()
            if work is not None:
                work.spend(len(v))
            out: dict[str, Any] = {}
            reorder = False
            for k, x in v.items():
                if k < ":" and k >= "0":
                    reorder = True
                entry = lookup(k)
                if entry is not None:
                    if type(x) is entry[2]:
                        out[k] = x
                    elif (
                        x is None
                        and entry[1] is not _UNDEF
                        and coercer.accepts_null(entry[1]) is False
                    ):
                        continue
                    else:
                        out[k] = entry[0](x)
                elif addl_prep is not None:
                    out[k] = addl_prep(x)
                else:
                    out[k] = _clone_fast(x)
            if reorder:
                out = {k: out[k] for k in _js_key_order(list(out))}
            for k, sub in inserts:
                if k not in out:  # `k in value` is true through Object.prototype
                    out[k] = coercer.coerce(_PROTO_VALUES[k], sub)
            return out

        def prep_list(v: list[Any]) -> list[Any]:
            work = current_work()
            if work is not None:
                work.spend(len(v))
            if item_prep is not None:
                return [item_prep(x) for x in v]
            if item_preps is not None:
                n = len(item_preps)
                return [
                    (item_preps[i] or _clone_fast)(x) if i < n else _clone_fast(x)
                    for i, x in enumerate(v)
                ]
            return [_clone_fast(x) for x in v]

        has_dict = table is not None or addl_prep is not None
        if has_dict:
            self.dict_preps[(id(s), norm, coerce)] = prep_dict
        has_list = item_prep is not None or item_preps is not None

        def prep(v: Any) -> Any:
            t = type(v)
            if t is dict:
                return prep_dict(v) if has_dict else _clone_fast(v)
            if t is list:
                return prep_list(v) if has_list else _clone_fast(v)
            if coerce_primitive is not None:
                if t is float and v - v:
                    raise _Odd
                if t is str or t is int or t is bool or t is float or v is None:
                    return coerce_primitive(v)
                raise _Odd
            return _clone_fast(v)

        keep: type | None = str
        if coerce_primitive is not None:
            keep = {
                "string": str, "integer": int, "number": int, "boolean": bool, "object": str,
                "array": str,
            }.get(types[0]) if len(types) == 1 else None  # fmt: skip
            if len(types) > 1:
                keep = next(
                    (
                        py
                        for name, py in (("string", str), ("integer", int), ("boolean", bool))
                        if name in types
                    ),
                    None,
                )
        return prep, keep


def _primitive_coercion(types: tuple[str, ...]) -> Callable[[Any], Any] | None:
    """Pi's type step of ``coerceWithJsonSchema`` for a non-container value."""
    if not types:
        return None
    if len(types) == 1:
        only = types[0]
        if only == "string":
            return _to_string
        if only == "number" or only == "integer":
            return _to_integer if only == "integer" else _to_number
        if only in ("object", "array"):
            return _identity

    def coerce(v: Any) -> Any:
        if len(types) > 1 and any(_matches_json_type(v, t) for t in types):
            return v
        for t in types:
            candidate = _coerce_primitive(v, t)
            if candidate is not v:
                return candidate
        return v

    return coerce


def _identity(v: Any) -> Any:
    return v


def _to_string(v: Any) -> Any:
    t = type(v)
    if t is str:
        return v
    return _coerce_primitive(v, "string")


def _to_number(v: Any) -> Any:
    t = type(v)
    if t is int or t is float:
        return v
    return _coerce_primitive(v, "number")


def _to_integer(v: Any) -> Any:
    if type(v) is int:
        return v
    return _coerce_primitive(v, "integer")
