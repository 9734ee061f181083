"""A ``google-vertex`` request: the Vertex AI endpoint, its credentials, the body.

The request side of pi-ai 0.85.0's ``api/google-vertex.js`` with what ``@google/genai``
1.52.0 does for a Vertex client (``ApiClient``, ``tModel``): the body is Gemini's
(:func:`pitrio.providers._google_generative_ai._payload.build_body`, which knows the
thinking difference of pi-ai's Vertex API: no Gemma 4 case), and the request goes to

- ``<model.base_url>[/v1]/publishers/google/models/<id>:streamGenerateContent?alt=sse``
  when the model names a base URL without ``{location}`` (``/v1`` unless a path segment
  already is a version);
- else, with an API key (``GOOGLE_CLOUD_API_KEY``), to
  ``https://aiplatform.googleapis.com/v1/publishers/google/models/<id>:...``;
- else (application default credentials, :mod:`._auth`) to
  ``https://<location>-aiplatform.googleapis.com/v1/projects/<project>/locations/<location>/
  publishers/google/models/<id>:...`` (``aiplatform.googleapis.com`` for ``global``,
  ``aiplatform.<us|eu>.rep.googleapis.com`` for the multi-regions).

The project is ``options.extra["project"]``, ``GOOGLE_CLOUD_PROJECT`` or
``GCLOUD_PROJECT``; the location ``options.extra["location"]`` or
``GOOGLE_CLOUD_LOCATION`` (``options.extra["env"]`` is read before ``os.environ``).
"""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import urlsplit

import attrs

from ..._model import Context, Model, StreamOptions
from .._google_generative_ai._payload import JSONObject, build_body, build_headers
from .._options import provider_env
from .._request import ProviderFailure

__all__ = ["VertexRequest", "build_request", "resolve_api_key", "stream_url"]

_CREDENTIALS_MARKER: Final = "gcp-vertex-credentials"
_PLACEHOLDER: Final = re.compile(r"^<[^>]+>$")
_VERSION_SEGMENT: Final = re.compile(r"^v\d+(?:beta\d*)?$")
_MULTI_REGIONS: Final = frozenset({"us", "eu"})


@attrs.frozen(kw_only=True)
class VertexRequest:
    """One ``streamGenerateContent`` request; ``adc``: it still needs an access token."""

    url: str
    headers: dict[str, str]
    body: JSONObject
    adc: bool


def resolve_api_key(options: StreamOptions) -> str | None:
    """The key to send, or ``None`` for application default credentials: no key,
    pi-ai's ``gcp-vertex-credentials`` marker, or a placeholder like
    ``<authenticated>``."""
    key = (options.api_key or "").strip()
    if not key or key == _CREDENTIALS_MARKER or _PLACEHOLDER.match(key):
        return None
    return key


def _extra(options: StreamOptions, name: str) -> str | None:
    value = options.extra.get(name)
    return value if isinstance(value, str) and value else None


def build_request(model: Model, context: Context, options: StreamOptions) -> VertexRequest:
    """The request pi-ai's ``streamSimple`` sends for these arguments (without the
    access token of application default credentials: ``adc`` says it is needed).

    Raises:
        ProviderFailure: application default credentials without a project or a
            location (pi-ai's texts).
        ValueError: a model or thinking-level mapping pi-ai rejects (pi-ai's texts).
    """
    body = build_body(model, context, options)
    api_key = resolve_api_key(options)
    project = location = ""
    if api_key is None:
        project = (
            _extra(options, "project")
            or provider_env("GOOGLE_CLOUD_PROJECT", options)
            or provider_env("GCLOUD_PROJECT", options)
            or ""
        )
        if not project:
            msg = (
                "Vertex AI requires a project ID. Set GOOGLE_CLOUD_PROJECT/GCLOUD_PROJECT "
                "or pass project in options."
            )
            raise ProviderFailure(msg)
        location = (
            _extra(options, "location") or provider_env("GOOGLE_CLOUD_LOCATION", options) or ""
        )
        if not location:
            msg = (
                "Vertex AI requires a location. Set GOOGLE_CLOUD_LOCATION or pass location "
                "in options."
            )
            raise ProviderFailure(msg)
    return VertexRequest(
        url=stream_url(model, api_key, project, location),
        headers=build_headers(model, api_key, options.headers),
        body=body,
        adc=api_key is None,
    )


def _model_path(model_id: str) -> str:
    """The SDK's ``tModel`` for Vertex."""
    if ".." in model_id or "?" in model_id or "&" in model_id:
        msg = "invalid model parameter"
        raise ValueError(msg)
    if model_id.startswith(("publishers/", "projects/", "models/")):
        return model_id
    if "/" in model_id:
        publisher, name = model_id.split("/")[:2]
        return f"publishers/{publisher}/models/{name}"
    return f"publishers/google/models/{model_id}"


def _includes_version(base_url: str) -> bool:
    return any(_VERSION_SEGMENT.match(part) for part in urlsplit(base_url).path.split("/"))


def stream_url(model: Model, api_key: str | None, project: str, location: str) -> str:
    """Where the request goes (module docstring)."""
    path = f"{_model_path(model.id)}:streamGenerateContent?alt=sse"
    custom = model.base_url.strip()
    if custom and "{location}" not in custom:
        base = custom.removesuffix("/")
        if not _includes_version(custom):
            base += "/v1"
        return f"{base}/{path}"
    if api_key is not None or location == "global":
        root = "https://aiplatform.googleapis.com"
    elif location in _MULTI_REGIONS:
        root = f"https://aiplatform.{location}.rep.googleapis.com"
    else:
        root = f"https://{location}-aiplatform.googleapis.com"
    if api_key is not None or path.startswith("projects/"):
        return f"{root}/v1/{path}"
    return f"{root}/v1/projects/{project}/locations/{location}/{path}"
