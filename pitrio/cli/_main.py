"""``python -m pitrio``: a coding agent in the terminal.

With no model configured (no ``--model`` and no provider API key in the environment)
the CLI runs its embedded offline demo: a scripted model, not an LLM, drives the real
coding tools through a short session in a fresh temporary directory, so the first
run on a new machine shows what an agent does without a network or a key::

    python -m pitrio                                   # the offline demo
    python -m pitrio -p "add a test for foo()"         # one prompt, then exit
    python -m pitrio --model anthropic/claude-sonnet-4-5
    python -m pitrio --base-url http://127.0.0.1:8080/v1 --model qwen2.5-7b-instruct

Without ``-p`` and with a real model, a terminal gets the interactive prompt: Ctrl-C
aborts the running answer, Ctrl-C again (or Ctrl-D) exits, and lines typed while the
agent works are queued as steering messages. Exit status: 0 done, 1 the model failed,
2 bad arguments, 130 interrupted.

This module is the only place that calls :func:`trio.run`.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import difflib
import json
import os
import shlex
import signal as signal_module
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TextIO, final, get_args

import attrs
import trio

from .._agent import Agent
from .._events import (
    AgentEnd,
    AgentEvent,
    MessageEnd,
    MessageStart,
    MessageUpdate,
    TextDeltaEvent,
    ThinkingDeltaEvent,
    ThinkingEndEvent,
    ThinkingStartEvent,
    ToolExecutionEnd,
    ToolExecutionStart,
)
from .._messages import (
    AssistantMessage,
    TextContent,
    ThinkingLevel,
    ToolResultMessage,
    UserMessage,
)
from .._model import Context, Model, StreamFn
from .._wire import unstructure
from ..coding import Workspace

if TYPE_CHECKING:
    from .._signal import AbortSignal
    from ..testing import ScriptedModel, ScriptedResponse

__all__ = ["DEMO_PROMPT", "main", "offline_model", "run"]

EXIT_OK = 0
EXIT_MODEL_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

DEMO_PROMPT = "Create a small Python module that greets someone, check it, and run it."
"""What the offline demo is asked when no ``-p`` is given."""

DEFAULT_MODELS: tuple[tuple[str, str], ...] = (
    ("anthropic", "claude-sonnet-4-5"),
    ("openai", "gpt-4.1"),
)
"""The model used when a provider's API key is set and no ``--model`` is given, in order."""

_OFFLINE_MODEL = Model(
    id="offline-demo", name="pitrio offline demo", api="scripted", provider="pitrio"
)
_INJECTED_MODEL = Model(id="scripted", api="scripted", provider="scripted")
_BASE_URL_KEY_ENV = "PITRIO_API_KEY"
_THINKING_LEVELS: tuple[str, ...] = get_args(ThinkingLevel)


def run() -> NoReturn:
    """The ``pitrio`` console script."""
    sys.exit(main())


def main(
    argv: Sequence[str] | None = None,
    *,
    stream_fn: StreamFn | None = None,
    env: Mapping[str, str] | None = None,
    stdin: TextIO | None = None,
) -> int:
    """Run the CLI; returns the exit status.

    Args:
        argv: the arguments (default ``sys.argv[1:]``).
        stream_fn: a testing seam: use this stream function instead of a real or the
            offline model (``--model``, if given, only names the model).
        env: the environment to read API keys from (default ``os.environ``).
        stdin: where prompts are read from (default ``sys.stdin``).
    """
    parser = _parser()
    environ = os.environ if env is None else env
    source = sys.stdin if stdin is None else stdin
    try:
        args = parser.parse_args(argv)
        if args.list_models:
            return _list_models()
        config = _configure(parser, args, environ, stream_fn, source)
    except SystemExit as exc:  # argparse's way of reporting --help and bad arguments
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        return trio.run(_amain, config, source)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


