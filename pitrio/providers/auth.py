"""Subscription logins (OAuth) and Pi's credential store, ``auth.json``.

pitrio's counterpart of pi-ai 0.85.0's ``auth/`` and the coding agent's ``AuthStorage``:
the logins pi-ai implements (Anthropic Claude Pro/Max, ChatGPT Codex and OpenRouter by
browser with a loopback callback, GitHub Copilot, xAI and Kimi Code by device code), their
refresh, and the file ``pi`` keeps them in (``~/.pi/agent/auth.json``, or under
``$PI_CODING_AGENT_DIR``), so ``pi`` and pitrio share logins::

    store = AuthFile()                       # ~/.pi/agent/auth.json
    await login("anthropic", store, client, interaction)
    async with Models(credentials=store) as models:
        ...                                  # requests use the stored tokens

A request's key comes from, in order: the request's own ``api_key``, the stored
credential (an API key, or OAuth tokens refreshed when they expire within five
minutes: once, under the file's lock, even with several processes), the environment.
"""

from __future__ import annotations

from ._auth import (
    ApiKeyCredential as ApiKeyCredential,
    AuthError as AuthError,
    AuthEvent as AuthEvent,
    AuthFile as AuthFile,
    AuthPrompt as AuthPrompt,
    Credential as Credential,
    CredentialStore as CredentialStore,
    CredentialStoreError as CredentialStoreError,
    LoginError as LoginError,
    LoginInteraction as LoginInteraction,
    MemoryCredentialStore as MemoryCredentialStore,
    ModelAuth as ModelAuth,
    OAuthCredential as OAuthCredential,
    OAuthFlow as OAuthFlow,
    ResolvedAuth as ResolvedAuth,
    default_auth_path as default_auth_path,
    login as login,
    logout as logout,
    oauth_providers as oauth_providers,
    resolve_auth as resolve_auth,
)

__all__ = [
    "ApiKeyCredential",
    "AuthError",
    "AuthEvent",
    "AuthFile",
    "AuthPrompt",
    "Credential",
    "CredentialStore",
    "CredentialStoreError",
    "LoginError",
    "LoginInteraction",
    "MemoryCredentialStore",
    "ModelAuth",
    "OAuthCredential",
    "OAuthFlow",
    "ResolvedAuth",
    "default_auth_path",
    "login",
    "logout",
    "oauth_providers",
    "resolve_auth",
]
