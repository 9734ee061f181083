"""The interactive slash commands Pi's coding agent has beyond pitrio's first set
(Pi's ``modes/interactive/interactive-mode.js``): ``/name``, ``/clone``, ``/export``,
``/copy``, ``/reload``, ``/hotkeys``, ``/tree``, ``!command`` / ``!!command``, and the
history shown again when a session is resumed. Each is a function of the
:class:`~pitrio.cli._app.App` and the :class:`~pitrio.cli._render.Renderer`;
:mod:`pitrio.cli._interactive` dispatches to them.

What they print is the CLI's own text made :func:`~pitrio.cli._sanitize.visible`: a
command's output, a session name or a message quoted from a file is shown, never obeyed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from typing import Final

import trio

from pitrio import (
    AgentMessage,
    AssistantMessage,
    TextContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from pitrio.harness import (
    BashExecutionMessage,
    Resources,
    Session,
    SessionEntry,
    load_prompt_templates,
)

from ._app import App
from ._export import default_export_path, write_export
from ._flags import apply_resource_flags
from ._render import Renderer
from ._resources import load_resources
from ._sanitize import one_line
from ._setup import templates_dirs

__all__ = [
    "CLIPBOARD_TOOLS",
    "HOTKEYS",
    "NOT_SUPPORTED",
    "clone",
    "copy_last",
    "export",
    "history_lines",
    "name",
    "reload",
    "run_bash",
    "tree",
    "tree_lines",
    "trust",
]

NOT_SUPPORTED: Final[dict[str, str]] = {
    "/share": "pitrio does not upload sessions; /export writes an HTML file to share",
    "/settings": "pitrio has no settings screen; it reads Pi's settings.json",
    "/import": "open a session file with pitrio --session FILE",
    "/scoped-models": "restart with --models PATTERNS",
    "/changelog": "see pitrio's docs/",
}
"""Pi's commands pitrio does not have (yet), and what to do instead."""

HOTKEYS: Final = """keys:
  Enter                  send the line (while the agent works: steer it)
  TEXT \\ then Enter      continue on the next line
  >> TEXT                while the agent works: queue TEXT as a follow-up
  !CMD                   run a shell command; it and its output join the context
  !!CMD                  run a shell command, kept out of the context
  Up / Down, Ctrl-R      history (readline); Left / Right, Ctrl-A / Ctrl-E edit the line
  Ctrl-C                 abort the running answer (when idle: exit)
  Ctrl-D                 exit"""

CLIPBOARD_TOOLS: Final[tuple[tuple[str, ...], ...]] = (
    ("wl-copy",),
    ("xclip", "-selection", "clipboard"),
    ("xsel", "--clipboard", "--input"),
    ("pbcopy",),
)
"""Commands that put their stdin on the clipboard, the first one found is used."""

_MAX_OUTPUT: Final = 50 * 1024
_SHOWN_LINES: Final = 20


# -- /name, /clone, /export, /copy -------------------------------------------------------


async def name(app: App, renderer: Renderer, arg: str) -> None:
    """``/name [NAME]``: show or set the session's display name."""
    session = app.session
    if session is None:
        renderer.error("/name needs a session (this run has none)")
        return
    if not arg.strip():
        renderer.say(f"session name: {session.name or '(none)'}")
        return
    await session.set_name(arg.strip())
    renderer.say(f"session name: {arg.strip()}")


async def clone(app: App, renderer: Renderer, _: str) -> None:
    """``/clone``: continue in a copy of the whole session (Pi's ``/clone``)."""
    session = app.session
    if session is None:
        renderer.error("/clone needs a session (this run has none)")
        return
    copy = await session.fork()
    await app.switch_session(copy, restore=True)
    renderer.say(f"cloned into session {copy.id} ({len(app.harness.messages)} messages)")


