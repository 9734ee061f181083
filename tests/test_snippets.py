"""Every Python code block of the documentation runs, or is a file that runs.

Each fenced ``python`` block in docs/**/*.md and README.md is one of:

- a file of docs/examples/ shown verbatim (the README; tests/test_examples.py runs it); the
  docs site includes those files with ``literalinclude`` instead of copying them;
- a snippet executed here, with top-level ``await`` allowed, in virtual time. A snippet
  that uses names it does not define (``agent``, ``harness``...) names its hidden setup on
  the line before the fence: ``<!-- snippet: SETUP -->``, a function of ``SETUPS`` below
  that provides those names and may check what the snippet did;
- pseudo-code (a signature, a skeleton with ``...`` holes), marked on the line before the
  fence with ``<!-- illustrative: why it cannot run -->``. The marker must stay rare.

A failure names the file and line of the block.
"""

from __future__ import annotations

import ast
import gc
import inspect
import json
import re
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio
import trio.testing

from pitrio import Agent, Model, Tool, text_result
from pitrio.testing import ScriptedModel, ScriptedResponse

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
EXAMPLES = DOCS / "examples"
MAX_ILLUSTRATIVE = 3

FENCE = re.compile(r"^(?P<fence>```+|~~~+)\s*(?P<info>[^\n]*)$")
PYTHON_INFO = re.compile(r"^(\{code-block\}\s+|\{code\}\s+)?(python3?|py)\b")
MARKER = re.compile(r"^<!--\s*(?P<kind>snippet|illustrative):\s*(?P<value>.*?)\s*-->$")


@attrs.frozen
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    code: str
    marker: tuple[str, str] | None  # ("snippet", setup) or ("illustrative", reason)

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def doc_files() -> list[Path]:
    pages = [p for p in DOCS.rglob("*.md") if "_build" not in p.relative_to(DOCS).parts]
    return [*sorted(pages), ROOT / "README.md"]


