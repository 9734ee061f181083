"""The ``pitrio`` command line's arguments: the parser alone, light to import.

``python -m pitrio --help`` and ``--version`` need only this module (argparse and the
kernel's names), so the harness, the providers and rich are imported after the
arguments are parsed (:mod:`pitrio.cli._setup` checks them).
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
from collections.abc import Mapping, Sequence
from typing import Final, NoReturn, final, get_args

from pitrio import ThinkingLevel

__all__ = [
    "BASE_URL_KEY_ENV",
    "EXIT_INTERRUPTED",
    "EXIT_MODEL_ERROR",
    "EXIT_OK",
    "EXIT_USAGE",
    "CliArgumentParser",
    "build_parser",
    "config_dir",
    "parse_cli",
    "split_messages",
]

EXIT_OK: Final = 0
EXIT_MODEL_ERROR: Final = 1
EXIT_USAGE: Final = 2
EXIT_INTERRUPTED: Final = 130

BASE_URL_KEY_ENV: Final = "PITRIO_API_KEY"
"""The variable holding the key for ``--base-url`` servers."""

_THINKING_LEVELS: Final[tuple[str, ...]] = get_args(ThinkingLevel)


@final
class CliArgumentParser(argparse.ArgumentParser):
    """argparse with pitrio's usage errors: one line on stderr, ``PROG: error: what was wrong``
    with a guess at what was meant (a close option, choice or subcommand, by
    :func:`difflib.get_close_matches`) and a pointer to ``--help``; exit status 2.

    argparse prints the whole usage block before the message; the block is in ``--help``.
    """

    def error(self, message: str) -> NoReturn:
        guess = _guess(self, message)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}{guess} (see {self.prog} --help)\n")


_INVALID_CHOICE: Final = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)$")
_UNRECOGNIZED: Final = "unrecognized arguments: "
_PI_ONLY: Final = frozenset({"-e", "--extension", "--theme", "--use-theme", "--tui-mode"})
"""Pi's flags pitrio does not take (the error says so rather than guessing)."""


def _guess(parser: argparse.ArgumentParser, message: str) -> str:
    """``; did you mean ...?`` for a mistyped option, choice or subcommand, else ``""``."""
    choice = _INVALID_CHOICE.search(message)
    if choice is not None:
        choices = re.findall(r"'([^']*)'", choice.group(2))
        close = difflib.get_close_matches(choice.group(1), choices, n=1)
        return f"; did you mean {close[0]!r}?" if close else ""
    if not message.startswith(_UNRECOGNIZED):
        return ""
    options = [s for action in parser._actions for s in action.option_strings]
    words = message.removeprefix(_UNRECOGNIZED).split()
    unsupported = [w for w in words if w.partition("=")[0] in _PI_ONLY]
    if unsupported and parser.prog == "pitrio":
        return (
            f"; {unsupported[0].partition('=')[0]} is Pi's, and pitrio has no TypeScript "
            "extensions, themes or full-screen mode (docs/cli.md, Pi's flags)"
        )
    guesses = []
    for word in words:
        if word.startswith("-"):
            close = difflib.get_close_matches(word.partition("=")[0], options, n=2, cutoff=0.7)
            if close:
                guesses.append(" or ".join(close))
        elif parser.prog == "pitrio" and difflib.get_close_matches(word, ["serve"], n=1):
            guesses.append("pitrio serve")
    if guesses:
        return f"; did you mean {', '.join(guesses)}?"
    return ""


