"""``/login`` and ``/logout``, and Pi's ``auth.json`` in the command line's choice of key.

The credentials are Pi's (``~/.pi/agent/auth.json``, or under ``$PI_CODING_AGENT_DIR``;
:mod:`pitrio.providers.auth`), so a ``/login`` in ``pi`` serves pitrio and the other
way round. The order a provider's key is taken in is Pi's (``docs/providers.md``,
"Resolution Order"): ``--api-key``, then ``auth.json`` (an API key, or a login's
tokens, refreshed when they expire), then the environment; pitrio's own config file
(``[keys]``) comes last. ``/login`` runs one of pi-ai's subscription logins (Pi's
``showLoginDialog``; pitrio asks its questions on the prompt line, one per line), or
stores a provider's API key as Pi does (``{"type": "api_key", "key": ...}``), read with
the terminal's echo off and kept out of the line history; ``/logout`` removes a stored
credential. Texts are Pi's.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any, Final

import trio

from ._resources import agent_dir, resolve_config_value

if TYPE_CHECKING:
    from pitrio.providers.auth import AuthEvent, AuthFile, AuthPrompt, Credential

    from ._render import Renderer

__all__ = [
    "API_KEY_LOGINS",
    "LOGOUT_NOTHING",
    "TerminalLogin",
    "api_key_login",
    "api_key_login_provider",
    "auth_file",
    "has_stored_key",
    "login_command",
    "logout_command",
    "stored_credentials",
    "stored_key",
]

ANTHROPIC_SUBSCRIPTION_WARNING: Final = (
    "Anthropic subscription auth is active. Third-party harness usage draws from extra usage "
    "and is billed per token, not your Claude plan limits. Manage extra usage at "
    "https://claude.ai/settings/usage. Disable this warning with "
    '"warnings": {"anthropicExtraUsage": false} in settings.json.'
)
"""Pi's warning when Claude is used through a subscription login (its last sentence names
pitrio's way to turn it off: pitrio has no ``/settings``)."""


async def anthropic_subscription_warning(
    provider: str, api_key: str | None, env: Mapping[str, str], stored: Mapping[str, Any], cwd: str
) -> str | None:
    """Pi's ``maybeWarnAboutAnthropicSubscriptionAuth``: the warning, when ``provider`` is
    ``anthropic`` and its key is a login's (stored tokens, or an ``sk-ant-oat`` key) and
    Pi's settings do not turn it off. Checkpoints."""
    from pitrio.providers.auth import OAuthCredential

    from ._resources import read_settings

    if provider != "anthropic":
        await trio.lowlevel.checkpoint()
        return None
    oauth = isinstance(stored.get("anthropic"), OAuthCredential)
    if not oauth and not (api_key or "").startswith("sk-ant-oat"):
        await trio.lowlevel.checkpoint()
        return None
    settings = await trio.to_thread.run_sync(read_settings, cwd, env)
    warnings = settings.get("warnings")
    if isinstance(warnings, dict) and warnings.get("anthropicExtraUsage") is False:
        return None
    return ANTHROPIC_SUBSCRIPTION_WARNING


API_KEY_LOGINS: Final = {
    "ant-ling": "Ant Ling API key",
    "anthropic": "Anthropic API key",
    "azure-openai-responses": "Azure OpenAI API key",
    "baseten": "Baseten API key",
    "cerebras": "Cerebras API key",
    "deepseek": "DeepSeek API key",
    "fireworks": "Fireworks API key",
    "github-copilot": "GitHub Copilot token",
    "google": "Gemini API key",
    "groq": "Groq API key",
    "huggingface": "Hugging Face token",
    "kimi-coding": "Kimi API key",
    "minimax": "MiniMax API key",
    "minimax-cn": "MiniMax CN API key",
    "mistral": "Mistral API key",
    "moonshotai": "Moonshot AI API key",
    "moonshotai-cn": "Moonshot AI API key",
    "nvidia": "NVIDIA API key",
    "openai": "OpenAI API key",
    "opencode": "OpenCode API key",
    "opencode-go": "OpenCode API key",
    "openrouter": "OpenRouter API key",
    "qwen-token-plan": "Qwen Token Plan API key",
    "qwen-token-plan-cn": "Qwen Token Plan CN API key",
    "qwen-token-plan-individual": "Qwen Token Plan Individual API key",
    "radius": "Radius API key",
    "together": "Together API key",
    "vercel-ai-gateway": "Vercel AI Gateway API key",
    "xai": "xAI API key",
    "xiaomi": "Xiaomi API key",
    "xiaomi-token-plan-ams": "Xiaomi Token Plan AMS API key",
    "xiaomi-token-plan-cn": "Xiaomi Token Plan CN API key",
    "xiaomi-token-plan-sgp": "Xiaomi Token Plan SGP API key",
    "zai": "Z.AI API key",
    "zai-coding-cn": "Z.AI Coding CN API key",
}
"""The providers whose key ``/login`` can store, and the name pi-ai's ``envApiKeyAuth``
gives each (its prompt is ``Enter <name>``). Providers whose key needs more than one
answer (Cloudflare's account, Bedrock's and Vertex's credential choices) are not here."""

