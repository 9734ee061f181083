"""The renderer's live region in virtual time: markdown blocks rendered once as they
complete, the open block redrawn at most every REFRESH_SECONDS (so a long answer costs
linear time), a spinner only while something runs, plain text without ``live``."""

from __future__ import annotations

import io
from typing import Any

import trio
import trio.testing

from pitrio import (
    AgentEnd,
    AgentStart,
    AssistantMessage,
    MessageEnd,
    MessageStart,
    MessageUpdate,
    TextContent,
    TextDeltaEvent,
    ThinkingDeltaEvent,
    ThinkingEndEvent,
    ThinkingStartEvent,
    ToolCall,
    ToolExecutionEnd,
    ToolExecutionStart,
    ToolResult,
)
from pitrio.cli._render import Renderer

PARTIAL = AssistantMessage(stop_reason="pending")


class Terminal(io.StringIO):
    """A StringIO the renderer takes for a terminal (no size: 80x24)."""

    def isatty(self) -> bool:
        return True


def delta(text: str) -> MessageUpdate:
    event = TextDeltaEvent(content_index=0, delta=text, partial=PARTIAL)
    return MessageUpdate(message=PARTIAL, assistant_message_event=event)


def answer_events(text: str, pieces: int) -> list[Any]:
    size = max(1, len(text) // pieces)
    final = AssistantMessage(content=(TextContent(text=text),))
    return [
        AgentStart(),
        MessageStart(message=PARTIAL),
        *(delta(text[i : i + size]) for i in range(0, len(text), size)),
        MessageEnd(message=final),
        AgentEnd(messages=(final,)),
    ]


class CountingRenderer:
    """A live rich Renderer that counts what it hands to rich's markdown renderer."""

    def __init__(self) -> None:
        self.out = Terminal()
        self.renderer = Renderer(self.out, style="rich", live=True)
        self.rendered_chars = 0
        self.renders = 0
        markdown = self.renderer._markdown

        def counting(text: str) -> list[str]:
            self.renders += 1
            self.rendered_chars += len(text)
            return markdown(text)

        self.renderer._markdown = counting  # type: ignore[method-assign]


async def stream(render: CountingRenderer, events: list[Any], gap: float) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(render.renderer.animate)
        for event in events:
            render.renderer(event)
            await trio.sleep(gap)
        nursery.cancel_scope.cancel()


async def test_markdown_blocks_render_once_and_streaming_stays_linear(
    autojump_clock: trio.testing.MockClock,
) -> None:
    blocks = [f"## Part {i}\n\nSome **bold** text number {i}, " + "words " * 20 for i in range(300)]
    text = "\n\n".join(blocks)
    render = CountingRenderer()
    start = trio.current_time()
    events = answer_events(text, pieces=6000)
    await stream(render, events, gap=0.01)  # ~6,000 deltas over ~60 s
    ticks = (trio.current_time() - start) / Renderer.REFRESH_SECONDS + 1
    out = render.out.getvalue()
    assert "## Part" not in out
    assert "**bold**" not in out
    assert "Part 299" in out
    # Every block (heading, paragraph) rendered once when complete, plus the open block
    # at most once per refresh: linear in the answer, not one render per delta.
    complete_blocks = text.count("\n\n") + 1
    assert len(events) > 6000
    assert render.renders <= complete_blocks + ticks
    assert render.rendered_chars <= len(text) + ticks * max(map(len, blocks))


async def test_the_answer_is_rendered_while_it_streams(
    autojump_clock: trio.testing.MockClock,
) -> None:
    render = CountingRenderer()
    renderer = render.renderer
    async with trio.open_nursery() as nursery:
        nursery.start_soon(renderer.animate)
        renderer(AgentStart())
        renderer(MessageStart(message=PARTIAL))
        await trio.sleep(0.3)
        assert "waiting for the model… 0s" in render.out.getvalue()
        renderer(delta("# Title\n\nThe **open** para"))
        await trio.sleep(0.3)
        shown = render.out.getvalue()
        assert "Title" in shown  # a complete block
        assert "# Title" not in shown
        assert "\x1b[1mopen\x1b[0m" in shown  # the open block, drawn live
        nursery.cancel_scope.cancel()


async def test_a_spinner_turns_only_while_a_tool_runs(
    autojump_clock: trio.testing.MockClock,
) -> None:
    out = Terminal()
    renderer = Renderer(out, style="ansi", live=True)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(renderer.animate)
        renderer(AgentStart())
        renderer(ToolExecutionStart(tool_call_id="a", tool_name="bash", args={"command": "x"}))
        await trio.sleep(2.05)
        during = out.getvalue()
        assert "bash running… 2s" in during
        assert len({c for c in during if c in "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"}) == 10  # every frame drawn
        result = ToolResult(content=(TextContent(text="ok"),))
        renderer(
            ToolExecutionEnd(tool_call_id="a", tool_name="bash", result=result, is_error=False)
        )
        renderer(AgentEnd(messages=()))
        size = len(out.getvalue())
        await trio.sleep(5)  # idle: nothing is redrawn
        assert len(out.getvalue()) == size
        assert out.getvalue().endswith("\x1b[J")  # the region erased at the end
        nursery.cancel_scope.cancel()


def test_without_live_there_are_no_frames_or_cursor_moves() -> None:
    out = io.StringIO()
    renderer = Renderer(out, style="plain", live=True)  # plain never draws a region
    for event in answer_events("## Title\n\nbody", pieces=4):
        renderer(event)
    text = out.getvalue()
    assert text == "## Title\n\nbody\n"


def update(event: Any) -> MessageUpdate:
    return MessageUpdate(message=PARTIAL, assistant_message_event=event)


async def test_thinking_streams_dimmed_lines_with_the_open_one_live(
    autojump_clock: trio.testing.MockClock,
) -> None:
    out = Terminal()
    renderer = Renderer(out, style="ansi", live=True)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(renderer.animate)
        renderer(AgentStart())
        renderer(MessageStart(message=PARTIAL))
        renderer(update(ThinkingStartEvent(content_index=0, partial=PARTIAL)))
        for piece in ("first ", "thought\nsecond", " half"):
            renderer(update(ThinkingDeltaEvent(content_index=0, delta=piece, partial=PARTIAL)))
        await trio.sleep(0.25)
        during = out.getvalue()
        # The complete line printed once, dimmed italic; the open line drawn live.
        assert during.count("\x1b[2;3mthinking: first thought\x1b[0m\n") == 1
        assert "\x1b[2;3msecond half\x1b[0m" in during
        end = ThinkingEndEvent(content_index=0, content="", partial=PARTIAL)
        renderer(update(end))
        renderer(delta("answer"))
        final = AssistantMessage(content=(TextContent(text="answer"),))
        renderer(MessageEnd(message=final))
        renderer(AgentEnd(messages=(final,)))
        text = out.getvalue()
        assert text.count("\x1b[2;3msecond half\x1b[0m\n") == 1  # printed when it ended
        assert text.index("second half\x1b[0m\n") < text.rindex("answer\n")
        nursery.cancel_scope.cancel()


async def test_a_huge_open_block_costs_a_screenful_per_redraw(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """One 200,000-character paragraph (no blank line ends it): each redraw renders at
    most about a screen of it, not the whole block so far."""
    text = "word " * 40_000
    render = CountingRenderer()
    await stream(render, answer_events(text, pieces=2000), gap=0.01)
    screen = 24 * 80
    # 2,000 redraws of at most a screenful, plus the complete block once at the end.
    assert render.rendered_chars <= len(text) + render.renders * screen
    assert render.renders > 100
    assert "word word" in render.out.getvalue()


def test_blocks_split_at_blank_lines_outside_fences() -> None:
    from pitrio.cli._render import _Blocks

    blocks = _Blocks()
    text = (
        "# T\n\npara one\nstill one\n\n```py\nx = 1\n\ny = 2\n```\n\n- a\n\n  more a\n- b\n\nlast"
    )
    done = [block for i in range(0, len(text), 3) for block in blocks.feed(text[i : i + 3])]
    assert done == [
        "# T",
        "para one\nstill one",
        "```py\nx = 1\n\ny = 2\n```",  # the blank line inside the fence does not split
        "- a\n\n  more a\n- b",  # nor does an indented continuation
    ]
    assert blocks.view(10, 1000) == "last"
    assert blocks.close() == "last"

    code = _Blocks()
    code.feed("```py\n" + "".join(f"line {i}\n" for i in range(100)))
    assert code.view(5, 1000).splitlines() == ["```py", "line 96", "line 97", "line 98", "line 99"]
    assert code.view(50, 20).splitlines()[0] == "```py"  # re-opened when cut by size too


async def test_a_compaction_outside_a_run_gets_its_own_spinner(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from pitrio.harness import CompactionEnd, CompactionStart

    out = Terminal()
    renderer = Renderer(out, style="ansi", live=True)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(renderer.animate)
        renderer(CompactionStart(reason="manual"))  # /compact: no run around it
        await trio.sleep(1.25)
        assert "compacting the context… 1s" in out.getvalue()
        renderer(CompactionEnd(reason="manual", status="completed", tokens_before=2000))
        size = len(out.getvalue())
        await trio.sleep(1)
        assert len(out.getvalue()) == size  # the region is gone, nothing redrawn
        assert "[compacted from ~2.0k tokens: older messages summarised]" in out.getvalue()
        nursery.cancel_scope.cancel()


def test_a_resumed_call_ends_with_its_arguments_from_the_transcript() -> None:
    """A call resumed after a killed run ends without a start in this process: its
    header and its last line name the command from the transcript's tool call."""
    call = ToolCall(id="c1", name="bash", arguments={"command": "sleep 5; echo hi"})
    transcript = [AssistantMessage(content=(call,), stop_reason="toolUse")]
    out = io.StringIO()
    renderer = Renderer(out, messages=lambda: transcript)
    result = ToolResult(content=(TextContent(text="[interrupted]"),))
    renderer(ToolExecutionEnd(tool_call_id="c1", tool_name="bash", result=result, is_error=True))
    assert out.getvalue().splitlines() == [
        "● bash sleep 5; echo hi",
        "  │ [interrupted]",
        "  └ bash sleep 5; echo hi ✗ failed",
    ]
    out.truncate(0)
    out.seek(0)
    renderer(ToolExecutionEnd(tool_call_id="c9", tool_name="bash", result=result, is_error=True))
    assert out.getvalue().splitlines()[0] == "● bash "  # a call the transcript lacks
