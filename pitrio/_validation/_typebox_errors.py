"""TypeBox's ``Errors()`` walk, its English texts and Pi's formatting of them.

When the check fails, Pi lists TypeBox's errors (at most :data:`MAX_ERRORS`) as
``"<path>: <message>"`` lines. Which errors appear, and in which order, follows from
TypeBox's keyword order, its nested error contexts (``anyOf``/``oneOf``/``allOf``,
``if``/``then``/``else``, ``$ref``) and ``Array.prototype.every`` short-circuits, so
:func:`node_errors` walks a ``_Node`` in exactly that order. The walk is separate from
the check: it runs only on failure, and a model sees its output.
"""

from __future__ import annotations

from typing import Any, Final

from ._formats import _format_test
from ._jsvalues import (
    _UNDEF,
    _has_key,
    _is_multiple_of,
    _is_number,
    _js_get,
    _string_length,
    js_number_to_string,
)
from ._typebox import _const_ok, _duplicates, _Node, _type_ok
from ._work import current_work

MAX_ERRORS: Final = 8
"""TypeBox's ``Settings.maxErrors``: ``Errors()`` reports at most this many."""


class _Error:
    __slots__ = ("keyword", "params", "path")

    def __init__(self, keyword: str, path: str, params: dict[str, Any]) -> None:
        self.keyword = keyword
        self.path = path
        self.params = params

    def message(self) -> str:
        """TypeBox's ``en_US`` locale."""
        p = self.params
        match self.keyword:
            case "additionalProperties":
                return "must not have additional properties"
            case "anyOf":
                return "must match a schema in anyOf"
            case "boolean":
                return "schema is false"
            case "const":
                return "must be equal to constant"
            case "contains":
                return "must contain at least 1 valid item"
            case "dependencies" | "dependentRequired":
                return (
                    f"must have properties {', '.join(p['dependencies'])} "
                    f"when property {p['property']} is present"
                )
            case "enum":
                return "must be equal to one of the allowed values"
            case "exclusiveMaximum" | "exclusiveMinimum" | "maximum" | "minimum":
                return f"must be {p['comparison']} {js_number_to_string(p['limit'])}"
            case "format":
                return f'must match format "{p["format"]}"'
            case "if":
                return f'must match "{p["failingKeyword"]}" schema'
            case "maxItems":
                return f"must not have more than {js_number_to_string(p['limit'])} items"
            case "maxLength":
                return f"must not have more than {js_number_to_string(p['limit'])} characters"
            case "maxProperties":
                return f"must not have more than {js_number_to_string(p['limit'])} properties"
            case "minItems":
                return f"must not have fewer than {js_number_to_string(p['limit'])} items"
            case "minLength":
                return f"must not have fewer than {js_number_to_string(p['limit'])} characters"
            case "minProperties":
                return f"must not have fewer than {js_number_to_string(p['limit'])} properties"
            case "multipleOf":
                return f"must be multiple of {js_number_to_string(p['multipleOf'])}"
            case "not":
                return "must not be valid"
            case "oneOf":
                return "must match exactly one schema in oneOf"
            case "pattern":
                return f'must match pattern "{p["pattern"]}"'
            case "propertyNames":
                return f"property names {', '.join(p['propertyNames'])} are invalid"
            case "required":
                return f"must have required properties {', '.join(p['requiredProperties'])}"
            case "type":
                t = p["type"]
                return f"must be {t}" if isinstance(t, str) else f"must be either {' or '.join(t)}"
            case "uniqueItems":
                return "must not have duplicate items"
            case _:  # pragma: no cover - every keyword above is the complete set
                return "an unknown validation error occurred"

    def line(self) -> str:
        """Pi's ``formatValidationPath(error): message``."""
        base = self.path[1:] if self.path.startswith("/") else self.path
        base = base.replace("/", ".")
        if self.keyword == "required":
            missing = self.params["requiredProperties"]
            if missing and missing[0]:
                return f"{f'{base}.' if base else ''}{missing[0]}: {self.message()}"
        return f"{base or 'root'}: {self.message()}"


class _Sink:
    """An error context: the root one keeps at most ``MAX_ERRORS``, nested ones all."""

    __slots__ = ("cap", "errors")

    def __init__(self, cap: int | None = None) -> None:
        self.errors: list[_Error] = []
        self.cap = cap

    def add(self, error: _Error) -> bool:
        if self.cap is None or len(self.errors) < self.cap:
            self.errors.append(error)
        return False

    def add_new(self, keyword: str, path: str, params: dict[str, Any]) -> bool:
        return self.add(_Error(keyword, path, params))


