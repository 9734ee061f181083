"""The model layer: HTTP providers, a model catalog and the API registry.

pitrio's counterpart of pi-ai 0.85.0. Its wire APIs (:func:`registered_apis`) are each a
stream function with one signature::

    def stream_<api>(client: httpx.AsyncClient, model: Model, context: Context,
                     options: StreamOptions) -> AssistantMessageEventStream

``openai-completions`` (OpenAI chat completions and every server that speaks it:
llama.cpp, vLLM, Ollama, LM Studio, OpenRouter, Groq, ...), ``anthropic-messages``,
``openai-responses``, ``google-generative-ai``, ``mistral-conversations``, ``pi-messages``,
``bedrock-converse-stream`` and the others of ``docs/providers.md``. The registry maps an
API name to its implementation, each imported the first time it is used.

:class:`Models` is what an application holds: it owns one ``httpx.AsyncClient``,
knows the models (the built-in catalog plus any you register), finds API keys, and
gives the agent its stream function::

    async with Models() as models:
        model = models.get("openai", "gpt-5.1")
        agent = Agent(stream_fn=models.stream_fn, model=model, ...)

    local = openai_compatible("http://127.0.0.1:8080/v1", "qwen2.5-7b-instruct")

A stream function never raises for provider failures: a missing key, an unknown API,
HTTP errors, malformed streams, timeouts and aborts all end the stream with an
``error`` event.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Final, TypeAlias, cast, final

import httpx

from .._errors import InvalidStateError, UnknownApiError, UsageError
from .._events import ErrorEvent
from .._messages import AssistantMessage, DeferredHandle, JSONValue
from .._model import Context, Model, ModelCost, StreamFn, StreamOptions
from .._stream import AssistantMessageEventStream
from ._options import MaxTokensClampedWarning as MaxTokensClampedWarning
from ._output import setup_error_message

if TYPE_CHECKING:
    from ._auth import CredentialStore

__all__ = [
    "ApiStreamFn",
    "MaxTokensClampedWarning",
    "Models",
    "UnknownApiError",
    "env_api_key",
    "find_env_keys",
    "get_api",
    "openai_compatible",
    "register_api",
    "registered_apis",
    "stream_simple",
]

ApiStreamFn: TypeAlias = Callable[
    [httpx.AsyncClient, Model, Context, StreamOptions], AssistantMessageEventStream
]
"""``(client, model, context, options) -> AssistantMessageEventStream``: one wire API."""

_StrList: TypeAlias = list[str]

_LAZY_APIS: dict[str, tuple[str, str]] = {
    "openai-completions": ("pitrio.providers._openai_completions", "stream_openai_completions"),
    "anthropic-messages": ("pitrio.providers._anthropic_messages", "stream_anthropic_messages"),
    "openai-responses": ("pitrio.providers._openai_responses", "stream_openai_responses"),
    "google-generative-ai": (
        "pitrio.providers._google_generative_ai",
        "stream_google_generative_ai",
    ),
    "mistral-conversations": (
        "pitrio.providers._mistral_conversations",
        "stream_mistral_conversations",
    ),
    "pi-messages": ("pitrio.providers._pi_messages", "stream_pi_messages"),
    "bedrock-converse-stream": (
        "pitrio.providers._bedrock_converse_stream",
        "stream_bedrock_converse_stream",
    ),
    "openai-codex-responses": (
        "pitrio.providers._openai_codex_responses",
        "stream_openai_codex_responses",
    ),
    "azure-openai-responses": (
        "pitrio.providers._azure_openai_responses",
        "stream_azure_openai_responses",
    ),
    "google-vertex": ("pitrio.providers._google_vertex", "stream_google_vertex"),
}
_APIS: dict[str, ApiStreamFn] = {}

_NOT_IMPLEMENTED_APIS: Final[Mapping[str, str]] = {
}
"""pi-ai's wire APIs that pitrio does not implement yet, with what they are: the
catalog has their models (so they can be listed and named), but streaming one ends
with an error naming the API unless :func:`register_api` gave it an implementation."""


FetchDeferredFn: TypeAlias = Callable[
    [httpx.AsyncClient, Model, DeferredHandle, StreamOptions, int], AssistantMessageEventStream
]
"""``(client, model, handle, options, wait_ms) -> stream``: fetch a deferred response."""
CancelDeferredFn: TypeAlias = Callable[
    [httpx.AsyncClient, Model, DeferredHandle, StreamOptions], Awaitable[None]
]
"""``(client, model, handle, options)``: cancel a deferred response (best effort)."""

_DEFERRED: dict[str, tuple[FetchDeferredFn, CancelDeferredFn]] = {}


def register_api(
    api: str,
    stream: ApiStreamFn,
    *,
    fetch_deferred: FetchDeferredFn | None = None,
    cancel_deferred: CancelDeferredFn | None = None,
) -> None:
    """Register (or replace) the implementation of the wire API ``api``.

    An API that supports deferred responses (pi-ai's protocol: a final message with
    stop reason ``deferred`` carrying a handle) also gives ``fetch_deferred`` and
    ``cancel_deferred``; :meth:`Models.fetch_deferred` and
    :meth:`Models.cancel_deferred` dispatch to them.
    """
    _APIS[api] = stream
    if (fetch_deferred is None) != (cancel_deferred is None):
        msg = "give both fetch_deferred and cancel_deferred, or neither"
        raise UsageError(msg)
    if fetch_deferred is not None and cancel_deferred is not None:
        _DEFERRED[api] = (fetch_deferred, cancel_deferred)
    else:
        _DEFERRED.pop(api, None)


def _deferred_api(model: Model) -> tuple[FetchDeferredFn, CancelDeferredFn]:
    found = _DEFERRED.get(model.api)
    if found is None and model.api == "openai-responses":
        from . import _deferred

        found = (_deferred.fetch_deferred, _deferred.cancel_deferred)
        _DEFERRED[model.api] = found
    if found is None:
        msg = f"Provider {model.provider} does not support deferred responses"
        raise UsageError(msg)
    return found


def registered_apis() -> list[str]:
    """The API names that have an implementation (registered or lazily importable)."""
    return sorted({*_APIS, *_LAZY_APIS})


def get_api(api: str) -> ApiStreamFn:
    """The implementation of ``api``, importing a built-in one on first use.

    Raises:
        UnknownApiError: no such API, or its module cannot be imported yet.
    """
    stream = _APIS.get(api)
    if stream is not None:
        return stream
    spec = _LAZY_APIS.get(api)
    if spec is None and api in _NOT_IMPLEMENTED_APIS:
        msg = (
            f"The {api!r} API ({_NOT_IMPLEMENTED_APIS[api]}) is not implemented in pitrio "
            f"yet; pitrio implements {', '.join(sorted(_LAZY_APIS))} (register_api() adds "
            "another)"
        )
        raise UnknownApiError(msg)
    if spec is None:
        msg = f"No API provider registered for api: {api}"
        raise UnknownApiError(msg)
    module_name, function_name = spec
    try:
        module = importlib.import_module(module_name)
        stream = cast("ApiStreamFn", getattr(module, function_name))
    except (ImportError, AttributeError) as exc:
        msg = f"The {api!r} API is not available: cannot load {module_name}.{function_name} ({exc})"
        raise UnknownApiError(msg) from exc
    _APIS[api] = stream
    return stream


def _error_stream(model: Model, text: str) -> AssistantMessageEventStream:
    message = setup_error_message(model, text)

    async def producer(stream: AssistantMessageEventStream) -> None:
        stream.push(ErrorEvent(reason="error", error=message))

    return AssistantMessageEventStream(producer)


def stream_simple(
    client: httpx.AsyncClient, model: Model, context: Context, options: StreamOptions
) -> AssistantMessageEventStream:
    """Stream one response from ``model`` through its API's implementation.

    pi-ai's lazy wrapper: any exception while setting the request up (an unknown API,
    a missing API key) becomes a stream with a lone ``error`` event.
    """
    try:
        return get_api(model.api)(client, model, context, options)
    except Exception as exc:
        return _error_stream(model, str(exc) or exc.__class__.__name__)


_ENV_KEYS: Mapping[str, tuple[str, ...]] = {
    "github-copilot": ("COPILOT_GITHUB_TOKEN",),
    "anthropic": ("ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_OAUTH_TOKEN", "ANTHROPIC_API_KEY"),
    "ant-ling": ("ANT_LING_API_KEY",),
    "qwen-token-plan": ("QWEN_TOKEN_PLAN_API_KEY",),
    "qwen-token-plan-cn": ("QWEN_TOKEN_PLAN_CN_API_KEY",),
    "qwen-token-plan-individual": ("QWEN_TOKEN_PLAN_API_KEY",),
    "openai": ("OPENAI_API_KEY",),
    "azure-openai-responses": ("AZURE_OPENAI_API_KEY",),
    "nvidia": ("NVIDIA_API_KEY",),
    "deepseek": ("DEEPSEEK_API_KEY",),
    "google": ("GEMINI_API_KEY",),
    "google-vertex": ("GOOGLE_CLOUD_API_KEY",),
    "groq": ("GROQ_API_KEY",),
    "cerebras": ("CEREBRAS_API_KEY",),
    "xai": ("XAI_API_KEY",),
    "radius": ("RADIUS_API_KEY",),
    "openrouter": ("OPENROUTER_API_KEY",),
    "vercel-ai-gateway": ("AI_GATEWAY_API_KEY",),
    "zai": ("ZAI_API_KEY",),
    "zai-coding-cn": ("ZAI_CODING_CN_API_KEY",),
    "mistral": ("MISTRAL_API_KEY",),
    "minimax": ("MINIMAX_API_KEY",),
    "minimax-cn": ("MINIMAX_CN_API_KEY",),
    "moonshotai": ("MOONSHOT_API_KEY",),
    "moonshotai-cn": ("MOONSHOT_API_KEY",),
    "huggingface": ("HF_TOKEN",),
    "fireworks": ("FIREWORKS_API_KEY",),
    "together": ("TOGETHER_API_KEY",),
    "baseten": ("BASETEN_API_KEY",),
    "opencode": ("OPENCODE_API_KEY",),
    "opencode-go": ("OPENCODE_API_KEY",),
    "kimi-coding": ("KIMI_API_KEY",),
    "cloudflare-workers-ai": ("CLOUDFLARE_API_KEY",),
    "cloudflare-ai-gateway": ("CLOUDFLARE_API_KEY",),
    "xiaomi": ("XIAOMI_API_KEY",),
    "xiaomi-token-plan-cn": ("XIAOMI_TOKEN_PLAN_CN_API_KEY",),
    "xiaomi-token-plan-ams": ("XIAOMI_TOKEN_PLAN_AMS_API_KEY",),
    "xiaomi-token-plan-sgp": ("XIAOMI_TOKEN_PLAN_SGP_API_KEY",),
}
"""pi-ai's ``getApiKeyEnvVars``: the variables holding each provider's key, in order
(the catalog tests check it against ``_catalog.json`` and pi-ai itself)."""

_BEARER_ONLY_ENV: Final = "ANTHROPIC_AUTH_TOKEN"
"""Counts as an Anthropic credential (:func:`find_env_keys`) but is never the API key:
pi-ai sends it as ``Authorization: Bearer``, which pitrio does not do yet."""

_AUTHENTICATED: Final = "<authenticated>"
"""pi-ai's marker key for credentials that are not a key (Vertex ADC, AWS)."""