def python_blocks(path: Path) -> Iterator[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        fence, start = match["fence"], i
        end = start + 1
        while end < len(lines) and not lines[end].startswith(fence):
            end += 1
        body = lines[start + 1 : end]
        if PYTHON_INFO.match(match["info"]):
            # MyST directive options (":lines: 3") at the top are not code
            while body and body[0].startswith(":") and match["info"].startswith("{"):
                body = body[1:]
            before = start - 1
            while before >= 0 and not lines[before].strip():
                before -= 1
            marker_match = MARKER.match(lines[before].strip()) if before >= 0 else None
            marker = (marker_match["kind"], marker_match["value"]) if marker_match else None
            yield Block(path, start + 1, "\n".join(body) + "\n", marker)
        i = end + 1


ALL_BLOCKS = [block for path in doc_files() for block in python_blocks(path)]
EXAMPLE_TEXTS = {path.read_text(encoding="utf-8") for path in EXAMPLES.glob("*.py")}
EXECUTED = [
    block
    for block in ALL_BLOCKS
    if block.code not in EXAMPLE_TEXTS and (block.marker is None or block.marker[0] == "snippet")
]


# --- hidden setups: the names a snippet uses but does not define ----------------------------

Check = Callable[[dict[str, Any]], Awaitable[None]]
Setup = Callable[[dict[str, Any], pytest.MonkeyPatch], Check | None]


def slow_agent(seconds: float = 3600) -> Agent:
    """An agent whose model takes ``seconds`` (virtual) to answer."""
    model = ScriptedModel(lambda context: ScriptedResponse.text("done", delay=seconds))
    return Agent(stream_fn=model)


async def add(call_id: str, params: Any, signal: Any, on_update: Any) -> Any:
    return text_result(str(params["a"] + params["b"]))


ADD_TOOL = Tool(
    name="add",
    description="Add two numbers",
    execute=add,
    parameters={
        "type": "object",
        "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
        "required": ["a", "b"],
    },
)


def fake_chat_server(request: httpx.Request) -> httpx.Response:
    """An OpenAI-compatible server (llama.cpp, vLLM, Ollama) answering "What is 2 + 3?"
    with a call of ``add``, then with the tool's result."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return f"data: {json.dumps({'choices': [choice]})}\n\n"

    body = json.loads(request.content)
    if body["messages"][-1]["role"] == "tool":
        events = [
            chunk({"content": "2 + 3 = " + body["messages"][-1]["content"]}),
            chunk({}, "stop"),
        ]
    elif body.get("tools"):
        call = {"index": 0, "id": "call_1", "type": "function",
                "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}  # fmt: skip
        events = [chunk({"tool_calls": [call]}), chunk({}, "tool_calls")]
    else:
        events = [chunk({"content": "hello"}), chunk({}, "stop")]
    sse = "".join(events) + "data: [DONE]\n\n"
    return httpx.Response(200, text=sse, headers={"content-type": "text/event-stream"})


def local_server(ns: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Check:
    """``Models()`` opens its own client: give every new client the fake server."""
    real_client = httpx.AsyncClient

    class ClientOfTheFakeServer(real_client):  # type: ignore[misc, valid-type]
        def __init__(self, **kwargs: Any) -> None:
            kwargs.setdefault("transport", httpx.MockTransport(fake_chat_server))
            super().__init__(**kwargs)

    monkeypatch.setattr(httpx, "AsyncClient", ClientOfTheFakeServer)
    printed: list[str] = []
    ns.update(
        Agent=Agent,
        add_tool=ADD_TOOL,
        add=ADD_TOOL,
        MODEL=Model(
            id="qwen2.5-7b-instruct",
            provider="llama-cpp",
            api="openai-completions",
            base_url="http://127.0.0.1:8080/v1",
        ),
        print=lambda *args: printed.append(" ".join(map(str, args))),
    )

    async def check(ns: dict[str, Any]) -> None:
        if "main" in ns:  # the snippet defines main(): run it
            await ns["main"]()
            assert printed[-1] == "2 + 3 = 5", printed
        if "agent" in ns:
            assert ns["agent"].state.error_message is None

    return check


def a_deadline(ns: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Check:
    ns.update(trio=trio, agent=slow_agent())

    async def check(ns: dict[str, Any]) -> None:
        assert ns["scope"].cancelled_caught
        assert ns["agent"].state.messages[-1].stop_reason == "aborted"
        assert not ns["agent"].state.is_streaming

    return check


def many_agents(ns: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Check:
    ns.update(trio=trio, agents=[slow_agent() for _ in range(3)], tasks=["a", "b", "c"])

    async def check(ns: dict[str, Any]) -> None:
        for agent in ns["agents"]:
            assert agent.state.messages[-1].stop_reason == "aborted"

    return check


def racing_agents(ns: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Check:
    agents = [slow_agent(60), slow_agent(5), slow_agent(60)]
    ns.update(trio=trio, agents=agents)

    async def check(ns: dict[str, Any]) -> None:
        winner = await ns["race"](agents, "which of you is fastest?")
        assert winner is agents[1]
        assert [a.state.messages[-1].stop_reason for a in agents] == ["aborted", "stop", "aborted"]
        assert trio.current_time() == 5

    return check


def startup(ns: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Check:
    served: list[object] = []

    async def load_everything() -> tuple[object, object]:
        await trio.lowlevel.checkpoint()
        return object(), object()

    async def serve(service: object) -> None:
        served.append(service)

    ns.update(load_everything=load_everything, serve=serve)

    async def check(ns: dict[str, Any]) -> None:
        try:
            await ns["main"]()
            assert gc.isenabled()
            assert gc.get_freeze_count() > 0
            assert len(served) == 1
        finally:
            gc.unfreeze()  # this test process must go on collecting
            gc.enable()

    return check


def agent_parts(ns: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Check:
    ns.update(
        Agent=Agent,
        model=Model(id="scripted", provider="scripted"),
        models=type("Models", (), {"stream_fn": ScriptedModel([ScriptedResponse.text("hi")])}),
    )

    async def check(ns: dict[str, Any]) -> None:
        await ns["agent"].prompt("hello")
        assert ns["agent"].state.messages[-1].text == "hi"

    return check


def no_api_keys(ns: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Check:
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_OAUTH_TOKEN", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    ns.update(Agent=Agent)

    async def check(ns: dict[str, Any]) -> None:
        # no key: the run ends as data (an error message), prompt() did not raise
        last = ns["agent"].state.messages[-1]
        assert last.stop_reason == "error"
        assert "API key" in last.error_message

    return check


def harness_parts(ns: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Check:
    from pitrio.harness import CompactionSettings, Harness, InMemorySessionStore, RetrySettings

    ns.update(
        Harness=Harness,
        RetrySettings=RetrySettings,
        CompactionSettings=CompactionSettings,
        model=Model(id="scripted", provider="scripted"),
        stream_fn=ScriptedModel([ScriptedResponse.text("hello to you")]),
        session=None,
        tool_or_factory=ADD_TOOL,
    )
    store = InMemorySessionStore()

    async def check(ns: dict[str, Any]) -> None:
        assert ns["harness"].messages[-1].text == "hello to you"
        assert store is not None

    return check


def web_transport(ns: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Check:
    from pitrio.harness import Harness

    sent: list[Any] = []
    model = ScriptedModel([ScriptedResponse.text("Hi there.", chunk_size=3)])
    harness = Harness(model=Model(id="scripted", provider="scripted"), stream_fn=model)

    class Client:
        def send_all(self, messages: list[Any]) -> None:
            sent.append(messages)

    class Session:
        def build_context(self) -> Any:
            return type("Ctx", (), {"messages": []})

    broadcast: list[Any] = []
    ns.update(harness=harness, broadcast=broadcast.append, new_client=Client(),
              session=Session())  # fmt: skip

    async def check(ns: dict[str, Any]) -> None:
        await harness.prompt("hello")
        kinds = [frame["type"] for frame in broadcast]
        assert "append" in kinds
        assert "appendDelta" in kinds
        assert kinds[-1] == "status"
        snapshot = ns["view"].snapshot()
        assert snapshot  # a late joiner gets the whole conversation
        assert [[m.to_json()["type"] for m in batch] for batch in sent] == [["status"]]

    return check


SETUPS: dict[str, Setup] = {
    "local-server": local_server,
    "a-deadline": a_deadline,
    "many-agents": many_agents,
    "racing-agents": racing_agents,
    "startup": startup,
    "agent-parts": agent_parts,
    "no-api-keys": no_api_keys,
    "harness-parts": harness_parts,
    "web-transport": web_transport,
}


# --- the tests ------------------------------------------------------------------------------


def test_the_docs_have_python_blocks() -> None:
    assert len(ALL_BLOCKS) >= 10
    assert EXECUTED, "no snippet is executed"


def test_every_block_runs_or_is_an_example_file() -> None:
    problems = []
    for block in ALL_BLOCKS:
        if block.path.name == "README.md" and block.code not in EXAMPLE_TEXTS:
            problems.append(f"{block.where}: a README block must be a file of docs/examples/")
        if block.marker and block.marker[0] == "snippet" and block.marker[1] not in SETUPS:
            problems.append(
                f"{block.where}: unknown setup {block.marker[1]!r} (tests/test_snippets.py"
                f" SETUPS has {sorted(SETUPS)})"
            )
        if block.marker and block.marker[0] == "illustrative" and len(block.marker[1]) < 10:
            problems.append(f"{block.where}: say why the block cannot run (illustrative: ...)")
    assert not problems, "\n".join(problems)


def test_illustrative_blocks_are_rare() -> None:
    illustrative = [b.where for b in ALL_BLOCKS if b.marker and b.marker[0] == "illustrative"]
    assert len(illustrative) <= MAX_ILLUSTRATIVE, (
        f"{len(illustrative)} pseudo-code blocks (at most {MAX_ILLUSTRATIVE}): {illustrative};"
        " make one a snippet with a setup, or include a part of a runnable example"
        " (literalinclude :pyobject:)"
    )


def test_every_literalinclude_is_a_run_example() -> None:
    """What the site includes is a file the examples test runs."""
    from test_examples import EXPECTED_OUTPUT

    problems = []
    for path in doc_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            match = re.match(r"^```+\{literalinclude\}\s+(\S+)", line)
            if not match:
                continue
            target = (path.parent / match[1]).resolve()
            where = f"{path.relative_to(ROOT)}:{number}"
            if target.parent != EXAMPLES:
                problems.append(f"{where}: includes {match[1]}, not a file of docs/examples/")
            elif target.name not in EXPECTED_OUTPUT:
                problems.append(f"{where}: {target.name} is not run by tests/test_examples.py")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("block", EXECUTED, ids=[block.where for block in EXECUTED])
def test_snippet_runs(block: Block, monkeypatch: pytest.MonkeyPatch) -> None:
    namespace: dict[str, Any] = {"__name__": "snippet"}
    setup = SETUPS[block.marker[1]] if block.marker else None
    check = setup(namespace, monkeypatch) if setup else None
    # line numbers in a traceback are the Markdown file's
    source = "\n" * block.line + block.code
    try:
        code = compile(source, block.where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    except SyntaxError as exc:
        pytest.fail(f"{block.where}: the block is not valid Python: {exc}")

    async def run() -> None:
        result = eval(code, namespace)
        if inspect.iscoroutine(result):
            await result
        if check is not None:
            await check(namespace)

    try:
        trio.run(run, clock=trio.testing.MockClock(autojump_threshold=0))
    except Exception as exc:
        raise AssertionError(f"{block.where}: the snippet failed: {exc!r}") from exc
