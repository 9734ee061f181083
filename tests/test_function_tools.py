"""Tools from typed functions (``pitrio.tool``): arguments, filled-in parameters, results."""

from __future__ import annotations

import dataclasses
import enum
import threading
from collections.abc import Callable
from typing import Annotated, Any, Literal

import attrs
import pytest
import trio

from pitrio import (
    AbortSignal,
    Agent,
    ArgumentTypeError,
    ImageContent,
    RunContext,
    TextContent,
    Tool,
    ToolCallId,
    ToolExecutionUpdate,
    ToolResult,
    ToolResultMessage,
    text_result,
    tool,
)
from pitrio._docstrings import parse_docstring
from pitrio._function_tools import _converter_for, json_schema_of
from pitrio.testing import ScriptedModel, ScriptedResponse


class Unit(enum.Enum):
    C = "celsius"
    F = "fahrenheit"


@dataclasses.dataclass
class Point:
    x: float
    y: float = 0.0


@attrs.frozen
class Segment:
    start: Point
    end: Point


async def call(t: Tool, arguments: dict[str, Any], **agent_kwargs: Any) -> ToolResultMessage:
    """Run one call of ``t`` through an agent (validation and all) and return its result."""
    model = ScriptedModel(
        [ScriptedResponse.tool_calls(("c1", t.name, arguments)), ScriptedResponse.text("ok")]
    )
    agent = Agent(stream_fn=model, tools=[t], **agent_kwargs)
    await agent.prompt("go")
    results = [m for m in agent.state.messages if isinstance(m, ToolResultMessage)]
    assert len(results) == 1
    return results[0]


def text(message: ToolResultMessage) -> str:
    return "".join(b.text for b in message.content if isinstance(b, TextContent))


async def test_arguments_arrive_as_the_annotated_types() -> None:
    """Validated arguments are converted: dataclasses, attrs classes, enums, tuples, sets."""
    seen: dict[str, Any] = {}

    @tool
    async def draw(
        segment: Segment,
        unit: Unit,
        pair: tuple[int, str],
        tags: set[str],
        scale: float,
        maybe: Point | None = None,
        mode: Literal["a", "b"] = "a",
    ) -> str:
        seen.update(locals())
        return "drawn"

    result = await call(
        draw,
        {
            "segment": {"start": {"x": 1}, "end": {"x": 2, "y": 3}},
            "unit": "celsius",
            "pair": [1, "one"],
            "tags": ["a", "b"],
            "scale": 2,
        },
    )
    assert text(result) == "drawn"
    assert not result.is_error
    assert seen["segment"] == Segment(Point(1.0, 0.0), Point(2.0, 3.0))
    assert seen["unit"] is Unit.C
    assert seen["pair"] == (1, "one")
    assert seen["tags"] == {"a", "b"}
    assert seen["scale"] == 2.0
    assert type(seen["scale"]) is float
    assert seen["maybe"] is None
    assert seen["mode"] == "a"


async def test_pi_coerces_and_validates_first() -> None:
    """Pi's coercion ("3" -> 3) runs before conversion, and its error texts are unchanged."""

    @tool
    async def add(a: float, b: int) -> str:
        return repr(a + b)

    ok = await call(add, {"a": "1.5", "b": "2"})
    assert text(ok) == "3.5"
    bad = await call(add, {"a": 1})
    assert bad.is_error
    assert text(bad).startswith('Validation failed for tool "add":\n  - b: must have required')
    extra = await call(add, {"a": 1, "b": 2, "c": 3})
    assert extra.is_error
    assert "must not have additional properties" in text(extra)


