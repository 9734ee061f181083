"""The incremental partial-JSON parser gives pi-ai's partial value after every delta.

The reference is ``parse_streaming_json`` (a port of pi-ai's ``parseStreamingJson``),
which re-parses the whole text; the parser must agree with it on every prefix of valid
and invalid JSON, however the text is split into deltas.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import example, given, settings, strategies as st

from pitrio.providers._json import parse_streaming_json
from pitrio.providers._partial_json import PartialJSONParser


def same(a: Any, b: Any) -> bool:
    """Equality that also distinguishes 1 from 1.0 and True from 1, and NaN == NaN."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def check_splits(text: str, cuts: list[int]) -> None:
    parser = PartialJSONParser()
    snapshots = []
    previous = 0
    for cut in [*sorted(set(cuts)), len(text)]:
        if cut <= previous:
            continue
        parser.feed(text[previous:cut])
        previous = cut
        snapshots.append((text[:cut], parser.snapshot()))
        expected = parse_streaming_json(text[:cut])
        assert same(parser.value(), expected), (text[:cut], parser.value(), expected)
    # Snapshots taken earlier still read as their own prefix after later deltas.
    for prefix, snapshot in snapshots:
        assert same(snapshot.value(), parse_streaming_json(prefix)), prefix


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**20), 10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=8,
)
containers = st.one_of(
    st.dictionaries(st.text(max_size=5), json_values, max_size=5),
    st.lists(json_values, max_size=5),
)
TRICKY = '"\\{}[],: \n\t\r\u00a0\u2028\ufeffeE.-+0123456789tfnulrsaINy\ud83d\ude00\x00\x1f'


@st.composite
def documents(draw: st.DrawFn) -> str:
    value = draw(containers)
    text = json.dumps(
        value,
        ensure_ascii=draw(st.booleans()),
        indent=draw(st.sampled_from([None, 0, 1, 2])),
        separators=draw(st.sampled_from([None, (",", ":"), (" , ", " : ")])),
    )
    if draw(st.booleans()):
        # Damage it: insert, delete or replace a few characters.
        for _ in range(draw(st.integers(1, 3))):
            at = draw(st.integers(0, len(text)))
            kind = draw(st.sampled_from(["insert", "delete", "replace"]))
            char = draw(st.sampled_from(TRICKY))
            if kind == "insert":
                text = text[:at] + char + text[at:]
            elif kind == "delete":
                text = text[:at] + text[at + 1 :]
            else:
                text = text[:at] + char + text[at + 1 :]
    return text


@settings(max_examples=150, deadline=None)
@given(documents(), st.data())
@example('{"a": "x\\ud83d\\ude00y", "b": [1e5, -0.5e-3, true, null]}', None)
@example('{"k": "abc\\u00e9  ', None)
@example('{"a": [ ], "b": 1}', None)
def test_every_prefix_and_split_matches_the_whole_string_parser(
    text: str, data: st.DataObject | None
) -> None:
    # Every prefix, one character per delta (every few characters for long texts)...
    check_splits(text, list(range(1, len(text), 1 + len(text) // 150)))
    # ...and random deltas.
    if data is not None:
        cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=8))
        check_splits(text, cuts)


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=TRICKY, max_size=24), st.lists(st.integers(0, 24), max_size=5))
def test_arbitrary_text_matches_the_whole_string_parser(text: str, cuts: list[int]) -> None:
    check_splits(text, [c for c in cuts if c < len(text)] + list(range(1, len(text))))


@pytest.mark.parametrize(
    ("deltas", "expected"),
    [
        (['{"a": tr'], {"a": True}),
        (['{"a": 1', "e"], {"a": 1}),
        (['{"a": 1.'], {}),
        (['{"a": "x\\'], {"a": "x"}),
        (['{"a": "x\\u00'], {"a": "x"}),
        (['{"a": "\\ud83d'], {"a": "\ud83d"}),
        (['{"a": "\\ud83d', '\\ude00"}'], {"a": "\U0001f600"}),
        (['{"a": "end   '], {"a": "end"}),
        (['{"a": [1, {"b": "c'], {"a": [1, {"b": "c"}]}),
        (['{"a": "raw\nnewline"}'], {"a": "raw\nnewline"}),  # repaired, via the fallback
        (["", "  "], {}),
    ],
)
def test_known_partial_values(deltas: list[str], expected: Any) -> None:
    parser = PartialJSONParser()
    for delta in deltas:
        parser.feed(delta)
    assert same(parser.value(), expected)
    assert parser.text == "".join(deltas)


def test_snapshot_values_are_fresh_objects_built_once() -> None:
    parser = PartialJSONParser()
    parser.feed('{"a": {"b": [1')
    snapshot = parser.snapshot()
    first = snapshot.value()
    assert first == {"a": {"b": [1]}}
    assert snapshot.value() is first  # cached
    assert parser.value() is not first  # a new snapshot builds a new object
