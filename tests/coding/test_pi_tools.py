"""pitrio's coding tools against Pi's own (pi-coding-agent 0.85.0), case by case.

``data/pi_tools_cases.json`` lists the calls (files to lay out, tool, arguments);
``node/pi_tools.mjs`` ran Pi's tools on them and recorded ``data/pi_tools.json``. Each
case here lays out the same files, makes the same call through pitrio's tool and
compares the result field by field: text, images, ``details`` (truncation records,
diffs and patches, limits), error texts, the files an edit or write leaves, and the
size of bash's full-output file. The temporary directory prints as ``$CWD`` and bash's
full-output file as ``$TMPFILE``, as the recording has them.

ripgrep and fd search in parallel, so the order of matches across files is not fixed in
Pi; those cases (``"order": "lines"``) compare the lines as a multiset. pitrio prints
them sorted.

``test_the_recording_is_what_pi_prints_now`` runs the Node script again when ``node``,
the oracle's ``node_modules`` and ripgrep and fd are on this machine, and compares it with
the recording.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trio

from pitrio._events import ToolResult
from pitrio._messages import ImageContent, TextContent
from pitrio._signal import AbortSignal
from pitrio.coding import CodingToolError, Workspace

HERE = Path(__file__).parent
CASES = json.loads((HERE / "data" / "pi_tools_cases.json").read_text(encoding="utf-8"))["cases"]
RECORDING = json.loads((HERE / "data" / "pi_tools.json").read_text(encoding="utf-8"))
RECORDED = {r["name"]: r for r in RECORDING["results"]}


def file_bytes(spec: dict[str, Any]) -> bytes:
    """The bytes of a file spec of the cases file (as pi_tools.mjs builds them)."""
    if "text" in spec:
        return str(spec["text"]).encode("utf-8")
    if "base64" in spec:
        return base64.b64decode(str(spec["base64"]))
    if "repeat" in spec:
        text, count = spec["repeat"]
        return str(text * count).encode("utf-8")
    if "parts" in spec:
        return "".join(text * count for text, count in spec["parts"]).encode("utf-8")
    prefix, count, end = spec["numbered"]
    assert isinstance(count, int)
    return ("\n".join(f"{prefix}{i}" for i in range(1, count + 1)) + str(end)).encode("utf-8")


def lay_out(root: Path, files: dict[str, Any]) -> None:
    (root / ".git").mkdir(parents=True)
    for name, spec in files.items():
        full = root / name
        if spec.get("dir"):
            full.mkdir(parents=True, exist_ok=True)
            continue
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_bytes(file_bytes(spec))


def wire(result: ToolResult) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    for block in result.content:
        if isinstance(block, TextContent):
            content.append({"type": "text", "text": block.text})
        else:
            assert isinstance(block, ImageContent)
            content.append({"type": "image", "data": block.data, "mimeType": block.mime_type})
    return {"content": content, "details": result.details}


def normalize(value: Any, cwd: Path, tmpfile: str | None) -> Any:
    text = json.dumps(value)
    if tmpfile:
        text = text.replace(tmpfile, "$TMPFILE")
    text = text.replace(str(cwd), "$CWD")
    return json.loads(text)


async def run_case(case: dict[str, Any], root: Path) -> dict[str, Any]:
    """What pi_tools.mjs records for ``case``, from pitrio's tool."""
    cwd = root / "work"
    lay_out(cwd, case["files"])
    tool = Workspace(cwd).tools([case["tool"]])[0]
    args = tool.prepare_arguments(json.loads(json.dumps(case["args"])))
    out: dict[str, Any] = {"name": case["name"]}
    tmpfile: str | None = None
    try:
        result = await tool.execute("call_1", args, AbortSignal(), lambda _update: None)
    except CodingToolError as exc:
        out["error"] = str(exc)
        if "Full output: " in out["error"]:
            tmpfile = out["error"].rsplit("Full output: ", 1)[1].rstrip("]")
    else:
        out["result"] = wire(result)
        details = result.details
        if isinstance(details, dict) and isinstance(details.get("fullOutputPath"), str):
            tmpfile = details["fullOutputPath"]
    if "checkFiles" in case:
        out["files"] = {
            name: (cwd / name).read_bytes().decode("utf-8") for name in case["checkFiles"]
        }
    if tmpfile:
        out["fullOutput"] = (await trio.Path(tmpfile).stat()).st_size
        await trio.Path(tmpfile).unlink()
    normalized: dict[str, Any] = normalize(out, cwd, tmpfile)
    return normalized


