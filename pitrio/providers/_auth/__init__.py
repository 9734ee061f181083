"""Subscription logins and stored credentials (pi-ai 0.85.0's ``auth/``; public names
in :mod:`pitrio.providers.auth`)."""

from __future__ import annotations

from ._errors import AuthError, CredentialStoreError, LoginError
from ._flow import AuthEvent, AuthPrompt, LoginInteraction, ModelAuth, OAuthFlow
from ._resolve import (
    ResolvedAuth,
    login,
    logout,
    oauth_flow,
    oauth_providers,
    resolve_auth,
    set_oauth_flow,
)
from ._store import (
    ApiKeyCredential,
    AuthFile,
    Credential,
    CredentialStore,
    MemoryCredentialStore,
    OAuthCredential,
    default_auth_path,
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
    "oauth_flow",
    "oauth_providers",
    "resolve_auth",
    "set_oauth_flow",
]
