"""API keys from the environment: pi-ai's ``env-api-keys.js`` ported in full, checked on
a table of environments here and, with Node, against pi-ai itself."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pitrio.providers import _AWS_CREDENTIALS, _ENV_KEYS, env_api_key, find_env_keys
from pitrio.providers._catalog import catalog_data

from .test_catalog import pi_ai_dir, pi_ai_node

ADC = ".config/gcloud/application_default_credentials.json"
VERTEX = {"GOOGLE_CLOUD_PROJECT": "proj", "GOOGLE_CLOUD_LOCATION": "us-central1"}

# (environment, {provider: expected env_api_key}); "{home}" is a HOME without ADC,
# "{adc_home}" one with them, "{adc}" an existing credentials file, "{missing}" none.
TABLE: list[tuple[dict[str, str], dict[str, str | None]]] = [
    ({}, {"openai": None, "anthropic": None, "google-vertex": None, "amazon-bedrock": None}),
    ({"OPENAI_API_KEY": "sk-o"}, {"openai": "sk-o", "azure-openai-responses": None}),
    ({"OPENAI_API_KEY": ""}, {"openai": None}),
    ({"ANTHROPIC_AUTH_TOKEN": "bearer"}, {"anthropic": None}),
    ({"ANTHROPIC_AUTH_TOKEN": "bearer", "ANTHROPIC_API_KEY": "ak"}, {"anthropic": "ak"}),
    ({"ANTHROPIC_OAUTH_TOKEN": "oat", "ANTHROPIC_API_KEY": "ak"}, {"anthropic": "oat"}),
    (
        {"MOONSHOT_API_KEY": "m", "OPENCODE_API_KEY": "oc", "QWEN_TOKEN_PLAN_API_KEY": "q"},
        {
            "moonshotai": "m",
            "moonshotai-cn": "m",
            "opencode": "oc",
            "opencode-go": "oc",
            "qwen-token-plan": "q",
            "qwen-token-plan-individual": "q",
            "qwen-token-plan-cn": None,
        },
    ),
    (
        {"GEMINI_API_KEY": "g", "GROQ_API_KEY": "gr", "XAI_API_KEY": "x", "HF_TOKEN": "hf"},
        {"google": "g", "groq": "gr", "xai": "x", "huggingface": "hf", "google-vertex": None},
    ),
    ({"CLOUDFLARE_API_KEY": "cf", "COPILOT_GITHUB_TOKEN": "gh"}, {"cloudflare-ai-gateway": "cf"}),
    ({"GOOGLE_CLOUD_API_KEY": "gk"}, {"google-vertex": "gk", "google": None}),
    ({"HOME": "{adc_home}", **VERTEX}, {"google-vertex": "<authenticated>"}),
    (
        {"HOME": "{adc_home}", "GCLOUD_PROJECT": "p", "GOOGLE_CLOUD_LOCATION": "eu"},
        {"google-vertex": "<authenticated>"},
    ),
    ({"HOME": "{adc_home}", "GOOGLE_CLOUD_PROJECT": "p"}, {"google-vertex": None}),
    ({"HOME": "{home}", **VERTEX}, {"google-vertex": None}),
    (
        {"HOME": "{home}", "GOOGLE_APPLICATION_CREDENTIALS": "{adc}", **VERTEX},
        {"google-vertex": "<authenticated>"},
    ),
    (
        {"HOME": "{adc_home}", "GOOGLE_APPLICATION_CREDENTIALS": "{missing}", **VERTEX},
        {"google-vertex": None},
    ),
    ({"AWS_PROFILE": "dev"}, {"amazon-bedrock": "<authenticated>"}),
    ({"AWS_ACCESS_KEY_ID": "AKIA"}, {"amazon-bedrock": None}),
    (
        {"AWS_ACCESS_KEY_ID": "AKIA", "AWS_SECRET_ACCESS_KEY": "s"},
        {"amazon-bedrock": "<authenticated>"},
    ),
    ({"AWS_SECRET_ACCESS_KEY": "s"}, {"amazon-bedrock": None}),
    ({"AWS_BEARER_TOKEN_BEDROCK": "b"}, {"amazon-bedrock": "<authenticated>"}),
    ({"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "/r"}, {"amazon-bedrock": "<authenticated>"}),
    ({"AWS_CONTAINER_CREDENTIALS_FULL_URI": "http://x"}, {"amazon-bedrock": "<authenticated>"}),
    ({"AWS_WEB_IDENTITY_TOKEN_FILE": "/t"}, {"amazon-bedrock": "<authenticated>"}),
    ({"AWS_PROFILE": ""}, {"amazon-bedrock": None}),
    # Every variable set, each to its own name: every provider's first one wins.
    (
        {name: name.lower() for names in _ENV_KEYS.values() for name in names},
        {"anthropic": "anthropic_oauth_token", "zai-coding-cn": "zai_coding_cn_api_key"},
    ),
]

PROVIDERS = [*_ENV_KEYS, "amazon-bedrock", "llama-cpp"]


def _environments(tmp_path: Path) -> list[dict[str, str]]:
    home, adc_home = tmp_path / "home", tmp_path / "adc-home"
    home.mkdir()
    (adc_home / ADC).parent.mkdir(parents=True)
    (adc_home / ADC).write_text("{}")
    places = {
        "{home}": str(home),
        "{adc_home}": str(adc_home),
        "{adc}": str(adc_home / ADC),
        "{missing}": str(tmp_path / "missing.json"),
    }
    # Without a HOME of its own a row gets the one without ADC, not the user's.
    return [
        {"HOME": str(home), **{k: places.get(v, v) for k, v in env.items()}} for env, _ in TABLE
    ]


def _ported(env: dict[str, str]) -> dict[str, list[Any]]:
    return {p: [find_env_keys(p, env), env_api_key(p, env)] for p in PROVIDERS}


@pytest.mark.parametrize("row", range(len(TABLE)))
def test_env_api_key_table(tmp_path: Path, row: int) -> None:
    env = _environments(tmp_path)[row]
    for provider, key in TABLE[row][1].items():
        assert env_api_key(provider, env) == key, (provider, TABLE[row][0])
    for provider in PROVIDERS:
        found = find_env_keys(provider, env)
        names = _ENV_KEYS.get(provider, ())
        assert found == ([n for n in names if env.get(n)] or None)


def test_anthropic_auth_token_counts_but_is_not_the_key() -> None:
    env = {"ANTHROPIC_AUTH_TOKEN": "bearer"}
    assert find_env_keys("anthropic", env) == ["ANTHROPIC_AUTH_TOKEN"]
    assert env_api_key("anthropic", env) is None


def test_the_map_is_the_generated_one() -> None:
    """The hand-written map equals what tools/gen_catalog.mjs read from pi-ai, and the
    special cases cover the variables pi-ai's code reads for them."""
    data = catalog_data()
    assert {p: list(v) for p, v in _ENV_KEYS.items()} == data["envKeys"]
    assert sorted(_ENV_KEYS) == sorted(data["envKeys"])
    aws = [name for group in _AWS_CREDENTIALS for name in group]
    assert [n for n in aws if n != "AWS_SECRET_ACCESS_KEY"] == data["specialEnv"]["amazon-bedrock"]
    assert data["specialEnv"]["google-vertex"] == [
        "GOOGLE_APPLICATION_CREDENTIALS",
        "GOOGLE_CLOUD_PROJECT",
        "GCLOUD_PROJECT",
        "GOOGLE_CLOUD_LOCATION",
    ]
    catalog_providers = set(data["providers"])
    assert catalog_providers - set(_ENV_KEYS) == {"amazon-bedrock", "openai-codex"}
    assert set(_ENV_KEYS) - catalog_providers == {"radius"}


