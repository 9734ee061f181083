"""TypeBox's ``Check``: the schema compiled into nodes, and the value checked.

A ``_Node`` reads one schema object's keywords once, through TypeBox's guards (a
keyword with a value of the wrong JSON type is ignored, as TypeBox ignores it), and
links to its sub-schemas' nodes; ``$ref`` is resolved as TypeBox's ``Stack.Ref`` /
``Pointer.Get`` do (relative to ``$id`` bases). ``_Node.check`` is the compiled check
``validator.Check`` runs (``jit=True``) or the interpreted one TypeBox's ``Errors()``
uses inside ``not`` and ``contains`` (``jit=False``): they differ for
``additionalProperties: false``, and Pi's result depends on which one runs where.
"""

from __future__ import annotations

import contextlib
import re
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any, Final

from ._formats import _format_test
from ._jsregex import _js_regex, _JSRegexError, _UnsupportedRegex, _v8_regex_message
from ._jsvalues import (
    _UNDEF,
    _UNSAFE_KEYS,
    _deep_equal,
    _has_key,
    _hash_into,
    _is_array_index,
    _is_integer,
    _is_multiple_of,
    _is_number,
    _is_value_like,
    _js_get,
    _js_key_order,
    _JSFunction,
    _strict_equal,
    _string_length,
)
from ._work import current_work


def _is_schema(v: object) -> bool:
    return isinstance(v, dict | bool)


def _all_schemas(v: object) -> bool:
    return isinstance(v, list) and all(_is_schema(x) for x in v)


def _str_list(v: object) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _num_kw(schema: dict[str, Any], key: str) -> float | None:
    v = schema.get(key, _UNDEF)
    return v if _is_number(v) else None


_TYPE_CHECKS: Final[dict[str, Callable[[Any], bool]]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "boolean": lambda v: isinstance(v, bool),
    "integer": _is_integer,
    "number": _is_number,
    "null": lambda v: v is None,
    "string": lambda v: isinstance(v, str),
    "bigint": lambda v: False,
    "symbol": lambda v: False,
    "constructor": lambda v: isinstance(v, _JSFunction),
    "function": lambda v: isinstance(v, _JSFunction),
    "undefined": lambda v: v is _UNDEF,
    "void": lambda v: v is _UNDEF,
}


def _type_ok(name: str, v: object) -> bool:
    check = _TYPE_CHECKS.get(name)
    return True if check is None else check(v)


class _Compiler:
    """Compiles the schema nodes reachable from one root (TypeBox ``Compile(root)``)."""

    def __init__(self, root: object) -> None:
        self.root = root
        self.nodes: dict[tuple[int, int], _Node] = {}
        self.error: str | None = None  # V8's message for the first invalid pattern
        self.unsupported: str | None = None
        self.top = self.node(root, root)

    def node(self, schema: object, base: object) -> _Node:
        if schema is True:
            return _TRUE
        if schema is False:
            return _FALSE
        key = (id(schema), id(base))
        node = self.nodes.get(key)
        if node is None:
            node = _Node.__new__(_Node)
            self.nodes[key] = node
            node.setup(self, schema, base)
        return node

    def regex(self, pattern: str, *, unicode: bool) -> re.Pattern[str] | None:
        try:
            return _js_regex(pattern, unicode=unicode)
        except _JSRegexError as exc:
            if self.error is None:
                self.error = _v8_regex_message(pattern, "u" if unicode else "", exc.args[0])
        except _UnsupportedRegex as exc:
            if self.unsupported is None:
                self.unsupported = (
                    f"pitrio cannot evaluate the JavaScript regular expression {pattern!r}: "
                    f"{exc.args[0]} is not supported"
                )
        return None


