"""The CLI's core: the :class:`App` every mode runs (a Harness with the coding tools, a
session, consent, output), and what the modes share: :func:`run_once` (one prompt to its
end), :func:`open_interrupts` (Ctrl-C as an iterator), :func:`tools_for`,
:func:`default_system_prompt` and :func:`event_to_wire`.

The modes (:mod:`pitrio.cli._interactive`, :mod:`pitrio.cli._json_mode`,
:mod:`pitrio.cli._rpc`, :mod:`pitrio.cli._mcp`, and ``pitrio serve`` in :mod:`pitrio.web`)
import this module; :mod:`pitrio.cli._run` starts an App and hands it to one of them.
This module imports none of them.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import re
import signal as signal_module
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, TextIO, cast, final

import trio

from pitrio import (
    AssistantMessage,
    ImageContent,
    Model,
    StreamFn,
    StreamOptions,
    ThinkingLevel,
    wire,
)
from pitrio.coding import DEFAULT_TOOL_NAMES, coding_tools
from pitrio.harness import (
    Harness,
    HarnessEvent,
    PromptTemplate,
    Resources,
    Session,
    SessionStore,
    SystemPromptFn,
    ToolContext,
    TurnState,
    expand_prompt_template,
    expand_skill_command,
)

from ._args import EXIT_INTERRUPTED, EXIT_MODEL_ERROR, EXIT_OK
from ._consent import Consent
from ._login import has_stored_key
from ._loopback import RefusingStreamFn
from ._resources import CodingResources, CustomProvider, build_system_prompt, custom_providers
from ._setup import AppSettings, api_key_lookup, restore_from_session

if TYPE_CHECKING:
    from pitrio.mcp import McpToolset

__all__ = [
    "App",
    "default_system_prompt",
    "event_to_wire",
    "open_interrupts",
    "run_once",
    "tools_for",
]


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


def event_to_wire(event: Any) -> dict[str, Any]:
    """An agent or harness event as one JSON object in Pi's wire form (camelCase)."""
    data: dict[str, Any] = wire.unstructure(event)
    event_type = getattr(event, "type", None)
    if isinstance(event_type, str) and "type" not in data:
        data = {"type": event_type, **data}
    return data


def tools_for(
    context: ToolContext,
    names: Sequence[str] = DEFAULT_TOOL_NAMES,
    model: Callable[[], Model | None] | None = None,
) -> list[Any]:
    """The coding tools bound to the harness's working directory: Pi's default set (read,
    bash, edit, write) unless ``names`` (Pi's ``--tools`` names) says otherwise; ``model``
    returns the model their calls are made for (read tells one without image input that
    an image will be omitted, as Pi's)."""
    return list(coding_tools(context.cwd, names, model=model))


