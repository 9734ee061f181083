"""The JSON of a session's writes, with the repeated parts of a run's records encoded once.

Pi's operation records repeat the operation's whole state in each ``pi.op.state`` write:
the run's ``settings``, the request's ``generationContext`` (with its model
configuration), the tool batch with every call. A harness turn of four tool calls writes
about fifteen such records, 21 KB of JSON, most of it the same parts again; encoded whole
each time they cost more than the agent's own turn. The recorder (``_operations``) builds
those parts as :class:`Encoded` objects, which keep their JSON once made, inside
:class:`Record` objects, which :func:`dumps` looks into; every other value is encoded by
:mod:`json` as before. The text is the same either way: ``json.dumps(value,
separators=(",", ":"), ensure_ascii=False)``, key order kept (both types are dicts, and
any other reader sees plain dicts).

An :class:`Encoded` object must not be changed once it is made (its JSON would not follow):
the recorder makes a new one for each step. A copy (``dict(...)``, :func:`copy.deepcopy`,
pickling) is a plain dict.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any, Final

__all__ = ["Encoded", "Record", "dumps", "line", "restamped"]

_ENCODE_ASCII: Final = json.JSONEncoder(separators=(",", ":")).encode

# JSONEncoder.encode makes a new C encoder at each call, which costs more than encoding a
# small write; this one is made once (no circular-reference check: a write is JSON data).
_C_ENCODE: Final = (
    None
    if c_make_encoder is None
    else c_make_encoder(
        None, json.JSONEncoder().default, encode_basestring, None, ":", ",", False, False, True
    )
)


def _encode(value: Any) -> str:
    if _C_ENCODE is None:  # pragma: no cover - a Python without the _json accelerator
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return "".join(_C_ENCODE(value, 0))


class Record(dict[str, Any]):
    """A dict (string keys) whose values may be :class:`Encoded`: :func:`dumps` encodes
    it member by member, splicing in their JSON."""

    __slots__ = ()

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (dict(self),))


class Encoded(dict[str, Any]):
    """A dict (string keys) that keeps its JSON once :func:`dumps` made it; never
    changed after it is made."""

    __slots__ = ("_json",)
    _json: str

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (dict(self),))


def _value(value: Any) -> str:
    kind = type(value)
    if kind is str:
        return encode_basestring(value)
    if kind is Encoded:
        try:
            text: str = value._json
        except AttributeError:
            text = value._json = _object(value)
        return text
    if kind is Record:
        return _object(value)
    if kind is int:
        return int.__repr__(value)
    if value is None:
        return "null"
    if kind is bool:
        return "true" if value else "false"
    if kind is list:
        return "[" + ",".join([_value(item) for item in value]) + "]"
    return _encode(value)


def _object(value: dict[str, Any]) -> str:
    return "{" + ",".join([encode_basestring(k) + ":" + _value(v) for k, v in value.items()]) + "}"


# The members of a value or list write as the session commits it (Pi's key order).
_SET_KEYS: Final = ("kind", "op", "seq", "namespace", "key", "value")
_DELETE_KEYS: Final = ("kind", "op", "seq", "namespace", "key")


def _write(write: dict[str, Any]) -> str | None:
    """A committed value or list write's JSON made in one piece (most of a run's writes
    are these), or ``None`` for any other dict."""
    keys = tuple(write)
    if keys == _SET_KEYS:
        tail = ',"value":' + _value(write["value"]) + "}"
    elif keys == _DELETE_KEYS:
        tail = "}"
    else:
        return None
    seq = write["seq"]
    if type(seq) is not int:
        return None
    try:  # (a member that is not a string: TypeError)
        return (
            f'{{"kind":{encode_basestring(write["kind"])},"op":{encode_basestring(write["op"])}'
            f',"seq":{seq},"namespace":{encode_basestring(write["namespace"])}'
            f',"key":{encode_basestring(write["key"])}{tail}'
        )
    except TypeError:
        return None


def restamped(form: Encoded, timestamp: int) -> Encoded:
    """``{**form, "timestamp": timestamp}`` (a message's wire form stamped again), its
    JSON made from ``form``'s when the timestamp is the form's last member, as in every
    message's wire form (a tool result kept as an outcome, then its entry)."""
    out = Encoded(form)
    out["timestamp"] = timestamp  # (in the form's place)
    old = form.get("timestamp")
    if type(old) is int and type(timestamp) is int and next(reversed(form)) == "timestamp":
        text = _value(form)
        suffix = f'"timestamp":{old}}}'
        if text.endswith(suffix):
            out._json = f'{text[: -len(suffix)]}"timestamp":{timestamp}}}'
    return out


def dumps(value: Any) -> str:
    """``json.dumps(value, separators=(",", ":"), ensure_ascii=False)``, faster for the
    harness's records (a write whose value or message is a :class:`Record` or
    :class:`Encoded`)."""
    kind = type(value)
    if kind is dict:
        text = _write(value)
        if text is not None:
            return text
        inner = value.get("message")
        if type(inner) is Record or type(inner) is Encoded:
            return _object(value)
        return _encode(value)
    if kind is Record or kind is Encoded:
        return _value(value)
    return _encode(value)


def line(transaction: Sequence[dict[str, Any]]) -> bytes:
    """One transaction as a JSONL line, UTF-8: its write alone, or the array of its
    writes. A lone surrogate, which UTF-8 cannot hold, is escaped as JavaScript escapes
    it (the whole line then in ASCII)."""
    if len(transaction) == 1:
        text = dumps(transaction[0])
    else:
        text = "[" + ",".join([dumps(write) for write in transaction]) + "]"
    try:
        return text.encode() + b"\n"
    except UnicodeEncodeError:
        value = transaction[0] if len(transaction) == 1 else list(transaction)
        return _ENCODE_ASCII(value).encode() + b"\n"