def unordered(record: dict[str, Any]) -> dict[str, Any]:
    """A record of a multi-file search with its lines sorted (and truncation content too)."""
    record = json.loads(json.dumps(record))
    for block in record.get("result", {}).get("content", []):
        if block["type"] == "text":
            body, sep, notice = block["text"].partition("\n\n[")
            block["text"] = "\n".join(sorted(body.split("\n"))) + sep + notice
    details = record.get("result", {}).get("details") or {}
    truncation = details.get("truncation")
    if truncation:
        truncation["content"] = "\n".join(sorted(truncation["content"].split("\n")))
    return record


def comparable(case: dict[str, Any], record: dict[str, Any]) -> dict[str, Any]:
    return unordered(record) if case.get("order") == "lines" else record


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
async def test_pitrio_tool_gives_what_pi_gives(case: dict[str, Any], tmp_path: Path) -> None:
    """The same call on the same files: the same text, details, errors and files as Pi."""
    mine = await run_case(case, tmp_path)
    assert comparable(case, mine) == comparable(case, RECORDED[case["name"]])


@pytest.mark.parametrize("name", list(RECORDING["tools"]))
def test_the_tool_definition_is_pis(name: str, tmp_path: Path) -> None:
    """Name, label, description and parameter schema as Pi gives them to the model, keys
    in the same order (the JSON a provider sends is the same bytes)."""
    tool = Workspace(tmp_path).tools([name])[0]
    mine = {"label": tool.label, "description": tool.description, "parameters": tool.parameters}
    assert json.dumps(mine) == json.dumps(RECORDING["tools"][name])


def test_every_case_was_recorded() -> None:
    """The recording holds one result per case, in the cases' order."""
    assert [r["name"] for r in RECORDED.values()] == [c["name"] for c in CASES]


def _pi_node_modules() -> Path | None:
    env = os.environ.get("PITRIO_PI_NODE_MODULES")
    candidates = [Path(env)] if env else []
    candidates.append(Path.home() / ".cache" / "pitrio-oracle-coding-agent" / "node_modules")
    oracle = Path("/work/shared/oracle/coding-agent/pi")
    if oracle.exists():
        try:
            found = subprocess.run(
                [str(oracle), "--oracle-path"], capture_output=True, text=True, timeout=60
            ).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            found = ""
        if found:
            candidates.append(Path(found) / "node_modules")
    for candidate in candidates:
        if (candidate / "@earendil-works" / "pi-coding-agent").is_dir():
            return candidate
    return None


def test_the_recording_is_what_pi_prints_now(tmp_path: Path) -> None:
    """Re-run Pi's tools on the cases (Node, the oracle install, rg and fd needed)."""
    node_modules = _pi_node_modules()
    missing = [
        name
        for name, ok in (
            ("node", shutil.which("node")),
            ("the oracle's node_modules", node_modules),
            ("rg", shutil.which("rg")),
            ("fd", shutil.which("fd") or shutil.which("fdfind")),
        )
        if not ok
    ]
    if missing:
        pytest.skip(f"re-running Pi's tools needs {', '.join(missing)}")
    assert node_modules is not None
    completed = subprocess.run(
        ["node", str(HERE / "node" / "pi_tools.mjs"), str(HERE / "data" / "pi_tools_cases.json")],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PITRIO_PI_NODE_MODULES": str(node_modules)},
        check=True,
    )
    recording = json.loads(completed.stdout)
    assert recording["tools"] == RECORDING["tools"]
    live = {r["name"]: r for r in recording["results"]}
    for case in CASES:
        assert comparable(case, live[case["name"]]) == comparable(case, RECORDED[case["name"]])
