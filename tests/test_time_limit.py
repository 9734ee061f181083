"""The per-test time limit (pytest-timeout, ``timeout`` in pyproject.toml) fails a hung
test and the run goes on: for Trio tests too (tests/conftest.py delivers it as a
cancellation), whose later neighbours still get a working ``trio.run``."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

HUNG_TESTS = '''
import subprocess
import sys

import pytest
import trio


@pytest.mark.timeout(1)
async def test_trio_waits_forever() -> None:
    await trio.sleep_forever()


@pytest.mark.timeout(1)
async def test_trio_waits_forever_in_virtual_time(autojump_clock: object) -> None:
    await trio.Event().wait()


async def test_trio_after_them_runs() -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.sleep, 0.01)


@pytest.mark.timeout(1)
def test_a_child_process_never_ends() -> None:
    subprocess.run([sys.executable, "-c", "import time; time.sleep(60)"], check=False)


def test_sync_after_them_runs() -> None:
    assert trio.run(trio.sleep, 0) is None
'''


def test_a_hung_test_fails_and_the_run_goes_on(tmp_path: Path) -> None:
    """Each hung test fails with the timeout; the tests after them pass."""
    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path / "conftest.py")
    shutil.copy(ROOT / "tests" / "_services.py", tmp_path / "_services.py")  # its plugin
    (tmp_path / "test_hung.py").write_text(HUNG_TESTS)
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\ntrio_mode = true\ntimeout = 300\nfilterwarnings = error\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rfE"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    summary = [line for line in result.stdout.splitlines() if line.startswith("FAILED")]
    assert sorted(line.split(" - ")[0] for line in summary) == [
        "FAILED test_hung.py::test_a_child_process_never_ends",
        "FAILED test_hung.py::test_trio_waits_forever",
        "FAILED test_hung.py::test_trio_waits_forever_in_virtual_time",
    ], result.stdout + result.stderr
    assert all("Timeout" in line for line in summary), result.stdout
    assert result.stdout.splitlines()[-1].startswith("3 failed, 2 passed in "), result.stdout
    assert "INTERNALERROR" not in result.stdout + result.stderr
