"""The JSONL reader's fast scan: a line in the layout Pi's and pitrio's writers give an
entry is indexed from its first and last members, and the index equals the one
``json.loads`` of every line gives, whatever the file holds (key orders, whitespace,
escapes, unicode, a message that spells ``"kind":"entry"`` or ``"seq"`` inside it)."""

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
from pitrio.harness._session_state import ENTRY_TYPES, SessionState

HEADER = {
    "v": 4,
    "kind": "header",
    "id": "s-1",
    "storageVersion": 1,
    "createdAt": 1735689600000,
    "cwd": "/p",
}

# Strings that look like the layout's tokens, for ids and inside messages.
TRICKY = [
    '"kind":"entry"',
    '{"kind":"entry","id":"x","parentId":null,"type":"message",',
    ',"seq":7,"timestamp":1}',
    '},{"kind":"value","op":"set","seq":9,"namespace":"pi.branch.tip","key":"main","value":"x"}]',
    'q"',
    "\\u0071",
    "\\",
    '"',
    "\n",
    "\x00\x1f",
    "é ü 中文 🙂",
    "\ud800",  # a lone surrogate: written escaped
]

texts = st.one_of(st.sampled_from(TRICKY), st.text(max_size=12))
plain_ids = st.text(
    st.characters(exclude_characters='"\\', exclude_categories=["Cc", "Cs"]), min_size=1, max_size=8
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**12) | texts,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["kind", "seq", "id", "type", "timestamp", "q"]) | texts,
            inner,
            max_size=3,
        )
    ),
    max_leaves=8,
)