API_KEY_PREFIX: Final = "api-key"
"""``/login api-key PROVIDER``: store a key even where a subscription login exists."""


def api_key_login_provider(arg: str) -> str | None:
    """The provider whose API key ``/login ARG`` asks for (``api-key PROVIDER``, or a
    provider with no subscription login), else ``None``."""
    words = arg.split()
    if len(words) == 2 and words[0] == API_KEY_PREFIX:
        return words[1] if words[1] in API_KEY_LOGINS else None
    if len(words) == 1 and words[0] in API_KEY_LOGINS and _find(words[0]) is None:
        return words[0]
    return None


def provider_title(provider: str) -> str:
    """The provider's display name (pi-ai's), or its id."""
    from pitrio.providers._catalog import catalog_data

    found = catalog_data()["providers"].get(provider)
    if isinstance(found, dict) and isinstance(found.get("name"), str):
        return str(found["name"])
    return "Radius" if provider == "radius" else provider


LOGOUT_NOTHING: Final = (
    "No stored credentials to remove. /logout only removes credentials saved by /login; "
    "environment variables and models.json config are unchanged."
)


def auth_path(env: Mapping[str, str]) -> str:
    """Pi's ``auth.json``: in ``$PI_CODING_AGENT_DIR``, default ``~/.pi/agent``."""
    return os.path.join(agent_dir(env), "auth.json")


def auth_file(env: Mapping[str, str]) -> AuthFile:
    """Pi's ``auth.json`` for this environment, as a credential store."""
    from pitrio.providers.auth import AuthFile

    return AuthFile(auth_path(env))


def stored_credentials(env: Mapping[str, str]) -> dict[str, Any]:
    """The credentials in ``auth.json`` now (provider -> ``Credential``; none when it
    cannot be read: a request to such a provider then says why). Without the file the
    providers are not even imported."""
    if not os.path.exists(auth_path(env)):
        return {}
    from pitrio.providers.auth import CredentialStoreError

    try:
        return dict(auth_file(env).snapshot())
    except CredentialStoreError:
        return {}


def stored_key(
    provider: str, env: Mapping[str, str], stored: Mapping[str, Credential]
) -> tuple[str | None, str] | None:
    """``(key, source)`` of ``provider``'s stored credential: an API key as Pi resolves
    it (``$VAR`` with the entry's ``env`` first, ``!command``), or ``(None, ...)`` for a
    login's tokens (read and refreshed per request); ``None`` when nothing usable is
    stored."""
    from pitrio.providers.auth import ApiKeyCredential, OAuthCredential

    found = stored.get(provider)
    path = auth_path(env)
    if isinstance(found, OAuthCredential):
        return None, f"the login stored in {path}"
    if isinstance(found, ApiKeyCredential) and found.key:
        key = resolve_config_value(found.key, {**env, **(found.env or {})})
        if key:
            return key, f"the key stored in {path}"
    return None


def has_stored_key(provider: str, env: Mapping[str, str], stored: Mapping[str, Credential]) -> bool:
    """Whether ``auth.json`` gives ``provider`` a credential (without running a key's
    ``!command``: a command counts as a key, as Pi's ``list`` does)."""
    from pitrio.providers.auth import ApiKeyCredential, OAuthCredential

    found = stored.get(provider)
    if isinstance(found, OAuthCredential):
        return True
    if isinstance(found, ApiKeyCredential) and found.key:
        return found.key.startswith("!") or stored_key(provider, env, stored) is not None
    return False