class _Node:
    """One schema object, its keywords read once (TypeBox's guards decide which count)."""

    __slots__ = (
        "addl",
        "addl_fast",
        "addl_keys",
        "addl_patterns",
        "all_of",
        "any_of",
        "arr",
        "const",
        "contains",
        "contains_valid",
        "dep_req",
        "dep_schemas",
        "deps",
        "else_",
        "enum",
        "excl_max",
        "excl_min",
        "fixed",
        "fmt",
        "if_",
        "items",
        "items_sized",
        "max_contains",
        "max_items",
        "max_len",
        "max_props",
        "maximum",
        "min_contains",
        "min_items",
        "min_len",
        "min_props",
        "minimum",
        "multiple_of",
        "not_",
        "num",
        "obj",
        "one_of",
        "pat_props",
        "pattern",
        "pattern_re",
        "prefix",
        "prop_names",
        "props",
        "ref",
        "ref_base",
        "ref_target",
        "required",
        "required_set",
        "schema",
        "str_",
        "then",
        "type_names",
        "type_param",
        "unique",
    )  # fmt: skip

    fixed: bool | None  # a boolean schema
    schema: Any

    def setup(self, comp: _Compiler, s: Any, base: object) -> None:
        self.fixed = None
        self.schema = s
        if not isinstance(s, dict):  # not a schema: TypeBox finds no keyword in it
            s = {}
        child_base = s if isinstance(s.get("$id"), str) else base
        node = comp.node
        t = s.get("type", _UNDEF)
        if isinstance(t, str):
            self.type_names: tuple[str, ...] | None = (t,)
        elif _str_list(t):
            self.type_names = tuple(t)
        else:
            self.type_names = None
        self.type_param = t
        # ---- object keywords, in TypeBox's order
        self.required = s["required"] if _str_list(s.get("required")) else None
        self.required_set = frozenset(self.required or ())
        addl = s.get("additionalProperties", _UNDEF)
        props = s.get("properties", _UNDEF)
        props_valid = isinstance(props, dict) and all(_is_schema(v) for v in props.values())
        pat_props = s.get("patternProperties", _UNDEF)
        pat_valid = isinstance(pat_props, dict) and all(_is_schema(v) for v in pat_props.values())
        self.addl = None
        self.addl_fast = False
        self.addl_keys: frozenset[str] = frozenset()
        self.addl_patterns: list[re.Pattern[str]] = []
        if _is_schema(addl):
            self.addl_fast = (
                self.required is not None
                and props_valid
                and not pat_valid
                and addl is False
                and len(props) == len(self.required)
            )
            if self.addl_fast:
                self.addl = node(addl, child_base)
            else:
                if pat_valid:
                    combined = (
                        "|".join([*pat_props, *(_escape_js(k) for k in props)])
                        if (props_valid)
                        else "|".join(pat_props)
                    )
                    comp.regex(f"({combined})" if combined else "(?!)", unicode=False)
                    for p in pat_props:
                        # A pattern that does not compile fails below, with the `u` flag.
                        with contextlib.suppress(_JSRegexError, _UnsupportedRegex):
                            self.addl_patterns.append(_js_regex(p, unicode=False))
                self.addl = node(addl, child_base)
            if props_valid:
                self.addl_keys = frozenset(props)
        deps = s.get("dependencies", _UNDEF)
        self.deps: list[tuple[str, list[str] | _Node]] | None = None
        if isinstance(deps, dict) and all(_is_schema(v) or _str_list(v) for v in deps.values()):
            self.deps = [
                (k, v if isinstance(v, list) else node(v, child_base)) for k, v in _js_items(deps)
            ]
        dep_req = s.get("dependentRequired", _UNDEF)
        self.dep_req: list[tuple[str, list[str]]] | None = None
        if isinstance(dep_req, dict) and all(_str_list(v) for v in dep_req.values()):
            self.dep_req = _js_items(dep_req)
        dep_schemas = s.get("dependentSchemas", _UNDEF)
        self.dep_schemas: list[tuple[str, _Node]] | None = None
        if isinstance(dep_schemas, dict) and all(_is_schema(v) for v in dep_schemas.values()):
            self.dep_schemas = [(k, node(v, child_base)) for k, v in _js_items(dep_schemas)]
        self.pat_props: list[tuple[str, re.Pattern[str] | None, _Node]] | None = None
        if pat_valid:
            self.pat_props = []
            for p, sub in _js_items(pat_props):
                compiled = comp.regex(p, unicode=True)
                self.pat_props.append((p, compiled, node(sub, child_base)))
        self.props: list[tuple[str, _Node]] | None = None
        if props_valid:
            self.props = [(k, node(v, child_base)) for k, v in _js_items(props)]
        prop_names = s.get("propertyNames", _UNDEF)
        self.prop_names = node(prop_names, child_base) if _is_schema(prop_names) else None
        self.min_props = _num_kw(s, "minProperties")
        self.max_props = _num_kw(s, "maxProperties")
        self.obj = any(
            x is not None
            for x in (
                self.required, self.deps, self.dep_req, self.dep_schemas, self.pat_props,
                self.props, self.prop_names, self.min_props, self.max_props,
            )
        ) or _is_schema(addl)  # fmt: skip
        # ---- array keywords
        items = s.get("items", _UNDEF)
        self.items_sized: list[_Node] | None = None
        self.items: _Node | None = None
        addl_items = s.get("additionalItems", _UNDEF)
        arr_addl = None
        if _all_schemas(items) and _is_schema(addl_items):
            arr_addl = addl_items
        self.contains = None
        contains = s.get("contains", _UNDEF)
        self.min_contains = _num_kw(s, "minContains")
        self.max_contains = _num_kw(s, "maxContains")
        self.contains_valid = not (self.min_contains is not None and self.min_contains == 0)
        # additionalItems is built before contains and items
        self.arr: tuple[Any, ...] = ()
        addl_items_node = node(arr_addl, child_base) if arr_addl is not None else None
        if _is_schema(contains):
            self.contains = node(contains, child_base)
        if _all_schemas(items):
            self.items_sized = [node(x, child_base) for x in items]
        elif _is_schema(items):
            self.items = node(items, child_base)
        self.max_items = _num_kw(s, "maxItems")
        self.min_items = _num_kw(s, "minItems")
        prefix = s.get("prefixItems", _UNDEF)
        self.prefix = [node(x, child_base) for x in prefix] if _all_schemas(prefix) else None
        self.unique = s.get("uniqueItems") is True
        self.arr = (addl_items_node,)
        has_arr = any(
            x is not None
            for x in (
                addl_items_node, self.contains, self.items_sized, self.items, self.max_items,
                self.min_items, self.prefix, self.max_contains, self.min_contains,
            )
        ) or isinstance(s.get("uniqueItems"), bool)  # fmt: skip
        if not has_arr:
            self.arr = ()
        # ---- string keywords
        self.max_len = _num_kw(s, "maxLength")
        self.min_len = _num_kw(s, "minLength")
        fmt = s.get("format", _UNDEF)
        self.fmt = fmt if isinstance(fmt, str) else None
        pattern = s.get("pattern", _UNDEF)
        self.pattern = pattern if isinstance(pattern, str) else None
        self.pattern_re = comp.regex(pattern, unicode=True) if self.pattern is not None else None
        self.str_ = any(x is not None for x in (self.max_len, self.min_len, self.fmt, self.pattern))
        # ---- number keywords
        self.excl_max = _num_kw(s, "exclusiveMaximum")
        self.excl_min = _num_kw(s, "exclusiveMinimum")
        self.maximum = _num_kw(s, "maximum")
        self.minimum = _num_kw(s, "minimum")
        self.multiple_of = _num_kw(s, "multipleOf")
        self.num = any(
            x is not None
            for x in (self.excl_max, self.excl_min, self.maximum, self.minimum, self.multiple_of)
        )
        # ---- the rest
        ref = s.get("$ref", _UNDEF)
        self.ref = ref if isinstance(ref, str) else None
        self.ref_base = child_base
        self.ref_target: _Node | None = None
        if self.ref is not None:
            target = _stack_ref(comp.root, child_base, self.ref)
            if target is None or target is _UNDEF:
                target = False
            self.ref_target = node(target, child_base) if _is_schema(target) else None
        self.const = (s["const"],) if "const" in s else None
        self.enum = s["enum"] if isinstance(s.get("enum"), list) else None
        if_ = s.get("if", _UNDEF)
        self.if_ = self.then = self.else_ = None
        if _is_schema(if_):
            self.if_ = node(if_, child_base)
            then = s.get("then", True)
            else_ = s.get("else", True)
            self.then = node(then if _is_schema(then) else True, child_base)
            self.else_ = node(else_ if _is_schema(else_) else True, child_base)
        not_ = s.get("not", _UNDEF)
        self.not_ = node(not_, child_base) if _is_schema(not_) else None
        self.all_of = (
            [node(x, child_base) for x in s["allOf"]] if _all_schemas(s.get("allOf")) else None
        )
        self.any_of = (
            [node(x, child_base) for x in s["anyOf"]] if _all_schemas(s.get("anyOf")) else None
        )
        self.one_of = (
            [node(x, child_base) for x in s["oneOf"]] if _all_schemas(s.get("oneOf")) else None
        )

    # ------------------------------------------------------------------ Check
    def check(self, v: Any, jit: bool = True) -> bool:
        """TypeBox's check: the compiled one (``jit``, what ``validator.Check`` runs) or
        the interpreted one that ``Errors()`` uses inside ``not`` and ``contains``; they
        differ in the compiled shortcut for ``additionalProperties: false``."""
        if self.fixed is not None:
            return self.fixed
        if self.type_names is not None and not any(_type_ok(t, v) for t in self.type_names):
            return False
        if self.obj and isinstance(v, dict) and not self._check_object(v, jit):
            return False
        if self.arr and isinstance(v, list) and not self._check_array(v, jit):
            return False
        if self.str_ and isinstance(v, str) and not self._check_string(v):
            return False
        if self.num and _is_number(v) and not self._check_number(v):
            return False
        if self.ref is not None and (self.ref_target is None or not self.ref_target.check(v, jit)):
            return False
        if self.const is not None and not _const_ok(self.const[0], v):
            return False
        if self.enum is not None and not any(_const_ok(o, v) for o in self.enum):
            return False
        if self.if_ is not None:
            assert self.then is not None
            assert self.else_ is not None
            branch = self.then if self.if_.check(v, jit) else self.else_
            if not branch.check(v, jit):
                return False
        if self.not_ is not None and self.not_.check(v, jit):
            return False
        if self.all_of is not None and not all(n.check(v, jit) for n in self.all_of):
            return False
        if self.any_of is not None and not any(n.check(v, jit) for n in self.any_of):
            return False
        return self.one_of is None or sum(1 for n in self.one_of if n.check(v, jit)) == 1

    def _check_object(self, v: dict[str, Any], jit: bool) -> bool:
        work = current_work()
        if work is not None:
            work.spend(len(v))
        if self.required is not None and not all(_has_key(v, k) for k in self.required):
            return False
        if self.addl_fast and jit:
            assert self.required is not None
            if len(v) != len(self.required):
                return False
        elif self.addl is not None:
            for k, x in v.items():
                if k in self.addl_keys or any(p.search(k) for p in self.addl_patterns):
                    continue
                if not self.addl.check(x, jit):
                    return False
        if self.deps is not None and v:
            for k, dep in self.deps:
                if _has_key(v, k) and not (
                    all(_has_key(v, d) for d in dep) if isinstance(dep, list) else dep.check(v, jit)
                ):
                    return False
        if self.dep_req is not None and v:
            for k, needed in self.dep_req:
                if _has_key(v, k) and not all(_has_key(v, d) for d in needed):
                    return False
        if self.dep_schemas is not None and v:
            for k, n in self.dep_schemas:
                if _has_key(v, k) and not n.check(v, jit):
                    return False
        if self.pat_props is not None:
            for _, regex, n in self.pat_props:
                for k, x in v.items():
                    if regex is not None and regex.search(k) and not n.check(x, jit):
                        return False
        if self.props is not None:
            required = self.required_set
            for k, n in self.props:
                if k in required:
                    if not n.check(_js_get(v, k), jit):
                        return False
                    continue
                x = _js_get(v, k)
                if x is _UNDEF or not _has_key(v, k):
                    continue
                if not n.check(x, jit):
                    return False
        if self.prop_names is not None and not all(self.prop_names.check(k, jit) for k in v):
            return False
        if self.min_props is not None and not len(v) >= self.min_props:
            return False
        return self.max_props is None or len(v) <= self.max_props

    def _check_array(self, v: list[Any], jit: bool) -> bool:
        work = current_work()
        if work is not None:
            work.spend(len(v))
        addl_items = self.arr[0]
        if addl_items is not None:
            assert self.items_sized is not None
            start = len(self.items_sized)
            if not all(addl_items.check(x, jit) for x in v[start:]):
                return False
        if self.contains is not None:
            if self.contains_valid and not (v and any(self.contains.check(x, jit) for x in v)):
                return False
            if self.max_contains is not None or self.min_contains is not None:
                count = sum(1 for x in v if self.contains.check(x, jit))
                if self.max_contains is not None and not count <= self.max_contains:
                    return False
                if self.min_contains is not None and not count >= self.min_contains:
                    return False
        if self.items_sized is not None:
            if not all(n.check(x, jit) for n, x in zip(self.items_sized, v, strict=False)):
                return False
        elif self.items is not None:
            offset = len(self.prefix) if self.prefix is not None else 0
            if not all(self.items.check(x, jit) for x in v[offset:]):
                return False
        if self.max_items is not None and not len(v) <= self.max_items:
            return False
        if self.min_items is not None and not len(v) >= self.min_items:
            return False
        if (
            self.prefix is not None
            and v
            and not all(n.check(x, jit) for n, x in zip(self.prefix, v, strict=False))
        ):
            return False
        return not self.unique or not _duplicates(v)

    def _check_string(self, v: str) -> bool:
        if self.max_len is not None and not _string_length(v) <= self.max_len:
            return False
        if self.min_len is not None and self.min_len != 0 and not _string_length(v) >= self.min_len:
            return False
        if self.fmt is not None and not _format_test(self.fmt, v):
            return False
        return self.pattern_re is None or self.pattern_re.search(v) is not None

    def _check_number(self, v: float) -> bool:
        if self.excl_max is not None and not v < self.excl_max:
            return False
        if self.excl_min is not None and not v > self.excl_min:
            return False
        if self.maximum is not None and not v <= self.maximum:
            return False
        if self.minimum is not None and not v >= self.minimum:
            return False
        return self.multiple_of is None or _is_multiple_of(v, self.multiple_of)