# --------------------------------------------------------------------------------------
# Arguments and configuration


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pitrio",
        description=(
            "A coding agent on pitrio. With no model configured it runs an offline demo "
            "(a scripted model driving the real tools in a temporary directory)."
        ),
        epilog=(
            "API keys come from the environment (ANTHROPIC_API_KEY, OPENAI_API_KEY, ...; "
            f"{_BASE_URL_KEY_ENV} for --base-url servers). In the interactive prompt, "
            "Ctrl-C aborts the running answer and Ctrl-C again or Ctrl-D exits."
        ),
    )
    parser.add_argument("-p", "--prompt", help="run this one prompt, print the answer, exit")
    parser.add_argument(
        "-i",
        "--interactive",
        action="store_true",
        help="read prompts line by line (the default in a terminal when a model is set)",
    )
    parser.add_argument(
        "-m",
        "--model",
        metavar="PROVIDER/ID",
        help="model to use, e.g. anthropic/claude-sonnet-4-5 or openai/gpt-4.1 "
        "(with --base-url: the model name the server expects)",
    )
    parser.add_argument(
        "--base-url",
        metavar="URL",
        help="an OpenAI-compatible server (llama.cpp, vLLM, Ollama, ...), "
        "e.g. http://127.0.0.1:8080/v1",
    )
    parser.add_argument("--system", metavar="TEXT", help="replace the default system prompt")
    parser.add_argument(
        "--thinking",
        choices=_THINKING_LEVELS,
        default="off",
        help="reasoning effort for models that support it (default: off)",
    )
    parser.add_argument(
        "--cwd",
        metavar="DIR",
        help="working directory the tools are confined to (default: the current one)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print every event as a JSON line (Pi's wire form)"
    )
    parser.add_argument(
        "--offline",
        action="store_true",
        help="use the embedded offline demo model even if an API key is set",
    )
    parser.add_argument(
        "--list-models", action="store_true", help="list the built-in models and exit"
    )
    return parser


@final
@attrs.frozen(kw_only=True)
class _Config:
    """Everything a session needs, checked before Trio starts."""

    mode: str  # "once", "repl" or "demo"
    prompt: str | None
    model: Model
    stream_fn: StreamFn | None  # None: the Models registry's stream function
    api_key: str | None  # for a --base-url server
    system_prompt: str | None
    thinking: ThinkingLevel
    cwd: str | None  # None: a fresh temporary directory (the offline demo)
    cwd_ignored: bool  # --cwd was given to the offline demo
    json: bool
    env: Mapping[str, str]


def _configure(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    env: Mapping[str, str],
    stream_fn: StreamFn | None,
    stdin: TextIO,
) -> _Config:
    """Check the arguments and pick the model; ``parser.error`` (exit 2) when they are bad."""
    if args.prompt is not None and not args.prompt.strip():
        parser.error("-p needs a non-empty prompt, e.g. -p 'explain main.py'")
    if args.offline and (args.model or args.base_url):
        parser.error(
            "--offline runs the embedded demo model; drop --model/--base-url, "
            "or drop --offline to use them"
        )
    if args.base_url is not None:
        if not args.model:
            parser.error(
                "--base-url needs --model MODEL_ID, the model name the server serves "
                "(e.g. --base-url http://127.0.0.1:8080/v1 --model qwen2.5-7b-instruct)"
            )
        if not args.base_url.startswith(("http://", "https://")):
            parser.error(
                f"--base-url must be an http:// or https:// URL of the API root, "
                f"e.g. http://127.0.0.1:8080/v1; got {args.base_url!r}"
            )
    cwd: str | None = None
    if args.cwd is not None:
        if not os.path.isdir(args.cwd):
            parser.error(f"--cwd {args.cwd!r} is not a directory; pass an existing directory")
        cwd = os.path.abspath(args.cwd)

    api_key: str | None = None
    if stream_fn is not None:
        model = _INJECTED_MODEL
        if args.model:
            provider, _, model_id = args.model.rpartition("/")
            model = Model(id=model_id, api="scripted", provider=provider or "scripted")
        offline = False
    elif args.offline:
        model, offline = _OFFLINE_MODEL, True
    elif args.base_url is not None:
        model, offline = _openai_compatible(args.base_url, args.model), False
        api_key = env.get(_BASE_URL_KEY_ENV) or "none"  # local servers take any key
    elif args.model:
        model, offline = _catalog_model(parser, args.model, env), False
    else:
        default = _default_model(env)
        model, offline = (default, False) if default is not None else (_OFFLINE_MODEL, True)

    if offline and not args.interactive:
        mode, prompt = "demo", args.prompt or DEMO_PROMPT
    elif args.interactive:
        mode, prompt = "repl", args.prompt
    elif args.prompt is not None:
        mode, prompt = "once", args.prompt
    elif _isatty(stdin):
        mode, prompt = "repl", None
    else:
        prompt = stdin.read().strip()
        if not prompt:
            parser.error(
                "no prompt: pass -p PROMPT, pipe a prompt on stdin, or run pitrio in a "
                "terminal for the interactive prompt"
            )
        mode = "once"
    return _Config(
        mode=mode,
        prompt=prompt,
        model=model,
        stream_fn=offline_model() if offline else stream_fn,
        api_key=api_key,
        system_prompt=args.system,
        thinking=args.thinking,
        # The demo never touches the user's files: it gets a fresh temporary directory.
        cwd=None if offline else (cwd or os.getcwd()),
        cwd_ignored=offline and cwd is not None,
        json=args.json,
        env=env,
    )


