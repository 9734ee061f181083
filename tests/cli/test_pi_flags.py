"""``python -m pitrio`` takes Pi's command lines (``pi`` 0.85.0, ``dist/cli/args.js``).

A table of Pi invocations and the settings pitrio derives from each (mode, first
message, further messages, model, thinking level, tools, system prompt, resources,
session), Pi's argument errors, then whole runs against the scripted server: what
reaches the model for ``@file`` arguments, several messages, ``--tools``,
``--system-prompt`` and ``--append-system-prompt``; sessions by id prefix, ``--name``,
``--export``. Where the real ``pi`` is installed the same command line runs through both
against the same server and the requests are compared.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pitrio import Model
from pitrio.cli._args import build_parser, parse_cli
from pitrio.cli._setup import AppSettings, _pi_match, configure

from ._pi import oracle_path, pi_command
from .conftest import ChatServer, Reply, text_reply
from .test_pi_resources import normalized

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def agent_setup(root: Path, url: str = "http://127.0.0.1:9/v1") -> dict[str, str]:
    """A Pi agent directory whose ``models.json`` has provider ``local`` (models ``m``,
    and ``r`` with reasoning) at ``url``; the environment pointing at it."""
    agent = root / "home" / ".pi" / "agent"
    agent.mkdir(parents=True, exist_ok=True)
    models = [
        {"id": "m", "input": ["text", "image"], "contextWindow": 128000, "maxTokens": 4096},
        {"id": "r", "reasoning": True, "contextWindow": 128000, "maxTokens": 4096},
    ]
    provider = {"baseUrl": url, "api": "openai-completions", "apiKey": "dummy", "models": models}
    (agent / "models.json").write_text(json.dumps({"providers": {"local": provider}}))
    keep = {k: v for k, v in os.environ.items() if k in {"PATH", "LANG", "LC_ALL"}}
    return {
        **keep,
        "HOME": str(root / "home"),
        "PI_CODING_AGENT_DIR": str(agent),
        "PITRIO_SESSIONS_DIR": str(root / "sessions"),
        "XDG_CONFIG_HOME": str(root / "config"),
        "XDG_STATE_HOME": str(root / "state"),
        "PI_OFFLINE": "1",
        "PI_TELEMETRY": "0",
        "PYTHONUNBUFFERED": "1",
    }


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project directory (the current one) with files the command lines name."""
    project = tmp_path / "proj"
    project.mkdir()
    (project / "a.txt").write_text("\ufeffA file.\n")
    (project / "empty.txt").write_text("")
    (project / "img.png").write_bytes(PNG)
    (project / "prompt.md").write_text("SYSTEM FROM FILE\n")
    (project / "extra.md").write_text("EXTRA FROM FILE")
    monkeypatch.chdir(project)
    return project


def derive(argv: list[str], env: dict[str, str], *, tty: bool = False) -> AppSettings:
    parser = build_parser()
    args: argparse.Namespace = parse_cli(parser, argv)
    return configure(parser, args, env, None, _Tty("") if tty else io.StringIO(""))


def summary(settings: AppSettings) -> dict[str, Any]:
    """The settings a command line decides, as plain values."""
    return {
        "mode": settings.mode,
        "prompt": settings.prompt,
        "messages": settings.messages,
        "images": [i.mime_type for i in settings.images],
        "model": f"{settings.model.provider}/{settings.model.id}",
        "thinking": settings.thinking,
        "allow": settings.tools.allow,
        "exclude": settings.tools.exclude,
        "no_tools": settings.tools.none,
        "system": settings.system_prompt,
        "append": settings.append_system_prompt,
        "context_files": settings.context_files,
        "skills": settings.skills,
        "skill_paths": settings.skill_paths,
        "templates": settings.prompt_templates,
        "template_paths": settings.template_paths,
        "trust": settings.trust,
        "session": (settings.session.kind, settings.session.value),
        "name": settings.session_name,
        "session_dir": settings.session_dir,
        "scoped": settings.scoped_models,
        "api_key": settings.api_key,
        "export": settings.export,
        "demo": settings.offline,
    }


LOCAL = ["--provider", "local", "--model", "m"]

