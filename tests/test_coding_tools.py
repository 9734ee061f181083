"""The coding tools on a temporary directory: texts, paging, confinement, processes."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import pytest
import trio

from pitrio._agent import Agent
from pitrio._events import AgentEvent, ToolExecutionEnd, ToolResult
from pitrio._messages import ImageContent, TextContent
from pitrio._model import Model
from pitrio._signal import AbortSignal
from pitrio.coding import (
    DEFAULT_MAX_BYTES,
    DEFAULT_TOOL_NAMES,
    TOOL_NAMES,
    CodingToolError,
    Workspace,
    coding_tools,
)
from pitrio.testing import ScriptedModel, ScriptedResponse


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path)


async def call(ws: Workspace, name: str, **params: Any) -> ToolResult:
    tool = ws.tools([name])[0]
    updates: list[ToolResult] = []
    prepared = tool.prepare_arguments(params)
    return await tool.execute("call_1", prepared, AbortSignal(), updates.append)


def text_of(result: ToolResult) -> str:
    return "".join(b.text for b in result.content if isinstance(b, TextContent))


async def run_text(ws: Workspace, name: str, **params: Any) -> str:
    return text_of(await call(ws, name, **params))


def test_coding_tools_are_pis_seven_tools(tmp_path: Path) -> None:
    """All seven in Pi's order by default, any subset by name, Pi's four as the default set."""
    tools = coding_tools(tmp_path)
    assert [t.name for t in tools] == ["read", "bash", "edit", "write", "grep", "find", "ls"]
    assert list(TOOL_NAMES) == [t.name for t in tools]
    assert DEFAULT_TOOL_NAMES == ("read", "bash", "edit", "write")
    assert [t.name for t in coding_tools(tmp_path, ["ls", "read"])] == ["ls", "read"]
    assert all(t.parameters["type"] == "object" for t in tools)
    edit = tools[2]
    assert edit.parameters["required"] == ["path", "edits"]


def test_an_unknown_tool_name_is_refused(tmp_path: Path) -> None:
    """A name that is not a coding tool is an error naming the tools there are."""
    with pytest.raises(CodingToolError, match=r"^unknown coding tool 'cat'; the coding tools"):
        coding_tools(tmp_path, ["read", "cat"])


def test_workspace_needs_a_directory(tmp_path: Path) -> None:
    """A working directory that does not exist is refused up front."""
    with pytest.raises(NotADirectoryError, match=r"is not a directory$"):
        Workspace(tmp_path / "missing")


# -- write / read ---------------------------------------------------------------------


async def test_write_creates_parents_and_read_returns_the_text(ws: Workspace) -> None:
    """write makes parent directories; read gives the content back, newline and all."""
    text = await run_text(ws, "write", path="pkg/mod.py", content="x = 'é'\n")
    assert text == "Successfully wrote to pkg/mod.py"
    assert (ws.root / "pkg" / "mod.py").read_text(encoding="utf-8") == "x = 'é'\n"
    assert await run_text(ws, "read", path="pkg/mod.py") == "x = 'é'\n"


async def test_read_offset_and_limit_page_through_a_file(ws: Workspace) -> None:
    """offset is 1-indexed; a limit that stops early says where to continue."""
    (ws.root / "f.txt").write_text("\n".join(f"line{i}" for i in range(1, 11)))
    text = await run_text(ws, "read", path="f.txt", offset=3, limit=2)
    assert text == "line3\nline4\n\n[6 more lines in file. Use offset=5 to continue.]"
    assert await run_text(ws, "read", path="f.txt", offset=9) == "line9\nline10"
    assert await run_text(ws, "read", path="f.txt", offset=9, limit=5) == "line9\nline10"


async def test_read_offset_past_the_end_is_an_error(ws: Workspace) -> None:
    """Pi's text for an offset beyond the last line."""
    (ws.root / "f.txt").write_text("a\nb")
    with pytest.raises(
        CodingToolError, match=r"^Offset 5 is beyond end of file \(2 lines total\)$"
    ):
        await call(ws, "read", path="f.txt", offset=5)