_AWS_CREDENTIALS: Final[tuple[tuple[str, ...], ...]] = (
    ("AWS_PROFILE",),
    ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"),
    ("AWS_BEARER_TOKEN_BEDROCK",),
    ("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",),
    ("AWS_CONTAINER_CREDENTIALS_FULL_URI",),
    ("AWS_WEB_IDENTITY_TOKEN_FILE",),
)
"""Amazon Bedrock's credential sources (each needs all its variables): a profile, IAM
keys, a Bedrock bearer token, ECS task roles, IRSA."""


def find_env_keys(provider: str, env: Mapping[str, str] | None = None) -> list[str] | None:
    """The variables of ``provider``'s key that are set, in pi-ai's order, or ``None``
    (pi-ai's ``findEnvKeys``; includes ``ANTHROPIC_AUTH_TOKEN``)."""
    environ = os.environ if env is None else env
    found = [name for name in _ENV_KEYS.get(provider, ()) if environ.get(name)]
    return found or None


def env_api_key(provider: str, env: Mapping[str, str] | None = None) -> str | None:
    """The API key for ``provider`` from the environment (pi-ai's ``getEnvApiKey``):
    the first variable of its list that is set (``OPENAI_API_KEY``,
    ``ANTHROPIC_OAUTH_TOKEN`` then ``ANTHROPIC_API_KEY``, ``GEMINI_API_KEY``,
    ``GROQ_API_KEY``, ...), else ``"<authenticated>"`` when other credentials are there:
    Google Vertex's application default credentials with ``GOOGLE_CLOUD_PROJECT`` (or
    ``GCLOUD_PROJECT``) and ``GOOGLE_CLOUD_LOCATION``, or Amazon Bedrock's AWS profile,
    IAM keys, bearer token or role variables. ``env`` replaces ``os.environ``."""
    environ = os.environ if env is None else env
    for name in find_env_keys(provider, environ) or ():
        if name != _BEARER_ONLY_ENV:
            return environ[name]
    if provider == "google-vertex":
        project = environ.get("GOOGLE_CLOUD_PROJECT") or environ.get("GCLOUD_PROJECT")
        if _has_vertex_adc(environ) and project and environ.get("GOOGLE_CLOUD_LOCATION"):
            return _AUTHENTICATED
    if provider == "amazon-bedrock" and any(
        all(environ.get(name) for name in names) for names in _AWS_CREDENTIALS
    ):
        return _AUTHENTICATED
    return None


