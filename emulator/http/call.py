"""What the request path's steps learn about one request, handed from step to step (:mod:`emulator.http.pipeline`)."""

from __future__ import annotations

from typing import Any

from emulator.api.request import Principal


class Call:
    """One request on its way through the pipeline: routing fills ``op``, ``base`` and ``params``; auth the
    ``caller``; the fault rules what they counted (``taken``) and a state ``effect``; validation the parsed
    ``query`` and ``body`` (``parsed``: the body was read and parsed)."""

    __slots__ = ("op", "base", "params", "caller", "effect", "taken", "query", "body", "parsed")

    def __init__(self, op: str | None, base: str, params: dict[str, str]) -> None:
        self.op = op
        self.base = base
        self.params = params
        self.caller: Principal | None = None
        self.effect: dict[str, Any] | None = None
        self.taken: tuple[list[Any], int | None] | None = None
        self.query: dict[str, str] | None = None
        self.body: Any = None
        self.parsed = False