# (Pi's command line, tty, the settings pitrio derives; "{here}" is the project)
TABLE: list[tuple[list[str], bool, dict[str, Any]]] = [
    (["-p", "hi"], False, {"mode": "print", "prompt": "hi", "messages": ()}),
    (["--print", "hi"], False, {"mode": "print", "prompt": "hi"}),
    (["hi", "-p"], False, {"mode": "print", "prompt": "hi"}),
    (["-p", "--", "- Summarize these points"], False, {"prompt": "- Summarize these points"}),
    (
        ["-p", "--", "-x", "@a.txt"],
        False,
        {"prompt": '<file name="{here}/a.txt">\nA file.\n\n</file>\n-x'},
    ),
    (["-p", "one", "two", "three"], False, {"prompt": "one", "messages": ("two", "three")}),
    (
        ["-p", "@a.txt", "What is in it?"],
        False,
        {"prompt": '<file name="{here}/a.txt">\nA file.\n\n</file>\nWhat is in it?', "images": []},
    ),
    (
        ["@img.png", "-p", "Describe"],
        False,
        {"prompt": '<file name="{here}/img.png"></file>\nDescribe', "images": ["image/png"]},
    ),
    (["-p", "@empty.txt", "x"], False, {"prompt": "x"}),
    (["--mode", "json", "hi"], False, {"mode": "json", "prompt": "hi"}),
    (["hi"], False, {"mode": "print", "prompt": "hi"}),  # stdin is no terminal: print
    (["hi", "there"], True, {"mode": "interactive", "prompt": "hi", "messages": ("there",)}),
    ([*LOCAL], True, {"mode": "interactive", "prompt": None, "model": "local/m"}),
    ([*LOCAL, "-p", "x"], False, {"model": "local/m", "thinking": "off", "demo": False}),
    (["--model", "local/m", "-p", "x"], False, {"model": "local/m"}),
    (["--model", "local/r:high", "-p", "x"], False, {"model": "local/r", "thinking": "high"}),
    (["--model", "local/r:high", "--thinking", "low", "-p", "x"], False, {"thinking": "low"}),
    (
        ["--provider", "local", "--model", "r:minimal", "-p", "x"],
        False,
        {"model": "local/r", "thinking": "minimal"},
    ),
    (
        ["--models", "local/r:low,local/m", "-p", "x"],
        False,
        {"model": "local/r", "thinking": "low", "scoped": ("local/r:low", "local/m")},
    ),
    ([*LOCAL, "--api-key", "sk-cli", "-p", "x"], False, {"api_key": "sk-cli"}),
    (
        ["--tools", "read,grep,find,ls", "-p", "x"],
        False,
        {"allow": ("read", "grep", "find", "ls"), "no_tools": False},
    ),
    (["-t", " read , bash ", "-p", "x"], False, {"allow": ("read", "bash")}),
    (["--no-tools", "-p", "x"], False, {"no_tools": True, "allow": None}),
    (["-nt", "-t", "read", "-p", "x"], False, {"no_tools": True, "allow": ("read",)}),
    (["-nbt", "-p", "x"], False, {"no_tools": True}),
    (["--exclude-tools", "bash,write", "-p", "x"], False, {"exclude": ("bash", "write")}),
    (["-xt", "bash", "-p", "x"], False, {"exclude": ("bash",)}),
    (["--system-prompt", "Be brief.", "-p", "x"], False, {"system": "Be brief."}),
    (["--system-prompt", "prompt.md", "-p", "x"], False, {"system": "SYSTEM FROM FILE\n"}),
    (["--system", "Old flag.", "-p", "x"], False, {"system": "Old flag."}),
    (
        ["--append-system-prompt", "A", "--append-system-prompt", "extra.md", "-p", "x"],
        False,
        {"append": ("A", "EXTRA FROM FILE"), "system": None},
    ),
    (["--no-context-files", "-p", "x"], False, {"context_files": False}),
    (
        ["-nc", "-ns", "-np", "-p", "x"],
        False,
        {"context_files": False, "skills": False, "templates": False},
    ),
    (
        ["--skill", "skills/x", "--prompt-template", "t.md", "-p", "x"],
        False,
        {"skill_paths": ("{here}/skills/x",), "template_paths": ("{here}/t.md",), "skills": True},
    ),
    (["-a", "-p", "x"], False, {"trust": True}),
    (["--no-approve", "-p", "x"], False, {"trust": False}),
    (["--demo", "-p", "x"], False, {"trust": None, "session": ("none", None)}),  # no session
    ([*LOCAL, "-c", "-p", "x"], False, {"session": ("continue", None)}),
    (
        [*LOCAL, "--continue", "What did we discuss?"],
        False,
        {"session": ("continue", None), "prompt": "What did we discuss?"},
    ),
    ([*LOCAL, "-r"], False, {"session": ("resume", None), "mode": "print", "prompt": None}),
    ([*LOCAL, "--session", "0199ab", "-p", "x"], False, {"session": ("resume", "0199ab")}),
    (
        [*LOCAL, "--session", "s/chat.jsonl", "-p", "x"],
        False,
        {"session": ("file", "{here}/s/chat.jsonl")},
    ),
    ([*LOCAL, "--resume=0199ab", "-p", "x"], False, {"session": ("resume", "0199ab")}),
    ([*LOCAL, "--session-id", "my-id.1", "-p", "x"], False, {"session": ("id", "my-id.1")}),
    ([*LOCAL, "--fork", "0199ab", "-p", "x"], False, {"session": ("fork", "0199ab")}),
    ([*LOCAL, "--no-session", "-p", "x"], False, {"session": ("none", None)}),
    ([*LOCAL, "--session-dir", "sess", "-p", "x"], False, {"session_dir": "{here}/sess"}),
    (
        [*LOCAL, "--name", " Refactor auth module ", "-p", "x"],
        False,
        {"name": "Refactor auth module"},
    ),
    ([*LOCAL, "-n", "short"], True, {"name": "short", "mode": "interactive"}),
    (
        ["--export", "s.jsonl", "out.html"],
        False,
        {"mode": "export", "export": "s.jsonl", "prompt": "out.html", "messages": ()},
    ),
    ([*LOCAL, "--offline", "-p", "x"], False, {"demo": False, "model": "local/m"}),
    # No model named, no catalog key: Pi's first available model (a models.json one)
    (["-p", "x"], False, {"demo": False, "model": "local/m"}),
    # An id the provider does not list: Pi's custom model id (with a warning)
    (["--provider", "local", "--model", "nope", "-p", "x"], False, {"model": "local/nope"}),
    (["--verbose", "-ne", "--no-themes", "-p", "x"], False, {"prompt": "x"}),
    (["--demo", "-p", "x"], False, {"demo": True, "model": "pitrio/offline-replay"}),
]