async def test_read_cuts_long_files_at_the_line_limit(ws: Workspace) -> None:
    """More than 2000 lines: the first 2000 and a note with the next offset; details
    carry Pi's truncation record."""
    (ws.root / "big.txt").write_text("\n".join(str(i) for i in range(1, 2501)))
    result = await call(ws, "read", path="big.txt")
    body, note = text_of(result).split("\n\n")
    assert body.split("\n")[-1] == "2000"
    assert note == "[Showing lines 1-2000 of 2500. Use offset=2001 to continue.]"
    assert isinstance(result.details, dict)
    truncation = result.details["truncation"]
    assert (truncation["truncatedBy"], truncation["totalLines"], truncation["outputLines"]) == (
        "lines",
        2500,
        2000,
    )


async def test_read_cuts_at_the_byte_limit(ws: Workspace) -> None:
    """Lines that together pass 50KB stop early, and the note names the limit."""
    line = "x" * 1000
    (ws.root / "wide.txt").write_text("\n".join([line] * 100))
    text = await run_text(ws, "read", path="wide.txt")
    assert text.endswith("[Showing lines 1-51 of 100 (50.0KB limit). Use offset=52 to continue.]")


async def test_read_a_line_longer_than_the_limit_points_to_bash(ws: Workspace) -> None:
    """A first line over 50KB cannot be shown; Pi suggests sed."""
    (ws.root / "one.txt").write_text("y" * (DEFAULT_MAX_BYTES + 10))
    text = await run_text(ws, "read", path="one.txt")
    assert text == (
        "[Line 1 is 50.0KB, exceeds 50.0KB limit. Use bash: sed -n '1p' one.txt | head -c 51200]"
    )


async def test_read_missing_file_and_directory(ws: Workspace) -> None:
    """Node's texts, as Pi passes them on, for a missing file and for a directory."""
    with pytest.raises(
        CodingToolError, match=r"^ENOENT: no such file or directory, access '.*/nope\.txt'$"
    ):
        await call(ws, "read", path="nope.txt")
    (ws.root / "d").mkdir()
    with pytest.raises(CodingToolError, match=r"^EISDIR: illegal operation on a directory, read$"):
        await call(ws, "read", path="d")


async def test_read_rejects_a_bad_offset(ws: Workspace) -> None:
    """offset and limit must be whole numbers; a negative limit is refused."""
    (ws.root / "f.txt").write_text("a")
    with pytest.raises(CodingToolError, match=r"^offset must be a whole number; got 1\.5$"):
        await call(ws, "read", path="f.txt", offset=1.5)
    with pytest.raises(CodingToolError, match=r"^limit must not be negative; got -1$"):
        await call(ws, "read", path="f.txt", limit=-1)


async def test_read_an_image_returns_an_attachment(ws: Workspace) -> None:
    """An image is known by its bytes (not its name) and comes back as base64 content."""
    data = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR" + b"\x00" * 13
    (ws.root / "pic.dat").write_bytes(data)
    result = await call(ws, "read", path="pic.dat")
    assert text_of(result) == "Read image file [image/png]"
    image = result.content[1]
    assert isinstance(image, ImageContent)
    assert image.mime_type == "image/png"
    assert base64.b64decode(image.data) == data


async def test_read_an_image_too_large_to_send_is_omitted(ws: Workspace) -> None:
    """An image over Pi's inline limit is named, not sent (pitrio cannot scale it down)."""
    (ws.root / "big.gif").write_bytes(b"GIF89a" + b"\x00" * (4 * 1024 * 1024))
    result = await call(ws, "read", path="big.gif")
    assert result.content == (
        TextContent(
            text="Read image file [image/gif]\n[Image omitted: could not be resized below the "
            "inline image size limit.]"
        ),
    )


