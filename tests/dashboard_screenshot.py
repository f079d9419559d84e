"""Regenerate docs/dashboard.png: a supervised run on a bad day and a GRPO run, on the dashboard, in Debian's chromium.

    make screenshot          # or: .venv/bin/python -m tests.dashboard_screenshot [OUT.png]

Manual clock, realistic timings, one resource with two sessions stepping side by side: ``sft-bad-day`` trains
with cross-entropy while a fault rule fails three of its forward-backwards with NON_FINITE_LOSS (the batch is
skipped, as ``examples/bad_day.py`` does), and ``grpo-even-tokens`` runs the GRPO loop of
``examples/rl_grpo.py`` (sample groups from the latest weights, group-relative advantages, the API's GRPO loss)
in two minibatches per step, so that the second is off-policy and its importance ratio, clip fractions and KL move. One operation is still running when the picture is taken. The
same seed gives the same state, so the picture only changes when the page does.
"""

from __future__ import annotations

import itertools
import statistics
import sys
from pathlib import Path
from typing import Any

import httpx

from emulator.config import Config
from emulator.tools.testing import serve_in_thread
from tests import browser

OUT = Path(__file__).resolve().parent.parent / "docs" / "dashboard.png"
KEY = "demo-key"
STEPS = 12
PROMPTS = [[1, 2, 3], [17, 4, 9]]
GROUP = 6
MAX_TOKENS = 40  # long enough that some completions end on a stop token: lengths and stop reasons vary
FAILED_AT = (3, 6, 9)  # steps of sft-bad-day whose forward-backward fails
_keys = itertools.count()


def _fb(tokens: list[int]) -> dict[str, Any]:
    return {"loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"},
            "samples": [{"model_input": {"chunks": [{"encoded_text": {"tokens": tokens[:-1]}}]},
                         "loss_fn_inputs": {"target_tokens": {"data": tokens[1:], "dtype": "int64"},
                                            "weights": {"data": [0.0] * 3 + [1.0] * (len(tokens) - 4),
                                                        "dtype": "float32"}}}]}


def _grpo_sample(prompt: list[int], completion: list[int], logprobs: list[float], advantage: float) -> dict[str, Any]:
    tokens, k = prompt + completion, len(prompt) - 1
    return {"model_input": {"chunks": [{"encoded_text": {"tokens": tokens[:-1]}}]},
            "loss_fn_inputs": {"target_tokens": {"data": tokens[1:], "dtype": "int64"},
                               "logprobs": {"data": [0.0] * k + logprobs, "dtype": "float32"},
                               "advantages": {"data": [0.0] * k + [advantage] * len(completion), "dtype": "float32"},
                               "mask": {"data": [0.0] * k + [1.0] * len(completion), "dtype": "float32"}}}


