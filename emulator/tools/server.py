"""The app a server runs, composed from the configuration: the emulator, plus the tools it asks for.

``--scenario`` loads a scenario at start-up (through the app, as a client would), ``--defect`` (TEST ONLY) wraps the app in
:class:`~emulator.tools.defects.DefectsApp`, and ``--record`` wraps the outermost app, so a recording
holds exactly what the client saw.
"""

from __future__ import annotations

import asyncio

from emulator.app import build_app
from emulator.config import ConfigError
from emulator.http.asgi import ASGIApp
from emulator.runtime import Runtime
from emulator.tools import scenarios
from emulator.tools.defects import DefectsApp
from emulator.tools.recording import Recorder, RecordingApp


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
    if config.record_file:
        try:
            recorder = Recorder(config.record_file, runtime.clock.now)
        except OSError as exc:
            raise ConfigError(f"--record {config.record_file}: {exc}") from exc
        app = RecordingApp(app, recorder)
    return app
