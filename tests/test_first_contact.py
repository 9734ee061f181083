"""A person's first minutes with ``python -m pitrio``: what goes wrong is said in one line,
at once, with what to do.

``serve`` without its dependency, a ``--base-url`` server that is not running, a mistyped
flag, choice, provider or config key, and the slash commands that describe the session
(``/help``, ``/thinking`` and ``/tools`` agree with the run they describe).
"""

from __future__ import annotations

import io
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pitrio import AssistantMessage
from pitrio.cli import main
from pitrio.cli._loopback import loopback_address, refused_text
from pitrio.harness._retry import is_retryable
from pitrio.providers import Models
from pitrio.providers._options import clamp_thinking_level, supported_thinking_levels


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """No keys; sessions, config and history under tmp_path."""
    return {
        "PITRIO_SESSIONS_DIR": str(tmp_path / "sessions"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "HOME": str(tmp_path / "home"),
    }


def run_cli(
    argv: list[str], env: dict[str, str], stdin: io.StringIO | None = None
) -> tuple[int, str]:
    out = io.StringIO()
    status = main(argv, env=env, stdin=stdin or io.StringIO(""), stdout=out)
    return status, out.getvalue()


# -- pitrio serve without trio-websocket -------------------------------------------------


def test_serve_without_its_dependency_says_how_to_install_it() -> None:
    """trio_websocket hidden: exit 1 at once, one line naming the install command."""
    hide_and_run = (
        "import sys; sys.modules['trio_websocket'] = None; "
        "sys.argv = ['pitrio', 'serve']; from pitrio.cli import run; run()"
    )
    result = subprocess.run(
        [sys.executable, "-c", hide_and_run],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == (
        "pitrio serve: the web UI needs trio-websocket, which is not installed: "
        "pip install -e '.[cli]' in a clone (or pip install 'pitrio[web]')\n"
    )


# -- a loopback server that is not running ---------------------------------------------


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port bound by this test but not listening: connections are refused,
    and no other process can take the port meanwhile."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def test_a_refused_loopback_server_fails_at_once_in_one_line(
    env: dict[str, str], tmp_path: Path, closed_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """No retry loop: one error line naming the address and asking about the server, on
    stderr (``-p`` into a pipe keeps stdout for the answer, and there is none)."""
    url = f"http://127.0.0.1:{closed_port}/v1"
    argv = ["--cwd", str(tmp_path), "--base-url", url, "--model", "m", "-p", "hi", "--no-color"]
    status, out = run_cli(argv, env)
    err = capsys.readouterr().err
    assert status == 1
    assert out == ""
    assert "retry" not in err
    assert [line for line in err.splitlines() if not line.startswith("tokens in ")] == [
        f"error: nothing is listening on 127.0.0.1:{closed_port}: is the server running? "
        f"(--base-url {url})"
    ]


def test_a_port_that_reads_as_a_status_is_not_retried_either(
    env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The retry policy matches texts such as "500" anywhere (port 5000 too): the refusal
    turns the harness's retry off rather than trusting its own text."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", 5000))
        except OSError:
            pytest.skip("port 5000 is in use on this machine")
        text = refused_text("127.0.0.1", 5000, "http://127.0.0.1:5000/v1")
        assert is_retryable(AssistantMessage(stop_reason="error", error_message=text))
        argv = ["--cwd", str(tmp_path), "--base-url", "http://127.0.0.1:5000/v1", "--model", "m"]
        status, out = run_cli([*argv, "-p", "hi", "--no-color"], env)
    err = capsys.readouterr().err
    assert status == 1
    assert out == ""
    assert "retry" not in err
    assert [line for line in err.splitlines() if not line.startswith("tokens in ")] == [
        f"error: {text}"
    ]


@pytest.mark.parametrize(
    ("url", "address"),
    [
        ("http://127.0.0.1:8080/v1", ("127.0.0.1", 8080)),
        ("http://localhost/v1", ("localhost", 80)),
        ("https://127.0.0.2/v1", ("127.0.0.2", 443)),
        ("http://[::1]:9/v1", ("::1", 9)),
        ("http://192.168.1.5:8080/v1", None),
        ("https://api.example.com/v1", None),
        ("http://127.0.0.1:notaport/v1", None),
    ],
)
def test_only_loopback_urls_are_probed(url: str, address: tuple[str, int] | None) -> None:
    """A remote server that refuses keeps Pi's retries: only this machine is probed."""
    assert loopback_address(url) == address


# -- argument errors ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["--modle", "x", "-p", "hi"],
            "pitrio: error: unrecognized arguments: --modle; did you mean --mode or --model? "
            "(see pitrio --help)",
        ),
        (
            ["--mode", "jsn"],
            "pitrio: error: argument --mode: invalid choice: 'jsn' (choose from 'text', 'json', "
            "'rpc'); did you mean 'json'? (see pitrio --help)",
        ),
        (
            ["serv"],
            "pitrio: error: unrecognized arguments: serv; did you mean pitrio serve? "
            "(see pitrio --help)",
        ),
        (
            ["--model", "opnai/gpt-4.1", "-p", "hi"],
            "pitrio: error: unknown provider 'opnai' in --model 'opnai/gpt-4.1'; did you mean "
            "'openai'? known providers: "
            + ", ".join(repr(p) for p in Models().providers())
            + " (for any OpenAI-compatible service use --base-url URL --model MODEL_ID) "
            "(see pitrio --help)",
        ),
    ],
)
def test_an_argument_error_is_one_line_with_a_guess(
    env: dict[str, str], capsys: pytest.CaptureFixture[str], argv: list[str], line: str
) -> None:
    """Exit 2; no usage block: the line, what was probably meant, where the help is."""
    status, out = run_cli(argv, env)
    assert status == 2
    assert out == ""
    assert capsys.readouterr().err == line + "\n"