def _catalog_model(parser: argparse.ArgumentParser, spec: str, env: Mapping[str, str]) -> Model:
    provider, slash, model_id = spec.partition("/")
    if not slash or not provider or not model_id:
        parser.error(
            f"--model {spec!r} needs the form PROVIDER/MODEL_ID, e.g. openai/gpt-4.1 or "
            "anthropic/claude-sonnet-4-5 (for an OpenAI-compatible server add --base-url URL)"
        )
    try:
        from ..providers import Models
    except ImportError as exc:  # pragma: no cover  # the providers package is part of pitrio
        parser.error(f"the model providers cannot be loaded ({exc}); use --offline")
    models = Models(env=env)
    providers = models.providers()
    if provider not in providers:
        known = ", ".join(repr(p) for p in providers)
        parser.error(
            f"unknown provider {provider!r} in --model {spec!r}; known providers: {known} "
            "(for any OpenAI-compatible service use --base-url URL --model MODEL_ID)"
        )
    model = models.get(provider, model_id)
    if model is None:
        ids = [m.id for m in models.list(provider)]
        close = difflib.get_close_matches(model_id, ids, n=4, cutoff=0.4)
        hint = (
            f"; did you mean {', '.join(repr(f'{provider}/{c}') for c in close)}?" if close else ""
        )
        parser.error(
            f"unknown model {model_id!r} for provider {provider!r}{hint} "
            "(pitrio --list-models lists them all)"
        )
    if models.api_key_for(provider) is None:
        parser.error(f"no API key for provider {provider!r}: set {_key_names(provider)}")
    return model


def _default_model(env: Mapping[str, str]) -> Model | None:
    """The first default model whose provider has a key in ``env``."""
    if not any(value and name.endswith(("_API_KEY", "_TOKEN")) for name, value in env.items()):
        return None  # no key at all: skip loading the providers (and httpx)
    try:
        from ..providers import Models, env_api_key
    except ImportError:  # pragma: no cover  # the providers package is part of pitrio
        return None
    for provider, model_id in DEFAULT_MODELS:
        if env_api_key(provider, env):
            model = Models(env=env).get(provider, model_id)
            if model is not None:
                return model
    return None


def _openai_compatible(base_url: str, model_id: str) -> Model:
    from ..providers import openai_compatible

    return openai_compatible(base_url, model_id)


def _key_names(provider: str) -> str:
    from .. import providers

    # The provider module's table of key variables; fall back to the usual spelling.
    names: tuple[str, ...] = getattr(providers, "_ENV_KEYS", {}).get(provider, ())
    if not names:
        names = (f"{provider.upper().replace('-', '_')}_API_KEY",)
    return " or ".join(names)


def _list_models() -> int:
    from ..providers import Models

    models = Models()
    for model in models.list():
        print(f"{model.provider}/{model.id}")
    return EXIT_OK


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


# --------------------------------------------------------------------------------------
# The session