@final
class _VersionAction(argparse.Action):
    """``--version``: prints ``pitrio VERSION`` and exits, as argparse's ``version``
    action does, but looks the version up only then (``importlib.metadata`` and its
    scan of the installed packages would cost every start)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: object) -> None:
        super().__init__(
            option_strings,
            dest=argparse.SUPPRESS,
            default=argparse.SUPPRESS,
            nargs=0,
            help="show program's version number and exit",
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> NoReturn:
        print(f"pitrio {_version()}")
        parser.exit()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pitrio")
    except PackageNotFoundError:  # pragma: no cover  # running from a source tree
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    """The ``pitrio`` argument parser (``allow_abbrev=False``: no prefix matching).

    Pi's coding agent's flags (``dist/cli/args.js``, ``parseArgs``) with their short
    forms, plus pitrio's own (``--base-url``, ``--local``, ``--demo``, ``--yes``,
    ``--policy``, ...). Messages and ``@file`` arguments are positional; parse with
    :func:`parse_cli` (options and messages intermixed, ``--`` ends the options).
    """
    parser = CliArgumentParser(
        prog="pitrio",
        allow_abbrev=False,
        usage="pitrio [options] [--] [@files...] [messages...]\n       pitrio serve [...]",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "A coding agent on pitrio: it reads, edits and runs code in the working "
            "directory.\nIts command line is Pi's (pi 0.85.0): pitrio -p 'explain main.py', "
            "pitrio @notes.md 'summarise'.\n\n"
            "With no model configured (no --model, --base-url or API key) it replays a "
            "recorded\nsession on a temporary copy of a small sample project: a scripted "
            "demo, not an LLM\n(--demo replays it whatever is configured).\n\n"
            "  pitrio serve [...]     the web UI (see pitrio serve --help)"
        ),
        epilog=(
            "keys: ANTHROPIC_API_KEY, OPENAI_API_KEY, ... (the provider's usual variable), "
            f"--api-key, or [keys] in\n  {_config_file_hint()};\n"
            f"  {BASE_URL_KEY_ENV} for --base-url servers (a local server takes any key).\n"
            "interactive: Enter sends; a line ending in \\ continues on the next line; "
            "while the agent\n  works a typed line steers it, and a line starting with >> "
            "is queued as a follow-up;\n  !CMD runs a shell command (!!CMD keeps it out of "
            "the context); /help lists the slash\n  commands; Ctrl-C aborts the "
            "running answer, Ctrl-C again or Ctrl-D exits.\n"
            "exit status: 0 done, 1 the run failed (model error), 2 bad arguments, "
            "130 interrupted."
        ),
    )
    add = parser.add_argument
    add(
        "messages",
        nargs="*",
        metavar="@files... messages...",
        help="the first message (@FILE arguments are included in it: text inlined, images "
        "attached), then more messages sent one after another",
    )
    add("-v", "--version", action=_VersionAction)
    add(
        "-p",
        "--print",
        dest="print",
        action="store_true",
        help="non-interactive: send the messages (or stdin), print the answer and exit "
        "(exit status 1 if the run failed)",
    )
    add(
        "--mode",
        choices=("text", "json", "rpc"),
        default="text",
        help="text: a readable transcript (default); json: every event as one JSON line "
        "in Pi's wire form; rpc: JSON-line commands on stdin (Pi's RPC mode), responses "
        "and events on stdout",
    )
    model = parser.add_argument_group("model")
    model.add_argument(
        "-m",
        "--model",
        metavar="[PROVIDER/]ID[:THINKING]",
        help="the model, e.g. anthropic/claude-sonnet-4-5, openai/gpt-4.1:high "
        "(with --base-url: the name the server serves)",
    )
    model.add_argument(
        "--provider", metavar="NAME", help="the provider of --model when it has no PROVIDER/ prefix"
    )
    model.add_argument(
        "--api-key", metavar="KEY", help="the API key for the model's provider (not saved)"
    )
    model.add_argument(
        "--models",
        metavar="PATTERNS",
        help="comma-separated model patterns (Pi's Ctrl+P scope, PROVIDER/ID:THINKING); "
        "pitrio starts on the first when no --model is given (no cycling)",
    )
    model.add_argument(
        "--thinking",
        choices=_THINKING_LEVELS,
        default=None,
        help="reasoning effort for models that support it (default: off)",
    )
    model.add_argument(
        "--list-models",
        nargs="?",
        const="",
        metavar="SEARCH",
        help="list the built-in models (of one provider, or found by a fuzzy search), "
        "whether their provider has a key, and exit",
    )
    model.add_argument(
        "--base-url",
        metavar="URL",
        help="pitrio: an OpenAI-compatible server (llama.cpp, vLLM, Ollama...), "
        "e.g. http://127.0.0.1:8080/v1",
    )
    model.add_argument(
        "--compat",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="pitrio, with --base-url: a compat switch for servers that differ from OpenAI, "
        "e.g. supportsStore=false or maxTokensField=max_tokens (repeatable; VALUE is JSON "
        "or a string)",
    )
    model.add_argument(
        "--context-window",
        metavar="TOKENS",
        type=int,
        help="pitrio, with --base-url: the server's context window (default 128000)",
    )
    model.add_argument(
        "--local",
        action="store_true",
        help="pitrio: run a real but tiny model in-process, offline (Gemma 3 270M in "
        "llama.cpp; needs pip install 'pitrio[local]'; very weak: a demonstration)",
    )
    model.add_argument(
        "--demo",
        action="store_true",
        help="pitrio: replay the recorded demo session even if a model is configured",
    )
    prompt = parser.add_argument_group("system prompt, tools and resources")
    prompt.add_argument(
        "--system-prompt",
        "--system",
        dest="system_prompt",
        metavar="TEXT|FILE",
        help="replace the default system prompt (a file's contents when FILE exists)",
    )
    prompt.add_argument(
        "--append-system-prompt",
        metavar="TEXT|FILE",
        action="append",
        default=[],
        help="append text or a file's contents to the system prompt (repeatable)",
    )
    prompt.add_argument(
        "-t",
        "--tools",
        metavar="NAMES",
        help="comma-separated allowlist of the tools to enable, e.g. read,grep,ls",
    )
    prompt.add_argument(
        "-xt", "--exclude-tools", metavar="NAMES", help="comma-separated tools to disable"
    )
    prompt.add_argument("-nt", "--no-tools", action="store_true", help="disable all tools")
    prompt.add_argument(
        "-nbt",
        "--no-builtin-tools",
        action="store_true",
        help="disable the built-in tools (pitrio has no others: the same as --no-tools)",
    )
    prompt.add_argument(
        "-nc",
        "--no-context-files",
        action="store_true",
        help="do not load AGENTS.md and CLAUDE.md",
    )
    prompt.add_argument(
        "--skill",
        metavar="PATH",
        action="append",
        default=[],
        help="load a skill file or directory (repeatable)",
    )
    prompt.add_argument(
        "-ns", "--no-skills", action="store_true", help="no skills discovery (--skill still loads)"
    )
    prompt.add_argument(
        "--prompt-template",
        metavar="PATH",
        action="append",
        default=[],
        help="load a prompt template file or directory (repeatable)",
    )
    prompt.add_argument(
        "-np",
        "--no-prompt-templates",
        action="store_true",
        help="no prompt template discovery (--prompt-template still loads)",
    )
    prompt.add_argument(
        "-ne",
        "--no-extensions",
        action="store_true",
        help="accepted for Pi's command lines: pitrio loads no extensions",
    )
    trust = prompt.add_mutually_exclusive_group()
    trust.add_argument(
        "-a",
        "--approve",
        dest="trust",
        action="store_const",
        const=True,
        help="trust the project's .pi/ files (settings, SYSTEM.md, skills, prompts) this run",
    )
    trust.add_argument(
        "-na",
        "--no-approve",
        dest="trust",
        action="store_const",
        const=False,
        help="ignore the project's .pi/ files this run",
    )
    prompt.add_argument(
        "--cwd",
        metavar="DIR",
        help="pitrio: the working directory the file tools are confined to (default: the current)",
    )
    prompt.add_argument(
        "-y",
        "--yes",
        action="store_true",
        help="pitrio: run bash, write and edit without asking (a policy file's deny still holds)",
    )
    prompt.add_argument(
        "--policy",
        metavar="FILE",
        help="pitrio: allow/deny patterns for bash, write and edit (TOML; default: "
        "policy.toml in the config directory, if it exists)",
    )
    group = parser.add_argument_group("sessions")
    sessions = group.add_mutually_exclusive_group()
    sessions.add_argument(
        "-c",
        "--continue",
        dest="continue_",
        action="store_true",
        help="continue the latest session of this directory",
    )
    sessions.add_argument(
        "-r",
        "--resume",
        action="store_true",
        help="pick a session of this directory to resume (in a terminal; piped: list them)",
    )
    sessions.add_argument(
        "--session",
        metavar="PATH|ID",
        help="continue a session: its file (one pitrio or Pi wrote; a new .jsonl path "
        "starts one there) or its id or the start of it",
    )
    sessions.add_argument(
        "--no-session", action="store_true", help="keep nothing: the conversation is not saved"
    )
    group.add_argument(
        "--session-id",
        metavar="ID",
        help="use this project session id, creating the session when it is missing",
    )
    group.add_argument(
        "--fork",
        metavar="PATH|ID",
        help="continue in a new session copied from this one (file, id or id prefix)",
    )
    group.add_argument(
        "--session-dir", metavar="DIR", help="where sessions are stored and looked up"
    )
    group.add_argument("-n", "--name", metavar="NAME", help="set the session's display name")
    group.add_argument(
        "--export",
        metavar="FILE",
        help="write the session file FILE as an HTML page and exit (the output path may "
        "follow as a message)",
    )
    other = parser.add_argument_group("other")
    other.add_argument(
        "--offline",
        action="store_true",
        help="no start-up network operations (PI_OFFLINE=1); pitrio makes none anyway",
    )
    other.add_argument(
        "--verbose", action="store_true", help="accepted for Pi's command lines (no effect)"
    )
    other.add_argument(
        "--no-themes", action="store_true", help="accepted for Pi's command lines (no effect)"
    )
    other.add_argument("--no-color", action="store_true", help="plain text, no colours or markdown")
    return parser


def parse_cli(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """Parse as Pi does: options and messages in any order, everything after ``--`` a
    message or ``@file``; ``--resume=ID`` (pitrio before Pi's flags) is ``--session ID``.

    The messages end up in ``args.messages``; :func:`split_messages` separates the
    ``@file`` arguments.
    """
    argv = list(argv)
    tail: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, tail = argv[:cut], argv[cut + 1 :]
    head: list[str] = []
    for arg in argv:
        if arg.startswith("--resume="):
            head += ["--session", arg.removeprefix("--resume=")]
        else:
            head.append(arg)
    args = parser.parse_intermixed_args(head)
    first = head[0] if head else ""
    if args.messages[:1] == [first] and difflib.get_close_matches(first, ["serve"], cutoff=0.8):
        parser.error(f"unrecognized arguments: {first}")  # a mistyped ``pitrio serve``
    search = args.list_models
    if search is not None and search.startswith("@"):  # Pi: an @file is no search
        args.messages.insert(0, search)
        args.list_models = ""
    args.messages = [*args.messages, *tail]
    args.after_dashes = len(tail)
    return args


def split_messages(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """``(messages, file_args)``: the positional arguments, ``@FILE`` ones apart (their
    ``@`` removed), as Pi's ``parseArgs``."""
    messages: list[str] = []
    files: list[str] = []
    for arg in args.messages:
        if arg.startswith("@"):
            files.append(arg[1:])
        else:
            messages.append(arg)
    return messages, files


def config_dir(env: Mapping[str, str] | None = None) -> str:
    """The user's pitrio config directory (``$XDG_CONFIG_HOME/pitrio``)."""
    environ = os.environ if env is None else env
    base = environ.get("XDG_CONFIG_HOME") or os.path.join(
        environ.get("HOME") or os.path.expanduser("~"), ".config"
    )
    return os.path.join(base, "pitrio")


def _config_file_hint() -> str:
    return "$XDG_CONFIG_HOME/pitrio/config.toml (default ~/.config/pitrio/config.toml)"