@pytest.mark.parametrize(("argv", "tty", "expected"), TABLE, ids=[" ".join(t[0]) for t in TABLE])
def test_pitrio_derives_from_a_pi_command_line_what_pi_does(
    here: Path, tmp_path: Path, argv: list[str], tty: bool, expected: dict[str, Any]
) -> None:
    got = summary(derive(argv, agent_setup(tmp_path), tty=tty))

    def fill(value: Any) -> Any:
        if isinstance(value, str):
            return value.replace("{here}", str(here))
        if isinstance(value, tuple):
            return tuple(fill(v) for v in value)
        if isinstance(value, list):
            return [fill(v) for v in value]
        return value

    assert {k: got[k] for k in expected} == {k: fill(v) for k, v in expected.items()}


def test_an_id_the_provider_does_not_list_is_pis_custom_model_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As Pi's ``buildFallbackModel``: the provider's default model (the first of a
    models.json provider) under the id given, with Pi's warning; pitrio adds the id it
    probably meant, and a thinking level asked for makes the model a reasoning one."""
    env = agent_setup(tmp_path)
    model = derive(["--provider", "local", "--model", "mm", "-p", "x"], env).model
    assert capsys.readouterr().err == (
        'Warning: Model "mm" not found for provider "local". Using custom model id. '
        "(did you mean 'local/m'?)\n"
    )
    assert (model.id, model.name, model.base_url, model.input) == (
        "mm",
        "mm",
        "http://127.0.0.1:9/v1",
        ("text", "image"),
    )
    assert model.reasoning is False
    catalog = {**env, "OPENAI_API_KEY": "k"}
    model = derive(
        ["--model", "openai/zz-unheard-of", "--thinking", "high", "-p", "x"], catalog
    ).model
    assert capsys.readouterr().err == (
        'Warning: Model "zz-unheard-of" not found for provider "openai". Using custom model id.\n'
    )
    assert (model.provider, model.id, model.api) == ("openai", "zz-unheard-of", "openai-responses")
    assert model.reasoning is True
    models = Path(env["PI_CODING_AGENT_DIR"]) / "models.json"
    empty = {"baseUrl": "http://127.0.0.1:9/v1", "api": "openai-completions", "models": []}
    models.write_text(json.dumps({"providers": {"local": empty}}))
    with pytest.raises(SystemExit):
        derive(["--provider", "local", "--model", "mm", "-p", "x"], env)
    assert "provider 'local' of " in capsys.readouterr().err  # no model to build it on


def test_a_model_pattern_matches_as_pis_try_match_model(tmp_path: Path) -> None:
    """Within the provider: the id in any case, else the ids or names holding the pattern,
    an alias before a dated id, the highest first. The catalog answers are what ``pi
    --provider anthropic --model PATTERN`` 0.85.0 picked (recorded)."""
    listed = [
        Model(id="claude-3-5-sonnet-20241022", provider="p"),
        Model(id="claude-sonnet-4-5-20250929", provider="p"),
        Model(id="claude-sonnet-4-5", provider="p"),
        Model(id="claude-sonnet-4", provider="p"),
        Model(id="old-20240101", name="Vintage", provider="p"),
    ]
    assert _pi_match("Claude-Sonnet-4", listed) is listed[3]  # exact, any case
    assert _pi_match("sonnet", listed) is listed[2]  # aliases only, highest id
    assert _pi_match("3-5", listed) is listed[0]  # only dated ones: the highest
    assert _pi_match("vintage", listed) is listed[4]  # by name
    assert _pi_match("gpt", listed) is None
    env = {**agent_setup(tmp_path), "ANTHROPIC_API_KEY": "k"}
    picked = {
        pattern: derive(["--provider", "anthropic", "--model", pattern, "-p", "x"], env).model.id
        for pattern in ("sonnet", "opus", "haiku-4", "Claude-Sonnet-4-5")
    }
    assert picked == {
        "sonnet": "claude-sonnet-5",
        "opus": "claude-opus-5",
        "haiku-4": "claude-haiku-4-5",
        "Claude-Sonnet-4-5": "claude-sonnet-4-5",
    }


def test_no_model_named_is_pis_default_of_the_first_provider_with_a_key(tmp_path: Path) -> None:
    """Pi's ``defaultModelPerProvider``, in its order; a ``models.json`` provider's first
    model only when no provider of the table has a key."""
    base = agent_setup(tmp_path)

    def default(**keys: str) -> str:
        found = derive(["-p", "x"], {**base, **keys}).model
        return f"{found.provider}/{found.id}"

    assert default(OPENAI_API_KEY="k", ANTHROPIC_API_KEY="k") == "anthropic/claude-opus-4-8"
    assert default(OPENAI_API_KEY="k") == "openai/gpt-5.5"
    assert default(GROQ_API_KEY="k") == "groq/openai/gpt-oss-120b"
    assert default() == "local/m"


def test_a_model_without_a_provider_is_searched_for_as_pi_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No provider: an exact id (or provider/id) across the catalog, then Pi's pattern
    match over the providers that have a key (Pi searches every provider, and for
    ``sonnet`` picked amazon-bedrock's, which has none here); Pi's text when nothing
    matches."""
    env = {**agent_setup(tmp_path), "ANTHROPIC_API_KEY": "k", "OPENAI_API_KEY": "k"}

    def model(pattern: str) -> str:
        found = derive(["--model", pattern, "-p", "x"], env).model
        return f"{found.provider}/{found.id}"

    assert model("gpt-4.1") == "openai/gpt-4.1"  # as pi picked it
    assert model("M") == "local/m"  # a models.json model's id, in any case
    assert model("claude-sonnet-4-5") == "anthropic/claude-sonnet-4-5"  # as pi picked it
    assert model("sonnet") == "anthropic/claude-sonnet-5"
    with pytest.raises(SystemExit):
        model("zzz-nothing")
    assert 'Model "zzz-nothing" not found. Use --list-models' in capsys.readouterr().err
    with pytest.raises(SystemExit):
        model("opnai/gpt-4.1")  # an unknown provider before the slash, and no such id
    assert "unknown provider 'opnai'" in capsys.readouterr().err


