"""What ``python -m pitrio --mode json -p`` imports for one turn against a local
OpenAI-compatible server: the kernel, the harness with its JSONL store, the coding tools,
the one provider it talks to; not the layers and stores it does not use (structure, not
time: ``benchmarks.bench_cli`` measures the time, and counts these modules)."""

from __future__ import annotations

import sys

import pytest

from benchmarks.bench_cli import Server, imported_modules

# Each is imported by a feature the run does not use (another store, another mode,
# another provider, a login, a front matter, an ignore file).
NOT_IN_A_JSON_TURN = (
    "pitrio.web",
    "pitrio.worker",
    "pitrio.mcp",
    "pitrio.telemetry",
    "pitrio.ui",
    "pitrio.cli._interactive",
    "pitrio.cli._rpc",
    "pitrio.harness._sqlite",
    "pitrio.harness._postgres",
    "pitrio.providers._anthropic_messages",
    "pitrio.providers._openai_responses",
    "pitrio.providers._google_generative_ai",
    "pitrio.providers._auth._anthropic",
    "pitrio.providers._auth._codex",
    "pitrio.providers._auth._copilot",
    "pitrio.providers._auth._device",
    "sqlite3",
    "yaml",
    "pathspec",
    "rich",
    "click",
    "pygments",
    "opentelemetry",
    "mcp",
)


def _loaded(modules: list[str], name: str) -> bool:
    return any(m == name or m.startswith(f"{name}.") for m in modules)


@pytest.mark.timeout(120)
def test_a_json_turn_imports_only_what_it_uses() -> None:
    with Server() as server:
        command = [sys.executable, "-m", "pitrio", "--provider", "local", "--model"]
        command += ["scripted", "--base-url", server.url, "--yes"]
        modules = imported_modules(command, "turn", url=server.url)
    # the run went through the layers it needs (run_one checked its answer)
    for needed in (
        "pitrio.harness._jsonl",
        "pitrio.providers._openai_completions",
        "pitrio.cli._json_mode",
    ):
        assert needed in modules, needed
    assert [name for name in NOT_IN_A_JSON_TURN if _loaded(modules, name)] == []
