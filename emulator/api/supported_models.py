"""Handler for the SupportedModels tag."""

from __future__ import annotations

from emulator.api.request import Reply, Request, stateless
from emulator.domain.catalog import CATALOG


@stateless
def get_supported_models(req: Request) -> Reply:
    return 200, {"data": [m.to_json() for m in CATALOG]}
