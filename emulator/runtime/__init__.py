"""The running emulator: :class:`Runtime` (its services, :mod:`emulator.runtime.core`), the units of work that
are the one way into its state (:mod:`~emulator.runtime.units`), and what it does beyond a request's
tenant: moving virtual time (:mod:`~emulator.runtime.moves`), scheduled actions
(:mod:`~emulator.runtime.actions`), state documents (:mod:`~emulator.runtime.documents`).
"""

from emulator.errors import Unavailable
from emulator.runtime.core import RecordingSwitch, RenderCache, Runtime, ScenarioLibrary
from emulator.runtime.moves import DEFAULT_RUN_SECONDS, MAX_STEPS, Wait
from emulator.runtime.units import ControlUnit, Undo, UnitOfWork

__all__ = ["DEFAULT_RUN_SECONDS", "MAX_STEPS", "ControlUnit", "RecordingSwitch", "RenderCache", "Runtime",
           "ScenarioLibrary", "Unavailable", "Undo", "UnitOfWork", "Wait"]