async def export(app: App, renderer: Renderer, arg: str) -> None:
    """``/export [FILE]``: the session as an HTML page (default: Pi's file name in the
    working directory)."""
    session = app.session
    if session is None:
        renderer.error("/export needs a session (this run has none)")
        return
    await session.flush()
    given = arg.strip() or default_export_path(getattr(session, "path", None), session.id)
    target = os.path.join(app.cwd, os.path.expanduser(given))  # noqa: ASYNC240  # no I/O
    try:
        await write_export(session, target)
    except OSError as exc:
        renderer.error(f"/export: cannot write {target}: {exc.strerror or exc}")
        return
    renderer.say(f"Session exported to: {target}")


def _clipboard() -> tuple[str, ...] | None:
    for command in CLIPBOARD_TOOLS:
        if shutil.which(command[0]) is not None:
            return command
    return None


async def copy_last(app: App, renderer: Renderer, _: str) -> None:
    """``/copy``: the last answer's text to the clipboard, with a clipboard tool
    (:data:`CLIPBOARD_TOOLS`). Never by a terminal escape (OSC 52): pitrio does not send
    those."""
    last = app.last_assistant()
    text = last.text if last is not None else ""
    if not text:
        renderer.error("/copy: no answer to copy yet")
        return
    command = _clipboard()
    if command is None:
        tools = ", ".join(c[0] for c in CLIPBOARD_TOOLS)
        renderer.error(f"/copy: no clipboard tool found (install one of {tools})")
        return
    try:
        done = await trio.run_process(
            command, stdin=text.encode(), capture_stdout=True, capture_stderr=True, check=False
        )
    except OSError as exc:
        renderer.error(f"/copy: {command[0]} failed: {exc}")
        return
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip() or f"exit status {done.returncode}"
        renderer.error(f"/copy: {command[0]} failed: {one_line(why)}")
        return
    renderer.say(f"copied the last answer ({len(text)} characters) with {command[0]}")


# -- /reload, /hotkeys --------------------------------------------------------------------


async def reload(app: App, renderer: Renderer, _: str) -> None:
    """``/reload``: load the context files, skills, prompt templates, SYSTEM.md and
    APPEND_SYSTEM.md again, with the run's flags."""
    settings = app.settings
    if settings.offline:
        renderer.error("/reload: the offline replay loads no resources")
        return
    resources = await load_resources(app.cwd, settings.env, trust=settings.trust)
    resources, dirs = await apply_resource_flags(
        resources, settings, [*resources.template_dirs, *templates_dirs(app.cwd, settings.env)]
    )
    templates = await load_prompt_templates(dirs)
    app.resources = resources
    app.templates = tuple(templates.templates)
    app.harness.set_resources(
        Resources(
            prompt_templates=app.templates,
            skills=resources.skills,
            context_files=resources.context_files,
        )
    )
    for warning in resources.warnings:
        renderer.error(f"warning: {warning}")
    renderer.say(
        f"reloaded: {len(resources.context_files)} context file(s), "
        f"{len(resources.skills)} skill(s), {len(app.templates)} prompt template(s)"
    )


# -- !command ----------------------------------------------------------------------------