async def test_read_tells_a_model_without_image_input_that_the_image_is_omitted(
    tmp_path: Path,
) -> None:
    """Pi's note goes under the image's text (and under an omitted image's) when the model
    the call is made for has no image input, asked at each call: not for a vision model,
    nor when no model is known."""
    (tmp_path / "pic.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR" + b"\x00" * 13)
    (tmp_path / "big.gif").write_bytes(b"GIF89a" + b"\x00" * (4 * 1024 * 1024))
    note = "[Current model does not support images. The image will be omitted from this request.]"
    current = [Model(id="m", api="a", provider="p", input=("text",))]
    ws = Workspace(tmp_path, model=lambda: current[0])
    result = await call(ws, "read", path="pic.png")
    assert text_of(result) == f"Read image file [image/png]\n{note}"
    assert isinstance(result.content[1], ImageContent)  # still sent: the provider drops it
    assert (await run_text(ws, "read", path="big.gif")).endswith(f"size limit.]\n{note}")
    current[0] = Model(id="v", api="a", provider="p", input=("text", "image"))
    assert await run_text(ws, "read", path="pic.png") == "Read image file [image/png]"
    unknown = coding_tools(tmp_path, ["read"], model=lambda: None)[0]
    result = await unknown.execute("c", {"path": "pic.png"}, AbortSignal(), lambda _: None)
    assert text_of(result) == "Read image file [image/png]"


# -- edit -----------------------------------------------------------------------------


async def test_edit_replaces_one_exact_occurrence(ws: Workspace) -> None:
    """A unique oldText is replaced; details carry Pi's diff, patch and first changed line."""
    (ws.root / "m.py").write_text("a = 1\nb = 2\n")
    result = await call(ws, "edit", path="m.py", edits=[{"oldText": "b = 2", "newText": "b = 3"}])
    assert text_of(result) == "Successfully replaced 1 block(s) in m.py."
    assert (ws.root / "m.py").read_text() == "a = 1\nb = 3\n"
    assert result.details == {
        "diff": " 1 a = 1\n-2 b = 2\n+2 b = 3",
        "patch": "--- m.py\n+++ m.py\n@@ -1,2 +1,2 @@\n a = 1\n-b = 2\n+b = 3\n",
        "firstChangedLine": 2,
    }


async def test_edit_accepts_the_older_top_level_form(ws: Workspace) -> None:
    """oldText/newText at the top level still work (Pi's prepareArguments)."""
    (ws.root / "m.py").write_text("a = 1\n")
    result = await call(ws, "edit", path="m.py", oldText="a = 1", newText="a = 2")
    assert text_of(result) == "Successfully replaced 1 block(s) in m.py."
    assert (ws.root / "m.py").read_text() == "a = 2\n"


async def test_edit_text_not_found(ws: Workspace) -> None:
    """Pi's text when oldText does not occur; the file is left alone."""
    (ws.root / "m.py").write_text("a = 1\n")
    with pytest.raises(
        CodingToolError,
        match=(
            r"^Could not find the exact text in m\.py\. The old text must match exactly "
            r"including all whitespace and newlines\.$"
        ),
    ):
        await call(ws, "edit", path="m.py", edits=[{"oldText": "a  = 1", "newText": "a = 2"}])
    assert (ws.root / "m.py").read_text() == "a = 1\n"


async def test_edit_text_not_unique(ws: Workspace) -> None:
    """Pi's text when oldText occurs more than once, with the count."""
    (ws.root / "m.py").write_text("x\nx\nx\n")
    with pytest.raises(
        CodingToolError,
        match=(
            r"^Found 3 occurrences of the text in m\.py\. The text must be unique\. "
            r"Please provide more context to make it unique\.$"
        ),
    ):
        await call(ws, "edit", path="m.py", edits=[{"oldText": "x", "newText": "y"}])
    assert (ws.root / "m.py").read_text() == "x\nx\nx\n"


