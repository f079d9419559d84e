"""The app a server runs, composed from the configuration: the emulator, plus the tools it asks for.

``--scenario`` loads a scenario at start-up (through the app, as a client would), ``--defect`` (TEST ONLY) wraps the app in
:class:`~emulator.tools.defects.DefectsApp`, and the recorder wraps the outermost app, so a recording
holds exactly what the client saw: from the start with ``--record``, or between
``POST /_emulator/recording/start`` and ``/stop``.
"""

from __future__ import annotations

import asyncio

from emulator.app import build_app
from emulator.config import ConfigError
from emulator.http.asgi import ASGIApp
from emulator.runtime import Runtime
from emulator.tools import scenarios
from emulator.tools.defects import DefectsApp
from emulator.tools.recording import RecordingApp, RecordingControl


def build_server_app(runtime: Runtime) -> ASGIApp:
    config = runtime.config
    app = build_app(runtime)
    runtime.scenarios = library = scenarios.Library(app, runtime)
    if config.defects:
        app = DefectsApp(app, config.defects)
    if config.scenario:
        try:
            asyncio.run(library.load(config.scenario))
        except scenarios.ScenarioError as exc:
            raise ConfigError(f"--scenario {config.scenario}: {exc}") from exc
    try:  # recording from the start with --record FILE; else switched on at run time (/_emulator/recording)
        control = RecordingControl(runtime.clock.now, config.record_file, recording=bool(config.record_file),
                                   canonical=config.record_canonical)
    except OSError as exc:
        raise ConfigError(f"--record {config.record_file}: {exc}") from exc
    runtime.recording = control
    return RecordingApp(app, control)