_NODE_TABLE = """
import { pathToFileURL } from "node:url";
const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const { dir, rows, providers } = JSON.parse(Buffer.concat(chunks).toString("utf8"));
const url = pathToFileURL(dir + "/dist/env-api-keys.js").href;
const out = [];
for (const [index, env] of rows.entries()) {
  for (const name of Object.keys(process.env)) delete process.env[name];
  Object.assign(process.env, env);
  // A fresh module per row: pi-ai caches the ADC lookup, and loads node:fs lazily.
  const keys = await import(`${url}?row=${index}`);
  await new Promise((resolve) => setTimeout(resolve, 20));
  const result = {};
  for (const p of providers) {
    result[p] = [keys.findEnvKeys(p, env) ?? null, keys.getEnvApiKey(p, env) ?? null];
  }
  out.push(result);
}
process.stdout.write(JSON.stringify(out));
"""


def test_env_keys_agree_with_pi_ai(tmp_path: Path) -> None:
    """Every provider in every environment of the table: pitrio's ``find_env_keys`` and
    ``env_api_key`` give what pi-ai's ``findEnvKeys`` and ``getEnvApiKey`` give."""
    directory = pi_ai_dir()
    rows = _environments(tmp_path)
    done = subprocess.run(
        [pi_ai_node(), "--input-type=module", "-e", _NODE_TABLE],
        input=json.dumps({"dir": str(directory), "rows": rows, "providers": PROVIDERS}),
        capture_output=True,
        text=True,
        timeout=120,
        env={},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    expected = json.loads(done.stdout)
    assert len(expected) == len(rows)
    for env, want in zip(rows, expected, strict=True):
        assert _ported(env) == want, env