def test_the_table_covers_thirty_command_lines() -> None:
    assert len(TABLE) >= 30


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([*LOCAL, "--fork", "x", "--continue"], "--fork cannot be combined with --continue"),
        ([*LOCAL, "--fork", "x", "--no-session"], "--fork cannot be combined with --no-session"),
        ([*LOCAL, "--session-id", "a", "-c"], "--session-id cannot be combined with --continue"),
        ([*LOCAL, "--session-id", "bad id", "-p", "x"], "a session id must be non-empty"),
        ([*LOCAL, "--name", "  ", "-p", "x"], "--name needs a non-empty value"),
        (["-p", "@missing.txt", "x"], "File not found: "),
        (["--mode", "rpc", "@a.txt"], "--mode rpc reads its prompts"),
        (["--api-key", "sk", "-p", "x"], "--api-key needs a model"),
        (["--demo", *LOCAL], "--demo replays the recorded demo"),
        (["--tools"], "expected one argument"),
        (["--no-tool", "-p", "x"], "did you mean --no-tools"),
        (["-e", "ext.ts", "-p", "x"], "-e is Pi's, and pitrio has no TypeScript extensions"),
        (["--use-theme", "dark", "-p", "x"], "--use-theme is Pi's"),
        ([*LOCAL, "-p"], "no prompt"),
    ],
)
def test_pis_argument_errors_are_one_line_usage_errors(
    here: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    with pytest.raises(SystemExit) as exc:
        derive(argv, agent_setup(tmp_path))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("argv", "search", "messages"),
    [
        (["--list-models"], "", []),
        (["--list-models", "sonnet"], "sonnet", []),
        (["--list-models", "@a.txt"], "", ["@a.txt"]),  # Pi: an @file is no search
        (["--list-models", "-p"], "", []),
        (["-p", "x"], None, ["x"]),
    ],
)
def test_list_models_takes_an_optional_search(
    argv: list[str], search: object, messages: list[str]
) -> None:
    args = parse_cli(build_parser(), argv)
    assert (args.list_models, args.messages) == (search, messages)


