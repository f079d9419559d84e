"""The type of a JSON value, for what the emulator keeps as the client sent it or shows as it computed it
(session metadata, operation outputs): read-only by type, so nothing changes one in place unseen.

At run time the alias is ``Any``: a decoder (msgspec) reads any JSON value for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    Json: TypeAlias = str | int | float | bool | None | Sequence["Json"] | Mapping[str, "Json"]
else:
    Json = Any

JsonObject: TypeAlias = Mapping[str, Json]

__all__ = ["Json", "JsonObject"]
