"""Pi's command-line flags turned into what a run uses (Pi's ``dist/main.js``,
``cli/file-processor.js``, ``cli/initial-message.js``, ``core/resource-loader.js``).

- ``@file`` arguments: :func:`process_file_args` (text files inlined as Pi writes them,
  images attached) and :func:`initial_message` (stdin, the files, the first message);
- ``--system-prompt`` / ``--append-system-prompt``: :func:`resolve_prompt_input` (a
  file's contents when the value names an existing file, else the text);
- ``--model ID:LEVEL``: :func:`split_thinking`;
- ``--tools`` / ``--exclude-tools`` / ``--no-tools``: :class:`ToolSelection`;
- ``--session`` / ``--fork`` with an id or the start of one: :func:`find_session`.
"""

from __future__ import annotations

import base64
import datetime
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, Protocol, TextIO, TypeVar, final

import attrs
import trio

from pitrio import ImageContent, ThinkingLevel
from pitrio.harness import PiSessionStore, Session, SessionInfo, Skill, load_skills

from ._errors import CliUsageError
from ._resources import CodingResources
from ._sanitize import one_line

__all__ = [
    "ResourceFlags",
    "ToolSelection",
    "apply_resource_flags",
    "find_session",
    "image_mime_type",
    "initial_message",
    "looks_like_path",
    "pick_session",
    "process_file_args",
    "resolve_prompt_input",
    "split_thinking",
]

THINKING_LEVELS: Final = ("off", "minimal", "low", "medium", "high", "xhigh", "max")


def _strip_bom(text: str) -> str:
    return text[1:] if text.startswith("\ufeff") else text


def resolve_prompt_input(value: str) -> str:
    """Pi's ``resolvePromptInput``: the contents of the file ``value`` when it exists
    (BOM stripped), else ``value`` itself."""
    if os.path.exists(value):
        try:
            with open(value, encoding="utf-8") as f:
                return _strip_bom(f.read())
        except (OSError, UnicodeDecodeError):
            return value  # Pi warns and uses the text
    return value


_SIGNATURES: Final = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def image_mime_type(head: bytes) -> str | None:
    """The image type of a file starting with ``head`` (PNG, JPEG, GIF, WebP: the types
    Pi's ``detectSupportedImageMimeTypeFromFile`` attaches), else ``None``."""
    for signature, mime in _SIGNATURES:
        if head.startswith(signature):
            return mime
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return None


def _resolve(path: str, cwd: str) -> str:
    """Pi's ``resolveReadPath`` for a CLI argument: ``~`` expanded, relative to ``cwd``."""
    expanded = os.path.expanduser(path)
    return os.path.abspath(os.path.join(cwd, expanded))


def process_file_args(files: Iterable[str], cwd: str) -> tuple[str, tuple[ImageContent, ...]]:
    """Pi's ``processFileArguments``: ``(text, images)``. Each text file becomes
    ``<file name="ABS">\\nCONTENT\\n</file>\\n``; an image is attached and named by
    ``<file name="ABS"></file>\\n``; an empty file is skipped.

    Raises:
        CliUsageError: a file does not exist or cannot be read as text.
    """
    text = ""
    images: list[ImageContent] = []
    for arg in files:
        path = _resolve(arg, cwd)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            msg = f"File not found: {path}"
            raise CliUsageError(msg) from None
        except OSError as exc:
            msg = f"Could not read file {path}: {exc.strerror or exc}"
            raise CliUsageError(msg) from None
        if not data:
            continue
        mime = image_mime_type(data[:16])
        if mime is not None:
            images.append(ImageContent(data=base64.b64encode(data).decode("ascii"), mime_type=mime))
            text += f'<file name="{path}"></file>\n'
            continue
        try:
            content = _strip_bom(data.decode("utf-8"))
        except UnicodeDecodeError:
            msg = f"Could not read file {path}: not UTF-8 text, nor a PNG/JPEG/GIF/WebP image"
            raise CliUsageError(msg) from None
        text += f'<file name="{path}">\n{content}\n</file>\n'
    return text, tuple(images)