def test_piped_stdin_comes_before_the_files_and_the_first_message(
    here: Path, tmp_path: Path
) -> None:
    """Pi's ``buildInitialMessage``: stdin, the files' text, the message, joined."""
    parser = build_parser()
    args = parse_cli(parser, ["-p", "@a.txt", "Summarise."])
    settings = configure(parser, args, agent_setup(tmp_path), None, io.StringIO("  log\n"))
    assert settings.prompt == f'log<file name="{here}/a.txt">\nA file.\n\n</file>\nSummarise.'


# -- whole runs against the scripted server ----------------------------------------------


def run_pitrio(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pitrio", *argv],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def user_text(message: dict[str, Any]) -> str:
    content = message["content"]
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content if p.get("type") == "text")


def test_files_and_several_messages_reach_the_model_as_pi_sends_them(
    serve: Callable[..., ChatServer], here: Path, tmp_path: Path
) -> None:
    server = serve(lambda body: text_reply("ok"))
    env = agent_setup(tmp_path, server.url)
    done = run_pitrio(
        [*LOCAL, "--no-session", "-p", "@a.txt", "@img.png", "What is in them?", "And then?"],
        env,
        here,
    )
    assert done.returncode == 0, done.stderr
    assert len(server.requests) == 2
    first = server.requests[0]["messages"][-1]
    assert user_text(first) == (
        f'<file name="{here}/a.txt">\nA file.\n\n</file>\n<file name="{here}/img.png"></file>\n'
        "What is in them?"
    )
    images = [p for p in first["content"] if p.get("type") == "image_url"]
    assert images == [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(
            PNG).decode()}}
    ]  # fmt: skip
    second = server.requests[1]["messages"]
    assert user_text(second[-1]) == "And then?"
    assert [m["role"] for m in second[1:]] == ["user", "assistant", "user"]