async def test_edit_keeps_crlf_line_endings(ws: Workspace) -> None:
    """A CRLF file matches LF oldText and keeps its CRLF endings."""
    (ws.root / "w.txt").write_bytes(b"one\r\ntwo\r\n")
    await call(ws, "edit", path="w.txt", edits=[{"oldText": "one\ntwo", "newText": "1\n2"}])
    assert (ws.root / "w.txt").read_bytes() == b"1\r\n2\r\n"


async def test_edit_missing_file(ws: Workspace) -> None:
    """Editing a file that does not exist: Pi's text with Node's error code."""
    with pytest.raises(
        CodingToolError, match=r"^Could not edit file: gone\.py\. Error code: ENOENT\.$"
    ):
        await call(ws, "edit", path="gone.py", edits=[{"oldText": "a", "newText": "b"}])


# -- confinement ----------------------------------------------------------------------


@pytest.mark.parametrize("path", ["../outside.txt", "/etc/passwd", "sub/../../x", "~/x"])
async def test_paths_outside_the_working_directory_are_refused(ws: Workspace, path: str) -> None:
    """Relative escapes, absolute paths and ~ outside the root are refused."""
    (ws.root / "sub").mkdir()
    with pytest.raises(CodingToolError, match=r"is outside the working directory"):
        await call(ws, "write", path=path, content="x")


async def test_symlinks_out_of_the_root_are_refused(ws: Workspace, tmp_path: Path) -> None:
    """A symlink inside the root that points outside it does not open a door."""
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("no")
    (ws.root / "link").symlink_to(outside)
    with pytest.raises(CodingToolError, match=r"^Path 'link/secret\.txt' is outside"):
        await call(ws, "read", path="link/secret.txt")


async def test_absolute_paths_inside_the_root_and_at_mentions_work(ws: Workspace) -> None:
    """An absolute path under the root is fine, and a leading @ is dropped as in Pi."""
    (ws.root / "a.txt").write_text("hi")
    assert await run_text(ws, "read", path=str(ws.root / "a.txt")) == "hi"
    assert await run_text(ws, "read", path="@a.txt") == "hi"


# -- ls / grep / find -----------------------------------------------------------------


async def test_ls_sorts_and_marks_directories(ws: Workspace) -> None:
    """Entries sorted case-insensitively, directories with '/', dotfiles included."""
    for name in ("b.txt", "A.txt", ".hidden"):
        (ws.root / name).write_text("")
    (ws.root / "src").mkdir()
    assert await run_text(ws, "ls") == ".hidden\nA.txt\nb.txt\nsrc/"
    assert await run_text(ws, "ls", path="src") == "(empty directory)"


async def test_ls_limit_and_errors(ws: Workspace) -> None:
    """A limit cuts the list with a note; missing paths and files are errors (absolute
    paths, as Pi prints them)."""
    for i in range(3):
        (ws.root / f"f{i}").write_text("")
    result = await call(ws, "ls", limit=2)
    assert text_of(result) == "f0\nf1\n\n[2 entries limit reached. Use limit=4 for more]"
    assert result.details == {"entryLimitReached": 2}
    with pytest.raises(CodingToolError, match=rf"^Path not found: {ws.root}/nope$"):
        await call(ws, "ls", path="nope")
    with pytest.raises(CodingToolError, match=rf"^Not a directory: {ws.root}/f0$"):
        await call(ws, "ls", path="f0")


@pytest.fixture
def tree(ws: Workspace) -> Workspace:
    (ws.root / "src").mkdir()
    (ws.root / "src" / "a.py").write_text("def alpha():\n    return 1\n\ndef Beta():\n    pass\n")
    (ws.root / "notes.md").write_text("alpha (a.b)\n")
    (ws.root / ".git").mkdir()
    (ws.root / ".gitignore").write_text("build/\n")
    (ws.root / "build").mkdir()
    (ws.root / "build" / "out.py").write_text("def built():\n")
    (ws.root / "blob.bin").write_bytes(b"\0def binary")
    return ws


