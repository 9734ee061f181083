"""Built-in models: pi-ai 0.85.0's generated catalog, every provider and model.

The data is ``_catalog.json`` beside this module, written by ``tools/gen_catalog.py``
from pi-ai's own ``models.generated.js`` (and ``providers/*.js``, ``env-api-keys.js``):
ids, names, APIs, base URLs, context windows, max output tokens, thinking-level maps,
compat switches, headers and costs (USD per million tokens, with price tiers). It is
read the first time :func:`builtin_models` (``Models()``) needs it, not at import.

Models whose API pitrio does not implement yet (Bedrock, Vertex, Azure and Codex
responses) are in the catalog too; streaming one ends with an error
naming the API (:func:`pitrio.providers.get_api`).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from .._model import Model, ModelCost
from ._output import register_cost_tiers

__all__ = ["builtin_models", "catalog_data"]

_DATA = Path(__file__).with_name("_catalog.json")


@functools.cache
def catalog_data() -> dict[str, Any]:
    """The parsed ``_catalog.json`` (read once; do not change it): ``piAiVersion``,
    ``providers`` (name, baseUrl, headers), ``envKeys``, ``specialEnv`` and ``models``
    (rows of ``fields``)."""
    data: dict[str, Any] = json.loads(_DATA.read_text(encoding="utf-8"))
    return data


def builtin_models() -> list[Model]:
    """The built-in models in pi-ai's order (providers alphabetically), each a fresh
    :class:`Model` with its own mappings (costs, being frozen, are shared)."""
    models = []
    for row in catalog_data()["models"]:
        provider, model_id, name, api, base_url, reasoning, inputs, cost = row[:8]
        window, max_tokens, levels, compat, headers = row[8:]
        model = Model(
            id=model_id,
            name=name,
            api=api,
            provider=provider,
            base_url=base_url,
            reasoning=reasoning,
            input=tuple(inputs),
            cost=_cost((cost["input"], cost["output"], cost["cacheRead"], cost["cacheWrite"])),
            context_window=window,
            max_tokens=max_tokens,
            thinking_level_map=None if levels is None else dict(levels),
            compat=None if compat is None else _copy(compat),
            headers=None if headers is None else dict(headers),
        )
        tiers = cost.get("tiers")
        if tiers:
            register_cost_tiers(model, tiers)
        models.append(model)
    return models


@functools.cache
def _cost(rates: tuple[float, float, float, float]) -> ModelCost:
    return ModelCost(input=rates[0], output=rates[1], cache_read=rates[2], cache_write=rates[3])


def _copy(compat: dict[str, Any]) -> dict[str, Any]:
    # Nested values (chatTemplateArgs, allowedFallbackModels) are copied too: a caller
    # changing its model's compat must not change the cached catalog.
    copied = dict(compat)
    for key, value in compat.items():
        if isinstance(value, (dict, list)):
            copied[key] = json.loads(json.dumps(value))
    return copied