_TRUE: Final = _Node.__new__(_Node)
_TRUE.fixed = True
_FALSE: Final = _Node.__new__(_Node)
_FALSE.fixed = False


def _const_ok(expected: object, v: object) -> bool:
    if _is_value_like(expected):
        return _strict_equal(v, expected)
    return _deep_equal(v, expected)


def _duplicates(v: list[Any]) -> list[int]:
    seen: set[bytes] = set()
    dups: list[int] = []
    for i, x in enumerate(v):
        buf = bytearray()
        _hash_into(x, buf)
        h = bytes(buf)
        if h in seen:
            dups.append(i)
        seen.add(h)
    return dups


def _js_items(d: dict[str, Any]) -> list[tuple[str, Any]]:
    """``Object.entries(d)`` (JavaScript key order)."""
    return [(k, d[k]) for k in _js_key_order(list(d))]


def _escape_js(key: str) -> str:
    return "^" + re.sub(r"[.*+?^${}()|\[\]\\]", lambda m: "\\" + m.group(0), key) + "$"


# ---- $ref resolution (TypeBox Stack.Ref / Resolve.Ref / Pointer.Get)

_DEFAULT_BASE: Final = "http://unknown/"


def _url_join(base: str, ref: str) -> str:
    if ref.startswith("#"):
        return base.partition("#")[0] + ref
    return urllib.parse.urljoin(base, ref)


