"""Hypothesis state machine: random calls and clock advances never break the lifecycle rules.

Driven at the domain layer (no HTTP) with the realistic profile, so a few hundred sequences run in
seconds. After every step, for every object: the status moved only along documented edges (several
may happen in one clock advance, so the new status must be reachable), terminal states never
revert, ``step`` never decreases, ``updated_at >= created_at``.
"""

from __future__ import annotations

from enum import StrEnum

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from emulator.config import Config
from emulator.domain import model_resources, operations, sessions
from emulator.domain.kinds import KINDS
from emulator.errors import EmulatorError
from emulator.runtime import Runtime
from emulator.store import records
from emulator.store.records import (
    TERMINAL,
    TRANSITIONS,
    OperationStatus,
    ResourceStatus,
    SessionStatus,
)


def reachable(enum_cls: type[StrEnum], old: str, new: str) -> bool:
    table = TRANSITIONS[enum_cls]
    seen, frontier = {enum_cls(old)}, [enum_cls(old)]
    while frontier:
        for nxt in table[frontier.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                frontier.append(nxt)
    return enum_cls(new) in seen


class LifecycleMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.runtime = Runtime(Config(clock="manual", profile="realistic"))
        self.principal = self.runtime.principal_for("prop")
        self.seen: dict[str, tuple[type[StrEnum], str, int]] = {}
        self.resource_ids: list[str] = []
        self.session_ids: list[str] = []

    def _tx(self, fn):  # type: ignore[no-untyped-def]
        with self.runtime.unit_of_work(self.principal, write=True) as (state, ctx):
            try:
                return fn(state, ctx)
            except EmulatorError:
                return None

    @rule(timeout=st.sampled_from([300, 600, 3600]))
    def create_resource(self, timeout: int) -> None:
        body = model_resources.CreateRequest(base_model="Qwen/Qwen3.5-4B", inactive_timeout=timeout)
        r = self._tx(lambda s, c: model_resources.create(s, c, body))
        if r is not None:
            self.resource_ids.append(r.id)

    @precondition(lambda self: self.resource_ids)
    @rule(data=st.data())
    def create_session(self, data: st.DataObject) -> None:
        rid = data.draw(st.sampled_from(self.resource_ids))
        s = self._tx(lambda st_, c: sessions.create(st_, c, sessions.CreateRequest(model_resources_id=rid)))
        if s is not None:
            self.session_ids.append(s.id)

    @precondition(lambda self: self.session_ids)
    @rule(data=st.data(), kind=st.sampled_from(["optim-step", "weights-sync", "training-checkpoint"]))
    def submit(self, data: st.DataObject, kind: str) -> None:
        sid = data.draw(st.sampled_from(self.session_ids))
        body = {"weight_sync_type": "WEIGHT_SYNC_TYPE_SYNCHRONOUS"} if kind == "weights-sync" else {}
        key = f"k{data.draw(st.integers(0, 3))}"
        request = KINDS[kind].parse(body)
        self._tx(lambda s, c: operations.submit(s, c, sid, KINDS[kind], request, operations.body_hash(body), key))

    @precondition(lambda self: self.session_ids)
    @rule(data=st.data())
    def stop_session(self, data: st.DataObject) -> None:
        sid = data.draw(st.sampled_from(self.session_ids))
        self._tx(lambda s, c: sessions.stop(s, c, sid))

    @precondition(lambda self: self.resource_ids)
    @rule(data=st.data(), force=st.booleans())
    def stop_resource(self, data: st.DataObject, force: bool) -> None:
        rid = data.draw(st.sampled_from(self.resource_ids))
        self._tx(lambda s, c: model_resources.stop(s, c, rid, force))

    @precondition(lambda self: self.resource_ids)
    @rule(data=st.data(), seconds=st.integers(60, 7200))
    def extend(self, data: st.DataObject, seconds: int) -> None:
        rid = data.draw(st.sampled_from(self.resource_ids))
        self._tx(lambda s, c: model_resources.extend_expiry(s, c, rid, seconds))

    @rule(seconds=st.sampled_from([0.5, 1, 5, 30, 60, 300, 1800, 4000]))
    def advance(self, seconds: float) -> None:
        self.runtime.clock.advance(seconds)

    @invariant()
    def lifecycle_rules_hold(self) -> None:
        def check(state, ctx):  # type: ignore[no-untyped-def]
            tables = ((state.resources, ResourceStatus), (state.sessions, SessionStatus),
                      (state.operations, OperationStatus))
            for table, enum_cls in tables:
                for obj in table.values():
                    assert obj.updated_at >= obj.created_at, obj
                    step = getattr(obj, "step", 0)
                    prev = self.seen.get(obj.id)
                    if prev is not None:
                        _, old_status, old_step = prev
                        assert reachable(enum_cls, old_status, obj.status), (obj.id, old_status, obj.status)
                        if enum_cls(old_status) in TERMINAL[enum_cls]:
                            assert obj.status == old_status, (obj.id, old_status, obj.status)
                        assert step >= old_step, (obj.id, old_step, step)
                    self.seen[obj.id] = (enum_cls, obj.status, step)
            for r in state.resources.values():
                active = [state.sessions[s] for s in state.sessions_of.get(r.id, ()) if state.sessions[s].status in
                          ("TRAINING_SESSION_STATUS_CREATING", "TRAINING_SESSION_STATUS_RUNNING")]
                if r.status in ("MODEL_RESOURCES_STATUS_STOPPED", "MODEL_RESOURCES_STATUS_ERROR"):
                    assert not active, (r.id, r.status, [s.status for s in active])
                assert state.inflight.get(r.id, 0) >= 0

        self._tx(check)


LifecycleMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None,
                                              suppress_health_check=[HealthCheck.too_slow])
TestLifecycle = LifecycleMachine.TestCase


def test_check_edge_takes_stored_statuses_and_refuses_undocumented_edges() -> None:
    """Records store their status as a plain string; ``check_edge`` looks it up as such (no enum built)."""
    for enum_cls, table in TRANSITIONS.items():
        for old, allowed in table.items():
            for new in enum_cls:
                stored = str(old._value_)  # what a record holds
                assert type(stored) is str
                if new in allowed:
                    records.check_edge(stored, new)
                else:
                    with pytest.raises(records.IllegalTransition, match=f"^{stored} -> {new._value_} is not a documented"):
                        records.check_edge(stored, new)
    with pytest.raises(records.IllegalTransition):
        records.check_edge("NOT_A_STATUS", SessionStatus.RUNNING)