def node_errors(node: _Node, v: Any, path: str, sink: _Sink) -> bool:
    if node.fixed is not None:
        return node.fixed or sink.add_new("boolean", path, {})
    ok = True
    if node.type_names is not None and not any(_type_ok(t, v) for t in node.type_names):
        ok = sink.add_new("type", path, {"type": node.type_param})
    if node.obj and isinstance(v, dict):
        ok = _errors_object(node, v, path, sink) and ok
    if node.arr and isinstance(v, list):
        ok = _errors_array(node, v, path, sink) and ok
    if node.str_ and isinstance(v, str):
        ok = _errors_string(node, v, path, sink) and ok
    if node.num and _is_number(v):
        ok = _errors_number(node, v, path, sink) and ok
    if node.ref is not None:
        nested = _Sink()
        result = node.ref_target is not None and node_errors(node.ref_target, v, path, nested)
        if not result:
            for e in nested.errors:
                sink.add(e)
        ok = result and ok
    if node.const is not None and not _const_ok(node.const[0], v):
        ok = sink.add_new("const", path, {"allowedValue": node.const[0]})
    if node.enum is not None and not any(_const_ok(o, v) for o in node.enum):
        ok = sink.add_new("enum", path, {"allowedValues": node.enum})
    if node.if_ is not None:
        assert node.then is not None
        assert node.else_ is not None
        if node_errors(node.if_, v, path, _Sink()):
            res = node_errors(node.then, v, path, _Sink()) or sink.add_new(
                "if", path, {"failingKeyword": "then"}
            )
        else:
            res = node_errors(node.else_, v, path, sink) or sink.add_new(
                "if", path, {"failingKeyword": "else"}
            )
        ok = res and ok
    if node.not_ is not None and node.not_.check(v, jit=False):
        ok = sink.add_new("not", path, {})
    if node.all_of is not None:
        failed = [s for s in (_member_errors(n, v, path) for n in node.all_of) if s]
        if failed:
            for nested_sink in failed:
                for e in nested_sink.errors:
                    sink.add(e)
            ok = False
    if node.any_of is not None:
        results = [_member_errors(n, v, path) for n in node.any_of]
        if all(r is not None for r in results):
            for r in results:
                assert r is not None
                for e in r.errors:
                    sink.add(e)
            ok = sink.add_new("anyOf", path, {})
    if node.one_of is not None:
        results = [_member_errors(n, v, path) for n in node.one_of]
        passing = [i for i, r in enumerate(results) if r is None]
        if len(passing) != 1:
            if not passing:
                for r in results:
                    assert r is not None
                    for e in r.errors:
                        sink.add(e)
            ok = sink.add_new("oneOf", path, {"passingSchemas": passing})
    return ok


def _member_errors(node: _Node, v: Any, path: str) -> _Sink | None:
    """A member's errors, or None when it passes."""
    nested = _Sink()
    return None if node_errors(node, v, path, nested) else nested


def _errors_object(node: _Node, v: dict[str, Any], path: str, sink: _Sink) -> bool:
    work = current_work()
    if work is not None:
        work.spend(len(v))
    ok = True
    if node.required is not None:
        missing = [k for k in node.required if not _has_key(v, k)]
        if missing:
            ok = sink.add_new("required", path, {"requiredProperties": missing})
    if node.addl is not None:
        extra: list[str] = []
        for k, x in v.items():
            if k in node.addl_keys or any(p.search(k) for p in node.addl_patterns):
                continue
            if not node_errors(node.addl, x, f"{path}/{k}", _Sink()):
                extra.append(k)
        if extra:
            ok = sink.add_new("additionalProperties", path, {"additionalProperties": extra})
    if node.deps is not None:
        for k, dep in node.deps:
            if not _has_key(v, k):
                continue
            if isinstance(dep, list):
                for d in dep:
                    if not _has_key(v, d):
                        ok = sink.add_new(
                            "dependencies", path, {"property": k, "dependencies": dep}
                        )
                        break
            else:
                ok = node_errors(dep, v, path, sink) and ok
    if node.dep_req is not None:
        for k, needed in node.dep_req:
            if _has_key(v, k):
                for d in needed:
                    if not _has_key(v, d):
                        ok = sink.add_new(
                            "dependentRequired", path, {"property": k, "dependencies": needed}
                        )
    if node.dep_schemas is not None:
        for k, n in node.dep_schemas:
            if _has_key(v, k):
                ok = node_errors(n, v, path, sink) and ok
    if node.pat_props is not None:
        for _, regex, n in node.pat_props:
            for k, x in list(v.items()):
                if regex is not None and regex.search(k):
                    ok = node_errors(n, x, f"{path}/{k}", sink) and ok
    if node.props is not None:
        for k, n in node.props:
            x = _js_get(v, k)
            if k not in node.required_set and x is _UNDEF:
                continue
            if not _has_key(v, k):
                continue
            ok = node_errors(n, x, f"{path}/{k}", sink) and ok
    if node.prop_names is not None:
        bad = [k for k in v if not node_errors(node.prop_names, k, f"{path}/{k}", _Sink())]
        if bad:
            ok = sink.add_new("propertyNames", path, {"propertyNames": bad})
    if node.min_props is not None and not len(v) >= node.min_props:
        ok = sink.add_new("minProperties", path, {"limit": node.min_props})
    if node.max_props is not None and not len(v) <= node.max_props:
        ok = sink.add_new("maxProperties", path, {"limit": node.max_props})
    return ok