async def test_filled_in_parameters_are_not_in_the_schema() -> None:
    """The signal, the update callback, the run context and the call id are filled in."""
    seen: dict[str, Any] = {}

    @tool
    async def search(
        ctx: RunContext[dict[str, str]],
        query: str,
        signal: AbortSignal,
        call_id: ToolCallId,
        on_update: Callable[[ToolResult], None],
    ) -> str:
        on_update(text_result("halfway"))
        seen.update(ctx=ctx, signal=signal, call_id=call_id)
        return f"{ctx.deps['db']}: {query}"

    assert search.parameters == {
        "type": "object",
        "properties": {"query": {"type": "string"}},
        "required": ["query"],
        "additionalProperties": False,
    }
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("c7", "search", {"query": "trio"})),
            ScriptedResponse.text(""),
        ]
    )
    agent = Agent(stream_fn=model, tools=[search], deps={"db": "main"})
    updates: list[str] = []

    def listen(event: object, signal: AbortSignal) -> None:
        if isinstance(event, ToolExecutionUpdate):
            updates.append(event.partial_result.content[0].text)  # type: ignore[union-attr]  # a text block

    agent.subscribe(listen)
    await agent.prompt("go")
    result = agent.state.messages[2]
    assert isinstance(result, ToolResultMessage)
    assert text(result) == "main: trio"
    assert updates == ["halfway"]
    assert seen["call_id"] == "c7"
    assert seen["ctx"].tool_call_id == "c7"
    assert seen["ctx"].tool_name == "search"
    assert seen["ctx"].signal is seen["signal"]
    # per-run deps replace the agent's for that run only
    model2 = ScriptedModel(
        [ScriptedResponse.tool_calls(("c8", "search", {"query": "x"})), ScriptedResponse.text("")]
    )
    agent.stream_fn = model2
    run = await agent.run("again", deps={"db": "other"})
    assert isinstance(run.messages[2], ToolResultMessage)
    assert text(run.messages[2]) == "other: x"
    assert agent.deps == {"db": "main"}


async def test_sync_functions_run_inline_or_in_a_thread() -> None:
    """A sync tool runs in the run's thread; with thread=True in a worker thread."""
    main = threading.get_ident()

    @tool
    def inline(n: int) -> str:
        return "inline" if threading.get_ident() == main else "thread"

    def worker(n: int, on_update: Callable[[ToolResult], None]) -> str:
        on_update(text_result("from the thread"))
        return "inline" if threading.get_ident() == main else "thread"

    threaded = tool(worker, name="threaded", thread=True)
    assert text(await call(inline, {"n": 1})) == "inline"
    assert text(await call(threaded, {"n": 1})) == "thread"


@dataclasses.dataclass
class Forecast:
    city: str
    days: tuple[int, ...]
    unit: Unit


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("plain", "plain"),
        (42, "42"),
        (None, "null"),
        ({"ü": [1, 2.5, True]}, '{"ü":[1,2.5,true]}'),
        (Forecast("Lisbon", (1, 2), Unit.C), '{"city":"Lisbon","days":[1,2],"unit":"celsius"}'),
    ],
)
async def test_return_values_become_text(value: object, expected: str) -> None:
    """A str is the text; any other JSON-able value is dumped as compact JSON."""

    @tool
    async def give() -> object:
        return value

    result = await call(give, {})
    assert not result.is_error
    assert text(result) == expected


async def test_results_and_content_blocks_are_used_as_they_are() -> None:
    """A ToolResult is the result; content blocks are its content."""
    image = ImageContent(data="AAAA", mime_type="image/png")

    @tool
    async def as_result() -> ToolResult:
        return ToolResult(content=(TextContent(text="r"),), details={"k": 1})

    @tool
    async def as_blocks() -> list[TextContent | ImageContent]:
        return [TextContent(text="a picture"), image]

    r = await call(as_result, {})
    assert (text(r), r.details) == ("r", {"k": 1})
    b = await call(as_blocks, {})
    assert b.content == (TextContent(text="a picture"), image)


async def test_a_tool_that_raises_or_returns_junk_fails_as_data() -> None:
    """An exception, or a value with no JSON form, is an error tool result."""

    @tool
    async def boom() -> str:
        raise RuntimeError("disk on fire")

    @tool
    async def junk() -> object:
        return object()

    failed = await call(boom, {})
    assert (failed.is_error, text(failed)) == (True, "disk on fire")
    odd = await call(junk, {})
    assert odd.is_error
    assert text(odd) == (
        "tool 'junk' returned a object, which has no JSON form; return a str, a ToolResult, "
        "content blocks or a JSON-able value"
    )


