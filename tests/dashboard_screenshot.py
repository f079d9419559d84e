"""Regenerate docs/dashboard.png: a realistic training state on the dashboard, in Debian's chromium.

    make screenshot          # or: .venv/bin/python -m tests.dashboard_screenshot [OUT.png]

Manual clock, realistic timings: a resource provisions, two sessions train 30 steps each at their own
learning rate (a fault rule fails one forward-backward, so a red operation shows up), sample now and
then, checkpoint, and one operation is still running when the picture is taken. The same seed gives
the same state, so the picture only changes when the page does.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import Any

import httpx

from emulator.config import Config
from emulator.tools.testing import serve_in_thread
from tests import browser

OUT = Path(__file__).resolve().parent.parent / "docs" / "dashboard.png"
KEY = "demo-key"
_keys = itertools.count()


def _tokens(start: int, n: int) -> list[int]:
    return list(range(start, start + n))


def _fb(tokens: list[int]) -> dict[str, Any]:
    return {"loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"},
            "samples": [{"model_input": {"chunks": [{"encoded_text": {"tokens": tokens[:-1]}}]},
                         "loss_fn_inputs": {"target_tokens": {"data": tokens[1:], "dtype": "int64"},
                                            "weights": {"data": [0.0] * 3 + [1.0] * (len(tokens) - 4),
                                                        "dtype": "float32"}}}]}


def build_state(url: str) -> None:
    api = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
    admin = httpx.Client(base_url=f"{url}/_emulator", timeout=30)

    def call(path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        resp = api.post(f"/v1/rl{path}", json=body, headers={"Idempotency-Key": f"shot-{next(_keys)}"})
        resp.raise_for_status()
        return resp.json()

    def advance(seconds: float) -> None:
        admin.post("/clock/advance", json={"seconds": seconds}).raise_for_status()

    admin.post("/faults", json={"name": "nan-loss", "match": {"operation_id": "createForwardBackward"},
                                "trigger": {"nth": [55]},
                                "effect": {"operation_fails": "TRAINING_OPERATION_ERROR_CODE_NON_FINITE_LOSS"}}
               ).raise_for_status()
    admin.post("/faults", json={"name": "overloaded", "match": {"operation_id": "createSession"},
                                "trigger": {"first_n": 0}, "effect": {"status": 429, "retry_after": 2}}
               ).raise_for_status()
    r = call("/model-resources", {"base_model": "Qwen/Qwen3.8-27B", "lora_enabled": True,
                                  "compute_config": {"num_generator_replicas": 1}})
    advance(240)
    runs = [("sweep-lr-1e-4", 1e-4, _tokens(1, 12)), ("sweep-lr-2e-4", 2e-4, _tokens(40, 12))]
    sessions = [call("/training-sessions", {"model_resources_id": r["id"], "display_name": name,
                                            "lora_config": {"rank": 16}})["id"] for name, _, _ in runs]
    advance(25)
    for step in range(1, 31):
        for sid, (_, lr, tokens) in zip(sessions, runs):
            call(f"/training-sessions/{sid}/operations/forward-backward", _fb(tokens))
            call(f"/training-sessions/{sid}/operations/optim-step", {"adam_params": {"learning_rate": lr}})
        advance(3)
        if step % 10 == 0:
            sid, tokens = sessions[0], runs[0][2]
            call(f"/training-sessions/{sid}/operations/weights-sync", {"weight_sync_type": "WEIGHT_SYNC_TYPE_SYNCHRONOUS"})
            call(f"/training-sessions/{sid}/operations/sample",
                 {"model_inputs": [{"chunks": [{"encoded_text": {"tokens": tokens[:4]}}]}], "num_samples": 2,
                  "sampling_params": {"max_tokens": 8, "temperature": 0.7}})
            advance(8)
    for sid in sessions:
        call(f"/training-sessions/{sid}/operations/inference-checkpoint")
    advance(40)
    call(f"/training-sessions/{sessions[1]}/operations/forward-backward", _fb(runs[1][2]))
    advance(0.3)  # caught mid-flight: RUNNING


def main(out: Path = OUT) -> None:
    reason = browser.missing()
    if reason:
        sys.exit(reason)
    with serve_in_thread(Config(clock="manual", profile="realistic", seed=7)) as (url, runtime):
        build_state(url)
        project = runtime.tenancy.project_for_token(KEY)
        with browser.chromium() as chromium:
            page = chromium.new_page(viewport={"width": 1440, "height": 1100}, device_scale_factor=1)
            page.goto(f"{url}/_emulator/ui/tenants/{project}")
            page.wait_for_selector('#live[data-state="live"]')
            page.wait_for_selector('#loss-chart[data-points="59"]')
            page.wait_for_selector("#samples tbody tr")
            page.screenshot(path=str(out), full_page=True)
            page.close()
    print(f"wrote {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT)
