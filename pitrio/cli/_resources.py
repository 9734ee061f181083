"""What Pi's coding agent (``pi`` 0.85.0) loads around a conversation, from Pi's own
locations, so that a Pi user's setup works as it is.

- the agent directory: ``$PI_CODING_AGENT_DIR``, default ``~/.pi/agent``
  (:func:`agent_dir`);
- context files (``core/resource-loader.js``, ``loadProjectContextFiles``): the agent
  directory's ``AGENTS.md`` / ``CLAUDE.md``, then one per directory from the filesystem
  root down to the working directory (``AGENTS.override.md``, ``AGENTS.md``, ``AGENTS.MD``,
  ``CLAUDE.md``, ``CLAUDE.MD``, the first found);
- ``SYSTEM.md`` (replaces the default prompt) and ``APPEND_SYSTEM.md`` (appended): the
  project's ``.pi/`` one when the project is trusted, else the agent directory's;
- skills: the project's ``.pi/skills`` and ``.agents/skills`` up the tree (trusted), then
  ``~/.pi/agent/skills`` and ``~/.agents/skills``; prompt templates: the project's
  ``.pi/prompts`` (trusted), then ``~/.pi/agent/prompts``;
- ``settings.json``: the agent directory's, then the project's ``.pi/settings.json``
  (trusted) over it;
- trust (``core/trust-manager.js``, ``project-trust.js``): a project whose ``.pi/`` holds
  settings, skills, prompts, ``SYSTEM.md`` or ``APPEND_SYSTEM.md`` (or with ``.agents/skills``
  up the tree) is trusted only by ``--approve``, by ``trust.json`` in the agent directory
  (the nearest folder with a decision), or by the setting ``defaultProjectTrust: "always"``;
  an interactive start asks, with Pi's five choices, and ``/trust`` saves a decision, as
  Pi's (:mod:`pitrio.cli._trust`).

:func:`build_system_prompt` is Pi's ``buildSystemPrompt`` (``core/system-prompt.js``),
with pitrio named where Pi names itself.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, final

import attrs
import trio

from pitrio import Model, ModelCost
from pitrio.harness import ContextFile, Skill, load_skills

from ._trust import nearest_decision

__all__ = [
    "TOOL_PROMPTS",
    "CodingResources",
    "agent_dir",
    "build_system_prompt",
    "format_skills",
    "CustomProvider",
    "custom_providers",
    "load_resources",
    "read_settings",
    "resolve_config_value",
]

CONFIG_DIR: Final = ".pi"
CONTEXT_NAMES: Final = ("AGENTS.override.md", "AGENTS.md", "AGENTS.MD", "CLAUDE.md", "CLAUDE.MD")
_TRUST_REQUIRING: Final = (
    "settings.json",
    "extensions",
    "skills",
    "prompts",
    "themes",
    "SYSTEM.md",
    "APPEND_SYSTEM.md",
    "mcp.json",  # pitrio's: MCP servers are programs to start (pitrio.cli._mcp)
)

TOOL_PROMPTS: Final[Mapping[str, tuple[str, tuple[str, ...]]]] = {
    "read": ("Read file contents", ("Use read to examine files instead of cat or sed.",)),
    "bash": (
        "Execute bash commands (ls, grep, find, etc.)",
        ("You can inspect PI_* environment variables for current model and session details.",),
    ),
    "edit": (
        "Make precise file edits with exact text replacement, including multiple disjoint "
        "edits in one call",
        (
            "Use edit for precise changes (edits[].oldText must match exactly)",
            "When changing multiple separate locations in one file, use one edit call with "
            "multiple entries in edits[] instead of multiple edit calls",
            "Each edits[].oldText is matched against the original file, not after earlier edits "
            "are applied. Do not emit overlapping or nested edits. Merge nearby changes into one "
            "edit.",
            "Keep edits[].oldText as small as possible while still being unique in the file. Do "
            "not pad with large unchanged regions.",
        ),
    ),
    "write": ("Create or overwrite files", ("Use write only for new files or complete rewrites.",)),
    "grep": ("Search file contents for patterns (respects .gitignore)", ()),
    "find": ("Find files by glob pattern (respects .gitignore)", ()),
    "ls": ("List directory contents", ()),
}
"""Each built-in tool's line in the prompt and its guidelines (the tools'
``SystemPromptContribution`` in Pi's ``core/tools/``)."""


