"""The same seed and the same requests give byte-identical responses (manual clock)."""

from __future__ import annotations

from emulator.config import Config
from emulator.runtime import Runtime
from tests.conftest import make_client
from tests.helpers import RL, ce_sample


def _script(seed: int) -> list[bytes]:
    out = []
    with make_client(Runtime(Config(clock="manual", seed=seed))) as c:
        def call(method: str, url: str, **kw: object) -> dict:
            resp = c.request(method, url, **kw)
            out.append(resp.content)
            return resp.json()

        r = call("POST", f"{RL}/model-resources", json={"base_model": "Qwen/Qwen3.8-27B"})
        call("GET", f"{RL}/model-resources/{r['id']}")
        s = call("POST", f"{RL}/training-sessions", json={"model_resources_id": r["id"]})
        call("GET", f"{RL}/training-sessions/{s['id']}")
        body = {"loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}, "samples": [ce_sample([1, 2, 3], [4, 5])]}
        base = f"{RL}/training-sessions/{s['id']}/operations"
        for kind, payload in (("forward-backward", body), ("optim-step", {}),
                              ("sample", {"model_inputs": [{"chunks": [{"encoded_text": {"tokens": [1, 2]}}]}],
                                          "num_samples": 3, "sampling_params": {"max_tokens": 6}}),
                              ("training-checkpoint", None)):
            kw = {"json": payload} if payload is not None else {}
            op = call("POST", f"{base}/{kind}", headers={"Idempotency-Key": kind}, **kw)
            call("GET", f"{base}/{kind}/{op['id']}")
        call("GET", f"{RL}/training-sessions/{s['id']}")
    return out


def test_same_seed_same_bytes() -> None:
    assert _script(7) == _script(7)


def test_other_seed_other_ids() -> None:
    assert _script(7)[0] != _script(8)[0]
