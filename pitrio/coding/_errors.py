"""The coding tools' one exception."""

from __future__ import annotations

from .._errors import PitrioError

__all__ = ["CodingToolError"]


class CodingToolError(PitrioError):
    """A coding tool refused or failed; the text is what the model sees."""