class TerminalLogin:
    """A login's questions and messages on the interactive prompt (pitrio's
    :class:`~pitrio.providers.auth.LoginInteraction`): each question is a line of the
    renderer's, the next line typed (``ask``) is its answer."""

    def __init__(self, renderer: Renderer, ask: Callable[[], Awaitable[str]]) -> None:
        self.renderer = renderer
        self._ask = ask

    async def prompt(self, prompt: AuthPrompt) -> str:
        """Show ``prompt`` and return the next line typed (a ``select`` takes the
        option's number or id)."""
        if prompt.kind == "select":
            lines = [prompt.message]
            lines += [f"  {n}. {label}" for n, (_, label) in enumerate(prompt.options, 1)]
            self.renderer.say("\n".join(lines))
            while True:
                answer = (await self._ask()).strip()
                ids = [option_id for option_id, _ in prompt.options]
                if not answer:
                    return ids[0]  # the first option is the default, as Pi's selector
                if answer in ids:
                    return answer
                if answer.isdigit() and 1 <= int(answer) <= len(ids):
                    return ids[int(answer) - 1]
                self.renderer.note(f"Please answer 1 to {len(ids)}.", color="33")
        hint = f" [{prompt.placeholder}]" if prompt.placeholder and prompt.kind == "text" else ""
        self.renderer.say(prompt.message + hint)
        return await self._ask()

    def notify(self, event: AuthEvent) -> None:
        """Show a URL to open, a device code, or progress (all made visible, never
        obeyed: a device code's URL comes from the server)."""
        if event.kind == "auth_url":
            lines = [f"Open this URL in your browser: {event.url}"]
            if event.instructions:
                lines.append(event.instructions)
            self.renderer.say("\n".join(lines))
        elif event.kind == "device_code":
            self.renderer.say(f"Open {event.url} and enter the code: {event.user_code}")
        else:
            self.renderer.note(event.message)


def _find(arg: str) -> str | None:
    from pitrio.providers.auth import oauth_providers

    wanted = arg.strip().lower()
    for provider, name in oauth_providers().items():
        if wanted in (provider.lower(), name.lower()):
            return provider
    return None


async def login_command(
    renderer: Renderer,
    arg: str,
    env: Mapping[str, str],
    stored: MutableMapping[str, Credential],
    ask: Callable[[], Awaitable[str]],
    ask_secret: Callable[[], Awaitable[str | None]] | None = None,
) -> bool:
    """``/login [PROVIDER]``: without a provider, list the logins; with one, run its
    subscription login, or (a provider with none, or ``api-key PROVIDER``) read its API
    key with ``ask_secret`` (a line typed without echo, kept out of the history), and
    store the credential. Whether one was stored. Checkpoints; cancelling it (Ctrl-C)
    stores nothing. After a Radius login the gateway's models are fetched and kept."""
    import httpx

    from pitrio.providers.auth import AuthError, OAuthCredential, login, oauth_providers

    if not arg.strip():
        lines = ["Subscription logins (/login PROVIDER):"]
        for listed, title in oauth_providers().items():
            mark = "  (logged in)" if isinstance(stored.get(listed), OAuthCredential) else ""
            lines.append(f"  {listed:<16} {title}{mark}")
        lines.append(
            "API keys (/login PROVIDER, or /login api-key PROVIDER where a subscription "
            "login exists; typed without echo): " + ", ".join(API_KEY_LOGINS)
        )
        renderer.say("\n".join(lines))
        await trio.lowlevel.checkpoint()
        return False
    keyed = api_key_login_provider(arg)
    if keyed is not None:
        return await api_key_login(renderer, keyed, env, stored, ask_secret)
    provider = _find(arg)
    if provider is None:
        known = ", ".join(oauth_providers())
        renderer.error(
            f"/login: no subscription login for {arg.strip()!r}; there are: {known} "
            f"(API keys: /login {API_KEY_PREFIX} PROVIDER)"
        )
        await trio.lowlevel.checkpoint()
        return False
    name = oauth_providers()[provider]
    store = auth_file(env)
    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(30.0)) as client:
            credential = await login(provider, store, client, TerminalLogin(renderer, ask))
    except AuthError as exc:
        if str(exc) != "Login cancelled":
            renderer.error(f"Failed to login to {name}: {exc}")
        return False
    except OSError as exc:  # the callback port is taken
        renderer.error(f"Failed to login to {name}: {exc}")
        return False
    stored[provider] = credential
    renderer.say(f"Logged in to {name}. Credentials saved to {store.path}")
    if provider == "radius":
        await _gateway_models(renderer, store.path, credential.access, env)
    return True