class Run:
    def __init__(self, url: str) -> None:
        self.api = httpx.Client(base_url=f"{url}/v1/rl", headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
        self.admin = httpx.Client(base_url=f"{url}/_emulator", timeout=30)

    def post(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        resp = self.api.post(path, json=body, headers={"Idempotency-Key": f"shot-{next(_keys)}"})
        resp.raise_for_status()
        return resp.json()

    def advance(self, seconds: float) -> None:
        self.admin.post("/clock/advance", json={"seconds": seconds}).raise_for_status()

    def op(self, sid: str, kind: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.post(f"/training-sessions/{sid}/operations/{kind}", body)

    def finished(self, sid: str, kind: str, op: dict[str, Any]) -> dict[str, Any]:
        """The operation once it has finished, moving the clock half a second at a time."""
        while True:
            got = self.api.get(f"/training-sessions/{sid}/operations/{kind}/{op['id']}").json()
            if got["status"].endswith(("COMPLETED", "FAILED")):
                return got
            self.advance(0.5)


def build_state(url: str) -> None:
    run = Run(url)
    # Both sessions' forward-backwards count for the rule: each step submits sft's first, then grpo's two.
    run.admin.post("/faults", json={"name": "nan-loss", "match": {"operation_id": "createForwardBackward"},
                                    "trigger": {"nth": [3 * (s - 1) + 1 for s in FAILED_AT]},
                                    "effect": {"operation_fails": "TRAINING_OPERATION_ERROR_CODE_NON_FINITE_LOSS"}}
                   ).raise_for_status()
    run.admin.post("/faults", json={"name": "overloaded", "match": {"operation_id": "createSession"},
                                    "trigger": {"first_n": 0}, "effect": {"status": 429, "retry_after": 2}}
                   ).raise_for_status()
    r = run.post("/model-resources", {"base_model": "Qwen/Qwen3.5-4B", "lora_enabled": True,
                                      "compute_config": {"num_generator_replicas": 1}})
    run.advance(240)
    sft = run.post("/training-sessions", {"model_resources_id": r["id"], "display_name": "sft-bad-day",
                                          "lora_config": {"rank": 16}})["id"]
    grpo = run.post("/training-sessions", {"model_resources_id": r["id"], "display_name": "grpo-even-tokens",
                                           "lora_config": {"rank": 16}})["id"]
    run.advance(25)
    for step in range(1, STEPS + 1):
        sft_fb = run.op(sft, "forward-backward", _fb(list(range(1, 13))))
        run.op(grpo, "weights-sync", {"weight_sync_type": "WEIGHT_SYNC_TYPE_SYNCHRONOUS"})
        minibatches = []
        for i, prompt in enumerate(PROMPTS):
            op = run.op(grpo, "sample", {"model_inputs": [{"chunks": [{"encoded_text": {"tokens": prompt}}]}],
                                         "num_samples": GROUP, "sampling_params": {
                                             "max_tokens": MAX_TOKENS, "temperature": 1.0, "seed": 1000 * step + i}})
            seqs = run.finished(grpo, "sample", op)["output"]["results"][0]["sequences"]
            group = [([int(t) for t in q["tokens"]], q["logprobs"]) for q in seqs]
            rewards = [sum(1 for t in toks if t % 2 == 0) / max(1, len(toks)) for toks, _ in group]
            mean, std = statistics.fmean(rewards), statistics.pstdev(rewards)
            minibatches.append([_grpo_sample(prompt, toks, lps, (rw - mean) / (std + 1e-6))
                                for (toks, lps), rw in zip(group, rewards)])
        if run.finished(sft, "forward-backward", sft_fb)["status"].endswith("COMPLETED"):
            run.op(sft, "optim-step", {"adam_params": {"learning_rate": 2e-4}})  # a failed batch is skipped
        for batch in minibatches:  # the second trains on samples of the weights before the first's step
            run.op(grpo, "forward-backward", {"loss": {"type": "LOSS_TYPE_GRPO"}, "samples": batch})
            optim = run.op(grpo, "optim-step", {"adam_params": {"learning_rate": 5e-4}})
        run.finished(grpo, "optim-step", optim)
    run.finished(sft, "inference-checkpoint", run.op(sft, "inference-checkpoint"))
    run.op(sft, "forward-backward", _fb(list(range(1, 13))))
    run.advance(0.3)  # caught mid-flight: RUNNING


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
            page.wait_for_selector(f'#loss-chart[data-points="{3 * STEPS - len(FAILED_AT)}"]')
            page.wait_for_selector('#metrics-charts [data-metric="loss/clip/high_fraction"]')
            page.wait_for_selector(f'#sampling-charts [data-chart="length"][data-points="{STEPS}"]')
            page.wait_for_selector("#samples tbody tr")
            page.click("#samples tbody tr:first-child summary")  # one sample's completions, unfolded
            page.wait_for_selector("#samples tbody tr:first-child .completion")
            page.screenshot(path=str(out), full_page=True)
            page.close()
    print(f"wrote {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT)