async def test_grep_finds_lines_with_numbers(tree: Workspace) -> None:
    """Matches come as path:line: text; ignored and binary files are skipped."""
    assert await run_text(tree, "grep", pattern=r"^def ") == (
        "src/a.py:1: def alpha():\nsrc/a.py:4: def Beta():"
    )


async def test_grep_options(tree: Workspace) -> None:
    """glob, ignoreCase, literal, context and path narrow or widen the search."""
    assert await run_text(tree, "grep", pattern="alpha", glob="*.md") == "notes.md:1: alpha (a.b)"
    assert (
        await run_text(tree, "grep", pattern="beta", ignoreCase=True) == "src/a.py:4: def Beta():"
    )
    assert await run_text(tree, "grep", pattern="(a.b)", literal=True) == "notes.md:1: alpha (a.b)"
    assert await run_text(tree, "grep", pattern="return", context=1) == (
        "src/a.py-1- def alpha():\nsrc/a.py:2:     return 1\nsrc/a.py-3- "
    )
    assert await run_text(tree, "grep", pattern="pass", path="src/a.py") == "a.py:5:     pass"


async def test_grep_limit_no_match_and_bad_regex(tree: Workspace) -> None:
    """The match limit adds a note; no match and an invalid regex have clear texts."""
    assert await run_text(tree, "grep", pattern="def", limit=1) == (
        "src/a.py:1: def alpha():\n\n[1 matches limit reached. Use limit=2 for more, "
        "or refine pattern]"
    )
    assert await run_text(tree, "grep", pattern="zzz") == "No matches found"
    with pytest.raises(CodingToolError, match=r"^regex parse error: \(: "):
        await call(tree, "grep", pattern="(")


async def test_grep_reads_past_a_leading_byte_order_mark(ws: Workspace) -> None:
    """A UTF-8 byte order mark opening a file is not part of its first line (ripgrep's
    decoding): ``^`` matches after it and the line is shown without it; one further in
    is text."""
    (ws.root / "bom.txt").write_bytes("\ufeffalpha\n\ufeffbeta\n".encode())
    assert await run_text(ws, "grep", pattern="^alpha") == "bom.txt:1: alpha"
    assert await run_text(ws, "grep", pattern="beta") == "bom.txt:2: \ufeffbeta"


async def test_find_globs_and_respects_gitignore(tree: Workspace) -> None:
    """find matches names (or paths with '/'), lists directories with '/', skips ignored."""
    assert await run_text(tree, "find", pattern="*.py") == "src/a.py"
    assert await run_text(tree, "find", pattern="src/*") == "src/a.py"
    assert await run_text(tree, "find", pattern="s*") == "src/"
    assert await run_text(tree, "find", pattern="*.rs") == "No files found matching pattern"
    result = await call(tree, "find", pattern="*", limit=2)
    assert text_of(result) == (
        ".git/\n.gitignore\n\n[2 results limit reached. Use limit=4 for more, or refine pattern]"
    )
    assert result.details == {"resultLimitReached": 2}


# -- bash -----------------------------------------------------------------------------


async def test_bash_runs_in_the_working_directory(ws: Workspace) -> None:
    """stdout and stderr come back together, trailing newline kept; the command runs in
    the root."""
    (ws.root / "here.txt").write_text("")
    text = await run_text(ws, "bash", command="ls; echo oops >&2")
    assert text == "here.txt\noops\n"
    assert await run_text(ws, "bash", command="true") == "(no output)"


async def test_bash_nonzero_exit_is_an_error(ws: Workspace) -> None:
    """A failing command raises with its output and exit code."""
    with pytest.raises(CodingToolError, match=r"^partial\n\n\nCommand exited with code 3$"):
        await call(ws, "bash", command="echo partial; exit 3")


