"""The model layer: providers, the model catalog and the API registry (work in progress)."""

from __future__ import annotations