def test_tools_and_system_prompt_flags_shape_the_request(
    serve: Callable[..., ChatServer], here: Path, tmp_path: Path
) -> None:
    server = serve(lambda body: text_reply("ok"))
    env = agent_setup(tmp_path, server.url)
    argv = [*LOCAL, "--no-session", "--tools", "read,ls,nope", "--system-prompt", "prompt.md",
            "--append-system-prompt", "APPENDED", "-nc", "-p", "hi"]  # fmt: skip
    done = run_pitrio(argv, env, here)
    assert done.returncode == 0, done.stderr
    body = server.requests[0]
    assert [t["function"]["name"] for t in body["tools"]] == ["read", "ls"]
    assert "no tool 'nope'" in done.stderr  # said, not fatal
    system = body["messages"][0]["content"]
    assert system.startswith("SYSTEM FROM FILE\n\n\nAPPENDED")
    assert system.endswith(f"\nCurrent working directory: {here}\n")

    server.requests.clear()
    done = run_pitrio([*LOCAL, "--no-session", "--no-tools", "-p", "hi"], env, here)
    assert done.returncode == 0, done.stderr
    assert "tools" not in server.requests[0] or server.requests[0]["tools"] == []
    server.requests.clear()
    done = run_pitrio([*LOCAL, "--no-session", "-xt", "bash,write", "-p", "hi"], env, here)
    names = [t["function"]["name"] for t in server.requests[0]["tools"]]
    assert "bash" not in names
    assert "write" not in names
    assert "read" in names


def test_sessions_by_id_prefix_name_and_export(
    serve: Callable[..., ChatServer], here: Path, tmp_path: Path
) -> None:
    server = serve(lambda body: text_reply("answer <b>"))
    env = agent_setup(tmp_path, server.url)
    done = run_pitrio([*LOCAL, "--name", "My run", "-p", "first question"], env, here)
    assert done.returncode == 0, done.stderr
    files = list((tmp_path / "sessions").rglob("*.jsonl"))
    assert len(files) == 1
    lines = [json.loads(x) for x in files[0].read_text().splitlines()]
    session_id = lines[0]["id"]
    assert {"type": "session_info", "name": "My run"}.items() <= next(
        x for x in lines if x.get("type") == "session_info"
    ).items()

    done = run_pitrio([*LOCAL, "--session", session_id[:8], "-p", "second"], env, here)
    assert done.returncode == 0, done.stderr
    texts = [user_text(m) for m in server.requests[-1]["messages"] if m["role"] == "user"]
    assert texts == ["first question", "second"]

    out = here / "page.html"
    done = run_pitrio(["--export", str(files[0]), str(out)], env, here)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"Exported to: {out}\n"
    page = out.read_text()
    assert "<title>My run</title>" in page
    assert "first question" in page
    assert "second" in page
    assert "answer &lt;b&gt;" in page
    assert "answer <b>" not in page

    done = run_pitrio(["--export", str(files[0])], env, here)
    assert done.returncode == 0, done.stderr
    assert (here / f"pitrio-session-{files[0].stem}.html").is_file()
    missing = run_pitrio(["--export", "nope.jsonl"], env, here)
    assert missing.returncode == 2
    assert "File not found" in missing.stderr


def test_fork_and_session_id(serve: Callable[..., ChatServer], here: Path, tmp_path: Path) -> None:
    server = serve(lambda body: text_reply("ok"))
    env = agent_setup(tmp_path, server.url)
    done = run_pitrio([*LOCAL, "--session-id", "chosen-1", "-p", "one"], env, here)
    assert done.returncode == 0, done.stderr
    assert "creating a new session with that id" in done.stderr
    done = run_pitrio([*LOCAL, "--session-id", "chosen-1", "-p", "two"], env, here)
    assert done.returncode == 0, done.stderr
    assert [user_text(m) for m in server.requests[-1]["messages"] if m["role"] == "user"] == [
        "one",
        "two",
    ]
    done = run_pitrio([*LOCAL, "--fork", "chosen", "-p", "three"], env, here)
    assert done.returncode == 0, done.stderr
    files = sorted((tmp_path / "sessions").rglob("*.jsonl"))
    assert len(files) == 2
    headers = [json.loads(f.read_text().splitlines()[0]) for f in files]
    fork = next(h for h in headers if h["id"] != "chosen-1")
    assert fork["parentSession"].endswith("chosen-1.jsonl")
    original = next(f for f in files if "chosen-1" in f.name).read_text()
    assert "three" not in original


# -- the same command line through pi ---------------------------------------------------


