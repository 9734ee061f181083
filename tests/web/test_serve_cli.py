"""``python -m pitrio serve`` as a person starts it: a subprocess, its URL, its token."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest


def _env(tmp_path: Path) -> dict[str, str]:
    keep = ("PATH", "LANG", "LC_ALL", "PYTHONPATH", "VIRTUAL_ENV")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / "config"), PYTHONUNBUFFERED="1")
    return env


def _status(url: str) -> int:
    # With a cookie jar, as a browser: the printed URL sets the token's cookie and
    # redirects to the page.
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
    try:
        with opener.open(url, timeout=10) as response:
            status: int = response.status
            return status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_serve_prints_a_tokened_url_and_refuses_requests_without_it(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "pitrio", "serve", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(tmp_path),
        cwd=tmp_path,
    )
    try:
        assert process.stdout is not None
        lines = [process.stdout.readline() for _ in range(3)]
        assert lines[0].startswith("pitrio serve: pitrio/offline-replay in ")
        assert lines[1].startswith("Open http://127.0.0.1:")
        url = lines[1].split()[1]
        base, _, token = url.partition("/?token=")
        assert len(token) >= 32
        assert _status(url) == 200
        assert _status(f"{base}/app.js?token={token}") == 200
        assert _status(f"{base}/") == 403
        assert _status(f"{base}/?token=x{token}") == 403
        assert _status(f"{base}/app.css") == 403
        assert _status(f"{base}/nothing?token={token}") == 404
    finally:
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 130
    assert "pitrio serve: stopped." in err
    assert "Traceback" not in err


def test_serve_help_and_bad_arguments(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pitrio", "serve", *args],
            capture_output=True,
            text=True,
            env=_env(tmp_path),
            cwd=tmp_path,
            timeout=60,
            check=False,
        )

    shown = run("--help")
    assert shown.returncode == 0
    for flag in ("--port", "--model", "--base-url", "--offline", "--yes", "--continue"):
        assert flag in shown.stdout
    bad_port = run("--port", "70000")
    assert bad_port.returncode == 2
    assert "--port must be 0-65535; got 70000" in bad_port.stderr
    offline_model = run("--offline", "--model", "openai/gpt-4.1")
    assert offline_model.returncode == 2
    assert "--demo replays the recorded demo" in offline_model.stderr
    offline_resume = run("--resume", "some-id")
    assert offline_resume.returncode == 2
    assert "the offline replay keeps no session" in offline_resume.stderr
    local = ("--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--cwd", str(tmp_path))
    missing = run("--port", "0", *local, "--resume", "no-such-id")
    assert missing.returncode == 2
    assert "pitrio serve: no session 'no-such-id' under " in missing.stderr
    assert "Traceback" not in missing.stderr
    unknown = run("--prot", "1")
    assert unknown.returncode == 2
    assert "unrecognized arguments: --prot" in unknown.stderr


@pytest.mark.parametrize("argv", [["--port", "-1"], ["--cwd", "/does/not/exist"]])
async def test_serve_entry_point_raises_a_clear_error(argv: list[str]) -> None:
    from pitrio.web._serve import serve

    with pytest.raises(ValueError, match=r"pitrio serve: error: --(port|cwd)"):
        await serve(argv, env={})


def test_serve_on_a_taken_port_says_so(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "pitrio", "serve", "--port", str(port)],
            capture_output=True,
            text=True,
            env=_env(tmp_path),
            cwd=tmp_path,
            timeout=60,
            check=False,
        )
    assert done.returncode == 2
    assert f"pitrio serve: cannot listen on 127.0.0.1:{port}:" in done.stderr
    assert "Traceback" not in done.stderr
