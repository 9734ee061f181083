"""The fast scan on files in the layouts Pi writes (``pi-agent-core``'s ``commitWrite``: an
entry with its branch tip, and with the operation and lane records its harness commits in
the same line): the index and every value equal what ``json.loads`` of every line gives,
whatever the values hold (nested arrays of write-shaped objects with the next sequence
numbers, escapes, unicode, ``"kind":"entry"`` inside a message), with a torn last line."""

from __future__ import annotations

import json
import os
import random
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, strategies as st

from pitrio.harness import JsonlSessionStore, SessionFormatError, _jsonl

from .test_jsonl_scan import HEADER, TRICKY, index_of, json_loads_scan, json_values, plain_ids

NAMESPACES = ["pi.branch.tip", "pi.op.state", "pi.op.meta", "pi.lane.state", "pi.result"]


def _write(seq: int, kind: str, op: str, namespace: str, key: str, value: Any) -> dict[str, Any]:
    """A write as Pi's ``commitWrite`` spells it (no value for a delete)."""
    out: dict[str, Any] = {"kind": kind, "op": op, "seq": seq, "namespace": namespace}
    out["key"] = key
    if op != "delete":
        out["value"] = value
    return out


@st.composite
def pi_lines(draw: st.DrawFn) -> list[bytes]:
    """The lines of a valid session file as Pi's JSONL storage writes them."""
    rng = random.Random(draw(st.integers(0, 2**32)))
    ids: list[str] = []
    seq = 0
    lines: list[bytes] = []
    keys = ["main", "op-1", "op-2", draw(st.sampled_from(TRICKY))]
    for _ in range(draw(st.integers(1, 10))):
        seq += 1
        transaction: list[dict[str, Any]] = []
        if rng.random() < 0.8:
            entry_id = draw(st.sampled_from(TRICKY) if rng.random() < 0.2 else plain_ids)
            if entry_id in ids:
                entry_id += f"#{len(ids)}"
            parent = draw(st.sampled_from(ids)) if ids and rng.random() < 0.9 else None
            text = draw(st.sampled_from(TRICKY) | st.text(max_size=10))
            entry: dict[str, Any] = {"kind": "entry", "id": entry_id, "parentId": parent}
            entry |= {"type": "message", "message": {"role": "user", "content": text}}
            entry |= {"seq": seq, "timestamp": draw(st.integers(0, 2**45))}
            ids.append(entry_id)
            transaction.append(entry)
        for _ in range(draw(st.integers(0 if transaction else 1, 4))):
            if transaction:
                seq += 1
            kind = draw(st.sampled_from(["value", "value", "value", "list"]))
            op = draw(st.sampled_from(["set", "set", "set", "delete"]))
            if kind == "list" and op == "set":
                op = "append"
            value: Any = draw(json_values)
            if rng.random() < 0.3:  # a value that holds writes spelled as the next ones
                fake = _write(seq + 1, "value", "set", "pi.branch.tip", "main", "forged")
                value = [{"x": "]"}, fake] if rng.random() < 0.5 else {"a": [{}, fake]}
            if rng.random() < 0.2:
                value = {"continuation": {"kind": "need_assistant"}, "inbox": [value]}
            namespace = draw(st.sampled_from(NAMESPACES))
            transaction.append(_write(seq, kind, op, namespace, draw(st.sampled_from(keys)), value))
        value_of_line: Any = transaction if len(transaction) > 1 else transaction[0]
        compact = (",", ":")
        try:  # as Pi's JSON.stringify writes it (a lone surrogate escaped), or ASCII-escaped
            if rng.random() < 0.2:
                raise UnicodeEncodeError("utf-8", "", 0, 1, "asked for")
            lines.append(json.dumps(value_of_line, separators=compact, ensure_ascii=False).encode())
        except UnicodeEncodeError:
            lines.append(json.dumps(value_of_line, separators=compact).encode())
    return lines


