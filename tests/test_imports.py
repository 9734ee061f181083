"""What ``import pitrio`` loads: the kernel, not the optional layers (structure, not time;
the time is measured by ``python -m benchmarks --metrics import``)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

# Loaded only when used: HTTP providers, the wire converter, terminal rendering, schema
# compilation, and the layers above the kernel.
NOT_AT_IMPORT = (
    "httpx",
    "httpcore",
    "cattrs",
    "rich",
    "fastjsonschema",
    "pitrio._validation",  # imported at the first tool call
    "yaml",
    "pitrio.providers",
    "pitrio.harness",
    "pitrio.cli",
    "pitrio.testing",
    "pitrio.coding",
    "pitrio.ui",
    "pitrio.web",
    "pitrio.mcp",
    "pitrio.telemetry",
    "opentelemetry",
    "mcp",
    "anyio",
)


def _modules_after(code: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
    )
    modules: list[str] = json.loads(out.stdout.splitlines()[-1])
    return modules


def _loaded(modules: list[str], name: str) -> bool:
    return any(m == name or m.startswith(f"{name}.") for m in modules)


def test_import_pitrio_loads_no_module_of_its_own() -> None:
    """Every name of ``pitrio`` is imported when first read (PEP 562)."""
    modules = _modules_after("import pitrio\nassert 'Agent' in dir(pitrio)")
    assert [m for m in modules if m.startswith("pitrio")] == ["pitrio", "pitrio._lazy"]
    assert not _loaded(modules, "trio")


@pytest.mark.parametrize(
    "code",
    [
        "from pitrio import Agent",
        "import pitrio\npitrio.Agent",
        "from pitrio import Agent, AgentTool, wire, register_message_role",
    ],
)
def test_the_agent_loads_only_the_kernel(code: str) -> None:
    modules = _modules_after(code)
    assert "pitrio._agent" in modules  # the check would see a failed import
    assert [name for name in NOT_AT_IMPORT if _loaded(modules, name)] == []


def test_the_wire_converter_is_built_on_first_use() -> None:
    modules = _modules_after(
        "import pitrio\n"
        "assert pitrio.wire.unstructure(pitrio.user_text('hi'))['role'] == 'user'\n"
        "assert pitrio.wire.converter is pitrio.wire.converter"
    )
    assert _loaded(modules, "cattrs")
    assert not _loaded(modules, "httpx")


@pytest.mark.parametrize("flag", ["--help", "--version"])
def test_help_and_version_load_no_layer_above_the_kernel(flag: str) -> None:
    """``python -m pitrio --help`` parses with the light argument module only: the
    harness, the providers, httpx and rich are imported after the arguments are parsed."""
    code = (
        "import sys, runpy\n"
        f"sys.argv = ['pitrio', {flag!r}]\n"
        "try:\n"
        "    runpy.run_module('pitrio', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "sys.stdout = sys.__stdout__"
    )
    loaded = set(_modules_after(code))
    assert "pitrio.cli._args" in loaded
    heavy = {"pitrio.harness", "pitrio.providers", "httpx", "rich", "cattrs"}
    assert not (heavy & loaded), sorted(heavy & loaded)


def test_the_validation_package_is_imported_at_the_first_tool_call() -> None:
    code = (
        "import sys, trio, pitrio\n"
        "from pitrio.testing import ScriptedModel, ScriptedResponse\n"
        "async def go(i: int) -> pitrio.ToolResult:\n"
        "    return pitrio.text_result('ok')\n"
        "tool = pitrio.Tool(name='t', parameters={'type': 'object'},"
        " execute=lambda call_id, params, signal, on_update: go(0))\n"
        "model = ScriptedModel([ScriptedResponse.tool_calls(('c1', 't', {})),"
        " ScriptedResponse.text('done')])\n"
        "agent = pitrio.Agent(stream_fn=model, tools=[tool])\n"
        "assert 'pitrio._validation' not in sys.modules\n"
        "trio.run(agent.prompt, 'go')\n"
        "assert agent.state.messages[2].content[0].text == 'ok', agent.state.messages\n"
    )
    assert _loaded(_modules_after(code), "pitrio._validation")


def test_the_harness_imports_a_module_when_one_of_its_names_is_read() -> None:
    """``pitrio.harness`` exports lazily (PEP 562): importing it loads none of its
    modules; a name loads its own module and what that imports, never the other stores."""
    modules = _modules_after("import pitrio.harness")
    assert [m for m in modules if m.startswith("pitrio.harness.")] == []
    modules = _modules_after("from pitrio.harness import Harness, JsonlSessionStore")
    assert "pitrio.harness._harness" in modules
    unused = ("pitrio.harness._sqlite", "pitrio.harness._postgres", "sqlite3", "yaml")
    assert [name for name in unused if _loaded(modules, name)] == []


def test_the_harness_names_are_all_public_and_listed() -> None:
    import pitrio.harness as harness

    assert sorted(harness._LAZY) == sorted(harness.__all__)
    assert set(harness.__all__) <= set(dir(harness))
    for name in harness.__all__:
        module = importlib.import_module(f"pitrio.harness.{harness._LAZY[name]}")
        assert getattr(harness, name) is getattr(module, name), name
    with pytest.raises(AttributeError, match=r"module 'pitrio\.harness' has no attribute 'Nope'"):
        _ = harness.Nope


def test_yaml_is_imported_at_the_first_front_matter() -> None:
    code = (
        "import sys\n"
        "from pitrio.harness import load_skills\n"
        "from pitrio.harness._resources import parse_front_matter\n"
        "assert parse_front_matter('no front matter') == ({}, 'no front matter')\n"
        "assert 'yaml' not in sys.modules\n"
        "assert parse_front_matter('---\\nname: x\\n---\\nbody') == ({'name': 'x'}, 'body')\n"
    )
    assert _loaded(_modules_after(code), "yaml")


def test_pathspec_is_imported_at_the_first_ignore_file(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from pitrio.coding import coding_tools\n"
        "from pitrio.coding._walk import _read_spec\n"
        "assert 'pathspec' not in sys.modules\n"
        f"open({str(tmp_path)!r} + '/.gitignore', 'w').write('*.log\\n')\n"
        f"assert _read_spec({str(tmp_path)!r} + '/.gitignore').match_file('a.log')\n"
    )
    assert _loaded(_modules_after(code), "pathspec")


def test_the_subscription_logins_are_imported_when_one_is_asked_for() -> None:
    """``pitrio.providers.auth`` (the credential store a CLI run opens) loads no OAuth
    flow; listing the logins loads them all."""
    flows = ["_anthropic", "_codex", "_copilot", "_device", "_openrouter"]
    modules = _modules_after("from pitrio.providers.auth import AuthFile, resolve_auth")
    assert [f for f in flows if f"pitrio.providers._auth.{f}" in modules] == []
    modules = _modules_after(
        "from pitrio.providers.auth import oauth_providers\nassert oauth_providers()['anthropic']"
    )
    assert [f for f in flows if f"pitrio.providers._auth.{f}" not in modules] == []
