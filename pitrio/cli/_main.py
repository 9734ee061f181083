"""``python -m pitrio``: parse and check the arguments, then dispatch to a mode.

Everything that can be checked before Trio starts is checked here (by
:func:`pitrio.cli._setup.configure`), and a bad argument exits with status 2 and a
message saying what to change. This module is the only place that calls
:func:`trio.run`.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
from collections.abc import Mapping, Sequence
from typing import IO, TYPE_CHECKING, Final, NoReturn, TextIO

from ._args import (
    EXIT_INTERRUPTED,
    EXIT_MODEL_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    build_parser,
    parse_cli,
)

if TYPE_CHECKING:
    from pitrio import StreamFn

__all__ = ["main", "run"]


def run() -> NoReturn:
    """The ``pitrio`` console script."""
    if "httpx" not in sys.modules:
        # httpx imports its own command line (click, rich.progress, rich.syntax,
        # pygments: about 100 modules, half of what importing httpx costs) whenever
        # click is installed; this process never runs it, so httpx.main stays a stub.
        sys.modules["httpx._main"] = None  # type: ignore[assignment]  # "not importable"
    sys.exit(main())


def main(
    argv: Sequence[str] | None = None,
    *,
    stream_fn: StreamFn | None = None,
    env: Mapping[str, str] | None = None,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
) -> int:
    """Run the CLI; returns the exit status (0 done, 1 the model or a tool failed the
    run, 2 bad arguments, 130 interrupted).

    Args:
        argv: the arguments (default ``sys.argv[1:]``).
        stream_fn: a testing seam: answer with this stream function instead of a
            provider (``--model`` then only names the model).
        env: the environment (default ``os.environ``).
        stdin: where prompts (or rpc commands) are read from (default ``sys.stdin``).
        stdout: where the transcript (or JSON lines) goes (default ``sys.stdout``).
    """
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["serve"]:
        return _serve(args_list[1:])
    if args_list[:1] == ["mcp"]:
        return _mcp(args_list[1:], stream_fn, os.environ if env is None else env)
    if args_list[:1] == ["worker"]:
        return _worker(args_list[1:])
    environ = os.environ if env is None else env
    source = sys.stdin if stdin is None else stdin
    out = sys.stdout if stdout is None else stdout
    parser = build_parser()
    try:
        args = parse_cli(parser, args_list)
        if args.list_models is not None:
            return _list_models(out, args.list_models, environ)
        # Imported here: --help and --version have exited above without them.
        import trio

        from ._errors import CliError
        from ._run import run_app
        from ._setup import configure

        settings = configure(parser, args, environ, stream_fn, source)
    except SystemExit as exc:  # argparse's way of reporting --help and bad arguments
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        return trio.run(run_app, settings, source, out, sys.stderr)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except CliError as exc:  # one line, no traceback; what it quotes shown, not obeyed
        from ._sanitize import visible

        print(f"pitrio: {visible(str(exc))}", file=sys.stderr)
        return exc.exit_status


SERVE_NEEDS: Final = "trio_websocket"
"""The module ``pitrio serve`` needs beyond pitrio's own dependencies (the ``web`` extra,
which ``cli`` includes)."""


def _worker(argv: list[str]) -> int:
    """``pitrio worker [celery worker options]``: a Celery worker running prompts as jobs
    (:mod:`pitrio.worker`; configured by ``PITRIO_*`` variables, see docs/deploy.md)."""
    from pitrio import UsageError
    from pitrio.worker._jobs import worker_main

    try:
        return worker_main(argv)
    except UsageError as exc:
        print(f"pitrio worker: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _serve(argv: list[str]) -> int:
    # Checked before anything starts: the page's socket is opened only when a browser
    # connects, so a missing module would otherwise fail each connection, not the start.
    try:
        importlib.import_module(SERVE_NEEDS)
    except ImportError:
        print(
            "pitrio serve: the web UI needs trio-websocket, which is not installed: "
            "pip install -e '.[cli]' in a clone (or pip install 'pitrio[web]')",
            file=sys.stderr,
        )
        return EXIT_MODEL_ERROR
    # The web server sits beside the CLI (pitrio.web imports the CLI's core, never the
    # reverse): this lazy import is the one way in.
    from pitrio.web import _serve as serve_module

    status: int = serve_module.main(argv)
    return status


def _mcp(argv: list[str], stream_fn: StreamFn | None, env: Mapping[str, str]) -> int:
    """``python -m pitrio mcp [OPTIONS]``: the agent as an MCP server on stdin/stdout,
    with the options of a ``-p`` run (``--model``, ``--base-url``, ``--yes``...)."""
    import io

    parser = build_parser()
    parser.prog = "pitrio mcp"
    try:
        args = parse_cli(parser, argv)
        if args.print or args.messages or args.mode != "text":
            parser.error(
                "pitrio mcp takes its prompts from the MCP client; drop -p, messages and --mode"
            )
        args.mode = "rpc"  # no prompt on stdin (it carries the protocol), no terminal
        import importlib.util

        if importlib.util.find_spec("mcp") is None:
            print(
                "pitrio mcp: the MCP server needs the mcp package: pip install 'pitrio[mcp]'",
                file=sys.stderr,
            )
            return EXIT_MODEL_ERROR
        import trio

        from ._errors import CliError
        from ._mcp import serve_mcp
        from ._run import run_app
        from ._setup import configure

        settings = configure(parser, args, env, stream_fn, io.StringIO())
        if settings.offline:
            parser.error(
                "pitrio mcp needs a model: --model, --base-url, or an API key "
                "(ANTHROPIC_API_KEY, OPENAI_API_KEY...)"
            )
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        status: int = trio.run(
            functools.partial(run_app, serve=serve_mcp), settings, sys.stdin, sys.stderr, sys.stderr
        )
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except CliError as exc:
        from ._sanitize import visible

        print(f"pitrio mcp: {visible(str(exc))}", file=sys.stderr)
        return exc.exit_status
    return status


def _list_models(out: IO[str], search: str, env: Mapping[str, str]) -> int:
    from pitrio.providers import Models, env_api_key, registered_apis

    from ._errors import CliError
    from ._list_models import list_models_table
    from ._login import has_stored_key, stored_credentials
    from ._setup import config_keys

    try:
        keys, _ = config_keys(env)
    except CliError:
        keys = {}  # an unreadable config file: the keys in the environment still count
    models = Models(env=env)
    stored = stored_credentials(env)  # Pi's auth.json: API keys and /login's tokens
    has_key = {
        p: bool(env_api_key(p, env) or keys.get(p) or has_stored_key(p, env, stored))
        for p in models.providers()
    }
    lines = list_models_table(models.list(), search, has_key, registered_apis())
    try:
        for line in lines:
            out.write(f"{line}\n")
        out.flush()
    except BrokenPipeError:
        # The reader went away (``pitrio --list-models | head``): that is fine. Point
        # stdout at /dev/null so the interpreter's final flush does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, out.fileno())
        except (OSError, ValueError, AttributeError):
            pass
        finally:
            os.close(devnull)
    return EXIT_OK
