"""Pi's own ``RpcClient`` drives ``python -m pitrio --mode rpc`` through its whole API.

``tests/cli/node/driver.mjs`` calls every ``RpcClient`` method (all 33 commands of
Pi's RPC mode) against one agent; ``cli.mjs`` is the ``cliPath`` that runs pitrio (or
Pi) with the client's arguments. The same scripted server answers both. pitrio's
transcript is compared field by field with Pi's: the real CLI's when it is installed,
else the one recorded in ``tests/cli/data/rpc_pi.json`` (``python
tests/cli/_pi_oracle.py record`` re-records it).

What the comparison leaves out is listed in :func:`comparable`, each with its reason.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from . import _pi_oracle as oracle, _rpc_driver

FIXTURE = oracle.DATA / "rpc_pi.json"
_ENTRY_STEPS = frozenset({"getEntries", "getTree"})
_RACY_STEPS = frozenset({"steer and followUp", "clearQueue"})


def normalize(transcript: dict[str, Any], root: Path) -> list[dict[str, Any]]:
    """The steps with ids, times and paths replaced; the entry listings normalized
    without numbering ids (Pi's have entries pitrio keeps as session values)."""
    normalizer = oracle.Normalizer(root)
    steps = []
    for step in transcript["steps"]:
        if step["step"] in _ENTRY_STEPS:
            scratch = copy.deepcopy(normalizer)
            steps.append(scratch(step))
        else:
            steps.append(normalizer(step))
    return steps


def _walk(value: Any, fn: Any) -> Any:
    value = fn(value)
    if isinstance(value, dict):
        return {k: _walk(v, fn) for k, v in value.items()}
    if isinstance(value, list):
        return [_walk(v, fn) for v in value]
    return value


def _entries_view(entries: list[dict[str, Any]]) -> list[Any]:
    view = []
    for entry in entries:
        if entry["type"] == "message":
            message = entry["message"]
            texts = [b.get("text") for b in message.get("content", ()) if isinstance(b, dict)]
            view.append(["message", message["role"], texts or message.get("command")])
        elif entry["type"] == "compaction":
            view.append(["compaction", entry["summary"], entry["tokensBefore"]])
    return view


def _tree_entries(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for node in nodes:
        out.append(node["entry"])
        out.extend(_tree_entries(node["children"]))
    return out


def comparable(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The parts of a normalized transcript that must be equal, with what is left out:

    * the model's ``baseUrl`` and ``maxTokens``: the two CLIs are configured apart
      (Pi's ``models.json`` says 4096, pitrio's ``--base-url`` model has its default);
    * ``message_update.usage`` and an assistant ``message_start``'s ``content`` and
      ``responseId``: Pi serializes events after the stream has moved on, so they
      show whatever the first network read held (timing, not protocol);
    * how a stream's output was chunked (``bash_execution_update``,
      ``tool_execution_update``), and where ``queue_update`` falls among the
      streamed events of a steered run (the steps in ``_RACY_STEPS``);
    * session entries other than messages and compactions (Pi's ``model_change``,
      ``thinking_level_change``, ``session_info``: pitrio keeps these as session
      values, see docs/deviations.md);
    * Pi's built-in ``llama`` extension command (pitrio has no extensions);
    * ``reasoning: 0`` in a compaction's usage and a trailing newline of bash tool
      output (the harness's summary usage and the coding bash tool, not the RPC layer).
    """

    def fix(value: Any) -> Any:
        if isinstance(value, dict):
            value = {k: v for k, v in value.items() if k not in ("baseUrl", "maxTokens")}
            if value.get("type") == "text" and isinstance(value.get("text"), str):
                value["text"] = value["text"].rstrip("\n")
        return value

    view = []
    for step in steps:
        step = _walk(step, fix)
        events = oracle.merge_streamed(step["events"])
        for event in events:
            if event["type"] == "message_update":
                event.pop("usage", None)
            if event["type"] == "message_start" and event["message"]["role"] == "assistant":
                event["message"]["content"] = []
                event["message"].pop("responseId", None)
            if event["type"] == "compaction_end" and event.get("result"):
                event["result"].get("usage", {}).pop("reasoning", None)
        if step["step"] in _RACY_STEPS:
            streamed = ("message_update", "tool_execution_update")
            kinds = sorted(e["type"] for e in events if e["type"] not in streamed)
            queues = [e for e in events if e["type"] == "queue_update"]
            step["events"] = {"kinds": kinds, "queues": queues}
        else:
            step["events"] = events
        name = step["step"]
        result = step.get("result")
        if name == "getEntries" and isinstance(result, dict):
            step["result"] = _entries_view(result["entries"])
            step["responses"] = None
        elif name == "getTree" and isinstance(result, dict):
            step["result"] = _entries_view(_tree_entries(result["tree"]))
            step["responses"] = None
        elif name == "getCommands" and isinstance(result, list):
            step["result"] = [c for c in result if c.get("source") != "extension"]
            step["responses"] = None
        elif name == "compact" and isinstance(result, dict):
            result.get("usage", {}).pop("reasoning", None)
            step["responses"] = None
        view.append(step)
    return view


def differences(pi: Any, pitrio: Any, path: str = "") -> list[str]:
    """Every place where the two differ (values, missing keys, key order)."""
    if type(pi) is not type(pitrio):
        return [f"{path}: Pi {json.dumps(pi)[:300]} / pitrio {json.dumps(pitrio)[:300]}"]
    if isinstance(pi, dict):
        found = []
        for key in pi.keys() | pitrio.keys():
            if key not in pitrio:
                found.append(f"{path}.{key}: only Pi has it ({json.dumps(pi[key])[:200]})")
            elif key not in pi:
                found.append(f"{path}.{key}: only pitrio has it ({json.dumps(pitrio[key])[:200]})")
            else:
                found += differences(pi[key], pitrio[key], f"{path}.{key}")
        if not found and list(pi) != list(pitrio):
            found.append(f"{path}: key order Pi {list(pi)} / pitrio {list(pitrio)}")
        return found
    if isinstance(pi, list):
        if len(pi) != len(pitrio):
            return [f"{path}: {len(pi)} items in Pi's, {len(pitrio)} in pitrio's"]
        found = []
        for index, (a, b) in enumerate(zip(pi, pitrio, strict=True)):
            found += differences(a, b, f"{path}[{index}]")
        return found
    return [] if pi == pitrio else [f"{path}: Pi {pi!r} / pitrio {pitrio!r}"]


def run_transcript(who: str, server: oracle.OracleServer, root: Path, node: str) -> Any:
    work = oracle.workspace(root)
    server.reset()
    if who == "pi":
        env = oracle.pi_home(root, server.url)
        return oracle.run_driver(node, [str(oracle.PI)], env, work, [])
    command = oracle.pitrio_command(server.url)
    return oracle.run_driver(node, command[:3], oracle.pitrio_env(root), work, command[3:])


def run_python_driver(server: oracle.OracleServer, root: Path) -> Any:
    """``_rpc_driver``: the driver's steps without Node (pitrio only)."""
    work = oracle.workspace(root)
    server.reset()
    command = oracle.pitrio_command(server.url)
    return _rpc_driver.run(command[:3], oracle.pitrio_env(root), work, command[3:])


@pytest.fixture(scope="module")
def node_path() -> str:
    found = oracle.node()
    if found is None:
        pytest.skip("Node is not installed (Pi's RpcClient needs it)")
    return found


@pytest.fixture(scope="module")
def pitrio_transcript(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """pitrio driven by Pi's RpcClient (Node), else by the Python port of the driver."""
    root = tmp_path_factory.mktemp("pitrio-rpc")
    node = oracle.node()
    with oracle.OracleServer() as server:
        if node is None:
            return run_python_driver(server, root), root
        return run_transcript("pitrio", server, root, node), root


def pi_steps(node: str, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Pi's normalized transcript: from the real CLI when installed, else recorded."""
    if oracle.pi_available():
        root = tmp_path_factory.mktemp("pi-rpc")
        with oracle.OracleServer() as server:
            return normalize(run_transcript("pi", server, root, node), root)
    recorded: list[dict[str, Any]] = json.loads(FIXTURE.read_text(encoding="utf-8"))["steps"]
    return recorded


def test_rpc_client_drives_pitrio_as_it_drives_pi(
    node_path: str,
    pitrio_transcript: tuple[dict[str, Any], Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    transcript, root = pitrio_transcript
    ours = normalize(transcript, root)
    theirs = pi_steps(node_path, tmp_path_factory)
    assert [s["step"] for s in ours] == [s["step"] for s in theirs]
    found = differences(comparable(theirs), comparable(ours))
    assert not found, "\n".join(found[:40])


def test_the_recorded_pi_transcript_matches_pitrio(
    pitrio_transcript: tuple[dict[str, Any], Path],
) -> None:
    """The committed recording of Pi's transcript against pitrio's (when Pi is not
    installed, this is the comparison; when it is, the recording stays honest)."""
    transcript, root = pitrio_transcript
    recorded = json.loads(FIXTURE.read_text(encoding="utf-8"))["steps"]
    found = differences(comparable(recorded), comparable(normalize(transcript, root)))
    assert not found, "\n".join(found[:40])


def test_the_python_driver_is_the_node_driver(
    node_path: str,
    pitrio_transcript: tuple[dict[str, Any], Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The fallback for machines without Node sends what Pi's RpcClient sends."""
    transcript, root = pitrio_transcript
    python_root = tmp_path_factory.mktemp("pitrio-rpc-python")
    with oracle.OracleServer() as server:
        python = normalize(run_python_driver(server, python_root), python_root)
    found = differences(comparable(normalize(transcript, root)), comparable(python))
    assert not found, "\n".join(found[:40])


def test_every_rpc_command_is_answered(
    pitrio_transcript: tuple[dict[str, Any], Path],
) -> None:
    """The driver sent each of the 33 commands of Pi's RPC union, and none got
    ``Unknown command``; ``agent_settled`` ended every prompt (RpcClient waits for it)."""
    transcript, _ = pitrio_transcript
    commands = {r["command"] for s in transcript["steps"] for r in s["responses"]}
    union = Path(oracle.NODE_DIR / "rpc_commands.txt").read_text(encoding="utf-8").split()
    assert len(union) == 33
    assert set(union) <= commands
    errors = [r.get("error", "") for s in transcript["steps"] for r in s["responses"]]
    assert not [e for e in errors if e.startswith("Unknown command")]
    for step in transcript["steps"]:
        if step["step"].startswith("promptAndWait"):
            assert step["events"][-1]["type"] == "agent_settled"
            starts = [i for i, e in enumerate(step["events"]) if e["type"] == "agent_start"]
            assert starts  # the response came before the events
            assert starts[0] == 0


def test_prompt_latency_is_reported(pitrio_transcript: tuple[dict[str, Any], Path]) -> None:
    transcript, _ = pitrio_transcript
    (latency,) = transcript["promptAndWaitMs"]
    assert latency > 0


_UNION = re.compile(r'type: "([a-z_]+)"')


def test_the_command_list_is_pis_union() -> None:
    """``node/rpc_commands.txt`` is the union in Pi's ``rpc-types.d.ts`` when installed."""
    listed = Path(oracle.NODE_DIR / "rpc_commands.txt").read_text(encoding="utf-8").split()
    types = oracle.pi_package() / "dist" / "modes" / "rpc" / "rpc-types.d.ts"
    if not types.exists():
        assert len(listed) == 33
        return
    text = types.read_text(encoding="utf-8")
    start = text.index("export type RpcCommand =")
    union = text[start : text.index("\nexport", start + 1)]
    assert sorted(_UNION.findall(union)) == sorted(listed)
