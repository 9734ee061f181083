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
from collections.abc import Mapping
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
    guesses = []
    for word in message.removeprefix(_UNRECOGNIZED).split():
        if word.startswith("-"):
            close = difflib.get_close_matches(word.partition("=")[0], options, n=2, cutoff=0.7)
            if close:
                guesses.append(" or ".join(close))
        elif parser.prog == "pitrio" and difflib.get_close_matches(word, ["serve"], n=1):
            guesses.append("pitrio serve")
    if guesses:
        return f"; did you mean {', '.join(guesses)}?"
    if parser.prog == "pitrio" and not message.removeprefix(_UNRECOGNIZED).startswith("-"):
        return "; a prompt goes after -p (pitrio -p 'explain main.py')"
    return ""


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pitrio")
    except PackageNotFoundError:  # pragma: no cover  # running from a source tree
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    """The ``pitrio`` argument parser (``allow_abbrev=False``: no prefix matching)."""
    parser = CliArgumentParser(
        prog="pitrio",
        allow_abbrev=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "A coding agent on pitrio: it reads, edits and runs code in the working "
            "directory.\n\n"
            "With no model configured (no --model, --base-url or API key) it replays a "
            "recorded\nsession on a temporary copy of a small sample project: a scripted "
            "demo, not an LLM.\n\n"
            "  pitrio serve [...]     the web UI (see pitrio serve --help)"
        ),
        epilog=(
            "keys: ANTHROPIC_API_KEY, OPENAI_API_KEY, ... (the provider's usual variable), "
            f"or [keys] in {_config_file_hint()};\n"
            f"  {BASE_URL_KEY_ENV} for --base-url servers (a local server takes any key).\n"
            "interactive: Enter sends; a line ending in \\ continues on the next line; "
            "while the agent\n  works a typed line steers it, and a line starting with >> "
            "is queued as a follow-up;\n  /help lists the slash commands; Ctrl-C aborts the "
            "running answer, Ctrl-C again or Ctrl-D exits.\n"
            "exit status: 0 done, 1 the run failed (model error), 2 bad arguments, "
            "130 interrupted."
        ),
    )
    add = parser.add_argument
    add("--version", action="version", version=f"pitrio {_version()}")
    add(
        "-p",
        "--print",
        dest="prompt",
        metavar="PROMPT",
        help="run this one prompt, print the answer and exit (exit status 1 if it failed)",
    )
    add(
        "--mode",
        choices=("text", "json", "rpc"),
        default="text",
        help="text: a readable transcript (default); json: every event as one JSON line "
        "in Pi's wire form; rpc: JSON-line commands on stdin (Pi's RPC mode), responses "
        "and events on stdout",
    )
    add(
        "-m",
        "--model",
        metavar="[PROVIDER/]ID",
        help="the model, e.g. anthropic/claude-sonnet-4-5 or openai/gpt-4.1 "
        "(with --base-url: the name the server serves)",
    )
    add(
        "--provider", metavar="NAME", help="the provider of --model when it has no PROVIDER/ prefix"
    )
    add(
        "--base-url",
        metavar="URL",
        help="an OpenAI-compatible server (llama.cpp, vLLM, Ollama...), "
        "e.g. http://127.0.0.1:8080/v1",
    )
    add(
        "--compat",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="with --base-url: a compat switch for servers that differ from OpenAI, e.g. "
        "supportsStore=false or maxTokensField=max_tokens (repeatable; VALUE is JSON or "
        "a string)",
    )
    add(
        "--context-window",
        metavar="TOKENS",
        type=int,
        help="with --base-url: the server's context window (default 128000)",
    )
    add(
        "--thinking",
        choices=_THINKING_LEVELS,
        default=None,
        help="reasoning effort for models that support it (default: off)",
    )
    add("--system", metavar="TEXT", help="replace the default system prompt")
    add(
        "--cwd",
        metavar="DIR",
        help="the working directory the file tools are confined to (default: the current)",
    )
    add(
        "--local",
        action="store_true",
        help="run a real but tiny model in-process, offline (Gemma 3 270M in llama.cpp; "
        "needs pip install 'pitrio[local]'; very weak: a demonstration, not a coder)",
    )
    add(
        "--offline",
        action="store_true",
        help="replay the recorded demo session even if an API key is set",
    )
    add(
        "-y",
        "--yes",
        action="store_true",
        help="run bash, write and edit without asking (a policy file's deny still holds)",
    )
    add(
        "--policy",
        metavar="FILE",
        help="allow/deny patterns for bash, write and edit (TOML; default: policy.toml "
        "in the config directory, if it exists)",
    )
    sessions = parser.add_mutually_exclusive_group()
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
        nargs="?",
        const="",
        metavar="ID",
        help="resume a session by id (without ID: list this directory's)",
    )
    sessions.add_argument(
        "--session",
        metavar="FILE",
        help="continue the session in this file (one pitrio or Pi wrote), or start one "
        "there when it does not exist (FILE ends in .jsonl)",
    )
    sessions.add_argument(
        "--no-session", action="store_true", help="keep nothing: the conversation is not saved"
    )
    add("--no-color", action="store_true", help="plain text, no colours or markdown")
    add(
        "--list-models",
        nargs="?",
        const="",
        metavar="SEARCH",
        help="list the built-in models (of one provider, or found by a fuzzy search), "
        "whether their provider has a key, and exit",
    )
    return parser


def config_dir(env: Mapping[str, str] | None = None) -> str:
    """The user's pitrio config directory (``$XDG_CONFIG_HOME/pitrio``)."""
    environ = os.environ if env is None else env
    base = environ.get("XDG_CONFIG_HOME") or os.path.join(
        environ.get("HOME") or os.path.expanduser("~"), ".config"
    )
    return os.path.join(base, "pitrio")


def _config_file_hint() -> str:
    return "$XDG_CONFIG_HOME/pitrio/config.toml (default ~/.config/pitrio/config.toml)"