def _scan(lines: list[bytes], torn: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "s.jsonl")
        head = json.dumps(HEADER).encode() + b"\n"
        Path(path).write_bytes(head + b"".join(line + b"\n" for line in lines) + torn)
        fd = os.open(path, os.O_RDONLY)
        try:
            loaded = _jsonl.read_session(path, fd, use_index=False)
        finally:
            os.close(fd)
        expected = json_loads_scan(path, lines, len(head))
        assert loaded.source is not None
        assert index_of(loaded.state, loaded.source) == index_of(*expected)
        assert loaded.torn == torn
        writes = loaded.source.load(range(len(loaded.state.ids)))
        assert [w["id"] for w in writes] == loaded.state.ids


@given(pi_lines(), st.binary(max_size=20).filter(lambda b: b"\n" not in b))
def test_the_fast_scan_reads_pi_s_layouts_as_json_loads_does(
    lines: list[bytes], torn: bytes
) -> None:
    _scan(lines, lines[-1][: len(torn)] if torn else b"")


def _harness_line(n: int, value: Any) -> bytes:
    """Entry ``e{n}`` with its tip, an operation state and the lane's, as Pi's harness
    commits them (sequence numbers from ``4 * n + 1``)."""
    seq = 4 * n + 1
    entry: dict[str, Any] = {"kind": "entry", "id": f"e{n}"}
    entry["parentId"] = f"e{n - 1}" if n else None
    entry |= {"type": "message", "message": {"role": "user", "content": "a"}}
    entry |= {"seq": seq, "timestamp": 1}
    writes = [
        entry,
        _write(seq + 1, "value", "set", "pi.branch.tip", "main", f"e{n}"),
        _write(seq + 2, "value", "set", "pi.op.state", f"op-{n}", value),
        _write(seq + 3, "value", "set", "pi.lane.state", "main", {"inbox": [], "n": n}),
    ]
    return json.dumps(writes, separators=(",", ":")).encode()


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The values and lines ``json.loads`` reads while the test runs."""
    seen: list[bytes] = []
    loads = json.loads

    def counted(text: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(bytes(text))
        return loads(text, *args, **kwargs)

    monkeypatch.setattr(json, "loads", counted)
    return seen


def test_a_replaced_value_is_not_parsed(tmp_path: Path, parsed: list[bytes]) -> None:
    lines = [_harness_line(n, {"at": "checkpoint", "n": n}) for n in range(30)]
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"\n".join([json.dumps(HEADER).encode(), *lines]) + b"\n")
    fd = os.open(path, os.O_RDONLY)
    try:
        loaded = _jsonl.read_session(str(path), fd, use_index=False)
    finally:
        os.close(fd)
    assert loaded.state.value("pi.lane.state", "main") == {"inbox": [], "n": 29}
    assert loaded.state.value("pi.op.state", "op-7") == {"at": "checkpoint", "n": 7}
    assert loaded.state.value("pi.branch.tip", "main") == "e29"
    assert loaded.state.next_seq == 4 * 30 + 1
    # The header; each operation's state, each one once; the lane's and the tip's last.
    lane = [text for text in parsed if b'"inbox"' in text]
    assert lane == [b'{"inbox":[],"n":29}']
    assert len(parsed) == 1 + 30 + 1 + 1


async def test_a_damaged_value_is_named_by_the_full_parse(tmp_path: Path) -> None:
    lines = [_harness_line(n, {"n": n}) for n in range(3)]
    lines[1] = lines[1].replace(b'"value":{"n":1}', b'"value":{"n":1', 1)
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"\n".join([json.dumps(HEADER).encode(), *lines]) + b"\n")
    with pytest.raises(SessionFormatError, match="line 3: not valid JSON"):
        await JsonlSessionStore(tmp_path).open(str(path))


def test_a_value_holding_the_next_write_is_read_whole(tmp_path: Path) -> None:
    # The operation's state, the line's last write, holds in an array a write spelled as
    # the next one would be (seq 4, a "]" in a string to even the brackets): every "q" and
    # sequence number fits, and the value cut before it does not parse, so the line is read
    # whole.
    fake = _write(4, "value", "set", "pi.branch.tip", "main", "forged")
    writes = json.loads(_harness_line(0, [{"s": "]"}, fake]))[:3]
    line = json.dumps(writes, separators=(",", ":")).encode()
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"\n".join([json.dumps(HEADER).encode(), line]) + b"\n")
    fd = os.open(path, os.O_RDONLY)
    try:
        loaded = _jsonl.read_session(str(path), fd, use_index=False)
    finally:
        os.close(fd)
    assert loaded.state.value("pi.branch.tip", "main") == "e0"
    assert loaded.state.value("pi.op.state", "op-0") == [{"s": "]"}, fake]
    assert loaded.state.next_seq == 4


E = b'{"kind":"entry","id":"n","parentId":"e1","type":"message","seq":5,"timestamp":1}'
TIP = b'{"kind":"value","op":"set","seq":6,"namespace":"pi.branch.tip","key":"main","value":"n"}'
STATE = b'{"kind":"value","op":"set","seq":7,"namespace":"s","key":"k","value":{"a":1}}'


@pytest.mark.parametrize(
    "line",
    [
        b"[" + E + b"," + TIP + b"," + STATE + b"]",
        b"[" + E.replace(b'"n"', b'"\xff"') + b"," + TIP + b"," + STATE + b"]",
        b"[" + E.replace(b'"e1"', b'"nope"') + b"," + TIP + b"," + STATE + b"]",
        b"[" + E.replace(b'"id":"n"', b'"id":"e0"') + b"," + TIP + b"," + STATE + b"]",
        b"[" + E + b"," + TIP + b"," + STATE.replace(b'"key":"k"', b'"key":"\xff"') + b"]",
        b"[" + E + b"," + TIP + b"," + STATE.replace(b'"seq":7', b'"seq":8') + b"]",
        b"[" + E + b"," + TIP + b"," + STATE.replace(b"{", b"[{", 2)[1:] + b"]",
        b"[" + E + b"," + TIP.replace(b',"value":"n"}', b"}") + b", " + STATE + b"]",
        b"[" + E + b"," + TIP.replace(b'"n"}', b'"n" }') + b"," + STATE + b"]",
        b"[" + E + b"," + TIP.replace(b',"value":"n"}', b"}") + b",1}]",
        STATE.replace(b'"seq":7', b'"seq":4'),
        STATE.replace(b'"seq":7', b'"seq":5') + b" ",
        STATE.replace(b'"seq":7', b'"seq":5').replace(b'"k"', b'"\\u0071"'),
        b"[" + STATE.replace(b'"seq":7', b'"seq":5') + b"," + TIP + b"]",
        b"[" + STATE.replace(b'"seq":7', b'"seq":5') + b"," + TIP + b"] ",
        b"[" + STATE.replace(b'"seq":7', b'"seq":5') + b"," + TIP.replace(b"}", b"") + b"]",
    ],
)
def test_odd_lines_read_as_json_loads_reads_them(tmp_path: Path, line: bytes) -> None:
    """Each fits the fast readers' layout but for one thing: the scan indexes it, or names
    what is wrong with it, as ``json.loads`` of every line does."""
    from .test_jsonl_scan import canonical_lines

    lines = [*canonical_lines(2), line]
    path = tmp_path / "s.jsonl"
    head = json.dumps(HEADER).encode() + b"\n"
    path.write_bytes(head + b"".join(x + b"\n" for x in lines))

    def outcome(read: Any) -> Any:
        try:
            return index_of(*read())
        except SessionFormatError as exc:
            return str(exc)

    def fast() -> Any:
        fd = os.open(path, os.O_RDONLY)
        try:
            loaded = _jsonl.read_session(str(path), fd, use_index=False)
        finally:
            os.close(fd)
        return loaded.state, loaded.source

    assert outcome(fast) == outcome(lambda: json_loads_scan(str(path), lines, len(head)))
