"""The CLI loads a Pi user's setup from Pi's locations, and its system prompt is Pi's.

One scratch setup (an agent directory with AGENTS.md, APPEND_SYSTEM.md, a skill, a prompt
template and settings.json; a project with AGENTS.md, a parent with CLAUDE.md, and a
project ``.pi/`` with SYSTEM.md and a skill, which need trust) is run through pitrio's
CLI and through the real ``pi`` against the same scripted server: the system prompts
match (pitrio names itself where Pi does, and points at its own documentation), the
template is expanded in ``-p`` mode, and the project's ``.pi/`` counts only once the
project is trusted (``trust.json``). Pi's prompts for this setup are recorded in
``data/pi_system_prompts.json`` (paths as ``{root}``) so the comparison runs without Node.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pitrio.cli._resources import build_system_prompt

from ._pi import oracle_path, pi_command
from .conftest import ChatServer, Reply, text_reply

DATA = Path(__file__).parent / "data" / "pi_system_prompts.json"
_PI_DOCS = re.compile(r"\n\nPi documentation \(read only.*?TUI API details\)", re.S)
_PITRIO_DOCS = re.compile(r"\n\npitrio documentation \(read only.*?docs/deviations\.md\)", re.S)


def normalized(prompt: str, root: Path) -> str:
    """A prompt with its documentation block cut, its name and its root made neutral."""
    prompt = _PI_DOCS.sub("", _PITRIO_DOCS.sub("", prompt))
    prompt = prompt.replace("operating inside pitrio,", "operating inside pi,")
    return prompt.replace(str(root), "{root}")


def make_setup(root: Path, *, trusted: bool) -> tuple[Path, Path]:
    """``(agent_dir, project)`` under ``root``."""
    agent = root / "home" / ".pi" / "agent"
    project = root / "work" / "proj"
    for d in (agent / "skills" / "greeter", agent / "prompts", project / ".pi/skills/local"):
        d.mkdir(parents=True, exist_ok=True)
    (agent / "AGENTS.md").write_text("GLOBAL-AGENTS marker\n")
    (agent / "APPEND_SYSTEM.md").write_text("APPEND-GLOBAL marker\n")
    (agent / "skills" / "greeter" / "SKILL.md").write_text(
        "---\nname: greeter\ndescription: Greets people <warmly>.\n---\nSay hello.\n"
    )
    (agent / "prompts" / "review.md").write_text(
        "---\ndescription: Review a file\n---\nReview $1 carefully.\n"
    )
    (agent / "settings.json").write_text(json.dumps({"defaultThinkingLevel": "high"}))
    (root / "work" / "CLAUDE.md").write_text("PARENT-CLAUDE marker\n")
    (project / "AGENTS.md").write_text("PROJECT-AGENTS marker\n")
    (project / ".pi" / "SYSTEM.md").write_text("PROJECT-SYSTEM marker: you are a test.\n")
    (project / ".pi" / "skills" / "local" / "SKILL.md").write_text(
        "---\nname: local\ndescription: A project skill.\n---\nDo local things.\n"
    )
    if trusted:
        (agent / "trust.json").write_text(json.dumps({os.path.realpath(project): True}))
    return agent, project


def requests_of(
    serve: Callable[..., ChatServer],
    cli_env: dict[str, str],
    root: Path,
    *,
    trusted: bool,
    oracle: str | None,
) -> dict[str, dict[str, Any]]:
    """The first request pitrio's CLI (and ``pi``, given ``oracle``) sends."""

    def script(body: dict[str, Any]) -> Reply:
        return text_reply("ok")

    server = serve(script)
    agent, project = make_setup(root, trusted=trusted)
    (agent / "models.json").write_text(
        json.dumps(
            {
                "providers": {
                    "local": {
                        "baseUrl": server.url,
                        "api": "openai-completions",
                        "apiKey": "dummy",
                        "models": [{"id": "m", "contextWindow": 128000, "maxTokens": 4096}],
                    }
                }
            }
        )
    )
    env = cli_env | {
        "HOME": str(root / "home"),
        "PI_CODING_AGENT_DIR": str(agent),
        "PI_OFFLINE": "1",
        "PI_TELEMETRY": "0",
    }
    argv = ["--cwd", str(project), "--base-url", server.url, "--model", "m", "--no-session"]
    done = subprocess.run(
        [sys.executable, "-m", "pitrio", *argv, "-p", "/review main.py"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    out = {"pitrio": server.requests[-1]}
    if oracle is not None:
        tools = ",".join(t["function"]["name"] for t in out["pitrio"]["tools"])
        done = subprocess.run(
            [*pi_command(oracle), "--provider", "local", "--model", "m", "--tools", tools,
             "--no-session", "-p", "/review main.py"],
            env=env, cwd=project, capture_output=True, text=True, timeout=120,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr + done.stdout
        out["pi"] = server.requests[-1]
    return out


@pytest.mark.parametrize("trusted", [False, True], ids=["untrusted", "trusted"])
def test_the_cli_sends_pis_system_prompt_for_a_pi_setup(
    serve: Callable[..., ChatServer],
    cli_env: dict[str, str],
    tmp_path: Path,
    trusted: bool,
) -> None:
    oracle = oracle_path()
    if oracle is None and os.environ.get("CI"):
        pytest.fail("Pi's coding agent is not installed (see tests/cli/_pi.py)")
    root = tmp_path / "setup"
    sent = requests_of(serve, cli_env, root, trusted=trusted, oracle=oracle)
    mine = sent["pitrio"]
    system = mine["messages"][0]
    assert system["role"] == "system"
    prompt = normalized(system["content"], root)
    key = "trusted" if trusted else "untrusted"
    recorded = json.loads(DATA.read_text())
    tools = [t["function"]["name"] for t in mine["tools"]]
    if oracle is not None:
        theirs = sent["pi"]
        if os.environ.get("PITRIO_RECORD_PI_PROMPTS"):  # re-record Pi's prompts
            pis = normalized(theirs["messages"][0]["content"], root)
            recorded[key] = {"tools": tools, "prompt": pis}
            DATA.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
        assert normalized(theirs["messages"][0]["content"], root) == prompt
        assert theirs["messages"][1:] == mine["messages"][1:]  # the expanded template
        if recorded.get(key, {}).get("tools") == tools:
            assert recorded[key]["prompt"] == prompt
    elif recorded.get(key, {}).get("tools") == tools:
        assert recorded[key]["prompt"] == prompt
    else:  # the recorded prompts are for another tool set: the builder must reproduce them
        raise AssertionError(f"re-record {DATA.name} for the tools {tools} (run with Node)")
    assert mine["messages"][1]["content"] in ("Review main.py carefully.", [
        {"type": "text", "text": "Review main.py carefully."}
    ])  # fmt: skip
    # what reached the model, in Pi's order
    for marker in ("GLOBAL-AGENTS", "PARENT-CLAUDE", "PROJECT-AGENTS", "APPEND-GLOBAL"):
        assert marker in prompt
    assert (
        prompt.index("GLOBAL-AGENTS")
        < prompt.index("PARENT-CLAUDE")
        < prompt.index("PROJECT-AGENTS")
    )
    assert "<name>greeter</name>" in prompt
    assert "Greets people &lt;warmly&gt;." in prompt
    assert ("PROJECT-SYSTEM marker" in prompt) is trusted
    assert ("<name>local</name>" in prompt) is trusted
    end = "Current working directory: {root}/work/proj" + ("\n" if trusted else "")
    assert prompt.endswith(end)


def test_the_builder_names_pitrio_and_keeps_pis_structure() -> None:
    prompt = build_system_prompt(cwd="C:\\work", tools=["read", "grep"])
    assert prompt.startswith("You are an expert coding assistant operating inside pitrio,")
    assert "- read: Read file contents\n- grep: Search file contents" in prompt
    assert "Use bash for file operations" not in prompt  # no bash
    assert prompt.endswith("\nCurrent working directory: C:/work")
    assert build_system_prompt(cwd="/w", tools=[]).count("(none)") == 1


def test_pis_settings_choose_the_model_and_thinking_level(tmp_path: Path) -> None:
    """``defaultProvider`` / ``defaultModel`` / ``defaultThinkingLevel`` of the agent
    directory's settings.json, the project's over them once trusted; a model pitrio's
    catalog lacks falls back to the usual defaults."""
    import io

    from pitrio.cli._args import build_parser
    from pitrio.cli._resources import read_settings
    from pitrio.cli._setup import configure

    agent, project = make_setup(tmp_path, trusted=True)
    (agent / "settings.json").write_text(
        json.dumps(
            {"defaultProvider": "openai", "defaultModel": "gpt-5", "defaultThinkingLevel": "low"}
        )
    )
    (project / ".pi" / "settings.json").write_text(json.dumps({"defaultThinkingLevel": "high"}))
    env = {"HOME": str(tmp_path / "home"), "PI_CODING_AGENT_DIR": str(agent), "OPENAI_API_KEY": "k"}
    assert read_settings(str(project), env)["defaultThinkingLevel"] == "high"
    parser = build_parser()

    def chosen(*argv: str) -> tuple[str, str, str]:
        args = parser.parse_args(["--cwd", str(project), *argv, "-p", "hi"])
        settings = configure(parser, args, env, None, io.StringIO())
        return settings.model.provider, settings.model.id, settings.thinking

    assert chosen() == ("openai", "gpt-5", "high")
    assert chosen("--thinking", "minimal") == ("openai", "gpt-5", "minimal")
    (agent / "trust.json").write_text(json.dumps({os.path.realpath(project): False}))
    assert chosen() == ("openai", "gpt-5", "low")  # the project's settings need trust
    (agent / "settings.json").write_text(json.dumps({"defaultProvider": "x", "defaultModel": "y"}))
    assert chosen()[:2] != ("x", "y")


def test_a_models_json_provider_is_chosen_as_in_pi(
    serve: Callable[..., ChatServer], cli_env: dict[str, str], tmp_path: Path
) -> None:
    """``--provider NAME --model ID`` of Pi's models.json, its ``$VAR`` key resolved; an
    id that provider does not list is sent as given, with Pi's warning."""
    server = serve(lambda body: text_reply("from models.json"))
    agent = tmp_path / "agent"
    agent.mkdir()
    (agent / "models.json").write_text(
        json.dumps(
            {
                "providers": {
                    "local": {
                        "baseUrl": server.url,
                        "api": "openai-completions",
                        "apiKey": "${LOCAL_KEY}-x",
                        "models": [{"id": "m", "contextWindow": 8000, "maxTokens": 100}],
                    }
                }
            }
        )
    )
    env = cli_env | {"PI_CODING_AGENT_DIR": str(agent), "LOCAL_KEY": "secret"}

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pitrio", "--no-session", *argv],
            env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        )  # fmt: skip

    done = run("--provider", "local", "--model", "m", "-p", "hi")
    assert done.returncode == 0, done.stderr
    assert "from models.json" in done.stdout
    assert server.requests[-1]["model"] == "m"
    assert server.requests[-1]["max_completion_tokens"] == 100
    assert server.headers[-1]["Authorization"] == "Bearer secret-x"
    done = run("--model", "local/m", "-p", "hi")
    assert done.returncode == 0, done.stderr
    done = run("--provider", "local", "--model", "nope", "-p", "hi")
    assert done.returncode == 0, done.stderr  # Pi's custom model id, on the provider's model
    assert 'Warning: Model "nope" not found for provider "local". Using custom model id.' in (
        done.stderr
    )
    assert server.requests[-1]["model"] == "nope"
    assert server.headers[-1]["Authorization"] == "Bearer secret-x"