def _url_hash(url: str) -> str:
    _, sep, fragment = url.partition("#")
    return "#" + fragment if sep and fragment else ""


def _url_path(url: str) -> str:
    parts = urllib.parse.urlsplit(url.partition("#")[0])
    return parts.path or "/"


def _stack_ref(root: object, base: object, ref: str) -> object:
    """TypeBox ``Stack.Ref``: the schema a ``$ref`` names, or ``_UNDEF``."""
    return _resolve_ref(root if not ref.startswith("#") else base, ref)


def _resolve_ref(schema: object, ref: str) -> object:
    initial = _DEFAULT_BASE
    if isinstance(schema, dict) and isinstance(schema.get("$id"), str):
        initial = _url_join(initial, schema["$id"])
    return _from_value(schema, initial, _url_join(initial, ref))


def _from_value(schema: object, base: str, ref: str) -> object:
    if isinstance(schema, dict):
        if isinstance(schema.get("$id"), str):
            base = _url_join(base, schema["$id"])
        found = _match(schema, base, ref)
        if found is not _UNDEF:
            return found
        children: Iterator[object] = iter([schema[k] for k in _js_key_order(list(schema))])
    elif isinstance(schema, list):
        children = iter(schema)
    else:
        return _UNDEF
    result: object = _UNDEF
    for child in children:
        found = _from_value(child, base, ref)
        if found is not _UNDEF:
            result = found
    return result


