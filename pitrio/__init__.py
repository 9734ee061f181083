"""pitrio: a Trio-native, structured-concurrency runtime for LLM agents (a port of Pi 0.85.0)."""

from __future__ import annotations

from . import _wire as wire
from ._events import *  # noqa: F403
from ._messages import *  # noqa: F403
from ._model import Context as Context, Model as Model, ModelCost as ModelCost, StreamFn as StreamFn, StreamOptions as StreamOptions
from ._signal import AbortSignal as AbortSignal
from ._stream import AssistantMessageEventStream as AssistantMessageEventStream, EventStream as EventStream
from ._wire import register_message_role as register_message_role

__version__ = "0.1.0"