async def run_bash(app: App, renderer: Renderer, command: str, *, excluded: bool) -> None:
    """``!command`` (``!!command``: ``excluded``): run it in the working directory, show
    its output, and record Pi's ``bashExecution`` message in the context and session
    (left out of what the model sees when ``excluded``)."""
    if not command.strip():
        renderer.error("! needs a command, e.g. !ls")
        return
    shell = shutil.which("bash") or "/bin/sh"
    try:
        done = await trio.run_process(
            [shell, "-c", command],
            cwd=app.cwd,
            stdin=subprocess.DEVNULL,
            capture_stdout=True,
            stderr=subprocess.STDOUT,
            check=False,
        )
    except OSError as exc:
        renderer.error(f"!{command}: cannot run {shell}: {exc}")
        return
    raw = done.stdout
    truncated = len(raw) > _MAX_OUTPUT
    output = raw[-_MAX_OUTPUT:].decode(errors="replace").rstrip("\n")
    lines = output.splitlines()
    shown = lines[-_SHOWN_LINES:]
    head = f"$ {command}" + (" (not in the context)" if excluded else "")
    more = [f"… ({len(lines) - len(shown)} earlier lines)"] if len(lines) > len(shown) else []
    status = [f"exit status {done.returncode}"] if done.returncode != 0 else []
    renderer.say("\n".join([head, *more, *shown, *status]))
    message = BashExecutionMessage(
        command=command,
        output=output,
        exit_code=done.returncode,
        truncated=truncated,
        timestamp=_now_ms(),
        exclude_from_context=True if excluded else None,
    )
    harness = app.harness
    harness.agent.state.messages = [*harness.messages, message]
    if app.session is not None:
        await app.session.append_message(message)
        await app.session.flush()


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)


# -- /tree -------------------------------------------------------------------------------


def _entry_text(entry: SessionEntry) -> str:
    message = getattr(entry, "message", None)
    if message is not None:
        return _message_summary(message)
    summary = getattr(entry, "summary", None)
    if isinstance(summary, str):
        return f"[{entry.type}] {summary}"
    return f"[{entry.type}]"


def _message_summary(message: AgentMessage) -> str:
    if isinstance(message, UserMessage):
        return f"user: {_content_text(message.content)}"
    if isinstance(message, AssistantMessage):
        calls = [c.name for c in message.tool_calls]
        text = message.text or (message.error_message or "")
        return "assistant: " + text + (f" [{', '.join(calls)}]" if calls else "")
    if isinstance(message, ToolResultMessage):
        return f"{message.tool_name} result: {_content_text(message.content)}"
    if isinstance(message, BashExecutionMessage):
        return f"!{message.command}"
    return f"[{message.role}]"


def _content_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "".join(b.text for b in content if isinstance(b, TextContent))
    return ""


def tree_lines(app: App, width: int = 100) -> list[str]:
    """The session's entries as a tree: ``ID  text``, indented where a branch starts,
    ``*`` on the current branch, ``<- here`` at the leaf."""
    session = app.session
    assert session is not None
    on_branch = {e.id for e in session.get_branch()}
    lines: list[str] = []

    def walk(entries: list[SessionEntry], depth: int) -> None:
        for entry in entries:
            node: SessionEntry | None = entry
            while node is not None:
                mark = "*" if node.id in on_branch else " "
                here = "  <- here" if node.id == session.leaf_id else ""
                text = one_line(_entry_text(node))
                room = max(20, width - 2 * depth - len(node.id) - 6 - len(here))
                if len(text) > room:
                    text = text[: room - 1] + "…"
                lines.append(f"{'  ' * depth}{mark} {node.id}  {text}{here}")
                children = session.children(node.id)
                if len(children) == 1:
                    node = children[0]
                    continue
                walk(children, depth + 1)
                node = None

    walk(session.children(None), 0)
    return lines


def _entries_named(session: Session, target: str) -> list[SessionEntry]:
    """The entry with the id ``target``, or those whose id starts with it."""
    entries = session.entries
    return [e for e in entries if e.id == target] or [e for e in entries if e.id.startswith(target)]


async def tree(app: App, renderer: Renderer, arg: str) -> None:
    """``/tree``: the session tree; ``/tree ID`` continues from that entry (the next
    message branches there; nothing is deleted)."""
    session = app.session
    if session is None:
        renderer.error("/tree needs a session (this run has none)")
        return
    target = arg.strip()
    if not target:
        # The whole session: read back from its file or database in a worker thread.
        lines = await trio.to_thread.run_sync(tree_lines, app)
        if not lines:
            renderer.say("the session is empty")
            return
        renderer.say("\n".join(["session tree (* current branch); /tree ID goes there:", *lines]))
        return
    matches = await trio.to_thread.run_sync(_entries_named, session, target)
    if len(matches) != 1:
        what = "no entry" if not matches else f"{len(matches)} entries"
        renderer.error(f"/tree: {what} with id {target!r}; /tree lists them")
        return
    await session.set_leaf(matches[0].id)
    await app.switch_session(session)
    show_history(app, renderer)
    renderer.say(f"now at {matches[0].id} ({len(app.harness.messages)} messages)")


