"""A live dashboard at ``/_emulator/ui``, for demos and for watching a client under test.

Shows, per tenant: model resources, sessions and operations with their statuses on a timeline in
virtual time, each session's loss curve (every operation that computes a loss, in order, the failed ones marked), the
metrics its losses returned (clip fractions, KL, ratio), its samples' lengths and stop reasons per
weights version, recent samples, checkpoints; and, for the whole emulator (every tenant): the virtual
clock with controls (advance, mode, speed), the fault rules (add, remove), scenario loading and a live
event stream (server-sent events). The start page names each tenant by the scenario loaded into it (or
the scenarios' public key) and its session names; no other API key is ever shown.

The page is static HTML and JavaScript shipped in this package (``static/``, with the uPlot chart
library vendored under ``static/vendor/`` with its licence); nothing loads from the internet. Its
actions call the control plane (``/_emulator/clock``, ``/_emulator/faults``, ``/_emulator/scenarios``)
like any other client, so the page can do nothing ``curl`` could not.

Tenants are addressed by project id, not by API key: the store keeps state per project, several keys
share a project under ``--tokens-file`` (one page, not one per key), and a project id in an address
bar or a screenshot gives nothing away, while an API key would. ``/_emulator/ui/api/lookup`` finds the
project of a key.

Limits: the views read the event log (the last 50,000 entries of all tenants) for timelines; only
the latest operations and samples are listed; the clock and the fault rules are global, shown on
every tenant's page.
"""

from emulator.ui.server import UI_PATH, Dashboard

__all__ = ["UI_PATH", "Dashboard", "is_dashboard_path"]


def is_dashboard_path(path: str) -> bool:
    return path == UI_PATH or path.startswith(UI_PATH + "/")