def agent_dir(env: Mapping[str, str]) -> str:
    """Pi's agent directory: ``$PI_CODING_AGENT_DIR``, default ``~/.pi/agent``."""
    given = env.get("PI_CODING_AGENT_DIR")
    home = env.get("HOME") or os.path.expanduser("~")
    if given:
        return os.path.abspath(given.replace("~", home, 1) if given.startswith("~") else given)
    return os.path.join(home, ".pi", "agent")


@final
@attrs.frozen(kw_only=True)
class CodingResources:
    """What :func:`load_resources` found for one working directory."""

    agent_dir: str
    trusted: bool
    context_files: tuple[ContextFile, ...] = ()
    system_prompt: str | None = None
    """``SYSTEM.md``'s text (replaces the default prompt), if any."""
    append_system_prompt: str | None = None
    """``APPEND_SYSTEM.md``'s text, if any."""
    skills: tuple[Skill, ...] = ()
    template_dirs: tuple[str, ...] = ()
    settings: Mapping[str, Any] = attrs.field(factory=dict)
    """``settings.json``: the global file, the project's over it (when trusted)."""
    warnings: tuple[str, ...] = ()


def _strip_bom(text: str) -> str:
    return text[1:] if text.startswith("\ufeff") else text


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return _strip_bom(f.read())
    except (OSError, UnicodeDecodeError):
        return None


def _context_file_in(directory: str) -> ContextFile | None:
    for name in CONTEXT_NAMES:
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            text = _read_text(path)
            if text is not None:
                return ContextFile(path, text)
    return None


def _context_files(cwd: str, agent: str) -> list[ContextFile]:
    files: list[ContextFile] = []
    seen: set[str] = set()
    found = _context_file_in(agent)
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


def _git_root(start: str) -> str | None:
    current = start
    while True:
        if os.path.exists(os.path.join(current, ".git")):
            return current
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent


def _ancestor_agents_skill_dirs(cwd: str, home: str) -> list[str]:
    """``.agents/skills`` from ``cwd`` up to the git root (or the filesystem root),
    without the user's own ``~/.agents/skills``."""
    user = os.path.join(home, ".agents", "skills")
    root = _git_root(cwd)
    out = []
    current = cwd
    while True:
        candidate = os.path.join(current, ".agents", "skills")
        if candidate != user:
            out.append(candidate)
        if root is not None and current == root:
            break
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    return out


def _needs_trust(cwd: str, home: str) -> bool:
    config = os.path.join(cwd, CONFIG_DIR)
    if any(os.path.exists(os.path.join(config, name)) for name in _TRUST_REQUIRING):
        return True
    user = os.path.join(home, ".agents", "skills")
    current = cwd
    while True:
        candidate = os.path.join(current, ".agents", "skills")
        if candidate != user and os.path.exists(candidate):
            return True
        parent = os.path.dirname(current)
        if parent == current:
            return False
        current = parent


def _trust_decision(agent: str, cwd: str, warnings: list[str]) -> bool | None:
    path = os.path.join(agent, "trust.json")
    text = _read_text(path)
    if text is None:
        return None
    try:
        data = json.loads(text)
    except ValueError as exc:
        warnings.append(f"{path} is not valid JSON ({exc}); no project is trusted by it")
        return None
    if not isinstance(data, dict):
        return None
    found = nearest_decision(data, cwd)
    return None if found is None else found[1]


def _settings_file(path: str, warnings: list[str]) -> dict[str, Any]:
    text = _read_text(path)
    if text is None:
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        warnings.append(f"{path} is not valid JSON ({exc}); its settings are ignored")
        return {}
    if not isinstance(data, dict):
        warnings.append(f"{path} must hold a JSON object; its settings are ignored")
        return {}
    return data