def _has_vertex_adc(environ: Mapping[str, str]) -> bool:
    explicit = environ.get("GOOGLE_APPLICATION_CREDENTIALS")
    if explicit:
        return os.path.exists(explicit)
    home = environ.get("HOME") or os.path.expanduser("~")
    return os.path.exists(
        os.path.join(home, ".config", "gcloud", "application_default_credentials.json")
    )


def _env_key_name(provider: str, env: Mapping[str, str] | None = None) -> str | None:
    # The variable env_api_key takes provider's key from (for messages), if any.
    environ = os.environ if env is None else env
    for name in find_env_keys(provider, environ) or ():
        if name != _BEARER_ONLY_ENV:
            return name
    return None


def openai_compatible(
    base_url: str,
    model_id: str,
    *,
    provider: str = "openai-compatible",
    name: str = "",
    reasoning: bool = False,
    images: bool = False,
    context_window: int = 128_000,
    max_tokens: int = 16_384,
    cost: ModelCost | None = None,
    headers: Mapping[str, str] | None = None,
    compat: Mapping[str, JSONValue] | None = None,
    thinking_level_map: Mapping[str, str | None] | None = None,
) -> Model:
    """A :class:`pitrio.Model` for an OpenAI-compatible chat-completions server.

    For llama.cpp (``llama-server``), vLLM, Ollama (``http://127.0.0.1:11434/v1``), LM
    Studio, OpenRouter, Groq and the like. ``base_url`` is the URL that
    ``/chat/completions`` is appended to (usually ending in ``/v1``). Servers that
    reject OpenAI-only request fields take ``compat`` switches, e.g.
    ``{"supportsStore": False, "maxTokensField": "max_tokens"}`` (see
    ``docs/providers.md``).
    """
    return Model(
        id=model_id,
        name=name or model_id,
        api="openai-completions",
        provider=provider,
        base_url=base_url.rstrip("/"),
        reasoning=reasoning,
        input=("text", "image") if images else ("text",),
        cost=cost or ModelCost(),
        context_window=context_window,
        max_tokens=max_tokens,
        headers=headers,
        compat=compat,
        thinking_level_map=thinking_level_map,
    )


