"""The session caps (and the other limits the emulator infers) come from emulator/domain/limits.py and
can be overridden with --limits-file / EMULATOR_LIMITS_FILE (issue 15)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from emulator.config import Config, ConfigError
from emulator.runtime import Runtime
from tests.conftest import make_client
from tests.helpers import RL, assert_error, create_session, ready_resource

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
        f"emulator: --limits-file {path}: max_full_weight_sessions must be a whole number >= 1, not 'two'"]