def _merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _settings(
    cwd: str, agent: str, home: str, trust: bool | None, warnings: list[str]
) -> tuple[bool, dict[str, Any]]:
    """Whether the project is trusted, and the settings (the project's over the global
    ones when it is)."""
    global_settings = _settings_file(os.path.join(agent, "settings.json"), warnings)
    if trust is not None:
        trusted = trust
    elif not _needs_trust(cwd, home):
        trusted = True
    else:
        decision = _trust_decision(agent, cwd, warnings)
        if decision is not None:
            trusted = decision
        else:
            trusted = global_settings.get("defaultProjectTrust") == "always"
    if not trusted:
        return False, global_settings
    project = _settings_file(os.path.join(cwd, CONFIG_DIR, "settings.json"), warnings)
    return True, _merge(global_settings, project)


def trust_needed(cwd: str, env: Mapping[str, str]) -> bool:
    """Whether the project has resources that need trust (Pi's
    ``hasTrustRequiringProjectResources``)."""
    return _needs_trust(os.path.abspath(cwd), env.get("HOME") or os.path.expanduser("~"))


def trust_undecided(cwd: str, env: Mapping[str, str]) -> bool:
    """Whether Pi's interactive start would ask to trust the project: it has resources
    that need trust, ``trust.json`` holds no decision for it, and the setting
    ``defaultProjectTrust`` is ``ask`` (or absent). Blocking: call in a thread."""
    if not trust_needed(cwd, env):
        return False
    agent = agent_dir(env)
    warnings: list[str] = []
    if _trust_decision(agent, os.path.abspath(cwd), warnings) is not None:
        return False
    default = _settings_file(os.path.join(agent, "settings.json"), warnings)
    return default.get("defaultProjectTrust", "ask") not in ("always", "never")


def read_settings(cwd: str, env: Mapping[str, str]) -> dict[str, Any]:
    """Pi's ``settings.json`` for ``cwd`` (read at start-up, before the model is chosen);
    a file that is not valid JSON counts as empty."""
    home = env.get("HOME") or os.path.expanduser("~")
    return _settings(os.path.abspath(cwd), agent_dir(env), home, None, [])[1]


def _load_sync(
    cwd: str, env: Mapping[str, str], trust: bool | None
) -> tuple[CodingResources, list[str]]:
    cwd = os.path.abspath(cwd)
    agent = agent_dir(env)
    home = env.get("HOME") or os.path.expanduser("~")
    warnings: list[str] = []
    trusted, settings = _settings(cwd, agent, home, trust, warnings)
    project = os.path.join(cwd, CONFIG_DIR)

    def pick(name: str) -> str | None:
        for directory in (project, agent) if trusted else (agent,):
            path = os.path.join(directory, name)
            if os.path.isfile(path):
                return _read_text(path)
        return None

    skill_dirs: list[str] = []
    template_dirs: list[str] = []
    if trusted:
        skill_dirs += [os.path.join(project, "skills"), *_ancestor_agents_skill_dirs(cwd, home)]
        template_dirs.append(os.path.join(project, "prompts"))
    skill_dirs += [os.path.join(agent, "skills"), os.path.join(home, ".agents", "skills")]
    template_dirs.append(os.path.join(agent, "prompts"))
    resources = CodingResources(
        agent_dir=agent,
        trusted=trusted,
        context_files=tuple(_context_files(cwd, agent)),
        system_prompt=pick("SYSTEM.md"),
        append_system_prompt=pick("APPEND_SYSTEM.md"),
        template_dirs=tuple(template_dirs),
        settings=settings,
        warnings=tuple(warnings),
    )
    return resources, [d for d in skill_dirs if os.path.isdir(d)]


async def load_resources(
    cwd: str, env: Mapping[str, str], *, trust: bool | None = None
) -> CodingResources:
    """Pi's resources for ``cwd`` (``trust``: ``--approve`` / ``--no-approve``)."""
    resources, skill_dirs = await trio.to_thread.run_sync(_load_sync, cwd, env, trust)
    if not skill_dirs:
        return resources
    found = await load_skills(skill_dirs)
    seen: set[str] = set()
    skills = []
    for skill in found.skills:  # the first of a name wins, as in Pi
        if skill.name not in seen:
            seen.add(skill.name)
            skills.append(skill)
    warnings = [*resources.warnings, *(f"{d.path}: {d.message}" for d in found.diagnostics)]
    return attrs.evolve(resources, skills=tuple(skills), warnings=tuple(warnings))


