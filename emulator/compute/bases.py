"""The base models of one runtime (numpy-free: a runtime holds one from start-up; numpy loads on first use)."""

from __future__ import annotations

from typing import Any


class BaseModels:
    """The base models one ``Runtime`` has built, by (seed, vocabulary, end token): every session on a base
    model shares its instance, so a row is computed once for all of them. Owned by the runtime (tenants
    reach it through their ``Models``), so two emulators in one process share nothing. At most ``limit``
    are kept (the oldest goes first). :func:`emulator.compute.base.base_model` builds what is missing."""

    __slots__ = ("_models", "limit")

    def __init__(self, limit: int = 64) -> None:
        self._models: dict[tuple[int, int, int], Any] = {}   # -> compute.base.BaseModel
        self.limit = limit

    def get(self, key: tuple[int, int, int]) -> Any:
        return self._models.get(key)

    def add(self, key: tuple[int, int, int], model: Any) -> None:
        if len(self._models) >= self.limit:
            del self._models[next(iter(self._models))]
        self._models[key] = model

    def __len__(self) -> int:
        return len(self._models)


__all__ = ["BaseModels"]