async def test_bash_keeps_the_tail_of_long_output(ws: Workspace) -> None:
    """Only the last 2000 lines are kept, with a note naming the file with all of it."""
    result = await call(ws, "bash", command="seq 1 3000")
    body, note = text_of(result).split("\n\n")
    assert body.split("\n")[0] == "1001"
    assert isinstance(result.details, dict)
    full = result.details["fullOutputPath"]
    assert note == f"[Showing lines 1001-3000 of 3000. Full output: {full}]"
    assert await trio.Path(full).read_text() == "".join(f"{i}\n" for i in range(1, 3001))
    await trio.Path(full).unlink()


async def test_bash_sends_partial_output_while_it_runs(ws: Workspace) -> None:
    """An empty update first (as Pi), then the output so far."""
    tool = ws.tools(["bash"])[0]
    updates: list[ToolResult] = []
    await tool.execute(
        "c", {"command": "echo one; sleep 0.3; echo two"}, AbortSignal(), updates.append
    )
    assert updates[0] == ToolResult(content=())
    texts = [text_of(u) for u in updates[1:]]
    assert texts[0] == "one\n"
    assert texts[-1] == "one\ntwo\n"


async def test_bash_rejects_a_bad_timeout(ws: Workspace) -> None:
    """Pi's texts for a timeout that is not a positive number or is too large."""
    with pytest.raises(CodingToolError, match=r"^Invalid timeout: must be a finite number"):
        await call(ws, "bash", command="true", timeout=0)
    with pytest.raises(
        CodingToolError, match=r"^Invalid timeout: maximum is 2147483\.647 seconds$"
    ):
        await call(ws, "bash", command="true", timeout=10**7)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is dead


async def _wait_dead(pid: int) -> bool:
    for _ in range(500):
        if not _alive(pid):
            return True
        await trio.sleep(0.01)
    return False


async def _read_pid(path: Path) -> int:
    pid_file = trio.Path(path)
    while True:
        if await pid_file.exists() and (text := await pid_file.read_text()).strip():
            return int(text)
        await trio.sleep(0.01)


async def test_bash_timeout_kills_the_command(ws: Workspace) -> None:
    """After the timeout the command and its children are killed and the output kept."""
    with trio.fail_after(20), pytest.raises(CodingToolError) as info:
        await call(ws, "bash", command="echo begun; sleep 30 & echo $! > pid; wait", timeout=0.5)
    assert str(info.value) == "begun\n\n\nCommand timed out after 0.5 seconds"
    assert await _wait_dead(int((ws.root / "pid").read_text()))


async def test_bash_background_leftovers_do_not_hang(ws: Workspace) -> None:
    """A command that leaves a child holding the output pipe still returns."""
    with trio.fail_after(20):
        text = await run_text(ws, "bash", command="sleep 30 & echo $! > pid; echo started")
    assert text == "started\n"
    assert await _wait_dead(int((ws.root / "pid").read_text()))


async def test_abort_kills_the_running_command(ws: Workspace) -> None:
    """Aborting the agent run cancels bash, kills its process group and settles."""
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(
                ("c1", "bash", {"command": "sleep 30 & echo $! > pid; wait"})
            ),
            ScriptedResponse.text("unreachable"),
        ]
    )
    agent = Agent(stream_fn=model, tools=ws.tools())
    events: list[AgentEvent] = []
    agent.subscribe(lambda event, signal: events.append(event))
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.prompt, "go")
            pid = await _read_pid(ws.root / "pid")
            assert _alive(pid)
            agent.abort()
    ends = [e for e in events if isinstance(e, ToolExecutionEnd)]
    assert len(ends) == 1
    assert ends[0].is_error
    assert text_of(ends[0].result) == "Operation aborted"
    assert events[-1].type == "agent_end"
    assert agent.state.messages[-1].stop_reason == "aborted"
    assert await _wait_dead(pid)


