"""Resources: prompt templates, skills, and project context files.

Ports of Pi's resource loaders (pi-agent-core 0.85.0 ``harness/prompt-templates.ts``,
``harness/skills.ts``, ``harness/system-prompt.ts``, and the coding agent's context
files and ``/name`` expansion):

- **Prompt templates** are Markdown files (``review.md`` is ``/review``) with optional
  YAML front matter (``description``). :func:`expand_prompt_template` turns
  ``/review src/app.py "all of it"`` into the template's text with ``$1``, ``$2``...,
  ``$@`` / ``$ARGUMENTS`` (all arguments) and ``${@:N}`` / ``${@:N:L}`` (a slice)
  substituted.
- **Skills** are directories with a ``SKILL.md`` (front matter ``name`` and
  ``description``; Pi's validation rules give warnings), found recursively under the
  given directories, honouring ``.gitignore``/``.ignore``/``.fdignore``; a Markdown file
  at a root with a ``description`` is a skill too. :func:`format_skills_for_prompt`
  lists them for the system prompt as Pi does.
- **Context files**: one ``AGENTS.md`` (else ``CLAUDE.md``) per directory, from the
  filesystem root down to the working directory, after a global one.

Loaders never raise for a missing or unreadable file: they skip it, and report
problems as :class:`ResourceDiagnostic` warnings. They are async and do their file
work in a worker thread.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, Literal, final

import attrs
import trio

from ._js_text import js_len, js_slice

__all__ = [
    "ContextFile",
    "PromptTemplate",
    "ResourceDiagnostic",
    "Skill",
    "SkillsResult",
    "TemplatesResult",
    "expand_prompt_template",
    "expand_skill_command",
    "format_context_files",
    "format_skill_invocation",
    "format_skills_for_prompt",
    "load_context_files",
    "load_prompt_templates",
    "load_skills",
    "parse_command_args",
    "parse_front_matter",
    "substitute_args",
]

PathLike = str | os.PathLike[str]


@final
@attrs.frozen(kw_only=True)
class ResourceDiagnostic:
    """A problem found while loading resources (the resource is skipped or kept as is).

    ``code`` is Pi's: ``file_info_failed``, ``list_failed``, ``read_failed``,
    ``parse_failed`` or ``invalid_metadata``.
    """

    type: Literal["warning"] = "warning"
    code: str
    message: str
    path: str


# -- front matter -----------------------------------------------------------------------


@functools.cache
def _yaml12_loader() -> type[Any]:
    """PyYAML's safe loader with YAML 1.2 booleans (as JavaScript's ``yaml`` reads them):
    only ``true``/``false`` are booleans; ``yes``, ``on`` and dates stay strings. Built at
    the first front matter: an application without any pays neither for the class nor
    for importing PyYAML."""
    import yaml

    class Yaml12Loader(yaml.SafeLoader):
        pass

    Yaml12Loader.yaml_implicit_resolvers = {
        key: [
            (tag, rx)
            for tag, rx in resolvers
            if tag not in ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:timestamp")
        ]
        for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    Yaml12Loader.add_implicit_resolver(
        "tag:yaml.org,2002:bool",
        re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
        list("tTfF"),
    )
    return Yaml12Loader


_JS_TRIM: Final = re.compile(r"^[\s\ufeff]+|[\s\ufeff]+$")


def parse_front_matter(content: str) -> tuple[dict[str, Any], str]:
    """``(front_matter, body)`` of a Markdown file, as Pi splits them.

    Front matter is YAML between a first line ``---`` and the next ``---`` line; the
    body after it is trimmed. Without front matter the whole text is the body.

    Raises:
        yaml.YAMLError: the front matter is not valid YAML.
    """
    normalized = content.replace("\r\n", "\n").replace("\r", "\n")
    if not normalized.startswith("---"):
        return {}, normalized
    end = normalized.find("\n---", 3)
    if end == -1:
        return {}, normalized
    # The text ends where a line does (as Pi's parser reads it: a block scalar keeps its
    # final newline).
    import yaml

    data = yaml.load(normalized[4:end] + "\n", Loader=_yaml12_loader())  # a safe loader
    body = _JS_TRIM.sub("", normalized[end + 4 :])
    return (dict(data) if isinstance(data, Mapping) else {}), body


def _yaml_error() -> type[Exception]:
    """``yaml.YAMLError``, read where :func:`parse_front_matter` raised (it imported
    PyYAML before it could)."""
    import yaml

    return yaml.YAMLError


def _locale_key(name: str) -> tuple[str, str]:
    """An approximation of JavaScript's ``localeCompare`` order (case-insensitive first,
    lower case before upper case)."""
    return name.casefold(), name.swapcase()


def _kind(path: str) -> Literal["file", "directory"] | None:
    """``file`` or ``directory`` (following symbolic links), else ``None``."""
    if os.path.isdir(path):
        return "directory"
    if os.path.isfile(path):
        return "file"
    return None


def _read(path: str, diagnostics: list[ResourceDiagnostic]) -> str | None:
    try:
        with open(path, encoding="utf-8") as file:
            return file.read()
    except (OSError, UnicodeDecodeError) as exc:
        diagnostics.append(ResourceDiagnostic(code="read_failed", message=str(exc), path=path))
        return None


def _as_list(paths: PathLike | Iterable[PathLike]) -> list[str]:
    if isinstance(paths, str | os.PathLike):
        return [os.path.abspath(os.fspath(paths))]
    return [os.path.abspath(os.fspath(p)) for p in paths]


# -- prompt templates ---------------------------------------------------------------------


@final
@attrs.frozen(kw_only=True)
class PromptTemplate:
    """A prompt template: ``/name`` expands to ``content`` with arguments substituted.

    ``description`` comes from the front matter, else the body's first line (cut at 60
    characters).
    """

    name: str
    description: str
    content: str
    file_path: str | None = None


@final
@attrs.frozen
class TemplatesResult:
    """What :func:`load_prompt_templates` found."""

    templates: list[PromptTemplate]
    diagnostics: list[ResourceDiagnostic]


def _template_from_file(
    path: str, name: str, diagnostics: list[ResourceDiagnostic]
) -> PromptTemplate | None:
    raw = _read(path, diagnostics)
    if raw is None:
        return None
    try:
        front, body = parse_front_matter(raw)
    except _yaml_error() as exc:
        diagnostics.append(ResourceDiagnostic(code="parse_failed", message=str(exc), path=path))
        return None
    description = front.get("description")
    if not isinstance(description, str):
        description = ""
    first_line = next((line for line in body.split("\n") if line.strip()), None)
    if not description and first_line:
        description = js_slice(first_line, 60)
        if js_len(first_line) > 60:
            description += "..."
    return PromptTemplate(
        name=re.sub(r"\.md$", "", name, flags=re.IGNORECASE),
        description=description,
        content=body,
        file_path=path,
    )


def _load_templates_sync(paths: list[str]) -> TemplatesResult:
    templates: list[PromptTemplate] = []
    diagnostics: list[ResourceDiagnostic] = []
    for path in paths:
        kind = _kind(path)
        if kind == "directory":
            try:
                names = os.listdir(path)
            except OSError as exc:
                diagnostics.append(
                    ResourceDiagnostic(code="list_failed", message=str(exc), path=path)
                )
                continue
            for name in sorted(names, key=_locale_key):
                full = os.path.join(path, name)
                if name.endswith(".md") and _kind(full) == "file":
                    template = _template_from_file(full, name, diagnostics)
                    if template is not None:
                        templates.append(template)
        elif kind == "file" and path.endswith(".md"):
            template = _template_from_file(path, os.path.basename(path), diagnostics)
            if template is not None:
                templates.append(template)
    return TemplatesResult(templates, diagnostics)


async def load_prompt_templates(paths: PathLike | Iterable[PathLike]) -> TemplatesResult:
    """Load prompt templates from directories (their ``.md`` files, not recursively, in
    name order) and ``.md`` files. Missing paths are skipped; unreadable or unparsable
    files become diagnostics."""
    return await trio.to_thread.run_sync(_load_templates_sync, _as_list(paths))


def parse_command_args(text: str) -> list[str]:
    """Split an argument string on spaces and tabs, with single and double quotes
    grouping words (Pi's ``parseCommandArgs``; no escapes)."""
    args: list[str] = []
    current = ""
    quote: str | None = None
    for char in text:
        if quote:
            if char == quote:
                quote = None
            else:
                current += char
        elif char in ('"', "'"):
            quote = char
        elif char in (" ", "\t"):
            if current:
                args.append(current)
                current = ""
        else:
            current += char
    if current:
        args.append(current)
    return args


def _js_replacement(replacement: str) -> Callable[[re.Match[str]], str]:
    """A ``re.sub`` function applying a JavaScript replacement string (``$$``, ``$&``,
    ``$``` and ``$'`` are special there; the patterns it is used with have no groups)."""

    def apply(match: re.Match[str]) -> str:
        source = match.string
        out: list[str] = []
        i = 0
        while i < len(replacement):
            char = replacement[i]
            if char == "$" and i + 1 < len(replacement):
                nxt = replacement[i + 1]
                if nxt == "$":
                    out.append("$")
                    i += 2
                    continue
                if nxt == "&":
                    out.append(match.group(0))
                    i += 2
                    continue
                if nxt == "`":
                    out.append(source[: match.start()])
                    i += 2
                    continue
                if nxt == "'":
                    out.append(source[match.end() :])
                    i += 2
                    continue
            out.append(char)
            i += 1
        return "".join(out)

    return apply


def substitute_args(content: str, args: Sequence[str]) -> str:
    """Substitute ``$1``..., ``${@:N}``, ``${@:N:L}``, ``$ARGUMENTS`` and ``$@`` in
    ``content``, in Pi's order (a missing positional argument becomes empty)."""

    def positional(match: re.Match[str]) -> str:
        index = int(match.group(1)) - 1
        return args[index] if 0 <= index < len(args) else ""

    def sliced(match: re.Match[str]) -> str:
        start = max(int(match.group(1)) - 1, 0)
        if match.group(2):
            return " ".join(args[start : start + int(match.group(2))])
        return " ".join(args[start:])

    result = re.sub(r"\$(\d+)", positional, content)
    result = re.sub(r"\$\{@:(\d+)(?::(\d+))?\}", sliced, result)
    everything = " ".join(args)
    result = re.sub(r"\$ARGUMENTS", _js_replacement(everything), result)
    return re.sub(r"\$@", _js_replacement(everything), result)


def expand_prompt_template(text: str, templates: Iterable[PromptTemplate]) -> str:
    """Expand ``/name args`` with the template called ``name``; any other text (or an
    unknown name) is returned unchanged."""
    if not text.startswith("/"):
        return text
    space = text.find(" ")
    name = text[1:] if space == -1 else text[1:space]
    rest = "" if space == -1 else text[space + 1 :]
    for template in templates:
        if template.name == name:
            return substitute_args(template.content, parse_command_args(rest))
    return text


# -- skills ---------------------------------------------------------------------------------

_MAX_NAME_LENGTH: Final = 64
_MAX_DESCRIPTION_LENGTH: Final = 1024
_IGNORE_FILES: Final = (".gitignore", ".ignore", ".fdignore")


@final
@attrs.frozen(kw_only=True)
class Skill:
    """A skill: instructions the model reads from ``file_path`` when a task matches.

    ``disable_model_invocation`` (front matter ``disable-model-invocation: true``) keeps
    it out of the system prompt's list; it can still be invoked explicitly.
    """

    name: str
    description: str
    content: str
    file_path: str
    disable_model_invocation: bool = False


@final
@attrs.frozen
class SkillsResult:
    """What :func:`load_skills` found."""

    skills: list[Skill]
    diagnostics: list[ResourceDiagnostic]


def _validate_name(name: str, parent: str) -> list[str]:
    errors = []
    if name != parent:
        errors.append(f'name "{name}" does not match parent directory "{parent}"')
    if js_len(name) > _MAX_NAME_LENGTH:
        errors.append(f"name exceeds {_MAX_NAME_LENGTH} characters ({js_len(name)})")
    if not re.fullmatch(r"[a-z0-9-]+", name):
        errors.append("name contains invalid characters (must be lowercase a-z, 0-9, hyphens only)")
    if name.startswith("-") or name.endswith("-"):
        errors.append("name must not start or end with a hyphen")
    if "--" in name:
        errors.append("name must not contain consecutive hyphens")
    return errors


def _validate_description(description: str | None) -> list[str]:
    if not description or not description.strip():
        return ["description is required"]
    if js_len(description) > _MAX_DESCRIPTION_LENGTH:
        return [f"description exceeds {_MAX_DESCRIPTION_LENGTH} characters ({js_len(description)})"]
    return []


def _skill_from_file(
    path: str, parent_name: str, diagnostics: list[ResourceDiagnostic]
) -> Skill | None:
    declared = os.path.basename(path.rstrip("/\\")) == "SKILL.md"
    raw = _read(path, diagnostics)
    if raw is None:
        return None
    try:
        front, body = parse_front_matter(raw)
    except _yaml_error() as exc:
        if declared:
            diagnostics.append(ResourceDiagnostic(code="parse_failed", message=str(exc), path=path))
        return None
    description = front.get("description")
    if not isinstance(description, str):
        description = None
    if not declared and (not description or not description.strip()):
        return None
    for error in _validate_description(description):
        diagnostics.append(ResourceDiagnostic(code="invalid_metadata", message=error, path=path))
    front_name = front.get("name")
    name = front_name if isinstance(front_name, str) and front_name else parent_name
    for error in _validate_name(name, parent_name):
        diagnostics.append(ResourceDiagnostic(code="invalid_metadata", message=error, path=path))
    if not description or not description.strip():
        return None
    return Skill(
        name=name,
        description=description,
        content=body,
        file_path=path,
        disable_model_invocation=front.get("disable-model-invocation") is True,
    )


class _IgnoreRules:
    """gitignore-style rules (what the ``ignore`` package does for Pi), on paths
    relative to the skills root; a directory path ends with ``/``."""

    def __init__(self) -> None:
        self._rules: list[tuple[re.Pattern[str], bool, bool]] = []

    def add(self, pattern: str) -> None:
        negated = pattern.startswith("!")
        if negated:
            pattern = pattern[1:]
        pattern = pattern.rstrip(" ")
        dir_only = pattern.endswith("/")
        pattern = pattern.rstrip("/")
        if not pattern:
            return
        anchored = "/" in pattern
        regex = _glob_to_regex(pattern.lstrip("/"))
        prefix = "" if anchored else "(?:.*/)?"
        self._rules.append((re.compile(f"^{prefix}{regex}$"), negated, dir_only))

    def ignores(self, path: str) -> bool:
        is_dir = path.endswith("/")
        parts = path.rstrip("/").split("/")
        # A path is ignored if it, or a directory above it, is.
        for depth in range(1, len(parts) + 1):
            candidate = "/".join(parts[:depth])
            candidate_is_dir = depth < len(parts) or is_dir
            ignored = False
            for regex, negated, dir_only in self._rules:
                if dir_only and not candidate_is_dir:
                    continue
                if regex.match(candidate):
                    ignored = not negated
            if ignored:
                return True
        return False


def _glob_to_regex(glob: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(glob):
        char = glob[i]
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif glob.startswith("/**", i) and i + 3 == len(glob):
            out.append("/.*")
            i += 3
        elif glob.startswith("**", i):
            out.append(".*")
            i += 2
        elif char == "*":
            out.append("[^/]*")
            i += 1
        elif char == "?":
            out.append("[^/]")
            i += 1
        elif char == "[":
            end = glob.find("]", i + 1)
            if end == -1:
                out.append(re.escape(char))
                i += 1
            else:
                body = glob[i + 1 : end]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append(f"[{body}]")
                i = end + 1
        elif char == "\\" and i + 1 < len(glob):
            out.append(re.escape(glob[i + 1]))
            i += 2
        else:
            out.append(re.escape(char))
            i += 1
    return "".join(out)


def _relative(root: str, path: str) -> str:
    root = root.replace("\\", "/").rstrip("/")
    path = path.replace("\\", "/").rstrip("/")
    if path == root:
        return ""
    if path.startswith(root + "/"):
        return path[len(root) + 1 :]
    return path.lstrip("/")


def _add_ignore_rules(
    rules: _IgnoreRules, directory: str, root: str, diagnostics: list[ResourceDiagnostic]
) -> None:
    relative = _relative(root, directory)
    prefix = f"{relative}/" if relative else ""
    for name in _IGNORE_FILES:
        path = os.path.join(directory, name)
        if not os.path.isfile(path):
            continue
        content = _read(path, diagnostics)
        if content is None:
            continue
        for line in re.split(r"\r?\n", content):
            trimmed = line.strip()
            if not trimmed or (trimmed.startswith("#") and not trimmed.startswith("\\#")):
                continue
            pattern = line
            negated = False
            if pattern.startswith("!"):
                negated = True
                pattern = pattern[1:]
            elif pattern.startswith("\\!"):
                pattern = pattern[1:]
            pattern = pattern.removeprefix("/")
            prefixed = f"{prefix}{pattern}"
            rules.add(f"!{prefixed}" if negated else prefixed)


def _load_skills_from_dir(
    directory: str,
    include_root_files: bool,
    rules: _IgnoreRules,
    root: str,
    diagnostics: list[ResourceDiagnostic],
    ancestors: frozenset[str],
) -> list[Skill]:
    skills: list[Skill] = []
    if _kind(directory) != "directory":
        return skills
    real = os.path.realpath(directory)
    if real in ancestors:  # a symbolic link back up the tree (Pi would recurse forever)
        return skills
    ancestors |= {real}
    _add_ignore_rules(rules, directory, root, diagnostics)
    try:
        names = os.listdir(directory)
    except OSError as exc:
        diagnostics.append(ResourceDiagnostic(code="list_failed", message=str(exc), path=directory))
        return skills
    parent_name = os.path.basename(directory.rstrip("/")) or directory
    if "SKILL.md" in names:
        full = os.path.join(directory, "SKILL.md")
        if _kind(full) == "file" and not rules.ignores(_relative(root, full)):
            skill = _skill_from_file(full, parent_name, diagnostics)
            if skill is not None:
                skills.append(skill)
            return skills
    for name in sorted(names, key=_locale_key):
        if name.startswith(".") or name == "node_modules":
            continue
        full = os.path.join(directory, name)
        kind = _kind(full)
        if kind is None:
            continue
        relative = _relative(root, full)
        if rules.ignores(f"{relative}/" if kind == "directory" else relative):
            continue
        if kind == "directory":
            skills.extend(_load_skills_from_dir(full, False, rules, root, diagnostics, ancestors))
        elif include_root_files and name.endswith(".md"):
            skill = _skill_from_file(full, parent_name, diagnostics)
            if skill is not None:
                skills.append(skill)
    return skills


def _load_skills_sync(dirs: list[str]) -> SkillsResult:
    skills: list[Skill] = []
    diagnostics: list[ResourceDiagnostic] = []
    for directory in dirs:
        if _kind(directory) != "directory":
            continue
        skills.extend(
            _load_skills_from_dir(
                directory, True, _IgnoreRules(), directory, diagnostics, frozenset()
            )
        )
    return SkillsResult(skills, diagnostics)


async def load_skills(dirs: PathLike | Iterable[PathLike]) -> SkillsResult:
    """Discover skills under ``dirs`` (Pi's ``loadSkills``).

    A directory holding a ``SKILL.md`` is one skill (its subdirectories are not
    searched); other directories are searched recursively (hidden ones and
    ``node_modules`` skipped, ignore files honoured); ``.md`` files directly in a root
    are skills when their front matter has a ``description``. A skill needs a
    description; a name that breaks Pi's rules (lowercase a-z, 0-9 and single inner
    hyphens, at most 64 characters, equal to its directory's name) is reported but
    kept.
    """
    return await trio.to_thread.run_sync(_load_skills_sync, _as_list(dirs))


def _escape_xml(value: str) -> str:
    return (
        value.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&quot;")
        .replace("'", "&apos;")
    )


def format_skills_for_prompt(skills: Iterable[Skill]) -> str:
    """The system prompt's list of skills (Pi's ``formatSkillsForSystemPrompt``); empty
    when no skill may be invoked by the model."""
    visible = [s for s in skills if not s.disable_model_invocation]
    if not visible:
        return ""
    lines = [
        "The following skills provide specialized instructions for specific tasks.",
        "Read the full skill file when the task matches its description.",
        "When a skill file references a relative path, resolve it against the skill directory "
        "(parent of SKILL.md / dirname of the path) and use that absolute path in tool "
        "commands.",
        "",
        "<available_skills>",
    ]
    for skill in visible:
        lines.append("  <skill>")
        lines.append(f"    <name>{_escape_xml(skill.name)}</name>")
        lines.append(f"    <description>{_escape_xml(skill.description)}</description>")
        lines.append(f"    <location>{_escape_xml(skill.file_path)}</location>")
        lines.append("  </skill>")
    lines.append("</available_skills>")
    return "\n".join(lines)


def _dirname(path: str) -> str:
    normalized = path.rstrip("/\\")
    separator = max(normalized.rfind("/"), normalized.rfind("\\"))
    if separator == 2 and normalized[1:2] == ":":
        return normalized[:3]
    return "/" if separator <= 0 else normalized[:separator]


def format_skill_invocation(skill: Skill, additional_instructions: str | None = None) -> str:
    """The prompt that invokes a skill explicitly (Pi's ``formatSkillInvocation``)."""
    block = (
        f'<skill name="{skill.name}" location="{skill.file_path}">\n'
        f"References are relative to {_dirname(skill.file_path)}.\n\n"
        f"{skill.content}\n</skill>"
    )
    return f"{block}\n\n{additional_instructions}" if additional_instructions else block


def expand_skill_command(text: str, skills: Iterable[Skill]) -> str:
    """Expand ``/skill:name args`` into the skill's invocation prompt (the coding agent's
    skill commands; :func:`format_skill_invocation` with ``args`` as additional
    instructions). Any other text, or an unknown skill, is returned unchanged.

    Apply it before :func:`expand_prompt_template`, as Pi does.
    """
    if not text.startswith("/skill:"):
        return text
    space = text.find(" ")
    name = text[7:] if space == -1 else text[7:space]
    rest = "" if space == -1 else _JS_TRIM.sub("", text[space + 1 :])
    for skill in skills:
        if skill.name == name:
            return format_skill_invocation(skill, rest or None)
    return text


# -- context files ----------------------------------------------------------------------

CONTEXT_FILE_NAMES: Final = ("AGENTS.md", "AGENTS.MD", "CLAUDE.md", "CLAUDE.MD")


@final
@attrs.frozen
class ContextFile:
    """A project context file (``AGENTS.md`` or ``CLAUDE.md``) and its text."""

    path: str
    content: str


def _context_file_in(directory: str) -> ContextFile | None:
    for name in CONTEXT_FILE_NAMES:
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            try:
                with open(path, encoding="utf-8") as file:
                    return ContextFile(path, file.read())
            except (OSError, UnicodeDecodeError):
                continue
    return None


def _load_context_files_sync(cwd: str, agent_dir: str | None) -> list[ContextFile]:
    cwd = os.path.abspath(cwd)
    agent_dir = None if agent_dir is None else os.path.abspath(agent_dir)
    files: list[ContextFile] = []
    seen: set[str] = set()
    if agent_dir is not None:
        found = _context_file_in(agent_dir)
        if found is not None:
            files.append(found)
            seen.add(found.path)
    ancestors: list[ContextFile] = []
    current = cwd
    while True:
        found = _context_file_in(current)
        if found is not None and found.path not in seen:
            ancestors.insert(0, found)
            seen.add(found.path)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    return files + ancestors


async def load_context_files(
    cwd: PathLike, *, agent_dir: PathLike | None = None
) -> list[ContextFile]:
    """The project context files for ``cwd``, in the order the model reads them.

    First ``agent_dir``'s own file (the user's global instructions, e.g.
    ``~/.pi/agent/AGENTS.md``), then one file per directory from the filesystem root
    down to ``cwd`` (so the closest comes last). In each directory ``AGENTS.md`` wins
    over ``CLAUDE.md``.
    """
    return await trio.to_thread.run_sync(
        _load_context_files_sync,
        os.fspath(cwd),
        None if agent_dir is None else os.fspath(agent_dir),
    )


def format_context_files(files: Iterable[ContextFile]) -> str:
    """Context files as the block Pi's coding agent appends to the system prompt
    (empty without files)."""
    files = list(files)
    if not files:
        return ""
    out = "<project_context>\n\nProject-specific instructions and guidelines:\n\n"
    for file in files:
        out += f'<project_instructions path="{file.path}">\n'
        out += f"{file.content}\n</project_instructions>\n\n"
    return out + "</project_context>\n"
