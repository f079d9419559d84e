"""The session caps (and the other limits the emulator infers) come from emulator/domain/limits.py and
can be overridden with --limits-file / EMULATOR_LIMITS_FILE (issue 15)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from emulator.config import Config, ConfigError
from emulator.runtime import Runtime
from tests.conftest import make_client
from tests.helpers import RL, assert_error, create_session, ready_resource, run_op, running_session, submit

MINIMAX = "MiniMaxAI/MiniMax-M3"


def _fill(client: TestClient, rid: str, n: int) -> None:
    for _ in range(n):
        create_session(client, rid)


def _over_cap(client: TestClient, rid: str) -> str:
    err = assert_error(client.post(f"{RL}/training-sessions", json={"model_resources_id": rid}), 429)
    return err["message"]


def _assert_caps(client: TestClient, lora: int, minimax: int, full_weight: int) -> None:
    """A LoRA resource of an unlisted model, one of MiniMax-M3 and a full-weight one hold exactly these."""
    for body, cap in (({}, lora), ({"base_model": MINIMAX}, minimax), ({"lora_enabled": False}, full_weight)):
        rid = ready_resource(client, **body)["id"]
        _fill(client, rid, cap)
        assert f"at most {cap}" in _over_cap(client, rid)


def test_create_session_default_caps(client: TestClient) -> None:
    _assert_caps(client, lora=5, minimax=2, full_weight=1)


def test_create_session_caps_follow_the_limits_file(tmp_path: Path) -> None:
    path = tmp_path / "limits.yaml"
    path.write_text("max_full_weight_sessions: 2\nmax_lora_sessions: 3\n"
                    "models:\n  MiniMaxAI/MiniMax-M3: {max_lora_sessions: 4}\n")
    with make_client(Runtime(Config(clock="manual", validate_responses=True, limits_file=str(path)))) as client:
        _assert_caps(client, lora=3, minimax=4, full_weight=2)


@pytest.mark.parametrize(("text", "problem"), [
    ("max_lora_sessions: 0\n", "max_lora_sessions must be a whole number >= 1"),
    ("operation_outputs_mib_per_tenant: 0.5\n", "operation_outputs_mib_per_tenant must be a whole number >= 1"),
    ("max_lora_sessions: true\n", "max_lora_sessions must be a whole number >= 1"),
    ("max_sessions: 3\n", "unknown limits keys: max_sessions"),
    ("models: {Qwen/Qwen3.8-27B: {max_rank: 3}}\n", "unknown limits keys: models.Qwen/Qwen3.8-27B.max_rank"),
    ("models: {nope/model: {max_lora_sessions: 3}}\n", "'nope/model' is not a catalog model"),
    ("models: {Qwen/Qwen3.8-27B: {max_lora_sessions: 2.5}}\n", "max_lora_sessions must be a whole number"),
    ("- 1\n", "a limits file is a mapping"),
    ("max_lora_sessions: [\n", "not valid YAML"),
])
def test_serve_refuses_a_bad_limits_file(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "limits.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        Runtime(Config(clock="manual", limits_file=str(path)))
    message = str(info.value)
    assert message.startswith(f"--limits-file {path}: ") and problem in message
    assert "\n" not in message


def test_serve_reads_the_limits_file_from_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "limits.json"
    path.write_text('{"max_full_weight_sessions": "two"}')
    proc = subprocess.run([sys.executable, "-m", "emulator", "serve", "--port", "0"], capture_output=True,
                          text=True, timeout=60, env={"EMULATOR_LIMITS_FILE": str(path), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"together-rl-emulator: EMULATOR_LIMITS_FILE='{path}': max_full_weight_sessions must be a whole number >= 1, not 'two'"]


# --- large operation outputs (emulator/domain/README.md, operations.py, "Output retention") --------------

def _logprobs_batch(n_tokens: int) -> dict[str, Any]:
    """A forward pass returning per-token logprobs: about 20 bytes of JSON per token."""
    tokens = [(7 * i) % 900 + 1 for i in range(n_tokens + 1)]
    sample = {"model_input": {"chunks": [{"encoded_text": {"tokens": tokens[:-1]}}]},
              "loss_fn_inputs": {"target_tokens": {"data": tokens[1:], "dtype": "int64"},
                                 "weights": {"data": [1.0] * n_tokens, "dtype": "float32"}}}
    return {"loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}, "forward_only": True, "return_loss_fn_outputs": True,
            "samples": [sample]}


def _op_path(sid: str, op_id: str) -> str:
    return f"{RL}/training-sessions/{sid}/operations/forward-backward/{op_id}"


def test_large_operation_outputs_are_kept_up_to_the_tenants_budget(tmp_path: Path) -> None:
    limits = tmp_path / "limits.yaml"
    limits.write_text("operation_outputs_mib_per_tenant: 1\n")
    runtime = Runtime(Config(clock="manual", validate_responses=True, limits_file=str(limits)))
    with make_client(runtime) as client:
        sid = running_session(client)["id"]
        small = run_op(client, sid, "forward-backward", {**_logprobs_batch(8), "return_loss_fn_outputs": False})
        big = [submit(client, sid, "forward-backward", _logprobs_batch(15_000), key=f"big-{i}").json()["id"]
               for i in range(4)]  # ~0.28 MiB of JSON each: three fit in 1 MiB, a fourth pushes the first out
        outputs = [client.get(_op_path(sid, op_id)) for op_id in big]
        assert [r.status_code for r in outputs[1:]] == [200, 200, 200]
        assert len(outputs[-1].json()["output"]["loss_fn_outputs"][0]["tensors"]["logprobs"]["data"]) == 15_000
        err = assert_error(outputs[0], 404)
        assert err["code"] == "output_released" and big[0] in err["message"], err
        # A small output is never released; the released operation's own Idempotency-Key says the same 404.
        assert client.get(_op_path(sid, small["id"])).json()["output"]["loss"] == small["output"]["loss"]
        replay = submit(client, sid, "forward-backward", _logprobs_batch(15_000), key="big-0")
        assert assert_error(replay, 404)["code"] == "output_released"
        # An export shows it, and an import keeps counting from there: the next large output releases the
        # oldest one still kept.
        doc = client.get("/_emulator/state").json()
        [released] = [o for t in doc["tenants"].values() for o in t["operations"] if o["output_released"]]
        assert released["id"] == big[0] and released["output"] is None
        assert client.put("/_emulator/state", json=doc).status_code == 200
        assert client.get(_op_path(sid, big[1])).status_code == 200
        run_op(client, sid, "forward-backward", _logprobs_batch(15_000))
        assert assert_error(client.get(_op_path(sid, big[1])), 404)["code"] == "output_released"
        assert client.get(_op_path(sid, big[2])).status_code == 200


def test_released_outputs_are_journaled(tmp_path: Path) -> None:
    limits = tmp_path / "limits.yaml"
    limits.write_text("operation_outputs_mib_per_tenant: 1\n")
    state_file = tmp_path / "state.json"
    runtime = Runtime(Config(clock="manual", limits_file=str(limits), state_file=str(state_file)))
    with make_client(runtime) as client:
        sid = running_session(client)["id"]
        for _ in range(4):
            run_op(client, sid, "forward-backward", _logprobs_batch(15_000))
        assert create_session(client, ready_resource(client)["id"])  # a write: the journal catches up
    restored = Runtime(Config(clock="manual", limits_file=str(limits), state_file=str(state_file)))
    assert restored.export_state()["tenants"] == runtime.export_state()["tenants"]
    [tenant] = restored.export_state()["tenants"].values()
    assert [o["output_released"] for o in tenant["operations"]] == [True, False, False, False]


def test_a_released_sample_takes_its_prompts_with_it(tmp_path: Path) -> None:
    limits = tmp_path / "limits.yaml"
    limits.write_text("operation_outputs_mib_per_tenant: 1\n")
    runtime = Runtime(Config(clock="manual", validate_responses=True, limits_file=str(limits)))
    prompt = {"chunks": [{"encoded_text": {"tokens": [(5 * i) % 900 + 1 for i in range(28_000)]}}]}
    body = {"model_inputs": [prompt], "num_samples": 1, "sampling_params": {"max_tokens": 4}}
    with make_client(runtime) as client:
        sid = running_session(client)["id"]
        # ~0.104 MiB of prompt each (the output is small): nine fit in 1 MiB, a tenth pushes the first out.
        ops = [run_op(client, sid, "sample", body)["id"] for _ in range(10)]
        path = f"{RL}/training-sessions/{sid}/operations/sample"
        assert assert_error(client.get(f"{path}/{ops[0]}"), 404)["code"] == "output_released"
        assert client.get(f"{path}/{ops[1]}").status_code == 200
        [tenant] = client.get("/_emulator/state").json()["tenants"].values()
        bodies = {o["id"]: o["body"] for o in tenant["operations"]}
        assert bodies[ops[0]] == {} and bodies[ops[1]]["model_inputs"] == [prompt]