def test_the_docstring_gives_the_descriptions() -> None:
    """The summary is the description; documented parameters get theirs."""

    @tool(name="weather", execution_mode="sequential")
    async def forecast(city: str, days: int = 3) -> str:
        """Forecast the weather.

        Looks the city up first.

        Args:
            city: the city's name,
                in English.
            days (int): how many days.

        Raises:
            LookupError: no such city.
        """
        return ""

    assert forecast.name == "weather"
    assert forecast.execution_mode == "sequential"
    assert forecast.description == "Forecast the weather.\n\nLooks the city up first."
    assert forecast.parameters["properties"] == {
        "city": {"type": "string", "description": "the city's name,\nin English."},
        "days": {"type": "integer", "description": "how many days.", "default": 3},
    }
    assert tool(forecast.execute_fn, name="x", description="mine").description == "mine"


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        (None, ("", {})),
        ("One line.", ("One line.", {})),
        (
            "Sum.\n\n    :param a: first.\n    :type a: int\n    :param int b: second\n"
            "        continued.\n    :returns: the sum.\n",
            ("Sum.", {"a": "first.", "b": "second\ncontinued."}),
        ),
        (
            "Sum.\n\nParameters\n----------\na : int\n    first.\n*rest\n    more.\n\n"
            "Returns\n-------\nint\n    the sum.\n",
            ("Sum.", {"a": "first.", "rest": "more."}),
        ),
        (
            "Sum.\n\nArgs:\n    a: first.\n    **kw: others.\n\nReturns:\n    b: not a param.\n",
            ("Sum.", {"a": "first.", "kw": "others."}),
        ),
    ],
)
def test_docstring_styles(doc: str | None, expected: tuple[str, dict[str, str]]) -> None:
    """Google, NumPy and Sphinx docstrings are read alike; other sections are left out."""
    assert parse_docstring(doc) == expected


@dataclasses.dataclass
class Node:
    value: int
    children: list[Node]


def test_bad_signatures_are_refused_with_a_reason() -> None:
    """A parameter pitrio cannot describe is refused when the tool is built."""

    async def no_annotation(a) -> str:  # type: ignore[no-untyped-def]  # the case under test
        return ""

    async def star(*args: int) -> str:
        return ""

    async def unknown(when: complex) -> str:
        return ""

    async def recursive(tree: Node) -> str:
        return ""

    async def int_keys(m: dict[int, str]) -> str:
        return ""

    async def is_async(a: int) -> str:
        return ""

    cases: list[tuple[Callable[[], object], str]] = [
        (lambda: tool(no_annotation), "parameter 'a' has no annotation"),
        (lambda: tool(star), "*args / **args cannot be described"),
        (lambda: tool(unknown), "parameter 'when': complex has no JSON schema"),
        (lambda: tool(recursive), "Node contains itself"),
        (lambda: tool(int_keys), "dict keys must be str (JSON object keys); got int"),
        (lambda: tool(lambda a: a), "a lambda has no usable name; pass name='...'"),
        (lambda: tool(is_async, thread=True), "thread=True is for sync functions"),
        (lambda: tool(3), "expected a function; got int"),  # type: ignore[call-overload]  # the case under test
    ]
    for build, text_part in cases:
        with pytest.raises(ArgumentTypeError) as info:  # text checked below
            build()
        assert text_part in str(info.value)


def test_json_schema_of_names_the_offending_type() -> None:
    """json_schema_of() describes one annotation, or says what is missing."""
    assert json_schema_of(list[Unit]) == {
        "type": "array",
        "items": {"enum": ["celsius", "fahrenheit"], "type": "string"},
    }
    with pytest.raises(ArgumentTypeError, match=r"^bytes has no JSON schema"):
        json_schema_of(bytes)


async def test_an_aborted_run_cancels_a_running_tool() -> None:
    """A decorated tool runs in the run's cancel scope: abort() cuts it short."""
    started = trio.Event()

    @tool
    async def slow(seconds: float) -> str:
        started.set()
        await trio.sleep(seconds)
        return "finished"

    model = ScriptedModel(
        [ScriptedResponse.tool_calls(("c1", "slow", {"seconds": 100})), ScriptedResponse.text("")]
    )
    agent = Agent(stream_fn=model, tools=[slow])
    async with trio.open_nursery() as nursery:
        nursery.start_soon(agent.prompt, "go")
        await started.wait()
        agent.abort()
    result = agent.state.messages[2]
    assert isinstance(result, ToolResultMessage)
    assert (result.is_error, text(result)) == (True, "Operation aborted")


