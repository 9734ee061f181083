"""The catalog in the CLI: ``--model`` takes every entry, ``--list-models [SEARCH]`` is
Pi's table (checked against the real ``pi --list-models``) with a key and an API column,
and ``/model`` lists the models that have a key."""

from __future__ import annotations

import io
import os
import subprocess
from pathlib import Path

import pytest
from cli._pi import pi_command, require_oracle

from pitrio import Model
from pitrio.cli._args import build_parser
from pitrio.cli._interactive import _keyed_models
from pitrio.cli._list_models import format_token_count, list_models_table, matches
from pitrio.cli._main import main
from pitrio.cli._setup import configure
from pitrio.providers import Models, registered_apis


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """No keys; config, sessions and HOME under tmp_path."""
    return {
        "PITRIO_SESSIONS_DIR": str(tmp_path / "sessions"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "HOME": str(tmp_path / "home"),
    }


def _list(argv: list[str], env: dict[str, str]) -> list[str]:
    out = io.StringIO()
    assert main(["--list-models", *argv], env=env, stdout=out) == 0
    return out.getvalue().splitlines()


@pytest.mark.parametrize(
    ("count", "text"),
    [(999, "999"), (1000, "1K"), (131072, "131.1K"), (32768, "32.8K"), (200000, "200K"),
     (1000000, "1M"), (1048576, "1.0M"), (2000000, "2M"), (1050000, "1.1M"), (8192, "8.2K")],
)  # fmt: skip
def test_token_counts_as_pi_writes_them(count: int, text: str) -> None:
    assert format_token_count(count) == text


def test_list_models_of_one_provider_with_its_key(env: dict[str, str]) -> None:
    lines = _list(["groq"], {**env, "GROQ_API_KEY": "gsk"})
    assert lines[0].split() == [
        "provider", "model", "context", "max-out", "thinking", "images", "key", "api"
    ]  # fmt: skip
    rows = [line.split() for line in lines[1:]]
    assert len(rows) == len(Models().list("groq"))
    assert {r[0] for r in rows} == {"groq"}
    assert {(r[6], r[7]) for r in rows} == {("yes", "openai-completions")}
    assert ["groq", "llama-3.3-70b-versatile", "131.1K", "32.8K", "no", "no"] in [
        r[:6] for r in rows
    ]


def test_list_models_marks_what_pitrio_cannot_use(
    env: dict[str, str], lacking_api: tuple[str, str]
) -> None:
    provider, api = lacking_api
    rows = [line.split() for line in _list([provider], env)[1:]]
    assert rows
    assert all(r[7:] == [api, "(not", "implemented)"] for r in rows)
    everything = _list([], env)
    assert len(everything) == 1 + 1336
    lacking = sum(m.api not in registered_apis() for m in Models().list())
    assert sum("(not implemented)" in line for line in everything) == lacking


def test_list_models_search_is_pis_fuzzy_search(env: dict[str, str]) -> None:
    model = Models().get("openrouter", "anthropic/claude-sonnet-4.5")
    assert model is not None
    assert matches("openrouter sonnet", model)
    assert matches("orouter/cl4.5", model)
    assert not matches("groq sonnet", model)
    lines = _list(["xai grok"], env)
    assert len(lines) > 1
    assert all(line.startswith("xai ") or "grok" in line for line in lines[1:])
    assert _list(["zzqqxx"], env) == ['No models matching "zzqqxx"']


def test_the_table_is_pis(env: dict[str, str], tmp_path: Path) -> None:
    """The first six columns are what ``pi --list-models openrouter`` prints, row for row
    (Pi lists the models it has a key for: OpenRouter's, with OPENROUTER_API_KEY)."""
    oracle = require_oracle()
    pi_env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path / "pi-home")}
    done = subprocess.run(
        [*pi_command(oracle), "--list-models", "openrouter"],
        env={**pi_env, "OPENROUTER_API_KEY": "sk-or"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    pi_rows = [line.split() for line in done.stdout.splitlines()]
    ours = [line.split() for line in _list(["openrouter"], {**env, "OPENROUTER_API_KEY": "k"})]
    assert pi_rows[0] == ours[0][:6]
    assert len(pi_rows) == len(ours) > 100
    # Pi sorts with localeCompare (ICU collation), pitrio by code point: same rows.
    assert sorted(r[:6] for r in ours[1:]) == sorted(pi_rows[1:])


def test_model_takes_every_catalog_entry(env: dict[str, str]) -> None:
    parser = build_parser()
    keyed = {**env, "DEEPSEEK_API_KEY": "dk", "ANTHROPIC_AUTH_TOKEN": "b", "ANTHROPIC_API_KEY": "a"}
    for spec, key, source in [
        ("deepseek/deepseek-v4-flash", "dk", "DEEPSEEK_API_KEY"),
        ("anthropic/claude-haiku-4-5", "a", "ANTHROPIC_API_KEY"),
    ]:
        args = parser.parse_args(["--model", spec, "-p", "hi"])
        settings = configure(parser, args, keyed, None, io.StringIO())
        assert f"{settings.model.provider}/{settings.model.id}" == spec
        assert settings.api_key == key
        assert settings.key_source == f"the environment variable {source}"


def test_provider_and_model_take_one_model_of_each_provider_and_api(
    env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``--provider P --model ID`` for a model of every (provider, API) pair of the catalog:
    the usable ones are chosen with the provider's key, the others refused naming the API."""
    from pitrio.providers import _ENV_KEYS

    keyed = {**env, **{n: n.lower() for names in _ENV_KEYS.values() for n in names}}
    keyed |= {"AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": "secret"}  # Bedrock
    firsts: dict[tuple[str, str], Model] = {}
    for model in Models().list():
        firsts.setdefault((model.provider, model.api), model)
    assert len(firsts) == 50
    parser = build_parser()
    usable = 0
    for (provider, api), model in firsts.items():
        args = parser.parse_args(["--provider", provider, "--model", model.id, "-p", "hi"])
        if api not in registered_apis():
            with pytest.raises(SystemExit):
                configure(parser, args, keyed, None, io.StringIO())
            assert f"the {api!r} API, which pitrio does not implement" in capsys.readouterr().err
            continue
        if provider not in _ENV_KEYS and provider != "amazon-bedrock":
            # a subscription login (openai-codex): no variable
            with pytest.raises(SystemExit):
                configure(parser, args, keyed, None, io.StringIO())
            assert f"no API key for provider {provider!r}" in capsys.readouterr().err
            usable += 1
            continue
        settings = configure(parser, args, keyed, None, io.StringIO())
        assert (settings.model.provider, settings.model.id) == (provider, model.id)
        if provider == "amazon-bedrock":  # AWS credentials are not a key
            assert settings.api_key == "<authenticated>"
        else:
            variable = next(n for n in _ENV_KEYS[provider] if n != "ANTHROPIC_AUTH_TOKEN")
            assert settings.api_key == variable.lower()
        usable += 1
    assert usable == sum(api in registered_apis() for _, api in firsts)


@pytest.mark.parametrize(
    ("argv", "chosen"),
    [
        (["--model", "openrouter/anthropic/claude-sonnet-4.5"], "anthropic/claude-sonnet-4.5"),
        (["--provider", "openrouter", "--model", "anthropic/claude-sonnet-4.5"], None),
        (["--provider", "nvidia", "--model", "nvidia/cosmos-reason2-8b"], None),
        (["--model", "nvidia/cosmos-reason2-8b"], "nvidia/cosmos-reason2-8b"),
        (["--model", "nvidia/nvidia/cosmos-reason2-8b"], "nvidia/cosmos-reason2-8b"),
    ],
)
def test_model_ids_with_slashes(env: dict[str, str], argv: list[str], chosen: str | None) -> None:
    """Ids that hold a slash (OpenRouter's, NVIDIA's ``nvidia/...``) are found with
    ``PROVIDER/ID`` and with ``--provider``; a leading ``PROVIDER/`` may be left out."""
    parser = build_parser()
    keyed = {**env, "OPENROUTER_API_KEY": "or", "NVIDIA_API_KEY": "nv"}
    settings = configure(parser, parser.parse_args([*argv, "-p", "hi"]), keyed, None, io.StringIO())
    want = chosen or argv[-1]
    assert settings.model.id == want
    assert Models().get(settings.model.provider, want) is not None


def test_a_model_pitrio_cannot_use_is_a_usage_error(
    env: dict[str, str], capsys: pytest.CaptureFixture[str], lacking_api: tuple[str, str]
) -> None:
    provider, api = lacking_api
    model = Models().list(provider)[0]
    status = main(["--model", f"{provider}/{model.id}", "-p", "hi"], env=env)
    assert status == 2
    err = capsys.readouterr().err
    assert f"{api!r} API, which pitrio does not implement yet" in err


def test_slash_model_lists_the_usable_models_with_a_key() -> None:
    text = _keyed_models({"GROQ_API_KEY": "g", "MISTRAL_API_KEY": "x"}, {"xai": "k"})
    names = text.split(": ", 1)[1].split(", ")
    usable = [m for m in Models().list() if m.api in registered_apis()]
    want = [f"{m.provider}/{m.id}" for m in usable if m.provider in ("groq", "mistral", "xai")]
    assert names == want
    assert any(n.startswith("mistral/") for n in names)  # mistral-conversations is there
    assert _keyed_models({}, {}).startswith("no catalog provider has a key")


def test_list_models_table_with_no_models() -> None:
    assert list_models_table([], "", {}, registered_apis()) == ['No models matching ""']