def initial_message(messages: list[str], file_text: str, stdin: str | None) -> str | None:
    """Pi's ``buildInitialMessage``: stdin, the files' text and the first message joined
    (with nothing between them); the first message is taken off ``messages``."""
    parts = []
    if stdin is not None:
        parts.append(stdin)
    if file_text:
        parts.append(file_text)
    if messages:
        parts.append(messages.pop(0))
    return "".join(parts) if parts else None


def split_thinking(spec: str) -> tuple[str, ThinkingLevel | None]:
    """``--model ID:LEVEL`` (Pi's shorthand): ``(ID, LEVEL)`` when the part after the last
    colon is a thinking level, else ``(spec, None)`` (``qwen2.5:7b`` stays whole)."""
    head, colon, tail = spec.rpartition(":")
    if colon and head and tail in THINKING_LEVELS:
        level: ThinkingLevel = tail  # type: ignore[assignment]  # checked just above
        return head, level
    return spec, None


def _names(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    return tuple(n.strip() for n in value.split(",") if n.strip())


_T = TypeVar("_T")


@final
@attrs.frozen(kw_only=True)
class ToolSelection:
    """Which tools a run offers: Pi's ``--tools`` (``allow``), ``--exclude-tools``
    (``exclude``), ``--no-tools`` / ``--no-builtin-tools`` (``none``). ``--tools`` with
    ``--no-tools`` enables just the listed ones, as in Pi."""

    allow: tuple[str, ...] | None = None
    exclude: tuple[str, ...] = ()
    none: bool = False

    @classmethod
    def from_flags(cls, tools: str | None, exclude: str | None, no_tools: bool) -> ToolSelection:
        return cls(allow=_names(tools), exclude=_names(exclude) or (), none=no_tools)

    @property
    def default(self) -> bool:
        """No flag given: every tool."""
        return self.allow is None and not self.exclude and not self.none

    def unknown(self, known: Iterable[str]) -> list[str]:
        """The names given that are no tool of ``known``."""
        names = set(known)
        asked = [*(self.allow or ()), *self.exclude]
        return [n for n in dict.fromkeys(asked) if n not in names]

    def select(self, tools: Sequence[_T], name_of: Callable[[_T], str]) -> list[_T]:
        """The tools to offer: ``--tools``' in its order, else ``tools`` in theirs."""
        if self.allow is not None:  # in the order given, as Pi's setActiveToolsByName
            by_name = {name_of(t): t for t in tools}
            chosen = [by_name[n] for n in dict.fromkeys(self.allow) if n in by_name]
        elif self.none:
            chosen = []
        else:
            chosen = list(tools)
        return [t for t in chosen if name_of(t) not in self.exclude]


def looks_like_path(arg: str) -> bool:
    """Pi's ``resolveSessionPath``: an argument with a slash or ending in ``.jsonl`` is a
    file, anything else an id (or the start of one)."""
    return "/" in arg or "\\" in arg or arg.endswith(".jsonl")


def find_session(
    arg: str, local: Sequence[SessionInfo], everywhere: Sequence[SessionInfo]
) -> SessionInfo | None:
    """Pi's id lookup: an exact id of this directory's sessions, else the first whose id
    starts with ``arg``; then the same over every directory's."""
    for infos in (local, everywhere):
        found = next((i for i in infos if i.id == arg), None) or next(
            (i for i in infos if i.id.startswith(arg)), None
        )
        if found is not None:
            return found
    return None


class ResourceFlags(Protocol):
    """The flags :func:`apply_resource_flags` reads (of an
    :class:`~pitrio.cli._setup.AppSettings`; a protocol, so that this module does not
    import that one, which imports this)."""

    @property
    def system_prompt(self) -> str | None: ...
    @property
    def append_system_prompt(self) -> tuple[str, ...] | None: ...
    @property
    def context_files(self) -> bool: ...
    @property
    def skills(self) -> bool: ...
    @property
    def skill_paths(self) -> tuple[str, ...]: ...
    @property
    def prompt_templates(self) -> bool: ...
    @property
    def template_paths(self) -> tuple[str, ...]: ...


async def apply_resource_flags(
    resources: CodingResources, settings: ResourceFlags, template_dirs: Sequence[str]
) -> tuple[CodingResources, list[str]]:
    """The resources and prompt-template paths once Pi's flags are applied (Pi's
    ``DefaultResourceLoader`` options): ``--system-prompt`` replaces ``SYSTEM.md``,
    ``--append-system-prompt`` replaces ``APPEND_SYSTEM.md`` (joined by blank lines),
    ``--no-context-files`` drops AGENTS.md / CLAUDE.md, ``--no-skills`` and
    ``--no-prompt-templates`` keep only what ``--skill`` / ``--prompt-template`` load
    (after the discovered ones otherwise; the first of a name wins)."""
    changes: dict[str, Any] = {}
    warnings = list(resources.warnings)
    if settings.system_prompt is not None:
        changes["system_prompt"] = settings.system_prompt
    if settings.append_system_prompt is not None:
        changes["append_system_prompt"] = "\n\n".join(settings.append_system_prompt) or None
    if not settings.context_files:
        changes["context_files"] = ()
    skills = list(resources.skills) if settings.skills else []
    if settings.skill_paths:
        seen = {s.name for s in skills}
        for skill in await _skills_at(settings.skill_paths, warnings):
            if skill.name not in seen:
                seen.add(skill.name)
                skills.append(skill)
    changes["skills"] = tuple(skills)
    changes["warnings"] = tuple(warnings)
    dirs = list(template_dirs) if settings.prompt_templates else []
    for path in settings.template_paths:
        if not await trio.Path(path).exists():
            warnings.append(f"{path}: Prompt template path does not exist")
        dirs.append(path)
    changes["warnings"] = tuple(warnings)
    return attrs.evolve(resources, **changes), dirs


async def _skills_at(paths: Sequence[str], warnings: list[str]) -> list[Skill]:
    """The skills of ``--skill`` paths: a directory's, or the one file's."""
    found: list[Skill] = []
    for path in paths:
        target = trio.Path(path)
        if await target.is_dir():
            result = await load_skills([path])
            found += result.skills
        elif await target.is_file():
            result = await load_skills([os.path.dirname(path)])
            real = os.path.realpath(path)  # noqa: ASYNC240  # a path string, no I/O wait
            found += [s for s in result.skills if os.path.realpath(s.file_path) == real]  # noqa: ASYNC240
        else:
            warnings.append(f"{path}: Skill path does not exist")
            continue
        warnings += [f"{d.path}: {d.message}" for d in result.diagnostics]
    return found


async def pick_session(
    store: PiSessionStore, cwd: str, stdin: TextIO, out: TextIO
) -> Session | None:
    """``--resume`` in a terminal: the directory's sessions, numbered (newest first); the
    line typed (a number, or an id or its start) picks one; an empty line picks none."""
    infos = await store.list(cwd=cwd)
    if not infos:
        out.write(f"No sessions for {one_line(cwd)} yet.\n")
        return None
    out.write(f"Sessions for {one_line(cwd)} (newest first):\n")
    for number, info in enumerate(infos, 1):
        when = datetime.datetime.fromtimestamp(info.modified_at).strftime("%Y-%m-%d %H:%M")
        out.write(f"  {number:>3}  {one_line(info.id)}  {when}\n")
    while True:
        out.write("Resume which? (number or id; Enter: none) ")
        out.flush()
        answer = (await trio.to_thread.run_sync(stdin.readline, abandon_on_cancel=True)).strip()
        if not answer:
            out.write("No session selected\n")
            return None
        if answer.isdigit() and 1 <= int(answer) <= len(infos):
            chosen: SessionInfo | None = infos[int(answer) - 1]
        else:
            chosen = find_session(answer, infos, ())
        if chosen is not None:
            return await store.open(chosen.path or chosen.id)
        out.write(f"no session {one_line(answer)!r} here; type a number from the list\n")
