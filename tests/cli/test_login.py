"""``/login`` and ``/logout`` in the interactive mode, and Pi's ``auth.json`` in the CLI's
choice of key: ``--api-key``, then ``auth.json`` (a key or a login), then the
environment; ``--list-models`` and ``/model`` count a login as a key."""

from __future__ import annotations

import io
import json
import os
import stat
import sys
import textwrap
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from pitrio.cli._args import build_parser
from pitrio.cli._interactive import _keyed_models
from pitrio.cli._login import stored_credentials
from pitrio.cli._main import main
from pitrio.cli._setup import api_key_lookup, configure

pexpect = pytest.importorskip(
    "pexpect", reason="pexpect is in the test extra: pip install -e .[test]"
)

OAUTH = {"type": "oauth", "access": "sk-ant-oat-x", "refresh": "r", "expires": 9e12}


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """No keys; Pi's agent directory (and so auth.json) under tmp_path."""
    return {
        "PITRIO_SESSIONS_DIR": str(tmp_path / "sessions"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "HOME": str(tmp_path / "home"),
        "PI_CODING_AGENT_DIR": str(tmp_path / "agent"),
    }


def write_auth(env: dict[str, str], data: dict[str, Any]) -> Path:
    path = Path(env["PI_CODING_AGENT_DIR"]) / "auth.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def key_column(env: dict[str, str], provider: str) -> set[str]:
    out = io.StringIO()
    assert main(["--list-models", provider], env=env, stdout=out) == 0
    return {line.split()[6] for line in out.getvalue().splitlines()[1:]}


def test_list_models_counts_a_login_and_a_stored_key(env: dict[str, str]) -> None:
    """A provider with tokens or a key in auth.json has a key; ``$VAR`` keys count when
    the variable is set."""
    assert key_column(env, "anthropic") == {"no"}
    write_auth(
        env,
        {
            "anthropic": OAUTH,
            "groq": {"type": "api_key", "key": "$MY_GROQ"},
            "openai": {"type": "api_key", "key": "sk-literal"},
        },
    )
    assert key_column(env, "anthropic") == {"yes"}
    assert key_column(env, "openai") == {"yes"}
    assert key_column(env, "groq") == {"no"}
    assert key_column({**env, "MY_GROQ": "g"}, "groq") == {"yes"}
    listed = _keyed_models(env, {}, stored_credentials(env))
    assert "anthropic/claude-sonnet-4-5" in listed


def _configure(argv: list[str], env: dict[str, str]) -> Any:
    parser = build_parser()
    return configure(parser, parser.parse_args(argv), env, None, io.StringIO())


def test_model_selection_takes_auth_json_before_the_environment(env: dict[str, str]) -> None:
    """Pi's order: a stored key beats ``ANTHROPIC_API_KEY``; ``--api-key`` beats both; a
    login leaves the key to each request (``None``), which reads and refreshes it."""
    keyed = {**env, "ANTHROPIC_API_KEY": "from-env"}
    path = write_auth(env, {"anthropic": {"type": "api_key", "key": "sk-stored"}})
    settings = _configure(["--model", "anthropic/claude-haiku-4-5", "-p", "hi"], keyed)
    assert settings.api_key == "sk-stored"
    assert settings.key_source == f"the key stored in {path}"
    assert api_key_lookup(settings)("anthropic") == "sk-stored"
    given = _configure(
        ["--model", "anthropic/claude-haiku-4-5", "--api-key", "cli", "-p", "hi"], keyed
    )
    assert api_key_lookup(given)("anthropic") == "cli"
    write_auth(env, {"anthropic": OAUTH})
    login = _configure(["--model", "anthropic/claude-haiku-4-5", "-p", "hi"], keyed)
    assert login.api_key is None
    assert login.key_source == f"the login stored in {path}"
    assert api_key_lookup(login)("anthropic") is None
    assert api_key_lookup(login)("openai") is None  # the environment answers
    default = _configure(["-p", "hi"], env)  # no --model: the first default with a key
    assert (default.model.provider, default.model.id) == ("anthropic", "claude-opus-4-8")  # Pi's


def test_no_key_for_a_provider_with_a_login_says_so(
    env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Without any key, a provider that has a subscription login names ``/login``."""
    with pytest.raises(SystemExit):
        _configure(["--model", "anthropic/claude-haiku-4-5", "-p", "hi"], env)
    assert "(or /login in the interactive mode)" in capsys.readouterr().err


# -- the interactive mode -----------------------------------------------------------


class _TokenServer(BaseHTTPRequestHandler):
    bodies: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        raw = self.rfile.read(length).decode()
        if self.headers["Content-Type"] == "application/json":
            _TokenServer.bodies.append(json.loads(raw))
        else:
            _TokenServer.bodies.append(dict(urllib.parse.parse_qsl(raw)))
        body = json.dumps(
            {"access_token": "sk-ant-oat-new", "refresh_token": "rt", "expires_in": 3600}
        )
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: object) -> None:
        pass


def _serve(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """``http://127.0.0.1:PORT`` of a server answering with ``handler``, while it runs."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]!s}"
    finally:
        server.shutdown()
        thread.join(timeout=5)
        server.server_close()


@pytest.fixture
def token_server() -> Iterator[str]:
    for url in _serve(_TokenServer):
        yield f"{url}/v1/oauth/token"


_BOOT = textwrap.dedent(
    """
    import sys
    from pitrio.providers._auth import set_oauth_flow
    from pitrio.providers._auth._anthropic import AnthropicOAuth
    set_oauth_flow("anthropic", AnthropicOAuth(token_url=sys.argv.pop(1), callback_port=0))
    from pitrio.cli._main import main
    sys.exit(main(sys.argv[1:]))
    """
)


@pytest.mark.timeout(60)
def test_login_with_a_pasted_code_then_logout(
    env: dict[str, str], token_server: str, tmp_path: Path
) -> None:
    """``/login`` lists the logins; ``/login anthropic`` shows the URL (Ctrl-C cancels
    it), takes the pasted code, stores the tokens 0600 and says Pi's text; ``/logout
    anthropic`` removes them."""
    (tmp_path / "work").mkdir()
    child = pexpect.spawn(
        sys.executable,
        ["-c", _BOOT, token_server, "--cwd", str(tmp_path / "work"), "--base-url",
         "http://127.0.0.1:9/v1", "--model", "m"],
        env={**env, "PATH": os.environ.get("PATH", ""), "TERM": "xterm", "PYTHONUNBUFFERED": "1",
             "PYTHONPATH": str(Path(__file__).parents[2])},
        encoding="utf-8",
        timeout=20,
        dimensions=(50, 200),
    )  # fmt: skip
    try:
        child.expect_exact("> ")
        child.send("/login\r")
        child.expect_exact("Subscription logins (/login PROVIDER):")
        child.expect_exact("github-copilot")
        child.expect_exact("> ")
        child.send("/login anthropic\r")
        child.expect_exact("paste the authorization code / redirect URL here:")
        child.sendintr()  # Ctrl-C cancels the login, not the session
        child.expect_exact("[login cancelled]")
        child.expect_exact("> ")
        child.send("/login anthropic\r")
        child.expect_exact("Open this URL in your browser: https://claude.ai/oauth/authorize?")
        child.expect_exact("paste the authorization code / redirect URL here:")
        child.send("the-pasted-code\r")
        child.expect_exact("Logged in to Anthropic (Claude Pro/Max). Credentials saved to ")
        path = Path(env["PI_CODING_AGENT_DIR"]) / "auth.json"
        child.expect_exact("> ")
        stored = json.loads(path.read_text())["anthropic"]
        assert stored["type"] == "oauth"
        assert stored["access"] == "sk-ant-oat-new"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert _TokenServer.bodies[-1]["code"] == "the-pasted-code"
        child.send("/login\r")
        child.expect_exact("Anthropic (Claude Pro/Max)  (logged in)")
        child.expect_exact("> ")
        child.send("/logout anthropic\r")
        child.expect_exact("Logged out of Anthropic (Claude Pro/Max)")
        child.expect_exact("> ")
        assert "anthropic" not in json.loads(path.read_text())
        child.send("/logout\r")
        child.expect_exact("No stored credentials to remove.")
        child.expect_exact("> ")
        child.send("/login nowhere\r")
        child.expect_exact("/login: no subscription login for 'nowhere'; there are: anthropic")
        child.expect_exact("> ")
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        if child.isalive():
            child.terminate(force=True)


# A reader thread slow to start its next read (a loaded machine): the idle prompt a
# finished login shows must not come before readline has the terminal, or the Ctrl-D typed
# at it is read by the terminal's line discipline and lost.
_SLOW_READER = textwrap.dedent(
    """
    import sys, time
    from pitrio.cli import _interactive
    read_one = _interactive.LineReader._read_one
    def slow(self, prompt):
        time.sleep(0.3)
        return read_one(self, prompt)
    _interactive.LineReader._read_one = slow
    from pitrio.cli._main import main
    sys.exit(main(sys.argv[1:]))
    """
)


@pytest.mark.timeout(60)
def test_ctrl_d_at_the_prompt_after_a_login_ends_the_session(
    env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "work").mkdir()
    child = pexpect.spawn(
        sys.executable,
        ["-c", _SLOW_READER, "--cwd", str(tmp_path / "work"), "--base-url",
         "http://127.0.0.1:9/v1", "--model", "m"],
        env={**env, "PATH": os.environ.get("PATH", ""), "TERM": "xterm", "PYTHONUNBUFFERED": "1",
             "PYTHONPATH": str(Path(__file__).parents[2])},
        encoding="utf-8",
        timeout=20,
        dimensions=(50, 200),
    )  # fmt: skip
    try:
        child.expect_exact("> ")
        child.send("/login nowhere\r")
        child.expect_exact("/login: no subscription login for 'nowhere'; there are: anthropic")
        child.expect_exact("> ")
        child.sendeof()
        child.expect(pexpect.EOF, timeout=10)
    finally:
        if child.isalive():
            child.terminate(force=True)


# -- the commands, in-process -------------------------------------------------------


class _Answers:
    def __init__(self, *lines: str) -> None:
        self.lines = list(lines)

    async def __call__(self) -> str:
        import trio

        await trio.lowlevel.checkpoint()
        return self.lines.pop(0)


async def test_login_and_logout_commands(env: dict[str, str], token_server: str) -> None:
    """``/login`` lists, runs a login with the typed answers (a select by number, a
    pasted code), stores it; ``/logout`` lists and removes; unknown names are errors."""
    from pitrio.cli._login import login_command, logout_command
    from pitrio.cli._render import Renderer
    from pitrio.providers._auth import set_oauth_flow
    from pitrio.providers._auth._codex import CodexOAuth

    out = io.StringIO()
    renderer = Renderer(out)
    stored: dict[str, Any] = {}
    previous = set_oauth_flow(
        "openai-codex",
        CodexOAuth(auth_base_url=token_server.rsplit("/v1/", 1)[0], callback_port=0),
    )
    try:
        assert await login_command(renderer, "", env, stored, _Answers()) is False
        assert "openai-codex     OpenAI (ChatGPT Plus/Pro)" in out.getvalue()
        assert await login_command(renderer, "nope", env, stored, _Answers()) is False
        # "3" is not an option: asked again; "1" is the browser; the code is pasted
        answers = _Answers("3", "1", "pasted")
        assert (
            await login_command(renderer, "OpenAI (ChatGPT Plus/Pro)", env, stored, answers)
            is False
        )
    finally:
        set_oauth_flow("openai-codex", previous)
    text = out.getvalue()
    assert "Please answer 1 to 2." in text
    assert "Open this URL in your browser: " in text
    # the fake token server's answer has no ChatGPT account id: pi-ai's failure text
    assert "Failed to login to OpenAI (ChatGPT Plus/Pro): Failed to extract accountId" in text
    assert stored == {}

    from pitrio.cli._login import TerminalLogin
    from pitrio.providers._auth._anthropic import AnthropicOAuth
    from pitrio.providers.auth import AuthEvent

    previous = set_oauth_flow("anthropic", AnthropicOAuth(token_url=token_server, callback_port=0))
    try:
        assert await login_command(renderer, "anthropic", env, stored, _Answers("pasted"))
    finally:
        set_oauth_flow("anthropic", previous)
    assert stored["anthropic"].access == "sk-ant-oat-new"
    assert "Logged in to Anthropic (Claude Pro/Max). Credentials saved to " in out.getvalue()
    terminal = TerminalLogin(renderer, _Answers(""))
    terminal.notify(AuthEvent(kind="device_code", url="https://g/d", user_code="AB\x1b[2J"))
    terminal.notify(AuthEvent(kind="progress", message="Enabling models..."))
    assert "Open https://g/d and enter the code: AB" in out.getvalue()
    assert "\x1b[2J" not in out.getvalue()  # a server's text is shown, never obeyed

    path = write_auth(env, {"anthropic": OAUTH, "groq": {"type": "api_key", "key": "k"}})
    stored.update(stored_credentials(env))
    await logout_command(renderer, "", env, stored)
    assert "anthropic        Anthropic (Claude Pro/Max) (oauth)" in out.getvalue()
    await logout_command(renderer, "mistral", env, stored)
    assert "/logout: nothing stored for 'mistral'; stored: anthropic, groq" in out.getvalue()
    await logout_command(renderer, "groq", env, stored)
    assert "Removed stored API key for groq." in out.getvalue()
    await logout_command(renderer, "Anthropic (Claude Pro/Max)", env, stored)
    assert "Logged out of Anthropic (Claude Pro/Max)" in out.getvalue()
    assert json.loads(path.read_text()) == {}
    assert stored == {}


async def test_the_anthropic_subscription_warning(env: dict[str, str], tmp_path: Path) -> None:
    """Pi warns when Claude runs on a subscription login (stored tokens or an
    ``sk-ant-oat`` key), unless its settings turn the warning off."""
    from pitrio.cli._login import ANTHROPIC_SUBSCRIPTION_WARNING, anthropic_subscription_warning

    write_auth(env, {"anthropic": OAUTH})
    stored = stored_credentials(env)
    cwd = str(tmp_path)
    warn = anthropic_subscription_warning
    assert await warn("anthropic", None, env, stored, cwd) == ANTHROPIC_SUBSCRIPTION_WARNING
    assert await warn("anthropic", "sk-ant-oat01-x", env, {}, cwd) is not None
    assert await warn("anthropic", "sk-ant-api03-x", env, {}, cwd) is None
    assert await warn("openai", None, env, stored, cwd) is None
    settings = Path(env["PI_CODING_AGENT_DIR"]) / "settings.json"
    settings.write_text(json.dumps({"warnings": {"anthropicExtraUsage": False}}))
    assert await warn("anthropic", None, env, stored, cwd) is None


# -- API keys typed at /login, and Radius's gateway ----------------------------------

RADIUS_MODEL = {
    "id": "claude-x",
    "name": "Claude X",
    "reasoning": True,
    "input": ["text"],
    "cost": {"input": 3, "output": 15, "cacheRead": 0, "cacheWrite": 0},
    "contextWindow": 200000,
    "maxTokens": 64000,
}


class _Gateway(BaseHTTPRequestHandler):
    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        _Gateway.seen.append(f"{self.path} {self.headers.get('Authorization')}")
        host = f"http://127.0.0.1:{self.server.server_address[1]!s}"  # type: ignore[index]
        refused = self.headers.get("Authorization") == "Bearer refused"
        body = json.dumps({"baseUrl": f"{host}/v1", "models": [RADIUS_MODEL]})
        self._answer(401 if refused else 200 if self.path == "/v1/config" else 404, body)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        _Gateway.seen.append(f"POST {self.path}")
        if self.path == "/v1/oauth/device":
            answer = {"device_code": "d", "user_code": "RAD-9", "expires_in": 60, "interval": 1,
                      "verification_uri": "https://radius.example/device"}  # fmt: skip
        else:
            answer = {"access_token": "at-cli", "refresh_token": "rt", "expires_in": 3600}
        self._answer(200, json.dumps(answer))

    def _answer(self, status: int, body: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def gateway() -> Iterator[str]:
    yield from _serve(_Gateway)


@pytest.mark.timeout(60)
def test_login_reads_an_api_key_without_echo(
    env: dict[str, str], gateway: str, tmp_path: Path
) -> None:
    """``/login openai`` asks Pi's ``Enter OpenAI API key``, reads the key with the
    echo off and stores it 0600 as ``{"type": "api_key", "key": ...}``: the key is not
    on the screen, not in the history file; ``/login api-key radius`` stores a key and
    fetches the gateway's models, which ``--list-models radius`` then lists."""
    (tmp_path / "work").mkdir()
    screen = io.StringIO()
    child = pexpect.spawn(
        sys.executable,
        ["-m", "pitrio", "--cwd", str(tmp_path / "work"), "--base-url",
         "http://127.0.0.1:9/v1", "--model", "m"],
        env={**env, "PATH": os.environ.get("PATH", ""), "TERM": "xterm", "PYTHONUNBUFFERED": "1",
             "PYTHONPATH": str(Path(__file__).parents[2]), "PI_RADIUS_GATEWAY": gateway},
        encoding="utf-8",
        timeout=20,
        dimensions=(50, 200),
    )  # fmt: skip
    child.logfile_read = screen
    path = Path(env["PI_CODING_AGENT_DIR"]) / "auth.json"
    try:
        child.expect_exact("> ")
        child.send("/login\r")
        child.expect_exact("/login api-key PROVIDER where a subscription login exists")
        child.expect_exact("> ")
        child.send("/login groq\r")
        child.expect_exact("Enter Groq API key")
        child.sendintr()  # Ctrl-C cancels the read; nothing is stored, echo comes back
        child.expect_exact("[login cancelled]")
        child.expect_exact("> ")
        child.send("/login openai\r")
        child.expect_exact("Enter OpenAI API key")
        child.send("sk-very-secret-typed-key\r")
        child.expect_exact("Saved API key for OpenAI. Credentials saved to ")
        child.expect_exact("> ")
        data = json.loads(path.read_text())
        assert data == {"openai": {"type": "api_key", "key": "sk-very-secret-typed-key"}}
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        child.send("/login api-key radius\r")
        child.expect_exact("Enter Radius API key")
        child.send("rk-gateway-secret\r")
        child.expect_exact("Radius models (1): radius/claude-x")
        child.expect_exact("> ")
        child.send("/logout echo-is-back\r")  # the echo is on again
        child.expect_exact("/logout echo-is-back")
        child.expect_exact("> ")
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        if child.isalive():
            child.terminate(force=True)
    shown = screen.getvalue()
    assert "sk-very-secret-typed-key" not in shown
    assert "rk-gateway-secret" not in shown
    history = (Path(env["XDG_STATE_HOME"]) / "pitrio" / "history").read_text()
    assert "/login openai" in history
    assert "sk-very-secret" not in history
    assert "rk-gateway-secret" not in history
    assert _Gateway.seen[-1] == "/v1/config Bearer rk-gateway-secret"
    assert json.loads(path.read_text())["radius"] == {"type": "api_key", "key": "rk-gateway-secret"}
    out = io.StringIO()
    assert main(["--list-models", "radius"], env=env, stdout=out) == 0
    assert "claude-x" in out.getvalue()
    assert key_column(env, "radius") == {"yes"}
    settings = _configure(["--model", "radius/claude-x", "-p", "hi"], env)
    assert (settings.model.api, settings.model.base_url) == ("pi-messages", f"{gateway}/v1")
    assert settings.api_key == "rk-gateway-secret"


async def test_api_key_login_without_a_terminal_and_empty(env: dict[str, str]) -> None:
    """Without a terminal the key is not read (the text says what to do instead); an
    empty key stores nothing; an unknown provider names the api-key form."""
    from pitrio.cli._login import login_command
    from pitrio.cli._render import Renderer

    out = io.StringIO()
    renderer = Renderer(out)
    stored: dict[str, Any] = {}
    assert not await login_command(renderer, "mistral", env, stored, _Answers())
    assert "an API key can only be typed on a terminal" in out.getvalue()

    async def empty() -> str:
        return ""

    assert not await login_command(renderer, "api-key anthropic", env, stored, _Answers(), empty)
    assert "No API key entered; nothing saved for Anthropic." in out.getvalue()
    assert not await login_command(renderer, "nowhere", env, stored, _Answers(), empty)
    assert "(API keys: /login api-key PROVIDER)" in out.getvalue()
    assert stored == {}
    assert not (Path(env["PI_CODING_AGENT_DIR"]) / "auth.json").exists()


async def test_radius_login_fetches_the_gateways_models(env: dict[str, str], gateway: str) -> None:
    """``/login radius`` by device code stores the tokens, then fetches ``/v1/config``
    with them and keeps the models; a gateway refusing the key is named, the key kept."""
    from pitrio.cli._login import login_command
    from pitrio.cli._render import Renderer
    from pitrio.providers import Models
    from pitrio.providers._auth import set_oauth_flow
    from pitrio.providers._auth._radius import RadiusOAuth

    out = io.StringIO()
    renderer = Renderer(out)
    stored: dict[str, Any] = {}
    previous = set_oauth_flow("radius", RadiusOAuth(gateway=gateway))
    try:
        assert await login_command(renderer, "radius", env, stored, _Answers("2"))
    finally:
        set_oauth_flow("radius", previous)
    text = out.getvalue()
    assert "Open https://radius.example/device and enter the code: RAD-9" in text
    assert "Logged in to Radius. Credentials saved to " in text
    assert "Radius models (1): radius/claude-x" in text
    assert _Gateway.seen[-1] == "/v1/config Bearer at-cli"
    assert stored["radius"].access == "at-cli"
    model = Models(env=env).get("radius", "claude-x")
    assert model is not None
    assert model.base_url == f"{gateway}/v1"

    async def refused() -> str:
        return "refused"

    keyed = {**env, "PI_RADIUS_GATEWAY": gateway}
    assert await login_command(renderer, "api-key radius", keyed, stored, _Answers(), refused)
    assert "Could not load Radius config from" in out.getvalue()
    assert "(run /login radius again to retry)" in out.getvalue()