async def _gateway_models(renderer: Renderer, path: str, key: str, env: Mapping[str, str]) -> None:
    """Fetch and keep Radius's models (pi-ai's ``refreshModels`` after a login), from
    the gateway the login used."""
    import httpx

    from pitrio.providers._auth import oauth_flow as flow_of
    from pitrio.providers._auth._radius import (
        RadiusOAuth,
        default_gateway,
        models_store_path,
        refresh_gateway_models,
    )
    from pitrio.providers.auth import AuthError

    flow = flow_of("radius")
    gateway = flow.url() if isinstance(flow, RadiusOAuth) and flow.gateway else None
    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(30.0)) as client:
            models = await refresh_gateway_models(
                client, key, models_store_path(path), gateway=gateway or default_gateway(env)
            )
    except AuthError as exc:
        renderer.error(f"{exc} (run /login radius again to retry)")
        return
    names = ", ".join(f"radius/{m.id}" for m in models) or "none"
    renderer.say(f"Radius models ({len(models)}): {names}")


async def api_key_login(
    renderer: Renderer,
    provider: str,
    env: Mapping[str, str],
    stored: MutableMapping[str, Credential],
    ask_secret: Callable[[], Awaitable[str | None]] | None,
) -> bool:
    """Pi's API-key login: ``Enter <name>``, the key read without echo, stored in
    ``auth.json`` as ``{"type": "api_key", "key": ...}`` (``0600``). Whether it was."""
    from pitrio.providers.auth import ApiKeyCredential, CredentialStoreError

    title = provider_title(provider)
    if ask_secret is None:
        renderer.error(
            f"/login {provider}: an API key can only be typed on a terminal; set the "
            "provider's environment variable or pass --api-key"
        )
        await trio.lowlevel.checkpoint()
        return False
    renderer.say(f"Enter {API_KEY_LOGINS[provider]}")
    key = (await ask_secret() or "").strip()
    if not key:
        renderer.error(f"No API key entered; nothing saved for {title}.")
        return False
    credential = ApiKeyCredential(key=key)

    async def put(_: Credential | None) -> Credential:
        await trio.lowlevel.checkpoint()
        return credential

    store = auth_file(env)
    try:
        await store.modify(provider, put)
    except CredentialStoreError as exc:
        renderer.error(f"Failed to save API key for {title}: {exc}")
        return False
    stored[provider] = credential
    renderer.say(f"Saved API key for {title}. Credentials saved to {store.path}")
    if provider == "radius":
        await _gateway_models(renderer, store.path, key, env)
    return True


async def logout_command(
    renderer: Renderer, arg: str, env: Mapping[str, str], stored: MutableMapping[str, Credential]
) -> None:
    """``/logout [PROVIDER]``: remove a stored credential (without a provider: list
    them). Checkpoints."""
    from pitrio.providers.auth import CredentialStoreError, logout, oauth_providers

    store = auth_file(env)
    try:
        entries = await store.list()
    except CredentialStoreError as exc:
        renderer.error(f"Could not read stored credentials: {exc}")
        return
    names = oauth_providers()
    wanted = arg.strip()
    if not entries:
        renderer.say(LOGOUT_NOTHING)
        return
    if not wanted:
        lines = ["Stored credentials (/logout PROVIDER removes one):"]
        lines += [f"  {p:<16} {names.get(p, p)} ({kind})" for p, kind in sorted(entries.items())]
        renderer.say("\n".join(lines))
        return
    provider = _find(wanted) or wanted
    if provider not in entries:
        known = ", ".join(sorted(entries))
        renderer.error(f"/logout: nothing stored for {wanted!r}; stored: {known}")
        return
    try:
        await logout(provider, store)
    except CredentialStoreError as exc:
        renderer.error(f"Logout failed: {exc}")
        return
    with contextlib.suppress(KeyError):
        del stored[provider]
    name = names.get(provider, provider)
    if entries[provider] == "oauth":
        renderer.say(f"Logged out of {name}")
    else:
        renderer.say(
            f"Removed stored API key for {name}. Environment variables and models.json "
            "config are unchanged."
        )
