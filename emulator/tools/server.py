"""The app a server runs, composed from the configuration: the emulator, plus the tools it asks for.

``--scenario`` loads a scenario at start-up (through the app), ``--defect`` (TEST ONLY) wraps the app in
:class:`~emulator.tools.defects.DefectsApp`, and the recorder wraps the outermost app, so a recording holds
exactly what the client saw (from the start with ``--record``, or between ``.../recording/start`` and ``/stop``).
"""

from __future__ import annotations

import asyncio

from emulator.app import build_app
from emulator.config import Config, ConfigError
from emulator.http.asgi import ASGIApp
from emulator.runtime import Runtime
from emulator.tenancy import Tenancy
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


def working_key(config: Config) -> tuple[str, str | None]:
    """An API key that works against a server of this configuration, and why when it is not just any key:
    the tenant ``--scenario`` filled, else the first key of ``--tokens-file`` (any other is refused)."""
    if config.scenario:
        return scenarios.token(config.scenario), f"the tenant --scenario {config.scenario} filled"
    keys = Tenancy.from_config(config.tokens_file, None).keys
    if keys:
        return keys[0], f"one of the {len(keys)} keys of --tokens-file {config.tokens_file}; any other key is refused"
    return "any-key", None