async def _amain(config: _Config, stdin: TextIO) -> int:
    out = sys.stdout
    # Notes and the prompt go to stderr when stdout carries JSON lines.
    ui = sys.stderr if config.json or config.mode == "demo" else sys.stdout
    status = EXIT_OK
    async with contextlib.AsyncExitStack() as stack:
        cwd = config.cwd
        if cwd is None:
            cwd = stack.enter_context(tempfile.TemporaryDirectory(prefix="pitrio-demo-"))
        stream_fn = config.stream_fn
        if stream_fn is None:
            from ..providers import Models

            key = config.api_key
            models = await stack.enter_async_context(
                Models(env=config.env, get_api_key=(lambda _provider: key) if key else None)
            )
            stream_fn = models.stream_fn
        agent = Agent(
            system_prompt=(
                config.system_prompt
                if config.system_prompt is not None
                else default_system_prompt(cwd)
            ),
            model=config.model,
            thinking_level=config.thinking,
            tools=Workspace(cwd).tools(),
            stream_fn=stream_fn,
        )
        if config.json:
            agent.subscribe(_JsonLines(out))
        else:
            agent.subscribe(Transcript(out, color=_use_color(out, config.env)))
        interrupts = await stack.enter_async_context(_open_interrupts())
        if config.cwd is None:
            ignored = " (--cwd is not used by the demo)" if config.cwd_ignored else ""
            print(
                f"pitrio offline demo: no model configured, so a scripted model (not an LLM) "
                f"drives the real tools in the temporary directory {cwd}{ignored}\n",
                file=ui,
                flush=True,
            )
        if config.mode == "repl":
            _print_banner(config, cwd, ui)
            status = await repl(agent, _read_lines(stdin), interrupts, ui, first=config.prompt)
        else:
            assert config.prompt is not None
            status = await run_once(agent, config.prompt, interrupts)
        if config.mode == "demo":
            print(
                "\nThat was the offline demo. For a real model set ANTHROPIC_API_KEY or "
                "OPENAI_API_KEY, or pass --model PROVIDER/ID, or --base-url URL --model ID "
                "for a local OpenAI-compatible server (see docs/cli.md).",
                file=ui,
                flush=True,
            )
    return status


def default_system_prompt(cwd: str) -> str:
    """The system prompt used unless ``--system`` replaces it."""
    today = datetime.date.today().isoformat()
    return (
        "You are an expert coding assistant. You help with coding tasks by reading files, "
        "running commands, editing code and writing new files.\n\n"
        "Available tools:\n"
        "- read: read file contents (offset/limit page through long files)\n"
        "- write: create or overwrite a file\n"
        "- edit: replace one exact, unique piece of text in a file\n"
        "- ls: list a directory\n"
        "- grep: search file contents with a regular expression\n"
        "- bash: run a shell command (ls, python3, git, tests, ...)\n\n"
        "Guidelines:\n"
        "- Read a file before editing it; use edit for small changes, write for new files.\n"
        "- Paths are relative to the working directory; tools refuse paths outside it.\n"
        "- Be concise. Show file paths when you change files.\n\n"
        f"Current date: {today}\n"
        f"Current working directory: {cwd}"
    )


def _print_banner(config: _Config, cwd: str, ui: TextIO) -> None:
    model = config.model
    print(
        f"pitrio: {model.provider}/{model.id} in {cwd}. Ctrl-C aborts a running answer; "
        "Ctrl-C again or Ctrl-D exits. Lines typed while the agent works steer it.",
        file=ui,
        flush=True,
    )


async def run_once(agent: Agent, prompt: str, interrupts: AsyncIterator[object]) -> int:
    """Run one prompt to the end; returns the exit status.

    The first interrupt aborts the run (which still settles); a second one stops
    waiting for it.
    """
    interrupted = False
    async with trio.open_nursery() as nursery:

        async def watch() -> None:
            nonlocal interrupted
            async for _ in interrupts:
                if interrupted:
                    nursery.cancel_scope.cancel(reason="second interrupt")
                    return
                interrupted = True
                agent.abort()

        nursery.start_soon(watch)
        await agent.prompt(prompt)
        nursery.cancel_scope.cancel(reason="the run has settled")
    if interrupted:
        return EXIT_INTERRUPTED
    return _status_of(agent)


