"""A live dashboard at ``/_emulator/ui``, for demos and for watching a client under test.

Emulates nothing of the real API. Per tenant: resources, sessions and operations on a virtual-time timeline,
loss curves and metrics, samples, checkpoints; for the whole emulator: the clock, fault rules, scenarios and a
live event stream. Static files in this package (nothing from the internet); tenants addressed by project id.
"""

from emulator.ui.server import UI_PATH, Dashboard

__all__ = ["UI_PATH", "Dashboard", "is_dashboard_path"]


def is_dashboard_path(path: str) -> bool:
    return path == UI_PATH or path.startswith(UI_PATH + "/")
