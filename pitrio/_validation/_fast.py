"""The fast path: a :mod:`fastjsonschema` validator equivalent to TypeBox's ``Check``.

Most calls are valid; checking them with the generated code of fastjsonschema is much
cheaper than walking ``_Node`` objects. The schema is rewritten first so that its
meaning for JSON values is exactly TypeBox's: string keywords (``minLength``,
``pattern``, ``format``, ...) become one custom format that applies TypeBox's grapheme
lengths, JavaScript regular expressions and formats; numeric keywords with a
non-number value are dropped as TypeBox ignores them. A schema whose meaning cannot be
kept (``multipleOf``, ``uniqueItems``, ``patternProperties``, non-scalar
``enum``/``const``, ...) gets no fast validator and is checked by :mod:`._typebox`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from ._formats import _format_test
from ._jsregex import _js_regex, _JSRegexError, _UnsupportedRegex
from ._jsvalues import _PROTO_VALUES, _UNDEF, _is_number, _string_length
from ._typebox import _all_schemas, _is_schema, _num_kw, _pointer_get, _str_list

_FAST_NUMBER_KEYWORDS: Final = (
    "minItems", "maxItems", "minProperties", "maxProperties",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
)  # fmt: skip
_FAST_UNSUPPORTED: Final = frozenset(
    [
        "prefixItems",
        "dependentRequired",
        "dependentSchemas",
        "unevaluatedItems",
        "unevaluatedProperties",
        "$recursiveRef",
        "$dynamicRef",
        "$id",
        "$anchor",
        "$dynamicAnchor",
        "$recursiveAnchor",
        "minContains",
        "maxContains",
        "patternProperties",
        "multipleOf",
        "~kind",
        "~refine",
    ]
)


class _NotFast(Exception):
    pass


class _FastRewriter:
    """Rewrites a schema for fastjsonschema (draft-07) so that, for JSON values with
    finite numbers, it accepts exactly what TypeBox's Check accepts; raises
    :class:`_NotFast` when that is not possible."""

    def __init__(self, root: dict[str, Any] | bool) -> None:
        self.root = root
        self.formats: dict[str, Callable[[str], bool]] = {}
        self.memo: dict[int, Any] = {}
        self.refs: list[tuple[str, object]] = []

    def run(self) -> Any:
        out = self.rewrite(self.root)
        for pointer, target in self.refs:
            if _pointer_get(out, pointer) is not self.memo.get(id(target), _UNDEF):
                raise _NotFast
        return out

    def rewrite(self, s: object) -> Any:
        if isinstance(s, bool):
            return s
        if not isinstance(s, dict):
            raise _NotFast
        done = self.memo.get(id(s))
        if done is not None:
            return done
        out: dict[str, Any] = {}
        self.memo[id(s)] = out
        if any(k in s for k in _FAST_UNSUPPORTED):
            raise _NotFast
        if "$ref" in s and isinstance(s["$ref"], str):
            self._ref(s, out)
        t = s.get("type", _UNDEF)
        if isinstance(t, str) or _str_list(t):
            names = [t] if isinstance(t, str) else t
            if not all(n in ("object", "array", "boolean", "integer", "number", "null", "string")
                       for n in names):  # fmt: skip
                raise _NotFast
            out["type"] = t
        props = s.get("properties", _UNDEF)
        if isinstance(props, dict) and all(_is_schema(v) for v in props.values()):
            if any(k in _PROTO_VALUES for k in props):
                raise _NotFast
            out["properties"] = {k: self.rewrite(v) for k, v in props.items()}
        required = s.get("required", _UNDEF)
        if _str_list(required):
            if len(set(required)) != len(required):
                raise _NotFast
            out["required"] = list(required)
        for key in ("additionalProperties", "not", "propertyNames", "contains"):
            sub = s.get(key, _UNDEF)
            if _is_schema(sub):
                out[key] = self.rewrite(sub)
            elif key == "propertyNames" and isinstance(sub, list):
                raise _NotFast
        items = s.get("items", _UNDEF)
        if _all_schemas(items):
            out["items"] = [self.rewrite(x) for x in items]
            if _is_schema(s.get("additionalItems", _UNDEF)):
                out["additionalItems"] = self.rewrite(s["additionalItems"])
        elif _is_schema(items):
            out["items"] = self.rewrite(items)
        for key in _FAST_NUMBER_KEYWORDS:
            if _num_kw(s, key) is not None:
                out[key] = s[key]
        if s.get("uniqueItems") is True:
            raise _NotFast
        for key in ("enum", "const"):
            if key not in s:
                continue
            values = s[key]
            if key == "enum" and not isinstance(values, list):
                continue
            for value in values if key == "enum" else [values]:
                if not (value is None or isinstance(value, bool | str) or _is_number(value)):
                    raise _NotFast
            out[key] = values
        for key in ("allOf", "anyOf", "oneOf"):
            if _all_schemas(s.get(key)):
                out[key] = [self.rewrite(x) for x in s[key]]
        if _is_schema(s.get("if", _UNDEF)):
            out["if"] = self.rewrite(s["if"])
            for key in ("then", "else"):
                if _is_schema(s.get(key, _UNDEF)):
                    out[key] = self.rewrite(s[key])
        deps = s.get("dependencies", _UNDEF)
        if isinstance(deps, dict) and all(_is_schema(v) or _str_list(v) for v in deps.values()):
            out["dependencies"] = {
                k: list(v) if isinstance(v, list) else self.rewrite(v) for k, v in deps.items()
            }
        for key in ("definitions", "$defs"):
            defs = s.get(key, _UNDEF)
            if isinstance(defs, dict):
                out[key] = {k: self.rewrite(v) for k, v in defs.items() if _is_schema(v)}
        self._strings(s, out)
        return out

    def _ref(self, s: dict[str, Any], out: dict[str, Any]) -> None:
        ref = s["$ref"]
        validating = set(s) & {
            "type", "properties", "required", "additionalProperties", "not", "propertyNames",
            "contains", "items", "additionalItems", "uniqueItems", "enum", "const", "allOf",
            "anyOf", "oneOf", "if", "dependencies", "minLength", "maxLength", "pattern", "format",
            *_FAST_NUMBER_KEYWORDS,
        }  # fmt: skip
        if validating or not ref.startswith("#") or "%" in ref:
            raise _NotFast
        target: object = self.root
        if ref != "#":
            if not ref.startswith("#/"):
                raise _NotFast
            target = _pointer_get(self.root, ref[1:])
            if not _is_schema(target):
                raise _NotFast
        out["$ref"] = ref
        self.refs.append((ref[1:], target))

    def _strings(self, s: dict[str, Any], out: dict[str, Any]) -> None:
        max_len = _num_kw(s, "maxLength")
        min_len = _num_kw(s, "minLength")
        fmt = s.get("format") if isinstance(s.get("format"), str) else None
        pattern = s.get("pattern") if isinstance(s.get("pattern"), str) else None
        if max_len is None and min_len is None and fmt is None and pattern is None:
            return
        regex = None
        if pattern is not None:
            try:
                regex = _js_regex(pattern)
            except (_JSRegexError, _UnsupportedRegex) as exc:
                raise _NotFast from exc

        def check(v: str) -> bool:
            if max_len is not None and not _string_length(v) <= max_len:
                return False
            if min_len is not None and min_len != 0 and not _string_length(v) >= min_len:
                return False
            if fmt is not None and not _format_test(fmt, v):
                return False
            return regex is None or regex.search(v) is not None

        name = f"pitrio-string-{len(self.formats)}"
        self.formats[name] = check
        out["format"] = name


def _compile_fast(schema: object) -> Callable[[Any], Any] | None:
    if not isinstance(schema, dict | bool):
        return None
    # Imported on the first tool schema, not with pitrio (~4 ms of import time).
    import fastjsonschema

    rewriter = _FastRewriter(schema)
    try:
        rewritten = rewriter.run()
        return fastjsonschema.compile(
            rewritten,
            formats=rewriter.formats,
            use_default=False,  # never write defaults into the arguments
        )
    except _NotFast:
        return None
    except Exception:  # fastjsonschema rejected the rewritten schema: use the engine
        return None