@final
class Models:
    """The models an application uses, and the one HTTP client they share.

    Use it as an async context manager: entering opens the ``httpx.AsyncClient`` (unless
    you pass your own, which stays yours to close), leaving closes it. Streams must be
    consumed inside the block.

    Args:
        client: an existing client to use instead of opening one.
        get_api_key: ``provider -> key | None``, asked when a request has no
            ``options.api_key``; the environment (:func:`env_api_key`) comes after it.
        builtin: start with the built-in catalog of pi-ai's models (see :meth:`get`),
            and the models Radius's gateway gave after a login (kept in Pi's
            ``models-store.json`` beside ``auth.json``: ``radius/<id>``, ``pi-messages``).
        env: the environment to read keys from (default ``os.environ``).
        credentials: stored credentials (:class:`pitrio.providers.auth.AuthFile`, Pi's
            ``auth.json``): asked after ``get_api_key`` and before the environment, as
            pi-ai does; OAuth tokens are refreshed (once, under the store's lock) when
            they expire within five minutes, and may set headers or the base URL
            (GitHub Copilot). A failed refresh ends the request with an error naming
            ``/login``.
    """

    __slots__ = ("_client", "_credentials", "_env", "_get_api_key", "_models", "_owns_client")

    def __init__(
        self,
        *,
        client: httpx.AsyncClient | None = None,
        get_api_key: Callable[[str], str | None] | None = None,
        builtin: bool = True,
        env: Mapping[str, str] | None = None,
        credentials: CredentialStore | None = None,
    ) -> None:
        self._client = client
        self._owns_client = client is None
        self._get_api_key = get_api_key
        self._env = env
        self._credentials = credentials
        self._models: dict[tuple[str, str], Model] = {}
        if builtin:
            from ._catalog import builtin_models

            self.register(*builtin_models())
            self.register(*_runtime_models(env))

    async def __aenter__(self) -> Models:
        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(None, connect=60.0),
                limits=httpx.Limits(max_keepalive_connections=20, keepalive_expiry=30),
            )
            self._owns_client = True
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        client, self._client = self._client, None
        if client is not None and self._owns_client:
            await client.aclose()
        elif client is not None:
            self._client = client

    @property
    def client(self) -> httpx.AsyncClient:
        """The shared HTTP client (only while the ``async with`` block is open)."""
        if self._client is None:
            msg = "Models is not open: use `async with Models() as models:`"
            raise InvalidStateError(msg)
        return self._client

    # -- the catalog ---------------------------------------------------------------------

    def register(self, *models: Model) -> None:
        """Add models (a model with the same provider and id is replaced)."""
        for model in models:
            self._models[model.provider, model.id] = model

    def register_provider(
        self,
        provider: str,
        *,
        base_url: str,
        api: str,
        models: Iterable[Model],
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Add a provider's models, setting their provider, API, base URL and headers."""
        import attrs

        for model in models:
            self.register(
                attrs.evolve(
                    model,
                    provider=provider,
                    api=api,
                    base_url=base_url.rstrip("/"),
                    headers={**(headers or {}), **(model.headers or {})} or None,
                )
            )

    def get(self, provider: str, model_id: str) -> Model | None:
        """The model ``model_id`` of ``provider``, or ``None``."""
        return self._models.get((provider, model_id))

    def list(self, provider: str | None = None) -> list[Model]:
        """All models (of one provider if given), in registration order."""
        return [m for (p, _), m in self._models.items() if provider is None or p == provider]

    def providers(self) -> _StrList:
        """The provider names that have models."""
        return list(dict.fromkeys(p for p, _ in self._models))

    # -- streaming ---------------------------------------------------------------------

    def api_key_for(self, provider: str) -> str | None:
        """The key for ``provider``: ``get_api_key`` first, then the environment."""
        if self._get_api_key is not None:
            key = self._get_api_key(provider)
            if key:
                return key
        return env_api_key(provider, self._env)

    def stream_simple(
        self, model: Model, context: Context, options: StreamOptions | None = None
    ) -> AssistantMessageEventStream:
        """Stream one response; returns at once (the work happens when the stream is
        opened with ``async with``). Fills ``options.api_key`` when it is not given."""
        options = options if options is not None else StreamOptions()
        if not options.api_key and self._credentials is not None:
            override = self._get_api_key(model.provider) if self._get_api_key else None
            if not override:
                return self._stored_auth_stream(model, context, options)
            options = _with_api_key(options, override)
        if not options.api_key:
            key = self.api_key_for(model.provider)
            if key:
                options = _with_api_key(options, key)
        return stream_simple(self.client, model, context, options)

    def _stored_auth_stream(
        self, model: Model, context: Context, options: StreamOptions
    ) -> AssistantMessageEventStream:
        # The stored credential is read (and refreshed) when the stream is opened.
        from ._auth import AuthError, resolve_auth

        store, client, env = self._credentials, self.client, self._env

        def env_key(provider: str) -> tuple[str, str] | None:
            key = env_api_key(provider, env)
            return (key, _env_key_name(provider, env) or "environment") if key else None

        async def producer(stream: AssistantMessageEventStream) -> None:
            try:
                resolved = await resolve_auth(
                    model.provider, store=store, client=client, env_key=env_key
                )
            except AuthError as exc:
                stream.push(ErrorEvent(reason="error", error=setup_error_message(model, str(exc))))
                return
            keyed, request = model, options
            if resolved is not None:
                import attrs

                auth = resolved.auth
                if auth.base_url:
                    keyed = attrs.evolve(model, base_url=auth.base_url)
                if auth.api_key:
                    request = _with_api_key(request, auth.api_key)
                if auth.headers:
                    headers = {**auth.headers, **(request.headers or {})}
                    request = attrs.evolve(request, headers=headers)
            inner = stream_simple(client, keyed, context, request)
            async with inner:
                async for event in inner:
                    stream.push(event)

        return AssistantMessageEventStream(producer)

    @property
    def stream_fn(self) -> StreamFn:
        """:meth:`stream_simple` as the agent's ``StreamFn``."""
        return self.stream_simple

    # -- deferred responses ------------------------------------------------------------

    def stream_deferred(
        self,
        model: Model,
        handle: DeferredHandle,
        options: StreamOptions | None = None,
        *,
        wait_ms: int = 0,
    ) -> AssistantMessageEventStream:
        """Fetch a deferred response (pi-ai's ``streamDeferred``): a stream that ends
        with the final message, or again with stop reason ``deferred`` if the response
        is still pending after ``wait_ms`` (0: one status check).

        Raises:
            UsageError: the model's API has no deferred responses.
        """
        fetch, _ = _deferred_api(model)
        return fetch(self.client, model, handle, self._keyed(model, options), wait_ms)

    async def fetch_deferred(
        self,
        model: Model,
        handle: DeferredHandle,
        options: StreamOptions | None = None,
        *,
        wait_ms: int = 0,
    ) -> AssistantMessage:
        """The deferred response's message (final, or still ``deferred``). Checkpoints."""
        stream = self.stream_deferred(model, handle, options, wait_ms=wait_ms)
        async with stream:
            async for _ in stream:
                pass
        return await stream.result()

    async def cancel_deferred(
        self, model: Model, handle: DeferredHandle, options: StreamOptions | None = None
    ) -> None:
        """Cancel a deferred response (best effort; errors are the provider's)."""
        _, cancel = _deferred_api(model)
        await cancel(self.client, model, handle, self._keyed(model, options))

    def _keyed(self, model: Model, options: StreamOptions | None) -> StreamOptions:
        options = options if options is not None else StreamOptions()
        if not options.api_key:
            key = self.api_key_for(model.provider)
            if key:
                options = _with_api_key(options, key)
        return options


def _runtime_models(env: Mapping[str, str] | None) -> list[Model]:
    """The models a gateway gave at run time (Radius's, after a login), kept in Pi's
    ``models-store.json`` beside ``auth.json``."""
    from ._auth._radius import models_store_path, read_stored_models
    from ._auth._store import default_auth_path

    return read_stored_models(models_store_path(default_auth_path(env)))


def _with_api_key(options: StreamOptions, key: str) -> StreamOptions:
    import attrs

    return attrs.evolve(options, api_key=key)