def _escape_xml(value: str) -> str:
    return (
        value.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&quot;")
        .replace("'", "&apos;")
    )


def format_skills(skills: Iterable[Skill], read_tool: str = "read") -> str:
    """The coding agent's list of skills (``core/skills.js``, ``formatSkillsForPrompt``)."""
    visible = [s for s in skills if not s.disable_model_invocation]
    if not visible:
        return ""
    lines = [
        "\n\nThe following skills provide specialized instructions for specific tasks.",
        "Use the read tool to load a skill's file when the task matches its description."
        if read_tool == "read"
        else "Use bash to load a skill's file when the task matches its description.",
        "When a skill file references a relative path, resolve it against the skill directory "
        "(parent of SKILL.md / dirname of the path) and use that absolute path in tool commands.",
        "",
        "<available_skills>",
    ]
    for skill in visible:
        lines += [
            "  <skill>",
            f"    <name>{_escape_xml(skill.name)}</name>",
            f"    <description>{_escape_xml(skill.description)}</description>",
            f"    <location>{_escape_xml(skill.file_path)}</location>",
            "  </skill>",
        ]
    lines.append("</available_skills>")
    return "\n".join(lines)


def _context_block(files: Sequence[ContextFile]) -> str:
    if not files:
        return ""
    out = "\n\n<project_context>\n\nProject-specific instructions and guidelines:\n\n"
    for file in files:
        out += f'<project_instructions path="{file.path}">\n{file.content}\n'
        out += "</project_instructions>\n\n"
    return out + "</project_context>\n"


_DOCS = Path(__file__).resolve().parents[2]


def _docs_block() -> str:
    """Where pitrio's own documentation is, when it is installed from a checkout."""
    readme, docs = _DOCS / "README.md", _DOCS / "docs"
    if not (readme.is_file() and docs.is_dir()):
        return ""
    return (
        "\n\npitrio documentation (read only when the user asks about pitrio itself, its "
        "library, CLI, web UI or harness):\n"
        f"- Main documentation: {readme}\n"
        f"- Additional docs: {docs}\n"
        "- When asked about: the CLI (docs/cli.md), the web UI (docs/web.md), the harness and "
        "sessions (docs/harness.md), differences from Pi (docs/deviations.md)"
    )


def build_system_prompt(
    *,
    cwd: str,
    tools: Sequence[str] = ("read", "bash", "edit", "write"),
    custom_prompt: str | None = None,
    append_system_prompt: str | None = None,
    context_files: Sequence[ContextFile] = (),
    skills: Sequence[Skill] = (),
) -> str:
    """Pi's ``buildSystemPrompt``: the default prompt (or ``custom_prompt``, i.e.
    ``SYSTEM.md`` / ``--system-prompt``), then the appended text, the context files, the
    skills (when ``read`` or ``bash`` can open them) and the working directory."""
    append = f"\n\n{append_system_prompt}" if append_system_prompt else ""
    read_tool = next((t for t in ("read", "bash") if t in tools), None)
    skills_text = format_skills(skills, read_tool) if read_tool is not None else ""
    prompt_cwd = cwd.replace("\\", "/")
    if custom_prompt:
        return (
            custom_prompt
            + append
            + _context_block(context_files)
            + skills_text
            + f"\nCurrent working directory: {prompt_cwd}\n"
        )
    visible = [t for t in tools if t in TOOL_PROMPTS]
    tools_list = "\n".join(f"- {t}: {TOOL_PROMPTS[t][0]}" for t in visible) or "(none)"
    guidelines: list[str] = []

    def add(line: str) -> None:
        if line not in guidelines:
            guidelines.append(line)

    if "bash" in tools and not {"grep", "find", "ls"} & set(tools):
        add("Use bash for file operations like ls, rg, find")
    for tool in tools:
        for line in TOOL_PROMPTS.get(tool, ("", ()))[1]:
            add(line)
    add("Be concise in your responses")
    add("Show file paths clearly when working with files")
    prompt = (
        "You are an expert coding assistant operating inside pitrio, a coding agent harness. "
        "You help users by reading files, executing commands, editing code, and writing new "
        f"files.\n\nAvailable tools:\n{tools_list}\n\n"
        "In addition to the tools above, you may have access to other custom tools depending "
        "on the project.\n\nGuidelines:\n" + "\n".join(f"- {g}" for g in guidelines)
    )
    prompt += _docs_block()
    return (
        prompt
        + append
        + _context_block(context_files)
        + skills_text
        + f"\nCurrent working directory: {prompt_cwd}"
    )


