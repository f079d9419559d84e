"""What a new user meets first (issue 10): start-up errors, empty control-plane bodies, docs, the access
log, validation messages, fault files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from emulator.config import Config, ConfigError
from emulator.runtime import Runtime
from tests.conftest import make_client
from tests.helpers import RL, assert_error, create_resource

ROOT = Path(__file__).resolve().parent.parent


def _serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # No --port: EMULATOR_PORT must be read. Every case fails before binding, so the call returns.
    return subprocess.run([sys.executable, "-m", "emulator", "serve", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})})


@pytest.mark.parametrize(("args", "env", "names"), [
    (["--log-level", "bogus"], {}, "--log-level"),
    ([], {"EMULATOR_PORT": "abc"}, "EMULATOR_PORT"),
    (["--speed", "nan"], {}, "--speed"),
    (["--clock", "sundial"], {}, "--clock"),
])
def test_serve_bad_option_is_one_line_and_exit_2(args: list[str], env: dict[str, str], names: str) -> None:
    proc = _serve(*args, env=env)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and names in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_serve_help_explains_log_level() -> None:
    proc = subprocess.run([sys.executable, "-m", "emulator", "serve", "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())  # argparse wraps lines
    assert "--log-level" in text and "critical, error, warning, info, debug, trace" in text
    assert "--access-log" in text


def test_state_file_in_a_missing_directory_is_created(tmp_path: Path) -> None:
    state_file = tmp_path / ".state" / "nested" / "emulator.json"
    runtime = Runtime(Config(clock="manual", state_file=str(state_file)))
    with make_client(runtime) as client:
        create_resource(client)
    assert state_file.exists() and state_file.stat().st_size > 0


@pytest.mark.parametrize("path", ["/_emulator/reset", "/_emulator/clock", "/_emulator/seed"])
def test_control_plane_post_with_optional_fields_accepts_no_body(client: TestClient, path: str) -> None:
    resp = client.post(path)  # like `curl -X POST URL`: no body, no Content-Type
    assert resp.status_code == 200, resp.text


def test_admin_reset_without_body_forgets_everything(client: TestClient) -> None:
    r = create_resource(client)
    assert client.post("/_emulator/reset").status_code == 200
    assert_error(client.get(f"{RL}/model-resources/{r['id']}"), 404)


def test_admin_set_seed_without_body_uses_the_start_seed() -> None:
    runtime = Runtime(Config(clock="manual", seed=7))
    with make_client(runtime) as client:
        assert client.post("/_emulator/seed", json={"seed": 3}).json() == {"seed": 3}
        assert client.post("/_emulator/seed").json() == {"seed": 7}


def test_a_seed_past_64_bits_is_refused_everywhere_it_can_be_given() -> None:
    # Exported state carries the seed and JSON encoders take 64-bit integers: such a seed made every export
    # (and, with --state-file, start-up) fail with a traceback.
    for bad in (2**63, -(2**63) - 1):
        with pytest.raises(ConfigError, match="--seed"):
            Config(clock="manual", seed=bad)
    runtime = Runtime(Config(clock="manual", seed=2**63 - 1))
    with make_client(runtime) as client:
        for path in ("/_emulator/seed", "/_emulator/reset"):
            assert_error(client.post(path, json={"seed": 2**63 + 5}), 400)
        doc = client.get("/_emulator/state").json()
        assert doc["seed"] == 2**63 - 1
        for bad_seed in (2**63 + 5, 1e308):
            error = assert_error(client.put("/_emulator/state", json={**doc, "seed": bad_seed}), 400)
            assert error["code"] == "invalid_state", error
        assert client.get("/_emulator/state").json() == doc


def test_clock_advance_still_needs_seconds(client: TestClient) -> None:
    error = assert_error(client.post("/_emulator/clock/advance"), 400)
    assert "required" in error["message"]


@pytest.mark.parametrize("path", ["/docs/openapi.json", "/docs/nothing/here.js", "/docs/../etc/passwd"])
def test_docs_unknown_path_is_404_in_error_data(client: TestClient, path: str) -> None:
    assert_error(client.get(path), 404)


def test_docs_page_and_spec_list_the_serving_url(client: TestClient) -> None:
    assert client.get("/docs/").status_code == 200
    spec = client.get("/openapi.json").json()
    assert spec["servers"][0]["url"] == "http://127.0.0.1:8765"
    assert "https://api.together.ai" in [s["url"] for s in spec["servers"]]


def test_validation_error_is_one_sentence_naming_the_field(client: TestClient) -> None:
    error = assert_error(client.get(f"{RL}/training-sessions", params={"limit": 0}), 400)
    assert error["message"] == "limit: 0 is less than the minimum of 1"
    assert error["param"] == "limit"
    r = create_resource(client)
    error = assert_error(client.post(f"{RL}/training-sessions", json={"model_resources_id": r["id"],
                                                                        "lora_config": {"rank": "x"}}), 400)
    assert error["param"] == "lora_config.rank"
    assert error["message"] == "lora_config.rank: 'x' is not of type 'integer'"
    error = assert_error(client.post(f"{RL}/training-sessions", json={}), 400)
    assert error["param"] == "model_resources_id" and "required" in error["message"]
    assert "\n" not in error["message"] and "Failed validating" not in error["message"]


def test_presigned_file_errors_use_the_one_renderer(client: TestClient) -> None:
    error = assert_error(client.get("/_files/payloads/not-a-token"), 404)
    assert error["code"] == "no_such_object"
    error = assert_error(client.get("/_files/checkpoints/not-a-token/model.safetensors"), 404)
    assert error["code"] == "no_such_object"
    assert_error(client.get("/_files/elsewhere"), 404)


def test_access_log_prints_one_line_per_request(capsys: pytest.CaptureFixture[str]) -> None:
    runtime = Runtime(Config(clock="manual", access_log=True))
    runtime.faults.load({"name": "slow-get", "match": {"operation_id": "getSupportedModels"},
                         "effect": {"latency_ms": 1}})
    with make_client(runtime, token="secret-token-12345") as client:
        assert client.get(f"{RL}/supported-models").status_code == 200
        assert client.get(f"{RL}/model-resources/nope").status_code == 404
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith(("GET", "POST"))]
    assert len(lines) == 2, lines
    first, second = lines
    assert first.startswith(f"GET {RL}/supported-models getSupportedModels 200 ")
    assert "tenant=proj_" in first and "key=secr..." in first and "fault=slow-get" in first
    assert second.startswith(f"GET {RL}/model-resources/nope getModelResources 404 ") and "fault=-" in second
    assert all("secret-token-12345" not in line for line in lines)


@pytest.mark.parametrize(("content", "named"), [
    ("- name: typo\n  match: {operation_id: createModelResource}\n  effect: {status: 503}\n",
     ("'typo'", "createModelResource")),                      # an operation that does not exist
    ("- name: nan\n  effect: {operation_fails: NOPE}\n", ("'nan'", "NOPE")),  # an error code the API lacks
    ("- name: broken\n  effect: {status: 503\n", ("line",)),   # not YAML: the line, not <unicode string>
])
def test_fault_file_problem_is_refused_naming_file_and_rule(tmp_path: Path, content: str,
                                                             named: tuple[str, ...]) -> None:
    path = tmp_path / "faults.yaml"
    path.write_text(content)
    with pytest.raises(ConfigError) as exc:
        Runtime(Config(faults_file=str(path)))
    message = str(exc.value)
    assert str(path) in message and all(part in message for part in named), message
    assert "<unicode string>" not in message


def test_add_faults_with_unknown_enum_is_400(client: TestClient) -> None:
    error = assert_error(client.post("/_emulator/faults", json={"name": "x", "effect": {"session_error": "NOPE"}}),
                         400)
    assert "'x'" in error["message"] and "NOPE" in error["message"]
    assert client.get("/_emulator/faults").json()["data"] == []


def test_serve_cannot_bind_says_how_to_pick_a_port() -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "emulator", "serve", "--port", str(port)], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "make serve PORT=" in proc.stderr and "Traceback" not in proc.stderr

