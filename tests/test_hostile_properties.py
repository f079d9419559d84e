"""The invariant of issue 26, as a property: whatever hostile requests a client sends, the server answers
each without a 5xx, and whatever it then holds it can export, and its export imports again.

Each example drives one emulator (realistic timing, manual clock) through a random sequence of requests
with hostile values where values enter: deep and odd free-form JSON (metadata, optimizer configs), huge
and out-of-range integers (``max_tokens``, ``num_samples``, seeds, replicas), clock jumps to the end of
time; then exports the state, imports it, and reads every list.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from emulator.clock import DEFAULT_MANUAL_START, MAX_TIME, Clock, rfc3339
from emulator.config import Config
from emulator.runtime import Runtime
from tests.conftest import make_client
from tests.helpers import BASE, RL, ce_sample

S = f"{RL}/training-sessions"


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value] if depth % 2 else {"k": value}
    return value


SCALARS = (st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=12)
           | st.floats(allow_nan=False, allow_infinity=False))
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                                          max_size=3), max_leaves=12)
FREE_FORM = st.dictionaries(st.text(max_size=6), JSON, max_size=3) | st.integers(1, 300).map(lambda d: {"d": _nested(d)})
HUGE = st.sampled_from([1, 16, 10**6, 2**31, 2**63 - 1, 2**63, 2**64 - 1, 10**17, 10**30])
INT64_TEXT = st.sampled_from(["0", "-1", str(2**63 - 1), str(2**63), str(-(2**63) - 1), "9" * 40, "007"])


@pytest.fixture(scope="module")
def hostile() -> Iterator[tuple[Runtime, TestClient]]:
    runtime = Runtime(Config(clock="manual", profile="realistic"))
    with make_client(runtime, token="hostile") as client:
        yield runtime, client


def _fresh(runtime: Runtime) -> None:
    runtime.store.reset()
    runtime.faults.clear()
    runtime.clock = Clock("manual", start=DEFAULT_MANUAL_START)


def _check(resp: Any) -> Any:
    assert resp.status_code < 500, resp.text[:500]
    return resp.json() if resp.headers.get("content-type", "").startswith("application/json") else None


def _ids(client: TestClient, path: str) -> list[str]:
    listed = client.get(path, params={"limit": 100})
    assert listed.status_code == 200, listed.text[:500]
    return [item["id"] for item in listed.json()["data"]]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_whatever_the_server_holds_it_exports_and_its_export_imports(
        hostile: tuple[Runtime, TestClient], data: st.DataObject) -> None:
    runtime, client = hostile
    _fresh(runtime)
    for _ in range(data.draw(st.integers(3, 12), label="steps")):
        action = data.draw(st.sampled_from(["resource", "session", "metadata", "sample", "train", "advance",
                                            "jump", "stop"]), label="action")
        resources, sessions = _ids(client, f"{RL}/model-resources"), _ids(client, S)
        if action == "resource":
            body: dict[str, Any] = {"base_model": BASE, "optimizer_config": {
                data.draw(st.sampled_from(["adam", "muon", "sgd"])): data.draw(FREE_FORM)}}
            if data.draw(st.booleans()):
                body["compute_config"] = {"num_generator_replicas": data.draw(HUGE)}
            _check(client.post(f"{RL}/model-resources", json=body))
        elif action == "session" and resources:
            body = {"model_resources_id": data.draw(st.sampled_from(resources)), "metadata": data.draw(FREE_FORM)}
            if data.draw(st.booleans()):
                body["lora_config"] = {"rank": 8, "seed": data.draw(INT64_TEXT | HUGE)}
            _check(client.post(S, json=body))
        elif action == "metadata" and sessions:
            _check(client.patch(f"{S}/{data.draw(st.sampled_from(sessions))}", json={"metadata": data.draw(FREE_FORM)}))
        elif action == "sample" and sessions:
            params = {"max_tokens": data.draw(HUGE), "seed": data.draw(INT64_TEXT | HUGE)}
            body = {"model_inputs": [{"chunks": [{"encoded_text": {"tokens": [1, 2, 3]}}]}],
                    "num_samples": data.draw(HUGE), "sampling_params": params}
            _check(client.post(f"{S}/{data.draw(st.sampled_from(sessions))}/operations/sample", json=body,
                               headers={"Idempotency-Key": data.draw(st.text("abc-", min_size=1, max_size=8))}))
        elif action == "train" and sessions:
            sid = data.draw(st.sampled_from(sessions))
            _check(client.post(f"{S}/{sid}/operations/forward-backward", headers={"Idempotency-Key": "fb"},
                               json={"loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}, "samples": [ce_sample([1, 2], [2, 3])]}))
            _check(client.post(f"{S}/{sid}/operations/optim-step", json={}, headers={"Idempotency-Key": "os"}))
        elif action == "advance":
            _check(client.post("/_emulator/clock/advance", json={"seconds": data.draw(st.floats(0, 1e12))}))
        elif action == "jump":
            at = data.draw(st.floats(MAX_TIME - 86_400 * 3, MAX_TIME))
            _check(client.post("/_emulator/clock", json={"now": rfc3339(at)}))
        elif action == "stop" and sessions:
            _check(client.post(f"{S}/{data.draw(st.sampled_from(sessions))}/stop"))
    exported = client.get("/_emulator/state")
    assert exported.status_code == 200, exported.text[:500]
    doc = exported.json()
    imported = client.put("/_emulator/state", json=doc)
    assert imported.status_code == 200, imported.text[:500]
    for path in (f"{RL}/model-resources", S, f"{RL}/checkpoints", "/_emulator/events"):
        assert client.get(path).status_code == 200, path
    again = client.get("/_emulator/state")
    assert again.status_code == 200 and again.json()["tenants"] == doc["tenants"]
