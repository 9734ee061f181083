"""Session files are private: ``0600`` files in ``0700`` directories, whoever creates them
(the JSONL and SQLite stores, the terminal CLI); a directory that existed is left alone.

Every test runs under umask ``022`` (the common default), where a file created with the
default mode would be ``0644`` and a directory ``0755``.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli.conftest import ChatServer, text_reply

from pitrio import UserMessage
from pitrio.harness import JsonlSessionStore, SqliteSessionStore


@pytest.fixture(autouse=True)
def common_umask() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def modes_under(root: Path) -> dict[str, int]:
    """The mode of ``root`` and of everything under it, by path relative to its parent."""
    found = {root.name: mode(root)}
    for path in root.rglob("*"):
        found[str(path.relative_to(root.parent))] = mode(path)
    return found


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A directory the user made (world-readable, as most are)."""
    path = tmp_path / "home"
    path.mkdir()
    path.chmod(0o755)
    return path


async def test_jsonl_store_creates_0600_files_in_0700_directories(home: Path) -> None:
    root = home / "data" / "pitrio" / "sessions"
    store = JsonlSessionStore(root)
    session = await store.create(cwd="/src/app")
    await session.append_message(UserMessage(content="a secret prompt"))
    await session.flush()
    forked = await session.fork()
    await forked.close()
    await session.close()

    files = [p for p in root.rglob("*") if p.is_file()]
    assert len(files) == 2  # the session and its fork
    found = modes_under(home / "data")
    assert set(found.values()) <= {0o600, 0o700}, found
    assert {found[str(p.relative_to(home))] for p in files} == {0o600}
    assert found["data"] == found["data/pitrio"] == found["data/pitrio/sessions"] == 0o700
    assert mode(home) == 0o755  # not pitrio's to change


async def test_jsonl_store_leaves_an_existing_directory_as_it_was(home: Path) -> None:
    root = home / "sessions"
    root.mkdir()
    root.chmod(0o755)
    session = await JsonlSessionStore(root).create(cwd="/src/app")
    await session.close()
    assert mode(root) == 0o755
    [directory] = root.iterdir()
    assert mode(directory) == 0o700
    assert [mode(p) for p in directory.iterdir()] == [0o600]


async def test_sqlite_store_creates_0600_files_in_0700_directories(home: Path) -> None:
    path = home / "db" / "sessions.db"
    store = SqliteSessionStore(path)
    session = await store.create(cwd="/src/app")
    await session.append_message(UserMessage(content="a secret prompt"))
    await session.flush()
    found = modes_under(home / "db")  # while open: the -wal and -shm files and the lock
    await session.close()
    await store.aclose()
    names = set(found)
    assert {"db/sessions.db", "db/sessions.db-wal", "db/sessions.db-shm"} <= names
    assert "db/sessions.db.locks" in names
    assert len([n for n in names if n.startswith("db/sessions.db.locks/")]) == 1
    for name, value in found.items():
        is_dir = (home / name).is_dir()
        assert (name, value) == (name, 0o700 if is_dir else 0o600)


@pytest.mark.parametrize("where", ["store", "--session"])
def test_the_terminal_cli_saves_sessions_privately(home: Path, tmp_path: Path, where: str) -> None:
    def answer(body: dict[str, Any]) -> Any:
        return text_reply("hello")

    chat = ChatServer(answer)
    chat.start()
    work = tmp_path / "work"
    work.mkdir()
    sessions = home / "state" / "pitrio-sessions"
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "PITRIO_SESSIONS_DIR": str(sessions),
        "XDG_STATE_HOME": str(home / "state"),
        "XDG_CONFIG_HOME": str(home / "config"),
    }
    try:
        argv = ["--base-url", chat.url, "--model", "tiny", "--cwd", str(work), "-p", "hi"]
        if where == "--session":  # a new file at a path of the user's choosing
            (home / "mine").mkdir()
            argv += ["--session", str(home / "mine" / "new.jsonl")]
        proc = subprocess.run(
            [sys.executable, "-m", "pitrio", *argv],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
            stdin=subprocess.DEVNULL,  # piped stdin would join the prompt, as in Pi
        )
    finally:
        chat.stop()
    assert proc.returncode == 0, proc.stderr
    if where == "--session":
        made = home / "mine" / "new.jsonl"
        assert "hi" in made.read_text()
        assert mode(made) == 0o600
        assert [p.name for p in (home / "mine").iterdir()] == ["new.jsonl"]  # no scratch left
        return
    files = [p for p in sessions.rglob("*") if p.is_file()]
    assert len(files) == 1
    assert "hi" in files[0].read_text()
    assert mode(files[0]) == 0o600
    assert mode(sessions) == mode(files[0].parent) == 0o700
    assert mode(home / "state") == 0o700  # made by pitrio for its sessions
