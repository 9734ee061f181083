"""The edit tool's diff (a port of jsdiff's ``diffLines``): properties on any two texts.

Its exact output against jsdiff itself is pinned by the ``edit-*`` cases of
``test_pi_tools.py`` (recorded from Pi's edit tool).
"""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from pitrio.coding._diff import diff_lines, diff_string, unified_patch

lines = st.lists(st.sampled_from(["a", "b", "c", "", "a b", "\r"]), max_size=12)
texts = st.builds(lambda ls, end: "\n".join(ls) + end, lines, st.sampled_from(["", "\n"]))


@settings(deadline=None, max_examples=300)
@given(old=texts, new=texts)
def test_a_diff_rebuilds_both_texts(old: str, new: str) -> None:
    """The common and removed parts spell the old text; the common and added, the new."""
    changes = diff_lines(old, new)
    assert "".join(c.value for c in changes if not c.added) == old
    assert "".join(c.value for c in changes if not c.removed) == new
    assert all(c.count > 0 for c in changes)
    assert not any(c.added and c.removed for c in changes)


@settings(deadline=None, max_examples=200)
@given(old=texts, new=texts)
def test_identical_texts_have_no_changes(old: str, new: str) -> None:
    """No change, no hunk: the patch is headers only and the numbered diff is empty."""
    assert diff_string(old, old) == ("", None)
    assert unified_patch("f", old, old) == "--- f\n+++ f\n"
    if old != new:
        assert diff_string(old, new)[1] is not None