@attrs.frozen
class Positive:
    n: int = attrs.field(validator=attrs.validators.gt(0))


async def test_a_conversion_failure_is_an_error_result_naming_the_argument() -> None:
    """What passes the schema but not the class (an attrs validator) fails as data."""

    @tool
    async def count(p: Positive) -> str:
        return str(p.n)

    assert text(await call(count, {"p": {"n": 3}})) == "3"
    failed = await call(count, {"p": {"n": -1}})
    assert failed.is_error
    assert text(failed).startswith("Invalid argument 'p' for tool 'count': ")
    # The validator's own words, not cattrs' "While structuring Positive" summary.
    assert "'n' must be > 0: -1" in text(failed)
    assert "While structuring" not in text(failed)


def test_unions_take_the_first_member_that_fits() -> None:
    """Exact JSON types first, then each member in order; none fitting is an error."""
    assert _converter_for(int | str)("x") == "x"
    assert _converter_for(int | str)(5) == 5
    as_float = _converter_for(float | None)(2)
    assert (as_float, type(as_float)) == (2.0, float)
    assert _converter_for(float | None)(None) is None
    assert _converter_for(Point | int)({"x": 1}) == Point(1.0)
    assert _converter_for(list[Unit | int])(["celsius", 3]) == [Unit.C, 3]
    with pytest.raises(ValueError, match="matches no member of"):
        _converter_for(Point | None)("nowhere")


def test_more_annotations() -> None:
    """Annotated is its type; None, bare tuples and tuple[()] have schemas; bad literals not."""
    assert json_schema_of(Annotated[int, "meta"]) == {"type": "integer"}
    assert json_schema_of(None) == {"type": "null"}
    assert json_schema_of(tuple) == {"type": "array", "items": {}}
    assert json_schema_of(tuple[()]) == {"type": "array", "minItems": 0, "maxItems": 0}
    assert json_schema_of(Literal["a", None]) == {"enum": ["a", None]}
    with pytest.raises(ArgumentTypeError, match=r"literal value b'x' is not a str"):
        json_schema_of(Literal[b"x"])


async def test_a_single_image_and_a_plain_json_return() -> None:
    """One content block is the content; a plain-argument tool may return JSON values."""
    image = ImageContent(data="AAAA", mime_type="image/png")

    @tool
    async def picture() -> ImageContent:
        return image

    @tool
    async def numbers(n: int) -> list[int]:
        return list(range(n))

    assert (await call(picture, {})).content == (image,)
    assert text(await call(numbers, {"n": 3})) == "[0,1,2]"


def test_positional_only_and_unresolvable_annotations_are_refused() -> None:
    """A positional-only parameter, or an annotation naming nothing, is refused."""

    async def positional(a: int, /) -> str:
        return ""

    async def dangling(a: NoSuchType) -> str:  # type: ignore[name-defined]  # the case under test  # noqa: F821
        return ""

    with pytest.raises(ArgumentTypeError, match="parameter 'a' is positional-only"):
        tool(positional)
    with pytest.raises(ArgumentTypeError, match="cannot resolve the annotations"):
        tool(dangling)


async def test_an_integral_float_arrives_as_an_int() -> None:
    """JSON's 5.0 passes Pi's integer check; an int parameter still gets an int."""

    @tool
    async def count(n: int) -> str:
        return repr(list(range(n)))

    assert text(await call(count, {"n": 3.0})) == "[0, 1, 2]"


async def test_the_benchmarks_decorated_tool_does_the_same_work() -> None:
    """bench_loop's --tool-style decorated runs the same calls as the hand-written tool."""
    from benchmarks.bench_loop import Workload, run_once

    for style in ("pi", "decorated"):
        w = Workload(turns=3, k=2, model="minimal", tool_style=style)
        await run_once(w)
        assert w.calls == 6
    assert dict(Workload(tool_style="decorated").tool.parameters)["properties"] == {
        "i": {"type": "integer"}
    }