def _errors_array(node: _Node, v: list[Any], path: str, sink: _Sink) -> bool:
    work = current_work()
    if work is not None:
        work.spend(len(v))
    ok = True
    addl_items = node.arr[0]
    if addl_items is not None:
        assert node.items_sized is not None
        for i in range(len(node.items_sized), len(v)):
            if not node_errors(addl_items, v[i], f"{path}/{i}", sink):
                ok = False
                break  # Array.prototype.every
    if (
        node.contains is not None
        and node.contains_valid
        and not (v and any(node.contains.check(x, jit=False) for x in v))
    ):
        ok = sink.add_new("contains", path, {"minContains": 1})
    if node.items_sized is not None:
        for i, n in enumerate(node.items_sized[: len(v)]):
            ok = node_errors(n, v[i], f"{path}/{i}", sink) and ok
    elif node.items is not None:
        offset = len(node.prefix) if node.prefix is not None else 0
        for i in range(offset, len(v)):
            ok = node_errors(node.items, v[i], f"{path}/{i}", sink) and ok
    if node.contains is not None and node.max_contains is not None:
        count = sum(1 for x in v if node.contains.check(x, jit=False))
        if not count <= node.max_contains:
            min_contains = node.min_contains if node.min_contains is not None else 1
            ok = sink.add_new(
                "contains",
                path,
                {"minContains": min_contains, "maxContains": node.max_contains},
            )
    if node.max_items is not None and not len(v) <= node.max_items:
        ok = sink.add_new("maxItems", path, {"limit": node.max_items})
    if node.contains is not None and node.min_contains is not None:
        count = sum(1 for x in v if node.contains.check(x, jit=False))
        if not count >= node.min_contains:
            ok = sink.add_new("contains", path, {"minContains": node.min_contains})
    if node.min_items is not None and not len(v) >= node.min_items:
        ok = sink.add_new("minItems", path, {"limit": node.min_items})
    if node.prefix is not None and v:
        for i, n in enumerate(node.prefix[: len(v)]):
            ok = node_errors(n, v[i], f"{path}/{i}", sink) and ok
    if node.unique:
        dups = _duplicates(v)
        if dups:
            ok = sink.add_new("uniqueItems", path, {"duplicateItems": dups})
    return ok


def _errors_string(node: _Node, v: str, path: str, sink: _Sink) -> bool:
    ok = True
    if node.max_len is not None and not _string_length(v) <= node.max_len:
        ok = sink.add_new("maxLength", path, {"limit": node.max_len})
    if node.min_len is not None and node.min_len != 0 and not _string_length(v) >= node.min_len:
        ok = sink.add_new("minLength", path, {"limit": node.min_len})
    if node.fmt is not None and not _format_test(node.fmt, v):
        ok = sink.add_new("format", path, {"format": node.fmt})
    if node.pattern is not None and (node.pattern_re is None or node.pattern_re.search(v) is None):
        ok = sink.add_new("pattern", path, {"pattern": node.pattern})
    return ok


def _errors_number(node: _Node, v: float, path: str, sink: _Sink) -> bool:
    ok = True
    if node.excl_max is not None and not v < node.excl_max:
        ok = sink.add_new("exclusiveMaximum", path, {"comparison": "<", "limit": node.excl_max})
    if node.excl_min is not None and not v > node.excl_min:
        ok = sink.add_new("exclusiveMinimum", path, {"comparison": ">", "limit": node.excl_min})
    if node.maximum is not None and not v <= node.maximum:
        ok = sink.add_new("maximum", path, {"comparison": "<=", "limit": node.maximum})
    if node.minimum is not None and not v >= node.minimum:
        ok = sink.add_new("minimum", path, {"comparison": ">=", "limit": node.minimum})
    if node.multiple_of is not None and not _is_multiple_of(v, node.multiple_of):
        ok = sink.add_new("multipleOf", path, {"multipleOf": node.multiple_of})
    return ok
