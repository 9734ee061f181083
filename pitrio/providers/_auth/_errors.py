"""The errors of logins and stored credentials (pi-ai's ``ModelsError`` with the codes
``auth`` and ``oauth``, and the errors its OAuth flows throw)."""

from __future__ import annotations

from ..._errors import ProviderError

__all__ = ["AuthError", "CredentialStoreError", "LoginError"]


class AuthError(ProviderError):
    """A provider's credentials cannot be resolved: the OAuth refresh failed (the text
    names ``/login``), or the store could not be read. Inside a run it never escapes:
    the request ends with an error message carrying this text."""

    def __init__(self, message: str, *, provider: str) -> None:
        super().__init__(message)
        self.provider = provider


class CredentialStoreError(AuthError):
    """``auth.json`` cannot be read or written (not JSON, a bad entry, a lock that
    cannot be taken); the text names the file."""


class LoginError(AuthError):
    """A login did not complete: cancelled, timed out, a state mismatch (CSRF), or an
    OAuth server's answer that cannot be used. The text is pi-ai's."""
