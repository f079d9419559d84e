"""Every named scenario loads (validated against the spec while loading) and seeds what it says."""

from __future__ import annotations

import asyncio

import pytest
from starlette.testclient import TestClient

from emulator.config import Config
from emulator.runtime import Runtime
from emulator.tools import scenarios
from tests.conftest import make_client
from tests.helpers import RL, advance, assert_error


@pytest.fixture
def demo(runtime: Runtime) -> TestClient:
    return make_client(runtime, "demo-key")


def load(client: TestClient, name: str) -> dict:
    resp = client.post(f"/_emulator/scenarios/{name}")
    assert resp.status_code == 200, resp.text
    return resp.json()


@pytest.mark.parametrize("name", sorted(scenarios.available()))
def test_scenario_loads(runtime: Runtime, name: str) -> None:
    with make_client(runtime, "demo-key") as c:
        result = load(c, name)
        assert result["scenario"] == name and result["token"] == "demo-key"
        assert scenarios.available()[name]  # documented


def test_scenario_list_and_unknown(client: TestClient) -> None:
    names = [s["name"] for s in client.get("/_emulator/scenarios").json()["data"]]
    assert {"empty-project", "two-sessions-step-40", "queued-resource", "capacity-errors",
            "about-to-expire"} <= set(names)
    assert_error(client.post("/_emulator/scenarios/nope"), 404)


def test_two_sessions_at_step_40(demo: TestClient) -> None:
    saved = load(demo, "two-sessions-step-40")["saved"]
    for key in ("s1", "s2"):
        s = demo.get(f"{RL}/training-sessions/{saved[key]}").json()
        assert s["status"] == "TRAINING_SESSION_STATUS_RUNNING" and s["step"] == "40"
        assert len(s["inference_checkpoints"]) == 1 and len(s["training_checkpoints"]) == 1
    assert len(demo.get(f"{RL}/checkpoints").json()["data"]) == 4


def test_queued_resource_counts_down(demo: TestClient) -> None:
    saved = load(demo, "queued-resource")["saved"]
    r = demo.get(f"{RL}/model-resources/{saved['queued']}").json()
    assert r["status"] == "MODEL_RESOURCES_STATUS_PENDING" and r["status_details"]["queue_position"] == 4
    advance(demo, 1)
    assert demo.get(f"{RL}/model-resources/{saved['queued']}").json()["status_details"]["queue_position"] == 3
    advance(demo, 3)
    assert demo.get(f"{RL}/model-resources/{saved['queued']}").json()["status"] == "MODEL_RESOURCES_STATUS_READY"


def test_capacity_errors(demo: TestClient) -> None:
    saved = load(demo, "capacity-errors")["saved"]
    failing = demo.post(f"{RL}/model-resources", json={"base_model": "Qwen/Qwen3.8-27B"}).json()
    got = demo.get(f"{RL}/model-resources/{failing['id']}").json()
    assert got["error"]["code"] == "MODEL_RESOURCES_ERROR_CODE_CAPACITY_WAIT_TIMEOUT"
    body = {"model_resources_id": saved["ready"]}
    assert [demo.post(f"{RL}/training-sessions", json=body).status_code for _ in range(3)] == [429, 429, 200]


def test_about_to_expire(demo: TestClient) -> None:
    saved = load(demo, "about-to-expire")["saved"]
    assert demo.get(f"{RL}/model-resources/{saved['resource']}").json()["status"] == "MODEL_RESOURCES_STATUS_READY"
    advance(demo, 10)
    assert demo.get(f"{RL}/model-resources/{saved['resource']}").json()["status"] in (
        "MODEL_RESOURCES_STATUS_STOPPING", "MODEL_RESOURCES_STATUS_STOPPED")
    assert demo.get(f"{RL}/training-sessions/{saved['session']}").json()["status"] == "TRAINING_SESSION_STATUS_EXPIRED"


def _load_file(runtime: Runtime, path: str) -> dict:
    from emulator.tools.server import build_server_app

    build_server_app(runtime)
    assert runtime.scenarios is not None
    return asyncio.run(runtime.scenarios.load(path))


def test_scenario_with_invalid_body_is_refused(tmp_path) -> None:
    (tmp_path / "broken.yaml").write_text("description: bad\nsteps:\n  - call: createModelResources\n"
                                          "    body: {lora_enabled: true}\n")
    with pytest.raises(scenarios.ScenarioError, match="base_model"):
        _load_file(Runtime(Config(clock="manual")), str(tmp_path / "broken.yaml"))


def test_serve_scenario_flag() -> None:
    from emulator.tools.server import build_server_app

    runtime = Runtime(Config(clock="manual", scenario="about-to-expire"))
    build_server_app(runtime)
    principal = runtime.principal_for("demo-key")
    state = runtime.store.get(principal.project) if principal else None
    assert state is not None and len(state.resources) == 1


def test_scenario_effect_sees_substituted_ids(tmp_path) -> None:
    (tmp_path / "failing.yaml").write_text(
        "description: a session that fails\nsteps:\n"
        "  - call: createModelResources\n    body: {base_model: Qwen/Qwen3.8-27B}\n    save: r\n"
        "  - call: getModelResources\n    path: {model_resources_id: '{r.id}'}\n"
        "  - call: createSession\n    body: {model_resources_id: '{r.id}'}\n    save: s\n"
        "  - call: getSession\n    path: {session_id: '{s.id}'}\n"
        "    effect: {session_error: TRAINING_SESSION_ERROR_CODE_SESSION_FAILED}\n")
    runtime = Runtime(Config(clock="manual"))
    saved = _load_file(runtime, str(tmp_path / "failing.yaml"))["saved"]
    with make_client(runtime, "demo-key") as c:
        s = c.get(f"{RL}/training-sessions/{saved['s']}").json()
    assert s["status"] == "TRAINING_SESSION_STATUS_ERROR"