@final
class App:
    """One CLI run: the harness, its session store and session, consent, output."""

    def __init__(
        self,
        settings: AppSettings,
        *,
        cwd: str,
        stream_fn: StreamFn | None,
        store: SessionStore | None,
        session: Session | None,
        templates: tuple[PromptTemplate, ...],
        out: TextIO,
        err: TextIO,
        resources: CodingResources | None = None,
        mcp: McpToolset | None = None,
        startup: AppSettings | None = None,
    ) -> None:
        self.settings = settings
        self.startup = startup if startup is not None else settings
        """The settings before a continued session's model and level were restored: what
        a session switched to later is resolved against, as Pi's runtime does each time."""
        self.mcp = mcp
        """The configured MCP servers (``mcp.json``), if any: their tools join the coding
        tools."""
        self.cwd = cwd
        self.stream_fn = stream_fn
        self.store = store
        self.session = session
        self.templates = templates
        self.resources = resources
        self.out = out
        self.err = err
        self.model = settings.model
        self.thinking: ThinkingLevel = settings.thinking
        ask_mode = {
            "export": "--export",
            "print": "-p",
            "json": "--mode json",
            "rpc": "--mode rpc",
            "interactive": "the interactive prompt",
        }[settings.mode]
        self.consent = Consent(settings.policy, yes=settings.yes, mode_hint=ask_mode, cwd=cwd)
        self._listeners: list[Callable[[HarnessEvent], Any]] = []
        self.harness = self._make_harness(session)

    # -- the harness ---------------------------------------------------------------------

    def _make_harness(self, session: Session | None) -> Harness:
        settings = self.settings
        resources = self.resources
        system_prompt: str | SystemPromptFn
        if settings.system_prompt is not None and resources is None:
            system_prompt = settings.system_prompt  # the replay with --system-prompt
        elif resources is None:  # the offline replay: the prompt it was recorded with
            system_prompt = default_system_prompt(self.cwd)
        else:
            system_prompt = self._pi_system_prompt
        harness = Harness(
            model=self.model,
            stream_fn=self.stream_fn,
            session=session,
            tools=[self._tools] if self.mcp is None else [self._tools, self.mcp],
            system_prompt=system_prompt,
            thinking_level=self.thinking,
            cwd=self.cwd,
            resources=Resources(
                prompt_templates=self.templates,
                skills=resources.skills if resources is not None else (),
                context_files=resources.context_files if resources is not None else (),
            ),
            get_api_key=api_key_lookup(settings, self.custom_providers),
            stream_options=_local_options() if settings.local_port is not None else None,
            compaction_failure="continue",  # as Pi's coding agent: the run goes on
        )
        harness.hooks.on("tool_call", self.consent)
        if isinstance(self.stream_fn, RefusingStreamFn):
            self.stream_fn.harness = harness  # a refused loopback server is not retried
        for listener in self._listeners:
            harness.subscribe(listener)
        return harness

    def _tools(self, context: ToolContext) -> list[Any]:
        """The coding tools, as ``--tools`` / ``--exclude-tools`` / ``--no-tools`` select
        (Pi's ``buildSessionOptions``: ``--tools`` picks among all of them, in its order;
        otherwise the default set less the excluded ones)."""
        selection = self.settings.tools
        model = self._tool_model
        if selection.default:
            return tools_for(context, model=model)
        if selection.allow is not None:
            pool = coding_tools(context.cwd, model=model)
        else:
            pool = tools_for(context, model=model)
        return selection.select(pool, lambda t: t.name)

    def _tool_model(self) -> Model:
        """The model the tools' calls are made for: the harness's, as it changes."""
        harness: Harness | None = getattr(self, "harness", None)  # (built after the tools)
        return harness.model if harness is not None else self.model

    def expand(self, text: str) -> str:
        """A typed prompt as Pi's coding agent sends it: ``/skill:NAME args`` becomes the
        skill's invocation, then ``/TEMPLATE args`` the template's text (any mode)."""
        if not text.startswith("/"):
            return text
        skills = self.resources.skills if self.resources is not None else ()
        return expand_prompt_template(expand_skill_command(text, skills), self.templates)

    def _pi_system_prompt(self, turn: TurnState) -> str:
        """Pi's coding-agent prompt for the turn's tools, with the loaded resources."""
        resources = self.resources
        assert resources is not None
        return build_system_prompt(
            cwd=self.cwd,
            tools=[tool.name for tool in turn.tools],
            custom_prompt=resources.system_prompt,
            append_system_prompt=resources.append_system_prompt,
            context_files=resources.context_files,
            skills=resources.skills,
        )

    def subscribe(self, listener: Callable[[HarnessEvent], Any]) -> None:
        """Listen to this and every later harness (after /resume, /fork, /clear)."""
        self._listeners.append(listener)
        self.harness.subscribe(listener)

    async def switch_session(self, session: Session | None, *, restore: bool = False) -> None:
        """Continue in ``session`` (closing the current one).

        ``restore``: take the model and thinking level as Pi's coding agent does when it
        replaces its session (``/resume``, ``/fork``, ``/clone``, RPC ``switch_session``,
        ``new_session``, ``fork``, ``clone``, ``/clear``): a session holding messages
        brings back its own, a new one starts with the run's (what the command line and the
        settings chose: ``/model``, ``/thinking`` and their RPC commands are not saved as
        defaults, as in Pi).
        """
        old = self.session
        self.session = session
        if restore and (session is None or session is not old):
            self._restore(session)
        self.harness = self._make_harness(session)
        if old is not None and old is not session:
            await old.close()

    def _restore(self, session: Session | None) -> None:
        from pitrio.providers._options import clamp_thinking_level

        settings = self.startup  # a model and its key stay together
        if session is not None and session.leaf_id is not None:
            settings = restore_from_session(settings, session, self.err)
        self.settings = settings
        self.model = settings.model
        self.thinking = cast("ThinkingLevel", clamp_thinking_level(self.model, settings.thinking))

    @functools.cached_property
    def custom_providers(self) -> dict[str, CustomProvider]:
        """Pi's ``models.json`` providers with models, read once for the run."""
        return custom_providers(self.startup.env)[0]

    @property
    def fixed_model(self) -> bool:
        """Whether this run's model is its only one: the offline replay, a test model,
        ``--base-url``, ``--local``."""
        start = self.startup
        if start.offline or start.stream_fn is not None:
            return True
        if start.base_url is None:
            return False
        chosen = self.custom_providers.get(start.model.provider)
        return chosen is None or start.model not in chosen.models  # not a models.json one

    def available_models(self) -> list[Model]:
        """The models this run can switch to (Pi's available models): the catalog's of
        each provider with a key, then those of models.json's providers with an
        ``apiKey`` (not resolved here: a ``!command`` runs when a request needs it)."""
        if self.fixed_model:
            return [self.model]
        from pitrio.providers import Models, env_api_key

        settings = self.settings
        models = Models(env=settings.env)
        available = []
        for provider in models.providers():
            if (
                provider == self.model.provider
                or env_api_key(provider, settings.env)
                or (provider in settings.config_keys)
                or has_stored_key(provider, settings.env, settings.stored_auth)
            ):
                available.extend(models.list(provider))
        listed = {(m.provider, m.id) for m in available}
        for custom in self.custom_providers.values():
            if custom.api_key is not None or custom.name == self.model.provider:
                available.extend(m for m in custom.models if (m.provider, m.id) not in listed)
        return available or [self.model]

    async def set_model(self, model: Model) -> None:
        self.model = model
        await self.harness.set_model(model)

    async def set_thinking(self, level: ThinkingLevel) -> None:
        self.thinking = level
        await self.harness.set_thinking_level(level)

    # -- results ---------------------------------------------------------------------------

    def last_assistant(self) -> AssistantMessage | None:
        for message in reversed(self.harness.messages):
            if isinstance(message, AssistantMessage):
                return message
        return None

    def status(self) -> int:
        last = self.last_assistant()
        if last is not None:
            if last.stop_reason == "error":
                return EXIT_MODEL_ERROR
            if last.stop_reason == "aborted":
                return EXIT_INTERRUPTED
        return EXIT_OK

    def error_hint(self, message: AssistantMessage) -> str | None:
        """Where to look when a request failed: the key's source, the server's URL."""
        text = (message.error_message or "").lower()
        hints: list[str] = []
        # a status as a word: a port such as 40195 in "nothing is listening on ..." is none
        if _AUTH_FAILURE.search(text):
            source = self.settings.key_source or "nowhere (no key was configured)"
            hints.append(f"the API key came from {source}")
        if (
            self.model.base_url
            and ("connect" in text or "timed out" in text or "timeout" in text)
            and self.model.base_url not in (message.error_message or "")
        ):
            hints.append(f"the server is {self.model.base_url} (--base-url)")
        if not hints:
            return None
        return "hint: " + "; ".join(hints)


_AUTH_FAILURE: Final = re.compile(r"\b(?:401|403)\b|unauthorized|api key|authentication")


def _local_options() -> StreamOptions:
    """--local: a base model does not stop by itself at the end of its turn."""
    return StreamOptions(max_tokens=256, sampling_params={"stop": ["<|im_end|>", "<|im_start|>"]})


async def run_once(
    app: App,
    prompt: str,
    interrupts: AsyncIterator[object],
    images: tuple[ImageContent, ...] = (),
) -> int:
    """Run one prompt to the end; the first interrupt aborts it, a second stops waiting."""
    interrupted = False
    async with trio.open_nursery() as nursery:

        async def watch() -> None:
            nonlocal interrupted
            async for _ in interrupts:
                if interrupted:
                    nursery.cancel_scope.cancel(reason="second interrupt")
                    return
                interrupted = True
                app.harness.abort()

        nursery.start_soon(watch)
        await app.harness.prompt(app.expand(prompt), images)
        nursery.cancel_scope.cancel(reason="the run has settled")
    if interrupted:
        return EXIT_INTERRUPTED
    return app.status()


@contextlib.asynccontextmanager
async def open_interrupts() -> AsyncIterator[AsyncIterator[object]]:
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