@pytest.mark.timeout(300)
def test_pi_and_pitrio_send_the_same_request_for_the_same_command_line(
    serve: Callable[..., ChatServer], here: Path, tmp_path: Path
) -> None:
    oracle = oracle_path()
    if oracle is None:
        if os.environ.get("CI"):
            pytest.fail("Pi's coding agent is not installed (see tests/cli/_pi.py)")
        pytest.skip("Pi's coding agent is not installed (see tests/cli/_pi.py)")

    def script(body: dict[str, Any]) -> Reply:
        return text_reply("ok")

    server = serve(script)
    env = agent_setup(tmp_path, server.url)
    lines = [
        ["--tools", "read,bash", "-p", "@a.txt", "What is in it?"],
        ["--tools", "read,grep,ls", "--system-prompt", "prompt.md",
         "--append-system-prompt", "APPENDED", "--append-system-prompt", "extra.md", "-p", "hi"],
        ["--tools", "read", "-nc", "@img.png", "-p", "Describe"],
        ["--no-tools", "-p", "--", "- one", "two"],
        ["--tools", "read", "-ns", "--skill", "skills/greeter", "-np", "--prompt-template",
         "review.md", "-p", "/review main.py"],
        ["--model", "local/r:high", "--tools", "bash", "-p", "think"],
        ["--provider", "local", "--model", "r", "--thinking", "low", "-t", "read", "-p", "x"],
    ]  # fmt: skip
    skill = here / "skills" / "greeter"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: greeter\ndescription: Greets.\n---\nHi.\n")
    (here / "review.md").write_text("---\ndescription: Review\n---\nReview $1 carefully.\n")
    for argv in lines:
        full = [*([] if "--model" in argv else LOCAL), "--no-session", *argv]
        sent: dict[str, list[dict[str, Any]]] = {}
        for who, command in (
            ("pitrio", [sys.executable, "-m", "pitrio"]),
            ("pi", pi_command(oracle)),
        ):
            server.requests.clear()
            done = subprocess.run(
                [*command, *full], env=env, cwd=here, capture_output=True, text=True,
                timeout=120, stdin=subprocess.DEVNULL,
            )  # fmt: skip
            assert done.returncode == 0, (who, argv, done.stderr + done.stdout)
            sent[who] = list(server.requests)
        mine, theirs = sent["pitrio"], sent["pi"]
        assert len(mine) == len(theirs), argv
        for a, b in zip(mine, theirs, strict=True):
            assert normalized(a["messages"][0]["content"], tmp_path) == normalized(
                b["messages"][0]["content"], tmp_path
            ), argv
            assert [t["function"]["name"] for t in a.get("tools", [])] == [
                t["function"]["name"] for t in b.get("tools", [])
            ], argv
            assert a["messages"][1:] == b["messages"][1:], argv
            assert a.get("reasoning_effort") == b.get("reasoning_effort"), argv


@pytest.mark.parametrize(
    ("head", "mime"),
    [
        (PNG[:16], "image/png"),
        (b"\xff\xd8\xff\xe0\x00\x10JFIF", "image/jpeg"),
        (b"GIF89a\x01\x00", "image/gif"),
        (b"RIFF\x10\x00\x00\x00WEBPVP8 ", "image/webp"),
        (b"%PDF-1.7", None),
        (b"hello", None),
    ],
)
def test_image_files_are_told_by_their_first_bytes(head: bytes, mime: str | None) -> None:
    from pitrio.cli._flags import image_mime_type

    assert image_mime_type(head) == mime


def test_a_binary_file_that_is_no_image_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pitrio.cli._errors import CliUsageError
    from pitrio.cli._flags import process_file_args

    (tmp_path / "blob.bin").write_bytes(b"\x00\xff\xfe\x80")
    with pytest.raises(CliUsageError, match=r"Could not read file .*blob\.bin: not UTF-8 text"):
        process_file_args(["blob.bin"], str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))  # ~ is the home directory, as in Pi
    (tmp_path / "x.txt").write_text("X")
    assert process_file_args(["~/x.txt"], "/") == (
        f'<file name="{tmp_path}/x.txt">\nX\n</file>\n',
        (),
    )


def test_json_mode_takes_the_files_and_messages_too(
    serve: Callable[..., ChatServer], here: Path, tmp_path: Path
) -> None:
    server = serve(lambda body: text_reply("ok"))
    env = agent_setup(tmp_path, server.url)
    done = run_pitrio(
        [*LOCAL, "--no-session", "--mode", "json", "@img.png", "Describe", "Shorter"], env, here
    )
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert [e["type"] for e in events].count("agent_start") == 2
    first = server.requests[0]["messages"][-1]["content"]
    assert [p["type"] for p in first] == ["text", "image_url"]
    assert user_text(server.requests[1]["messages"][-1]) == "Shorter"
