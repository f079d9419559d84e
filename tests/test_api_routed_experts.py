"""Routed-experts keys on a mixture-of-experts model (issue 15): returned by sample, replayed by
forward-backward / custom-forward-backward, deterministic, bounded per session, kept in the state."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from emulator.config import Config
from emulator.runtime import Runtime
from tests.conftest import make_client
from tests.helpers import ready_resource, run_op, running_session

MINIMAX = "MiniMaxAI/MiniMax-M3"
KEY = re.compile(r"^routing/session/[0-9a-f]{32}\.(\d+)$")
PROMPTS = [[1, 2, 3, 4], [7, 8]]
COMPLETED = "TRAINING_OPERATION_STATUS_COMPLETED"
FAILED = "TRAINING_OPERATION_STATUS_FAILED"
INVALID_INPUT = "TRAINING_OPERATION_ERROR_CODE_INVALID_INPUT"


def _moe_session(client: TestClient) -> str:
    return running_session(client, ready_resource(client, base_model=MINIMAX)["id"])["id"]


def _sample(client: TestClient, sid: str, *, routed: bool = True, prompts: list[list[int]] = PROMPTS,
            num_samples: int = 2) -> list[list[dict[str, Any]]]:
    body: dict[str, Any] = {"model_inputs": [{"chunks": [{"encoded_text": {"tokens": p}}]} for p in prompts],
                            "num_samples": num_samples, "sampling_params": {"max_tokens": 5}}
    if routed:
        body["return_routed_experts"] = True
    op = run_op(client, sid, "sample", body)
    assert op["status"] == COMPLETED, op
    return [r["sequences"] for r in op["output"]["results"]]


def _train_sample(tokens: list[int], key: str | None) -> dict[str, Any]:
    sample: dict[str, Any] = {
        "model_input": {"chunks": [{"encoded_text": {"tokens": tokens[:-1]}}]},
        "loss_fn_inputs": {"target_tokens": {"data": tokens[1:], "dtype": "int64"},
                           "weights": {"data": [1.0] * (len(tokens) - 1), "dtype": "float32"}}}
    if key is not None:
        sample["routed_experts_key"] = key
    return sample


def _forward_backward(client: TestClient, sid: str, tokens: list[int], key: str | None) -> dict[str, Any]:
    return run_op(client, sid, "forward-backward", {"loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"},
                                                    "samples": [_train_sample(tokens, key)]})


def _custom(client: TestClient, sid: str, tokens: list[int], key: str | None) -> dict[str, Any]:
    return run_op(client, sid, "custom-forward-backward", {
        "samples": [_train_sample(tokens, key)],
        "gradients": [{"data": [0.1] * (len(tokens) - 1), "dtype": "D_TYPE_FLOAT32"}]})


def _full(prompt: list[int], seq: dict[str, Any]) -> list[int]:
    return prompt + [int(t) for t in seq["tokens"]]


def test_create_sample_returns_a_routed_experts_key_per_sequence_on_moe(client: TestClient) -> None:
    sid = _moe_session(client)
    results = _sample(client, sid)
    keys = []
    for prompt, seqs in zip(PROMPTS, results):
        for seq in seqs:
            match = KEY.match(seq["routed_experts_key"])
            assert match, seq
            assert int(match.group(1)) == len(prompt) + len(seq["tokens"])
            keys.append(seq["routed_experts_key"])
    assert len(set(keys)) == 4


def test_create_sample_has_no_key_unless_asked_or_on_a_dense_model(client: TestClient) -> None:
    assert all("routed_experts_key" not in seq for seqs in _sample(client, _moe_session(client), routed=False)
               for seq in seqs)
    dense = running_session(client)["id"]
    assert all("routed_experts_key" not in seq for seqs in _sample(client, dense) for seq in seqs)


def test_create_forward_backward_replays_a_key_covering_the_sample(client: TestClient) -> None:
    sid = _moe_session(client)
    seq = _sample(client, sid)[0][0]
    tokens = _full(PROMPTS[0], seq)
    key = seq["routed_experts_key"]
    # (prompt + completion)[:-1] is covered whole; prompt + completion all but its last token.
    assert _forward_backward(client, sid, tokens, key)["status"] == COMPLETED
    assert _forward_backward(client, sid, [*tokens, 5], key)["status"] == COMPLETED
    longer = _forward_backward(client, sid, [*tokens, 5, 6], key)
    assert longer["status"] == FAILED and longer["error"]["code"] == INVALID_INPUT
    assert "covers" in longer["error"]["message"]


def test_create_forward_backward_fails_on_an_unknown_key(client: TestClient) -> None:
    sid = _moe_session(client)
    op = _forward_backward(client, sid, [1, 2, 3, 4], "routing/session/" + "0" * 32 + ".4")
    assert op["status"] == FAILED and op["error"]["code"] == INVALID_INPUT
    assert "routed_experts_key" in op["error"]["message"]


def test_create_custom_forward_backward_fails_on_a_key_of_another_session(client: TestClient) -> None:
    first, second = _moe_session(client), _moe_session(client)
    seq = _sample(client, first)[0][0]
    tokens = _full(PROMPTS[0], seq)
    assert _custom(client, first, tokens, seq["routed_experts_key"])["status"] == COMPLETED
    op = _custom(client, second, tokens, seq["routed_experts_key"])
    assert op["status"] == FAILED and op["error"]["code"] == INVALID_INPUT


def test_create_forward_backward_ignores_keys_on_a_dense_model(client: TestClient) -> None:
    dense = running_session(client)["id"]
    op = _forward_backward(client, dense, [1, 2, 3, 4], "routing/session/" + "0" * 32 + ".4")
    assert op["status"] == COMPLETED, op


def test_create_forward_backward_fails_on_an_expired_key(tmp_path: Path) -> None:
    limits = tmp_path / "limits.yaml"
    limits.write_text("routed_experts_keys_per_session: 3\n")
    with make_client(Runtime(Config(clock="manual", validate_responses=True, limits_file=str(limits)))) as client:
        sid = _moe_session(client)
        first = _sample(client, sid, prompts=[[1, 2]], num_samples=2)[0]
        second = _sample(client, sid, prompts=[[3, 4]], num_samples=2)[0]
        # Four keys issued, three kept: the oldest one expired, the others still train.
        expired = _forward_backward(client, sid, _full([1, 2], first[0]), first[0]["routed_experts_key"])
        assert expired["status"] == FAILED and expired["error"]["code"] == INVALID_INPUT
        assert "expired" in expired["error"]["message"]
        for prompt, seq in (([1, 2], first[1]), ([3, 4], second[0]), ([3, 4], second[1])):
            assert _forward_backward(client, sid, _full(prompt, seq), seq["routed_experts_key"])["status"] == COMPLETED


def test_create_sample_keys_are_deterministic_from_the_seed() -> None:
    def keys(seed: int) -> list[str]:
        with make_client(Runtime(Config(clock="manual", seed=seed))) as client:
            return [seq["routed_experts_key"] for seqs in _sample(client, _moe_session(client)) for seq in seqs]

    assert keys(7) == keys(7) != keys(8)


def test_routed_experts_keys_survive_state_export_and_import(client: TestClient) -> None:
    sid = _moe_session(client)
    seq = _sample(client, sid)[0][0]
    doc = client.get("/_emulator/state").json()
    with make_client(Runtime(Config(clock="manual", validate_responses=True))) as restored:
        assert restored.put("/_emulator/state", json=doc).status_code == 200
        op = _forward_backward(restored, sid, _full(PROMPTS[0], seq), seq["routed_experts_key"])
        assert op["status"] == COMPLETED, op