def test_serve_argument_errors_are_one_line_too(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--prot", "8000"]) == 2
    assert capsys.readouterr().err == (
        "pitrio serve: error: unrecognized arguments: --prot 8000; did you mean --port? "
        "(see pitrio serve --help)\n"
    )


# -- the config file ------------------------------------------------------------------------


def test_an_unknown_config_key_is_warned_with_its_line(
    env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A typo such as ``[key]`` is not silently ignored: file, line, and a guess."""
    config = Path(env["XDG_CONFIG_HOME"], "pitrio", "config.toml")
    config.parent.mkdir(parents=True)
    config.write_text(
        'theme = "dark"\n# keys\n\n[key]\nopenai = "sk-1"\n\n[keys]\nanthropic = "a"\n'
        "[ui.colors]\nx = 1\n"
    )
    status, _ = run_cli(["--model", "nope/x", "-p", "hi"], env)
    err = capsys.readouterr().err.splitlines()
    assert status == 2
    assert err[:3] == [
        f"pitrio: {config}:1: unknown key 'theme' is ignored (pitrio reads only [keys])",
        f"pitrio: {config}:4: unknown key 'key' is ignored; did you mean [keys]?",
        f"pitrio: {config}:9: unknown key 'ui' is ignored (pitrio reads only [keys])",
    ]
    assert err[3].startswith("pitrio: error: unknown provider 'nope'")


def test_a_config_file_pitrio_reads_whole_gets_no_warning(
    env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    config = Path(env["XDG_CONFIG_HOME"], "pitrio", "config.toml")
    config.parent.mkdir(parents=True)
    config.write_text('[keys]\nopenai = "sk-1"\n')
    run_cli(["--model", "nope/x", "-p", "hi"], env)
    assert "unknown key" not in capsys.readouterr().err


# -- /help, /thinking, /tools -----------------------------------------------------------------


class Typed(io.StringIO):
    """Lines typed at the interactive prompt (a terminal, as far as pitrio can tell)."""

    def isatty(self) -> bool:
        return True


def interactive(argv: list[str], env: dict[str, str], *lines: str) -> str:
    status, out = run_cli(argv, env, stdin=Typed("".join(f"{line}\n" for line in lines)))
    assert status == 0
    return out


@pytest.mark.parametrize(
    "model", ["anthropic/claude-sonnet-4-5", "openai/gpt-4.1", "openai/gpt-5.2"]
)
def test_help_and_thinking_list_the_models_levels(
    env: dict[str, str], tmp_path: Path, model: str
) -> None:
    """Both list the levels this model takes (pi-ai's getSupportedThinkingLevels)."""
    provider, _, model_id = model.partition("/")
    found = Models().get(provider, model_id)
    assert found is not None
    levels = ", ".join(supported_thinking_levels(found))
    keys = {"ANTHROPIC_API_KEY": "k", "OPENAI_API_KEY": "k"}
    argv = ["--cwd", str(tmp_path), "--model", model, "--no-session", "--no-color"]
    out = interactive(argv, {**env, **keys}, "/help", "/thinking")
    help_line = next(line for line in out.splitlines() if "/thinking [LEVEL]" in line)
    assert help_line.endswith(f"show or change the reasoning level ({levels})")
    default = clamp_thinking_level(found, "medium")  # Pi's default, as the model takes it
    assert f"thinking: {default} (levels: {levels})" in out


@pytest.mark.parametrize(
    ("flags", "how"),
    [([], "asks first"), (["--yes"], "runs without asking (--yes)")],
)
def test_tools_says_yes_only_when_it_was_given(
    env: dict[str, str], tmp_path: Path, flags: list[str], how: str
) -> None:
    argv = ["--cwd", str(tmp_path), "--model", "openai/gpt-4.1", "--no-session", *flags]
    out = interactive(argv, {**env, "OPENAI_API_KEY": "k"}, "/tools")
    bash = next(line for line in out.splitlines() if line.strip().startswith("bash "))
    assert bash.split(None, 1)[1].startswith(how)
    assert ("(--yes)" in out) == ("--yes" in flags)


def test_the_offline_replay_says_why_its_tools_do_not_ask(env: dict[str, str]) -> None:
    """The replay runs its tools without asking (a throwaway copy), and /tools says that
    rather than pretending --yes was given."""
    import argparse

    from pitrio.cli._args import build_parser
    from pitrio.cli._setup import configure

    parser = build_parser()
    for flags, reason in (([], "offline replay"), (["--yes"], "--yes")):
        args: argparse.Namespace = parser.parse_args(["--demo", "-p", "x", *flags])
        settings = configure(parser, args, env, None, io.StringIO(""))
        assert (settings.yes, settings.yes_reason) == (True, reason)


async def test_the_harness_retries_again_once_the_server_answers() -> None:
    """The refusal holds the harness's retry only until a request reaches a server."""
    from pitrio import Model
    from pitrio.cli._loopback import RefusingStreamFn
    from pitrio.harness import Harness, RetrySettings
    from pitrio.testing import ScriptedModel, ScriptedResponse

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        model = Model(
            id="m", api="scripted", provider="local", base_url=f"http://127.0.0.1:{port}/v1"
        )
        stream_fn = RefusingStreamFn(ScriptedModel([ScriptedResponse.text("hello")]))
        retry = RetrySettings(max_retries=2, base_delay=0.5)
        harness = Harness(model=model, stream_fn=stream_fn, retry=retry)
        stream_fn.harness = harness
        await harness.prompt("one")
        first = harness.messages[-1]
        assert isinstance(first, AssistantMessage)
        assert first.error_message == refused_text("127.0.0.1", port, model.base_url or "")
        assert harness.retry.enabled is False  # so the prompt ended without a retry
        sock.listen()  # the server is up now
        await harness.prompt("two")
    last = harness.messages[-1]
    assert isinstance(last, AssistantMessage)
    assert (last.stop_reason, last.text) == ("stop", "hello")
    assert harness.retry == retry


def test_a_port_with_401_in_it_is_no_reason_to_blame_the_key() -> None:
    """The key hint wants a status as a word: ``127.0.0.1:40195`` is a port, not a 401."""
    from pitrio.cli._app import _AUTH_FAILURE

    refused = refused_text("127.0.0.1", 40195, "http://127.0.0.1:40195/v1").lower()
    assert _AUTH_FAILURE.search(refused) is None
    assert _AUTH_FAILURE.search("http 401: invalid x-api-key") is not None
    assert _AUTH_FAILURE.search("error 403 forbidden") is not None
