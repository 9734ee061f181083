"""``pitrio --list-models [SEARCH]``: the catalog as Pi's ``pi --list-models`` table.

Pi's columns (provider, model, context, max-out, thinking, images; sorted by provider,
then id; token counts as ``200K`` / ``1M``) and two of pitrio's: ``key`` (whether the
provider has a credential: a key in the environment or the config file, or one in Pi's
``auth.json``, an API key or a ``/login``'s tokens) and ``api`` (the wire API,
marked ``not implemented`` for the pi-ai APIs pitrio lacks). Pi lists only the models
it has credentials for; pitrio lists all of them. ``SEARCH`` is a provider's name (its
models only) or Pi's fuzzy search over ``provider id``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from pitrio._model import Model

__all__ = ["format_token_count", "list_models_table", "matches"]

_HEADERS = ("provider", "model", "context", "max-out", "thinking", "images", "key", "api")


def format_token_count(count: int) -> str:
    """Pi's ``formatTokenCount``: ``200000`` -> ``200K``, ``1048576`` -> ``1.0M``."""
    if count >= 1_000_000:
        millions = count / 1_000_000
        return f"{int(millions)}M" if millions % 1 == 0 else f"{_fixed1(millions)}M"
    if count >= 1_000:
        thousands = count / 1_000
        return f"{int(thousands)}K" if thousands % 1 == 0 else f"{_fixed1(thousands)}K"
    return str(count)


def _fixed1(value: float) -> str:
    # JavaScript's toFixed(1) rounds the exact binary value half away from zero.
    from decimal import ROUND_HALF_UP, Decimal

    return str(Decimal(value).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP))


def _subsequence(query: str, text: str) -> bool:
    position = 0
    for char in text:
        if position < len(query) and char == query[position]:
            position += 1
    return position == len(query)


def _token_matches(token: str, text: str) -> bool:
    # pi-tui's fuzzyMatch, as a yes/no: the token's letters in order, or with a
    # letters-digits token's halves swapped ("gpt5" finds "5gpt" and the other way).
    if _subsequence(token, text):
        return True
    swapped = re.fullmatch(r"([a-z]+)([0-9]+)|([0-9]+)([a-z]+)", token)
    if swapped is None:
        return False
    first, second = (swapped[1], swapped[2]) if swapped[1] else (swapped[3], swapped[4])
    return _subsequence(second + first, text)


def matches(search: str, model: Model) -> bool:
    """Whether ``model`` is found by Pi's fuzzy ``search`` (every token, split at spaces
    and slashes, fuzzily in ``provider id``, case-insensitively)."""
    text = f"{model.provider} {model.id}".lower()
    tokens = [t for t in re.split(r"[\s/]+", search.strip().lower()) if t]
    return all(_token_matches(token, text) for token in tokens)


def list_models_table(
    models: Sequence[Model], search: str, has_key: Mapping[str, bool], implemented: Sequence[str]
) -> list[str]:
    """The lines ``--list-models`` prints: ``models`` of the provider named ``search``
    (or found by it; all for ``""``), one row each under a header."""
    if any(m.provider == search for m in models):
        chosen = [m for m in models if m.provider == search]
    else:
        chosen = [m for m in models if matches(search, m)] if search.strip() else list(models)
    if not chosen:
        return [f'No models matching "{search}"']
    chosen.sort(key=lambda m: (m.provider, m.id))
    rows = [
        (
            m.provider,
            m.id,
            format_token_count(m.context_window),
            format_token_count(m.max_tokens),
            "yes" if m.reasoning else "no",
            "yes" if "image" in m.input else "no",
            "yes" if has_key.get(m.provider) else "no",
            m.api if m.api in implemented else f"{m.api} (not implemented)",
        )
        for m in chosen
    ]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(_HEADERS)]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in (_HEADERS, *rows)
    ]