def _dumps(value: Any, rng: random.Random) -> bytes:
    """``value`` as a JSON line in one of the layouts a writer might give it: compact as
    Pi's and pitrio's writers, spaced as Python's default, ASCII-escaped or not (a lone
    surrogate, which UTF-8 cannot hold, always escaped as the writers escape it)."""
    layout = rng.choice(["compact"] * 8 + ["spaced", "ascii"])
    separators = (", ", ": ") if layout == "spaced" else (",", ":")
    try:
        if layout == "ascii":
            raise UnicodeEncodeError("utf-8", "", 0, 1, "asked for")
        return json.dumps(value, separators=separators, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return json.dumps(value, separators=separators).encode()


def _reordered(write: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """The write's keys in the writers' order (mostly) or shuffled, some repeated-looking
    keys nested in its body."""
    if rng.random() < 0.85:
        return write
    keys = list(write)
    rng.shuffle(keys)
    return {k: write[k] for k in keys}


@st.composite
def session_lines(draw: st.DrawFn) -> list[bytes]:
    """The lines of a valid v4 session file after its header."""
    rng = random.Random(draw(st.integers(0, 2**32)))
    ids: list[str] = []
    seq = 0
    lines: list[bytes] = []
    for _ in range(draw(st.integers(1, 12))):
        seq += draw(st.integers(1, 3))
        entry_id = draw(st.sampled_from(TRICKY) if rng.random() < 0.2 else plain_ids)
        if entry_id in ids:
            entry_id += f"#{len(ids)}"
        parent = draw(st.none() | st.sampled_from(ids)) if ids else None
        entry: dict[str, Any] = {
            "kind": "entry",
            "id": entry_id,
            "parentId": parent,
            "type": draw(st.sampled_from(ENTRY_TYPES)),
        }
        keys = st.sampled_from(["message", "data", "seq", "summary"])
        body = draw(st.dictionaries(keys, json_values, max_size=2))
        body.pop("seq", None)
        if rng.random() < 0.25:
            body["message"] = {"content": [draw(json_values), {"kind": "entry", "seq": 3}]}
        entry |= body
        entry |= {"seq": seq, "timestamp": draw(st.integers(-1, 2**45))}
        ids.append(entry_id)
        transaction: list[dict[str, Any]] = [_reordered(entry, rng)]
        shape = draw(st.sampled_from(["alone", "tip", "tip", "tip+value", "value", "usage", "two"]))
        if shape == "two":  # a second entry in the transaction, then the tip (a fork's)
            seq += 1
            second: dict[str, Any] = {"kind": "entry", "id": f"{entry_id}/2", "parentId": entry_id}
            second |= {"type": "custom", "seq": seq, "timestamp": 1}
            ids.append(second["id"])
            transaction.append(second)
            shape = "tip"
        if shape in ("tip", "tip+value"):
            seq += draw(st.integers(1, 2))
            tip = {"kind": "value", "op": "set", "seq": seq, "namespace": "pi.branch.tip"}
            key = "main" if rng.random() < 0.7 else draw(st.sampled_from(["b", *TRICKY]))
            tip |= {"key": key, "value": entry_id}
            transaction.append(_reordered(tip, rng))
        if shape in ("tip+value", "value"):
            seq += 1
            value = {"kind": "list", "op": "append", "seq": seq, "namespace": "n", "key": "k"}
            value["value"] = draw(json_values)
            transaction.append(_reordered(value, rng))
        if shape == "usage":
            seq += 1
            transaction.append(
                {"kind": "usage", "id": f"u{seq}", "usage": {"input": 1}, "seq": seq}
            )
        as_array = len(transaction) > 1 or rng.random() < 0.1
        lines.append(_dumps(transaction if as_array else transaction[0], rng))
    return lines


def json_loads_scan(path: str, lines: list[bytes], at: int) -> tuple[SessionState, Any]:
    """The index ``json.loads`` of every line gives (the reader's full parse)."""
    state, source = SessionState(), _jsonl._Source(path)
    for number, line in enumerate(lines, start=2):
        _jsonl._scan_line(state, source, line, at, path, number)
        at += len(line) + 1
    return state, source


def index_of(state: SessionState, source: Any) -> dict[str, Any]:
    return {
        "ids": state.ids,
        "parents": list(state.parents),
        "seqs": list(state.seqs),
        "types": bytes(state.types),
        "values": state.values,
        "lists": state.lists,
        "usage": state.usage,
        "next_seq": state.next_seq,
        "offsets": list(source.offsets),
        "lengths": list(source.lengths),
        "slots": list(source.slots),
    }


@given(session_lines())
def test_the_fast_scan_indexes_as_json_loads_does(lines: list[bytes]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "s.jsonl")
        head = json.dumps(HEADER).encode() + b"\n"
        encoded = lines
        Path(path).write_bytes(head + b"".join(line + b"\n" for line in encoded))
        fd = os.open(path, os.O_RDONLY)
        try:
            loaded = _jsonl.read_session(path, fd, use_index=False)
            expected_state, expected_source = json_loads_scan(path, encoded, len(head))
            assert loaded.source is not None
            assert index_of(loaded.state, loaded.source) == index_of(
                expected_state, expected_source
            )
            # Every entry reads back as json.loads reads it, and passes the index's check.
            writes = loaded.source.load(range(len(loaded.state.ids)))
            assert [w["id"] for w in writes] == loaded.state.ids
        finally:
            os.close(fd)


def canonical_lines(n: int) -> list[bytes]:
    """Entries as pitrio writes them alone, then as Pi writes them with their tip."""
    out: list[bytes] = []
    parent: str | None = None
    for i in range(n):
        entry: dict[str, Any] = {"kind": "entry", "id": f"e{i}", "parentId": parent}
        entry["type"] = "message"
        entry |= {"message": {"role": "user", "content": 'a "kind":"entry" q"', "timestamp": 0}}
        entry |= {"seq": 2 * i + 1, "timestamp": 5}
        tip: dict[str, Any] = {"kind": "value", "op": "set", "seq": 2 * i + 2}
        tip["namespace"] = "pi.branch.tip"
        tip |= {"key": "main", "value": f"e{i}"}
        value: Any = entry if i % 2 == 0 else [entry, tip]
        out.append(json.dumps(value, separators=(",", ":")).encode())
        parent = f"e{i}"
    return out


def write_session(path: Path, lines: list[bytes]) -> None:
    head = json.dumps(HEADER, separators=(",", ":")).encode()
    path.write_bytes(b"\n".join([head, *lines]) + b"\n")


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The lines the reader parses whole (``json.loads``) while the test runs."""
    lines: list[bytes] = []
    full = _jsonl._scan_line

    def counted(state: Any, source: Any, line: bytes, *rest: Any) -> None:
        lines.append(line)
        full(state, source, line, *rest)

    monkeypatch.setattr(_jsonl, "_scan_line", counted)
    return lines


def test_the_writers_layout_needs_no_json_parse(tmp_path: Path, parsed: list[bytes]) -> None:
    lines = canonical_lines(40)
    # Parsed: a line whose timestamp is not an integer, one that has "q" before its "seq"
    # (a key ending in q: it could be a write hidden between the entry and its tip).
    lines.append(
        b'{"kind":"entry","id":"t","parentId":"e39","type":"custom","customType":"c",'
        b'"seq":81,"timestamp":1.5}'
    )
    lines.append(
        b'[{"kind":"entry","id":"x","parentId":"t","type":"custom","customType":"freq",'
        b'"data":{"freq":1},"seq":82,"timestamp":5},{"kind":"value","op":"set","seq":83,'
        b'"namespace":"pi.branch.tip","key":"main","value":"x"}]'
    )
    path = tmp_path / "s.jsonl"
    write_session(path, lines)
    fd = os.open(path, os.O_RDONLY)
    try:
        loaded = _jsonl.read_session(str(path), fd, use_index=False)
    finally:
        os.close(fd)
    assert parsed == lines[-2:]
    assert loaded.state.ids == [f"e{i}" for i in range(40)] + ["t", "x"]
    assert loaded.state.value("pi.branch.tip", "main") == "x"
    assert loaded.state.next_seq == 84


async def test_a_damaged_message_is_found_when_its_entry_is_read(tmp_path: Path) -> None:
    lines = canonical_lines(4)
    # The message of the last entry is no longer JSON, its first and last members intact.
    lines[-1] = lines[-1].replace(b'"content":"a', b'"content":a', 1)
    with pytest.raises(json.JSONDecodeError):
        json.loads(lines[-1])
    path = tmp_path / "s.jsonl"
    write_session(path, lines)
    session = await JsonlSessionStore(tmp_path).open(str(path))
    try:
        assert session._state.ids == ["e0", "e1", "e2", "e3"]
        with pytest.raises(SessionFormatError, match=r"line at byte \d+ is no longer the entry"):
            session.build_context()
    finally:
        await session.close()


async def test_a_repeated_key_is_found_when_its_entry_is_read(tmp_path: Path) -> None:
    lines = canonical_lines(2)
    # json.loads (and JavaScript's JSON.parse) take the last "parentId": null here.
    lines[-1] = lines[-1].replace(b',"seq":', b',"parentId":null,"seq":', 1)
    assert json.loads(lines[-1])[0]["parentId"] is None
    path = tmp_path / "s.jsonl"
    write_session(path, lines)
    session = await JsonlSessionStore(tmp_path).open(str(path))
    try:
        with pytest.raises(SessionFormatError, match="names a key twice"):
            session.build_context()
    finally:
        await session.close()


@pytest.mark.parametrize(
    ("line", "error"),
    [
        (
            b'{"kind":"entry","id":"n","parentId":null,"type":"message","seq":4,"timestamp":1}',
            "line 4: storage sequence numbers must increase: 4 after 4",
        ),
        (
            b'{"kind":"entry","id":"e0","parentId":null,"type":"message","seq":20,"timestamp":1}',
            "line 4: duplicate or missing entry id: 'e0'",
        ),
        (
            b'{"kind":"entry","id":"n","parentId":"nope","type":"message","seq":20,"timestamp":1}',
            "line 4: entry 'n' names a parent that does not exist: 'nope'",
        ),
        (
            b'{"kind":"entry","id":"n","parentId":null,"type":"note","seq":20,"timestamp":1}',
            "line 4: unknown session entry type 'note'",
        ),
        (
            b'[{"kind":"entry","id":"n","parentId":null,"type":"message","seq":20,"timestamp":1},'
            b'{"kind":"value","op":"set","seq":20,"namespace":"pi.branch.tip","key":"main",'
            b'"value":"n"}]',
            "line 4: storage sequence numbers must increase: 20 after 20",
        ),
        (
            b'{"kind":"entry","id":"\xff","parentId":null,"type":"message","seq":20,"timestamp":1}',
            "line 4: not valid JSON",
        ),
        (
            b'[{"kind":"entry","id":"n","parentId":null,"type":"message","seq":20,"timestamp":1},'
            b'{"kind":"value","op":"set","seq":21,"namespace":"pi.branch.tip","key":"main",'
            b'"value":"\xff"}]',
            "line 4: not valid JSON",
        ),
    ],
)
async def test_a_line_the_checks_refuse_is_named_as_json_loads_names_it(
    tmp_path: Path, line: bytes, error: str
) -> None:
    path = tmp_path / "s.jsonl"
    write_session(path, [*canonical_lines(2)[:2], line])
    with pytest.raises(SessionFormatError, match=error):
        await JsonlSessionStore(tmp_path).open(str(path))


PI_WRITTEN = sorted(
    [
        *(Path(__file__).parent / "data" / "structural").glob("pi-*.jsonl"),
        Path(__file__).parent / "data" / "sessions" / "pi-v4.jsonl",
    ]
)


@pytest.mark.parametrize("path", PI_WRITTEN, ids=[p.name for p in PI_WRITTEN])
def test_files_pi_wrote_index_as_json_loads_does(path: Path, parsed: list[bytes]) -> None:
    data = path.read_bytes()
    lines = data.split(b"\n")[1:-1]
    fd = os.open(path, os.O_RDONLY)
    try:
        loaded = _jsonl.read_session(str(path), fd, use_index=False)
        fast = [line for line in lines if line not in parsed]
        slow = list(parsed)
        expected = json_loads_scan(str(path), lines, data.index(b"\n") + 1)
    finally:
        os.close(fd)
    assert loaded.source is not None
    assert index_of(loaded.state, loaded.source) == index_of(*expected)
    # Pi's entry, value and list lines are read without json.loads of the whole line (not
    # those with a usage row, an entry after another write, or a "q" before '"' in a value).
    assert any(line.startswith(b'[{"kind":"entry"') for line in fast)
    alone = (b'{"kind":"value"', b'{"kind":"list"')
    assert any(line.startswith(alone) for line in fast) == any(
        line.startswith(alone) for line in lines
    )
    assert len(slow) * 3 < len(lines)