def _status_of(agent: Agent) -> int:
    messages = agent.state.messages
    last = messages[-1] if messages else None
    if isinstance(last, AssistantMessage):
        if last.stop_reason == "error":
            return EXIT_MODEL_ERROR
        if last.stop_reason == "aborted":
            return EXIT_INTERRUPTED
    return EXIT_OK


async def repl(
    agent: Agent,
    lines: AsyncIterator[str],
    interrupts: AsyncIterator[object],
    ui: TextIO,
    *,
    first: str | None = None,
) -> int:
    """The interactive prompt; returns the exit status when ``lines`` end or on interrupt.

    A line typed while a run is active is queued with :meth:`Agent.steer`. An
    interrupt aborts the active run (and drops the queued lines); an interrupt while
    no run is active ends the prompt.
    """
    status = EXIT_OK
    aborted = False

    def show_prompt() -> None:
        print("> ", end="", file=ui, flush=True)

    async def turn(text: str, *, task_status: trio.TaskStatus[None]) -> None:
        nonlocal aborted
        aborted = False
        await agent.prompt(text, task_status=task_status)
        # Lines queued after the run's last steering poll are still waiting: run them.
        while agent.queued_steering and not aborted:
            await agent.resume()
        show_prompt()

    async with trio.open_nursery() as nursery:

        async def watch() -> None:
            nonlocal status, aborted
            async for _ in interrupts:
                signal = agent.signal
                if signal is not None and not signal.aborted:
                    aborted = True
                    dropped = len(agent.queued_steering) + len(agent.queued_follow_up)
                    agent.clear_all_queues()
                    agent.abort()
                    note = f" ({dropped} queued line(s) dropped)" if dropped else ""
                    print(f"\n[aborted{note}; Ctrl-C again or Ctrl-D exits]", file=ui, flush=True)
                else:
                    print(file=ui, flush=True)
                    status = EXIT_INTERRUPTED
                    nursery.cancel_scope.cancel(reason="interrupt while idle")
                    return

        nursery.start_soon(watch)
        if first is not None and first.strip():
            await nursery.start(turn, first.strip())
        else:
            show_prompt()
        async for line in lines:
            text = line.strip()
            if not text:
                if not agent.is_running:
                    show_prompt()
                continue
            if agent.is_running:
                agent.steer(text)
                print("[queued: delivered after the current step]", file=ui, flush=True)
            else:
                await nursery.start(turn, text)
        await agent.wait_for_idle()
        print(file=ui, flush=True)
        nursery.cancel_scope.cancel(reason="end of input")
    return status


async def _read_lines(stream: TextIO) -> AsyncIterator[str]:
    """Lines of ``stream``, each read in a worker thread, until end of input."""
    while True:
        line = await trio.to_thread.run_sync(stream.readline, abandon_on_cancel=True)
        if not line:
            return
        yield line


@contextlib.asynccontextmanager
async def _open_interrupts() -> AsyncIterator[AsyncIterator[object]]:
    """Ctrl-C presses as an async iterator (instead of KeyboardInterrupt) while open.

    Off the main thread, where Trio cannot take over SIGINT, the iterator never yields.
    """
    if threading.current_thread() is not threading.main_thread():
        send, receive = trio.open_memory_channel[object](0)
        with send, receive:
            yield receive
        return
    with trio.open_signal_receiver(signal_module.SIGINT) as receiver:
        yield receiver


# --------------------------------------------------------------------------------------
# Output


def _use_color(stream: TextIO, env: Mapping[str, str]) -> bool:
    return _isatty(stream) and "NO_COLOR" not in env and env.get("TERM") != "dumb"