# -- the history, shown again ------------------------------------------------------------


def history_lines(messages: Sequence[AgentMessage], width: int = 160) -> list[str]:
    """The conversation compactly, as it was shown live: ``> `` before what the user
    typed, the answers' text, ``● tool args`` for each call and the first line of its
    result, ``$ command`` for a ``!command``."""
    out: list[str] = []

    def clip(text: str) -> str:
        text = one_line(text)
        return text if len(text) <= width else text[: width - 1] + "…"

    for message in messages:
        if isinstance(message, UserMessage):
            out.append("> " + clip(_content_text(message.content)))
        elif isinstance(message, AssistantMessage):
            for block in message.content:
                if isinstance(block, TextContent) and block.text.strip():
                    out += [clip(line) for line in block.text.strip().splitlines()[:_SHOWN_LINES]]
                elif isinstance(block, ToolCall):
                    args = json.dumps(block.arguments, ensure_ascii=False)
                    out.append(clip(f"● {block.name} {args}"))
            if message.stop_reason in ("error", "aborted"):
                out.append(clip(f"[{message.stop_reason}: {message.error_message or ''}]"))
        elif isinstance(message, ToolResultMessage):
            text = _content_text(message.content).strip().splitlines()
            first = text[0] if text else "(no output)"
            more = f" (+{len(text) - 1} lines)" if len(text) > 1 else ""
            out.append(clip(f"  ⎿ {first}{more}"))
        elif isinstance(message, BashExecutionMessage):
            out.append(clip(f"$ {message.command}"))
        else:
            summary = getattr(message, "summary", None)
            if isinstance(summary, str):
                out.append(clip(f"[{message.role}] {summary}"))
    return out


def show_history(app: App, renderer: Renderer) -> None:
    """Print the session's messages again (a resumed session, a move in the tree)."""
    lines = history_lines(app.harness.messages)
    if lines:
        renderer.say("\n".join(lines))


async def trust(app: App, renderer: Renderer, arg: str) -> None:
    """``/trust``: this project's trust decision and the choices of Pi's trust selector;
    ``/trust yes|parent|no`` saves one in ``trust.json`` (Pi's; a restart applies it)."""
    from ._resources import agent_dir
    from ._trust import save_decisions, saved_decision, trust_options

    agent = agent_dir(app.settings.env)
    options = trust_options(app.cwd)
    word = arg.strip().lower()
    try:
        if not word:
            saved = await trio.to_thread.run_sync(saved_decision, agent, app.cwd)
            now = "trusted" if app.resources is not None and app.resources.trusted else "untrusted"
            if saved is None:
                said = "no decision saved"
            else:
                said = f"saved: {'trusted' if saved[1] else 'untrusted'} ({saved[0]})"
            lines = [f"project {app.cwd}: {now} this session; {said}"]
            lines += [f"  /trust {o.word:<8} {o.label}" for o in options]
            renderer.say("\n".join(lines))
            return
        chosen = next((o for o in options if o.word == word), None)
        if chosen is None:
            words = ", ".join(o.word for o in options)
            renderer.error(f"/trust takes one of {words}; got {arg.strip()!r}")
            return
        await trio.to_thread.run_sync(save_decisions, agent, chosen.updates)
    except (OSError, ValueError) as exc:
        renderer.error(f"/trust: {exc}")
        return
    state = "trusted" if chosen.trusted else "untrusted"
    renderer.say(f"Saved trust decision: {state}. Restart pitrio for this to take effect.")
