"""What the request path's steps learn about one request, handed from step to step (:mod:`emulator.http.pipeline`)."""

from __future__ import annotations

from typing import Any

import msgspec

from emulator.api.request import Principal


class Call(msgspec.Struct, gc=False):
    """One request on its way through the pipeline: routing fills ``op``, ``base`` and ``params``; auth the
    ``caller``; the fault rules what they counted (``taken``) and a state ``effect``; validation the parsed
    ``query`` and ``body`` (``parsed``: the body was read and parsed).

    (A msgspec Struct, built in C: one is made per request. Nothing it holds refers back to it, so the
    collector need not track it.)"""

    op: str | None
    base: str
    params: dict[str, str]
    caller: Principal | None = None
    effect: dict[str, Any] | None = None
    taken: tuple[list[Any], int | None] | None = None
    query: dict[str, str] | None = None
    body: Any = None
    parsed: bool = False