@final
class Transcript:
    """A listener that prints a readable transcript: streamed text, tool calls, results."""

    __slots__ = ("_at_line_start", "_color", "_last_call", "_out")

    MAX_RESULT_LINES = 8
    MAX_LINE_CHARS = 160
    MAX_ARG_CHARS = 100

    def __init__(self, out: TextIO, *, color: bool = False) -> None:
        self._out = out
        self._color = color
        self._at_line_start = True
        self._last_call: str | None = None

    def __call__(self, event: AgentEvent, signal: AbortSignal) -> None:
        if isinstance(event, MessageStart) and isinstance(event.message, AssistantMessage):
            self._line_break()
        elif isinstance(event, MessageUpdate):
            update = event.assistant_message_event
            if isinstance(update, TextDeltaEvent):
                self._write(update.delta)
            elif isinstance(update, ThinkingStartEvent):
                self._line_break()
                self._write(self._style("thinking: ", "2"))
            elif isinstance(update, ThinkingDeltaEvent):
                self._write(self._style(update.delta, "2"))
            elif isinstance(update, ThinkingEndEvent):
                self._line_break()
        elif isinstance(event, MessageEnd) and isinstance(event.message, AssistantMessage):
            self._assistant_end(event.message)
        elif isinstance(event, ToolExecutionStart):
            self._line_break()
            self._write(
                self._style(
                    f"-> {event.tool_name}({_format_args(event.args, self.MAX_ARG_CHARS)})", "36"
                )
            )
            self._write("\n")
            self._last_call = event.tool_call_id
        elif isinstance(event, ToolExecutionEnd):
            self._tool_end(event)
        elif isinstance(event, AgentEnd):
            self._line_break()
        self._out.flush()

    def _assistant_end(self, message: AssistantMessage) -> None:
        if message.stop_reason == "error":
            self._line_break()
            self._write(
                self._style(f"error: {message.error_message or 'unknown error'}", "31") + "\n"
            )
        elif message.stop_reason == "aborted":
            self._line_break()
            self._write(self._style("(aborted)", "33") + "\n")
        self._last_call = None

    def _tool_end(self, event: ToolExecutionEnd) -> None:
        self._line_break()
        if self._last_call != event.tool_call_id:
            self._write(self._style(f"<- {event.tool_name}", "36") + "\n")
        self._last_call = None
        text = "\n".join(
            b.text if isinstance(b, TextContent) else f"[image {b.mime_type}]"
            for b in event.result.content
        ).rstrip()
        lines = text.split("\n") if text else ["(empty)"]
        shown = lines[: self.MAX_RESULT_LINES]
        if event.is_error:
            shown[0] = "error: " + shown[0]
        for line in shown:
            clipped = (
                line if len(line) <= self.MAX_LINE_CHARS else line[: self.MAX_LINE_CHARS] + "..."
            )
            self._write(self._style(f"   {clipped}", "31" if event.is_error else "2") + "\n")
        if len(lines) > len(shown):
            self._write(self._style(f"   ... ({len(lines) - len(shown)} more lines)", "2") + "\n")

    def _write(self, text: str) -> None:
        if not text:
            return
        self._out.write(text)
        self._at_line_start = text.endswith("\n")

    def _line_break(self) -> None:
        if not self._at_line_start:
            self._write("\n")

    def _style(self, text: str, code: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self._color else text


def _format_args(args: Any, limit: int) -> str:
    if not isinstance(args, dict):
        return _clip(json.dumps(args, ensure_ascii=False), limit)
    return ", ".join(
        f"{key}={_clip(json.dumps(value, ensure_ascii=False), limit)}"
        for key, value in args.items()
    )


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


@final
class _JsonLines:
    """A listener that prints each event as one JSON line, in Pi's wire form."""

    __slots__ = ("_out",)

    def __init__(self, out: TextIO) -> None:
        self._out = out

    def __call__(self, event: AgentEvent, signal: AbortSignal) -> None:
        self._out.write(json.dumps(event_to_wire(event), ensure_ascii=False) + "\n")
        self._out.flush()


def event_to_wire(event: Any) -> dict[str, Any]:
    """An agent event (or a provider stream event inside one) as Pi writes it."""
    data: dict[str, Any] = unstructure(event)
    return data


# --------------------------------------------------------------------------------------
# The embedded offline model


_DEMO_FILE = "greet.py"
_DEMO_SOURCE = """def greet(name: str) -> str:
    return f"Hello, {name}!"


if __name__ == "__main__":
    print(greet("world"))
"""


def offline_model() -> ScriptedModel:
    """The embedded offline model: a script that uses the coding tools like an agent would.

    Whatever it is asked, it writes ``greet.py``, reads it back, edits it, lists and
    searches the directory (two tools in one batch), runs it with bash and then
    answers with what the command printed. It needs no network and no key.
    """
    # Imported here: pitrio.testing pulls in trio.testing, which real-model runs never need.
    from ..testing import ScriptedModel, ScriptedResponse

    counter = 0

    def next_id() -> str:
        nonlocal counter
        counter += 1
        return f"demo_{counter}"

    # The interpreter running pitrio surely exists; "python3" may not be on PATH.
    python = shlex.quote(sys.executable)

    def respond(context: Context) -> ScriptedResponse:
        step, prompt = _demo_progress(context.messages)
        options: dict[str, Any] = {"chunk_size": 6, "checkpoint_each_event": True}
        if step == 0:
            return _say_and_call(
                "I'll write a small Python module first.",
                [("write", {"path": _DEMO_FILE, "content": _DEMO_SOURCE})],
                next_id,
                options,
            )
        if step == 1:
            return _say_and_call(
                "Let me read it back to check it.",
                [("read", {"path": _DEMO_FILE})],
                next_id,
                options,
            )
        if step == 2:
            return _say_and_call(
                "A friendlier greeting: one exact replacement.",
                [
                    (
                        "edit",
                        {
                            "path": _DEMO_FILE,
                            "oldText": 'return f"Hello, {name}!"',
                            "newText": 'return f"Hello, {name}! Nice to meet you."',
                        },
                    )
                ],
                next_id,
                options,
            )
        if step == 3:
            return _say_and_call(
                "Now the directory and the definitions in it, two tools at once.",
                [("ls", {"path": "."}), ("grep", {"pattern": r"^def ", "path": "."})],
                next_id,
                options,
            )
        if step == 4:
            command = (
                f"{python} -c 'import greet; "
                f'print(greet.greet("world")); print(greet.greet("Trio"))\''
            )
            return _say_and_call(
                "Finally, run it.", [("bash", {"command": command})], next_id, options
            )
        return ScriptedResponse.text(_demo_answer(context.messages, prompt), **options)

    return ScriptedModel(respond, record_requests=False)


def _say_and_call(
    text: str,
    calls: list[tuple[str, dict[str, Any]]],
    next_id: Callable[[], str],
    options: dict[str, Any],
) -> ScriptedResponse:
    from .._messages import ToolCall
    from ..testing import ScriptedResponse

    return ScriptedResponse(
        content=(
            TextContent(text=text),
            *(ToolCall(id=next_id(), name=name, arguments=args) for name, args in calls),
        ),
        **options,
    )


def _demo_progress(messages: Sequence[Any]) -> tuple[int, str]:
    """How many answers the demo gave since the last user message, and that message."""
    step = 0
    prompt = ""
    for message in reversed(messages):
        if isinstance(message, UserMessage):
            content = message.content
            prompt = (
                content
                if isinstance(content, str)
                else "".join(b.text for b in content if isinstance(b, TextContent))
            )
            break
        if isinstance(message, AssistantMessage):
            step += 1
    return step, prompt


def _demo_answer(messages: Sequence[Any], prompt: str) -> str:
    result = next(
        (m for m in reversed(messages) if isinstance(m, ToolResultMessage)),
        None,
    )
    output = ""
    if result is not None:
        output = "".join(b.text for b in result.content if isinstance(b, TextContent)).strip()
    if result is None or result.is_error:
        body = f"The last step failed:\n\n{output or '(no output)'}\n\n"
    else:
        body = (
            f"Done. I wrote `{_DEMO_FILE}`, read it back, edited the greeting, listed and "
            f"searched the directory, and ran it. It printed:\n\n{output}\n\n"
        )
    note = "(This answer came from pitrio's offline demo script, not a language model"
    if prompt.strip() and prompt.strip() != DEMO_PROMPT:
        note += (
            "; it does the same thing whatever it is asked, "
            f"so it did not act on {prompt.strip()!r}"
        )
    return body + note + ".)"
