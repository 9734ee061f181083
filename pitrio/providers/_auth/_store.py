"""Stored credentials: Pi's ``auth.json`` (``~/.pi/agent/auth.json``) and its lock.

The file is the coding agent's (``dist/core/auth-storage.js``): one JSON object keyed by
provider id, each value ``{"type": "api_key", "key": ..., "env": {...}}`` or
``{"type": "oauth", "access": ..., "refresh": ..., "expires": <ms>, ...}`` (extra fields
such as Codex's ``accountId`` or Copilot's ``enterpriseUrl`` are kept), written as
``JSON.stringify(data, null, 2)``. Every write is a read-modify-write under the lock Pi
takes with ``proper-lockfile``: a directory ``auth.json.lock`` made with ``mkdir`` (atomic
on every file system), counted stale after 30 seconds. ``pi`` and pitrio therefore
exclude each other too. The file is replaced atomically (a ``0600`` temporary file
renamed over it) in a ``0700`` directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Final, Protocol, TypeAlias, final

import attrs
import trio

from ..._messages import JSONValue
from ._errors import CredentialStoreError

__all__ = [
    "ApiKeyCredential",
    "AuthFile",
    "Credential",
    "CredentialStore",
    "MemoryCredentialStore",
    "OAuthCredential",
    "default_auth_path",
]


@final
@attrs.frozen(kw_only=True)
class ApiKeyCredential:
    """A stored API key (``{"type": "api_key"}``): ``key`` as written (it may be
    ``$VAR`` or ``!command``, resolved when used) and provider-scoped ``env`` values."""

    key: str | None = None
    env: Mapping[str, str] | None = None


@final
@attrs.frozen(kw_only=True)
class OAuthCredential:
    """Stored OAuth tokens (``{"type": "oauth"}``): ``expires`` is milliseconds since
    the epoch (pi-ai's ``Date.now()`` clock); ``extra`` holds the flow's other fields
    (``accountId``, ``enterpriseUrl``, ``availableModelIds``...) as in the file."""

    access: str
    refresh: str
    expires: int
    extra: Mapping[str, JSONValue] = attrs.field(factory=dict)


Credential: TypeAlias = ApiKeyCredential | OAuthCredential
"""One provider's stored credential."""

ModifyFn: TypeAlias = Callable[[Credential | None], Awaitable[Credential | None]]


class CredentialStore(Protocol):
    """Where credentials live (pi-ai's ``CredentialStore``): keyed by provider id.

    :meth:`modify` is the only write: ``fn`` gets the current credential and returns
    the new one (``None``: leave it), all under the store's lock, so two refreshes of
    one token cannot both run.
    """

    async def read(self, provider: str) -> Credential | None:
        """The stored credential of ``provider`` (possibly expired), or ``None``."""
        ...

    async def list(self) -> dict[str, str]:
        """Provider id -> credential type (``"api_key"``/``"oauth"``), no secrets."""
        ...

    async def modify(self, provider: str, fn: ModifyFn) -> Credential | None:
        """Replace ``provider``'s credential with ``await fn(current)`` under the lock;
        returns the credential stored afterwards."""
        ...

    async def delete(self, provider: str) -> None:
        """Remove ``provider``'s credential (logout)."""
        ...


def default_auth_path(env: Mapping[str, str] | None = None) -> str:
    """Pi's ``auth.json``: ``$PI_CODING_AGENT_DIR/auth.json`` (``~`` expanded), default
    ``~/.pi/agent/auth.json``."""
    environ = os.environ if env is None else env
    home = environ.get("HOME") or os.path.expanduser("~")
    given = environ.get("PI_CODING_AGENT_DIR")
    if given:
        base = given.replace("~", home, 1) if given.startswith("~") else given
        return os.path.join(os.path.abspath(base), "auth.json")
    return os.path.join(home, ".pi", "agent", "auth.json")


def credential_from_json(provider: str, value: object, where: str) -> Credential:
    """A credential from its JSON form; :class:`CredentialStoreError` naming the
    provider and file when it is not one (the coding agent's validation)."""
    if isinstance(value, dict):
        kind = value.get("type")
        if kind == "api_key":
            key, env = value.get("key"), value.get("env")
            if (key is None or isinstance(key, str)) and (
                env is None
                or (isinstance(env, dict) and all(isinstance(v, str) for v in env.values()))
            ):
                return ApiKeyCredential(key=key, env=env)
        elif (
            kind == "oauth"
            and isinstance(value.get("access"), str)
            and isinstance(value.get("refresh"), str)
            and isinstance(value.get("expires"), int | float)
            and not isinstance(value.get("expires"), bool)
        ):
            extra = {
                k: v for k, v in value.items() if k not in ("type", "access", "refresh", "expires")
            }
            return OAuthCredential(
                access=value["access"],
                refresh=value["refresh"],
                expires=int(value["expires"]),
                extra=extra,
            )
    msg = (
        f'Invalid auth.json credential for provider "{provider}" in {where}: expected '
        '{"type": "api_key", "key": "..."} or {"type": "oauth", "access": "...", '
        '"refresh": "...", "expires": <ms>}; fix the entry or remove it with /logout'
    )
    raise CredentialStoreError(msg, provider=provider)


def credential_to_json(credential: Credential) -> dict[str, JSONValue]:
    """The JSON form of a credential, as the coding agent writes it."""
    if isinstance(credential, ApiKeyCredential):
        out: dict[str, JSONValue] = {"type": "api_key"}
        if credential.key is not None:
            out["key"] = credential.key
        if credential.env is not None:
            out["env"] = dict(credential.env)
        return out
    return {
        "type": "oauth",
        "refresh": credential.refresh,
        "access": credential.access,
        "expires": credential.expires,
        **credential.extra,
    }


_LOCK_STALE: Final = 30.0
"""proper-lockfile's ``stale`` as the coding agent sets it: a lock older is broken."""
_LOCK_MAX_DELAY: Final = 2.0


@final
class AuthFile:
    """Pi's ``auth.json`` as a :class:`CredentialStore` (the coding agent's
    ``AuthStorage`` over its ``FileAuthStorageBackend``).

    Args:
        path: the file; default :func:`default_auth_path` (``$PI_CODING_AGENT_DIR``).

    Every method reads the file afresh (another process may have written it). Blocking
    file calls run in a worker thread; each method checkpoints. The lock is held only
    for a read-modify-write (an OAuth refresh is bounded by its 15-second timeout,
    below the 30 seconds after which a lock counts as stale).
    """

    __slots__ = ("path",)

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = os.path.abspath(os.fspath(path)) if path is not None else default_auth_path()

    def __repr__(self) -> str:
        return f"AuthFile({self.path!r})"

    # -- reading ---------------------------------------------------------------------

    def _load(self) -> dict[str, object]:
        try:
            with open(self.path, encoding="utf-8-sig") as f:
                text = f.read()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            msg = f"Failed to read auth.json ({self.path}): {exc}"
            raise CredentialStoreError(msg, provider="") from None
        if not text.strip():
            return {}
        try:
            data = json.loads(text)
        except ValueError as exc:
            msg = (
                f"Failed to read auth.json ({self.path}): {exc}; fix the JSON or move the "
                "file away and log in again"
            )
            raise CredentialStoreError(msg, provider="") from None
        if not isinstance(data, dict):
            msg = f"Invalid auth.json ({self.path}): expected an object"
            raise CredentialStoreError(msg, provider="")
        return data

    async def read(self, provider: str) -> Credential | None:
        """The stored credential of ``provider``, or ``None``. Checkpoints."""
        data = await trio.to_thread.run_sync(self._load)
        value = data.get(provider)
        return None if value is None else credential_from_json(provider, value, self.path)

    def snapshot(self) -> dict[str, Credential]:
        """Every entry that is a credential, read now (blocking: for start-up code
        outside Trio, such as a command line choosing its model). Entries this version
        cannot read are left out; :meth:`read` names them.

        Raises:
            CredentialStoreError: the file is not a JSON object.
        """
        found: dict[str, Credential] = {}
        for provider, value in self._load().items():
            with contextlib.suppress(CredentialStoreError):
                found[provider] = credential_from_json(provider, value, self.path)
        return found

    async def list(self) -> dict[str, str]:
        """Provider id -> ``"api_key"``/``"oauth"`` for every entry. Checkpoints."""
        data = await trio.to_thread.run_sync(self._load)
        return {
            p: str(v.get("type")) for p, v in data.items() if isinstance(v, dict) and "type" in v
        }

    # -- writing ---------------------------------------------------------------------

    async def modify(self, provider: str, fn: ModifyFn) -> Credential | None:
        """Read, ``await fn(current)``, write, all under the lock. Checkpoints; a
        cancellation while ``fn`` runs leaves the file as it was and frees the lock."""
        async with self._locked():
            data = await trio.to_thread.run_sync(self._load)
            value = data.get(provider)
            current = None if value is None else credential_from_json(provider, value, self.path)
            new = await fn(current)
            if new is None:
                return current
            data[provider] = credential_to_json(new)
            await trio.to_thread.run_sync(self._write, data)
            return new

    async def delete(self, provider: str) -> None:
        """Remove ``provider``'s entry (the file stays, maybe ``{}``). Checkpoints."""
        async with self._locked():
            data = await trio.to_thread.run_sync(self._load)
            if data.pop(provider, None) is not None:
                await trio.to_thread.run_sync(self._write, data)

    def _write(self, data: Mapping[str, object]) -> None:
        text = json.dumps(data, indent=2, ensure_ascii=False)
        directory = os.path.dirname(self.path)
        temp = f"{self.path}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.write(fd, text.encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temp, self.path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            msg = f"Failed to write auth.json ({self.path}): {exc}"
            raise CredentialStoreError(msg, provider="") from None
        with contextlib.suppress(OSError):
            dir_fd = os.open(directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)

    # -- the lock --------------------------------------------------------------------

    def _try_lock(self) -> bool:
        os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
        lock = self.path + ".lock"
        try:
            os.mkdir(lock)
        except FileExistsError:
            try:
                age = time.time() - os.stat(lock).st_mtime
            except FileNotFoundError:
                return False  # released meanwhile: the caller retries at once
            if age > _LOCK_STALE:
                # proper-lockfile's stale rule: the holder died; break it and retry
                with contextlib.suppress(OSError):
                    os.rmdir(lock)
            return False
        return True

    def _unlock(self) -> None:
        with contextlib.suppress(OSError):
            os.rmdir(self.path + ".lock")

    def _locked(self) -> _FileLock:
        return _FileLock(self)


@final
class _FileLock:
    """``async with``: ``auth.json.lock`` taken (retrying with the coding agent's
    backoff until the 30-second stale time passes) and removed on the way out."""

    __slots__ = ("_file",)

    def __init__(self, file: AuthFile) -> None:
        self._file = file

    async def __aenter__(self) -> None:
        deadline = trio.current_time() + _LOCK_STALE + 1.0
        retry = 0
        while True:
            try:
                taken = await trio.to_thread.run_sync(self._file._try_lock)
            except OSError as exc:
                msg = f"Cannot lock auth.json ({self._file.path}.lock): {exc}"
                raise CredentialStoreError(msg, provider="") from None
            if taken:
                return
            if trio.current_time() >= deadline:
                msg = (
                    f"auth.json is locked ({self._file.path}.lock) and the lock is not "
                    "released; if no pi or pitrio is running, remove that directory"
                )
                raise CredentialStoreError(msg, provider="")
            base = min(0.01 * 2**retry, _LOCK_MAX_DELAY / 2)
            retry += 1
            await trio.sleep(base * (1 + secrets.randbelow(1000) / 1000))

    async def __aexit__(self, *_: object) -> None:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(self._file._unlock)


@final
class MemoryCredentialStore:
    """A :class:`CredentialStore` in memory (pi-ai's ``InMemoryCredentialStore``): for
    tests and applications that persist credentials their own way. Writes of one
    provider are serialised by a lock."""

    __slots__ = ("_credentials", "_locks")

    def __init__(self, credentials: Mapping[str, Credential] | None = None) -> None:
        self._credentials: dict[str, Credential] = dict(credentials or {})
        self._locks: dict[str, trio.Lock] = {}

    async def read(self, provider: str) -> Credential | None:
        """The credential of ``provider``, or ``None``. Checkpoints."""
        await trio.lowlevel.checkpoint()
        return self._credentials.get(provider)

    async def list(self) -> dict[str, str]:
        """Provider id -> ``"api_key"``/``"oauth"``. Checkpoints."""
        await trio.lowlevel.checkpoint()
        return {
            p: "api_key" if isinstance(c, ApiKeyCredential) else "oauth"
            for p, c in self._credentials.items()
        }

    async def modify(self, provider: str, fn: ModifyFn) -> Credential | None:
        """``await fn(current)`` stored, one call per provider at a time. Checkpoints."""
        async with self._locks.setdefault(provider, trio.Lock()):
            current = self._credentials.get(provider)
            new = await fn(current)
            if new is None:
                return current
            self._credentials[provider] = new
            return new

    async def delete(self, provider: str) -> None:
        """Remove ``provider``'s credential. Checkpoints."""
        async with self._locks.setdefault(provider, trio.Lock()):
            self._credentials.pop(provider, None)