def _match(schema: dict[str, Any], base: str, ref: str) -> object:
    if isinstance(schema.get("$id"), str):
        if schema["$id"] == _url_hash(ref):
            return schema
        if _url_path(_url_join(base, schema["$id"])) == _url_path(ref):
            return _match_hash(schema, ref) if _url_hash(ref).startswith("#") else schema
    for key in ("$anchor", "$dynamicAnchor"):
        anchor = schema.get(key)
        if isinstance(anchor, str) and _url_join(base, "#" + anchor) == ref:
            return schema
    return _match_hash(schema, ref)


def _match_hash(schema: dict[str, Any], ref: str) -> object:
    if ref.endswith("#"):
        return schema
    fragment = _url_hash(ref)
    if not fragment.startswith("#"):
        return _UNDEF
    pointer = urllib.parse.unquote(fragment[1:])
    if not pointer.startswith("/"):
        return _UNDEF
    return _pointer_get(schema, pointer)


def _pointer_get(value: object, pointer: str) -> object:
    indices = [p.replace("~1", "/").replace("~0", "~") for p in pointer.split("/")]
    if indices and indices[0] == "":
        indices = indices[1:]
    for index in indices:
        if index in _UNSAFE_KEYS:
            return _UNDEF
        if isinstance(value, dict):
            value = value.get(index, _UNDEF)
        elif isinstance(value, list) and _is_array_index(index) and int(index) < len(value):
            value = value[int(index)]
        else:
            return _UNDEF
    return value