# -- models.json ------------------------------------------------------------------------

_INTERPOLATION = re.compile(r"\$\$|\$!|\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def resolve_config_value(value: str, env: Mapping[str, str]) -> str | None:
    """A ``models.json`` ``apiKey`` or header value as Pi resolves it: ``!command`` runs
    the command (its stdout, trimmed), ``$VAR`` / ``${VAR}`` interpolate the environment
    (a missing variable: ``None``), ``$$`` and ``$!`` are a literal ``$`` and ``!``, any
    other text is literal."""
    if value.startswith("!"):
        done = subprocess.run(
            value[1:], shell=True, capture_output=True, text=True, timeout=60, check=False
        )
        return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else None
    missing = False

    def sub(match: re.Match[str]) -> str:
        nonlocal missing
        text = match.group(0)
        if text in ("$$", "$!"):
            return text[1]
        name = match.group(1) or match.group(2)
        if name not in env:
            missing = True
            return ""
        return env[name]

    out = _INTERPOLATION.sub(sub, value)
    return None if missing else out


@final
@attrs.frozen(kw_only=True)
class CustomProvider:
    """A provider of Pi's ``models.json`` with its models (``api_key``: the unresolved
    ``apiKey`` value)."""

    name: str
    models: tuple[Model, ...]
    api_key: str | None = None


def custom_providers(env: Mapping[str, str]) -> tuple[dict[str, CustomProvider], list[str]]:
    """The providers of ``models.json`` in the agent directory that declare models, and
    warnings for what cannot be used (named with the file)."""
    path = os.path.join(agent_dir(env), "models.json")
    warnings: list[str] = []
    data = _settings_file(path, warnings)
    providers = data.get("providers")
    out: dict[str, CustomProvider] = {}
    if not isinstance(providers, Mapping):
        return out, warnings
    for name, config in providers.items():
        if not isinstance(config, Mapping) or not isinstance(config.get("models"), list):
            continue
        models = []
        for entry in config["models"]:
            api = (entry.get("api") if isinstance(entry, Mapping) else None) or config.get("api")
            base_url = (entry.get("baseUrl") if isinstance(entry, Mapping) else None) or config.get(
                "baseUrl"
            )
            if not isinstance(entry, Mapping) or not isinstance(entry.get("id"), str):
                warnings.append(f"{path}: provider {name!r} has a model without an id; skipped")
                continue
            if not isinstance(api, str) or not isinstance(base_url, str):
                warnings.append(
                    f"{path}: model {name}/{entry['id']} needs baseUrl and api (on the model "
                    "or its provider); skipped"
                )
                continue
            cost: Mapping[str, Any] = entry.get("cost") or {}
            headers = {**(config.get("headers") or {}), **(entry.get("headers") or {})}
            models.append(
                Model(
                    id=entry["id"],
                    name=str(entry.get("name") or entry["id"]),
                    api=api,
                    provider=str(name),
                    base_url=base_url,
                    reasoning=entry.get("reasoning") is True,
                    input=tuple(entry.get("input") or ("text",)),
                    cost=ModelCost(
                        input=float(cost.get("input", 0)),
                        output=float(cost.get("output", 0)),
                        cache_read=float(cost.get("cacheRead", 0)),
                        cache_write=float(cost.get("cacheWrite", 0)),
                    ),
                    context_window=int(entry.get("contextWindow") or 128_000),
                    max_tokens=int(entry.get("maxTokens") or 16_384),
                    headers={k: resolve_config_value(str(v), env) or "" for k, v in headers.items()}
                    or None,
                    compat={**(config.get("compat") or {}), **(entry.get("compat") or {})} or None,
                )
            )
        key = config.get("apiKey")
        out[str(name)] = CustomProvider(
            name=str(name), models=tuple(models), api_key=key if isinstance(key, str) else None
        )
    return out, warnings