# -- confinement: every path-taking tool, every escape ---------------------------------

SECRET = "the secret outside the root\n"
ESCAPES = ["dotdot", "absolute", "symlinked-dir", "symlinked-file"]
FILE_CALLS: dict[str, dict[str, Any]] = {
    "read": {},
    "write": {"content": "overwritten\n"},
    "edit": {"edits": [{"oldText": "secret", "newText": "EDITED"}]},
    "find": {"pattern": "*"},
    "grep": {"pattern": "secret"},
    "ls": {},
}


@pytest.fixture
def jail(tmp_path: Path) -> tuple[Workspace, Path]:
    """A workspace ``root`` next to a directory ``outside`` holding ``secret.txt``,
    with a symlinked directory and a symlinked file inside the root pointing there."""
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET)
    (root / "linkdir").symlink_to(outside, target_is_directory=True)
    (root / "linkfile").symlink_to(outside / "secret.txt")
    (root / "inside.txt").write_text("inside\n")
    return Workspace(root), outside


def escape_path(escape: str, outside: Path, *, directory: bool) -> str:
    target = "" if directory else "/secret.txt"
    if escape == "dotdot":
        return "../outside" + target
    if escape == "absolute":
        return str(outside) + target
    if escape == "symlinked-dir":
        return "linkdir" + target
    return "linkfile"  # a symlinked file (for ls: still leads outside)


@pytest.mark.parametrize("escape", ESCAPES)
@pytest.mark.parametrize("tool", sorted(FILE_CALLS))
async def test_every_path_tool_refuses_every_escape(
    jail: tuple[Workspace, Path], tool: str, escape: str
) -> None:
    """read, write, edit, ls, find and grep refuse ``..``, absolute paths, a symlinked
    directory and a symlinked file that lead outside, and the outside is unchanged."""
    ws, outside = jail
    before = sorted(p.name for p in outside.iterdir())
    path = escape_path(escape, outside, directory=tool in ("ls", "find"))
    with pytest.raises(CodingToolError, match=r"is outside the working directory"):
        await call(ws, tool, path=path, **FILE_CALLS[tool])
    assert (outside / "secret.txt").read_text() == SECRET
    assert sorted(p.name for p in outside.iterdir()) == before


async def test_grep_over_the_root_skips_files_symlinked_out_of_it(
    jail: tuple[Workspace, Path],
) -> None:
    """Searching the whole root does not follow a symlinked file (or directory) out of
    it: only the file inside matches."""
    ws, _ = jail
    (ws.root / "inside.txt").write_text("a secret kept inside\n")
    text = await run_text(ws, "grep", pattern="secret")
    assert text == "inside.txt:1: a secret kept inside"


async def test_symlinks_that_stay_inside_the_root_work(ws: Workspace) -> None:
    """Confinement is about where a path lands: an inner symlink is followed."""
    (ws.root / "real.txt").write_text("real\n")
    (ws.root / "alias.txt").symlink_to(ws.root / "real.txt")
    assert await run_text(ws, "read", path="alias.txt") == "real\n"
    assert await run_text(ws, "grep", pattern="real", path="alias.txt") == "alias.txt:1: real"


async def test_bash_shows_output_held_back_by_the_throttle(ws: Workspace) -> None:
    """Output that comes within the update interval is shown when the interval ends, not
    only when the command does (Pi's throttle timer)."""
    seen: list[tuple[str, bool]] = []
    done = ws.root / "done"

    def record(update: ToolResult) -> None:
        seen.append((text_of(update), done.exists()))

    tool = ws.tools(["bash"])[0]
    command = "printf one; sleep 0.02; printf two; sleep 1.5; touch done"
    with trio.fail_after(20):
        await tool.execute("c", {"command": command}, AbortSignal(), record)
    assert ("onetwo", False) in seen
