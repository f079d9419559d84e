"""A training loop that survives a bad day: run it against ``together-rl-emulator serve --faults bad-day``.

The shipped fault file ``bad-day`` (docs/faults-and-scenarios.md, "Rehearse a bad day") puts the resource in a GPU queue, answers
the first two session creates 429 with ``Retry-After: 2``, fails every 3rd forward-backward with
``NON_FINITE_LOSS`` and answers one GET in ten 503. The SDK's own retries absorb the 429s and 503s (it
obeys ``Retry-After``); what it cannot retry is a failed operation, which raises. A NaN loss is a verdict
on that batch, not a network problem: sending it again gives the same NaN on a real service. So this loop
skips the batch, takes no optimizer step on it (its gradients were never accumulated) and goes on, and
stops only when too many steps in a row fail.

    together-rl-emulator serve --faults bad-day &
    python bad_day.py                 # --steps N
"""

from __future__ import annotations

import argparse
import json
import os
import time
import urllib.request
from collections import Counter

import together
from together.post_training import AdamParams, LossConfig, ModelResourcesClient, Sample

TOKENS = [1, 2, 3, 4, 5, 6, 7]
SAMPLE = Sample(model_input={"chunks": [{"encoded_text": {"tokens": TOKENS[:-1]}}]},
                loss_fn_inputs={"target_tokens": {"data": TOKENS[1:], "dtype": "int64"},
                                "weights": {"data": [0, 0, 0, 1, 1, 1], "dtype": "float32"}})
MAX_FAILURES_IN_A_ROW = 3


def is_non_finite_loss(exc: Exception) -> bool:
    # The SDK raises OperationFailedError (a RuntimeError) naming the operation's error code.
    return isinstance(exc, RuntimeError) and "NON_FINITE_LOSS" in str(exc)


def fault_answers() -> Counter[int] | None:
    """The error answers the emulator's fault rules have given so far, by status (its control plane, which the
    real service does not have: None there, or when the control plane wants a token this client lacks)."""
    url = os.environ["TOGETHER_BASE_URL"].rstrip("/") + "/_emulator/faults"
    headers = {"X-Emulator-Admin-Token": os.environ["EMULATOR_ADMIN_TOKEN"]} if "EMULATOR_ADMIN_TOKEN" in os.environ else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as answer:
            rules = json.load(answer)["data"]
    except (OSError, ValueError, KeyError):
        return None
    return Counter({rule["effect"]["status"]: rule["fired"] for rule in rules if "status" in rule.get("effect", {})})


def retried(before: Counter[int] | None, after: Counter[int] | None) -> str:
    """What the SDK retried meanwhile, said only when the emulator can tell (" (the SDK retried 2 answers 429)")."""
    if before is None or after is None:
        return ""
    new = after - before
    said = [f"{n} answer{'s' if n > 1 else ''} {status}" for status, n in sorted(new.items())]
    return f" (the SDK retried {' and '.join(said)})" if said else ""


def provision() -> ModelResourcesClient:
    """A READY resource, provisioning again when waiting for one fails.

    ModelResourcesClient.create polls until READY with the SDK's default of 2 retries per call; when a poll
    fails three times in a row (a 503 that outlasts the retries), create() stops the resource it made and
    raises. Polling once a second keeps that rare; trying again makes it harmless.
    """
    for attempt in range(1, 4):
        try:
            return ModelResourcesClient.create(base_model="Qwen/Qwen3.8-27B", interval=1.0, ready_timeout=600)
        except (together.InternalServerError, together.APIConnectionError, together.RateLimitError) as exc:
            print(f"provisioning attempt {attempt} failed ({type(exc).__name__}): trying again")
    raise SystemExit("could not provision a resource in 3 attempts")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    os.environ.setdefault("TOGETHER_BASE_URL", "http://127.0.0.1:8765")
    os.environ.setdefault("TOGETHER_API_KEY", "any-key")

    started = time.monotonic()
    faults_before = fault_answers()
    resources = provision()
    # The first two creates answer 429: the SDK waits Retry-After (2 s) and tries again, twice.
    session = resources.create_session(lora_config={"rank": 8}, display_name="bad-day", interval=0.1)
    print(f"resource and session up after {time.monotonic() - started:.1f} s{retried(faults_before, fault_answers())}")
    losses, skipped, in_a_row = [], [], 0
    print(f"{'step':>4}  {'loss':>8}  {'seconds':>7}  outcome")
    try:
        for step in range(args.steps):
            t0 = time.monotonic()
            try:
                fb = session.trainer.forward_backward(samples=[SAMPLE], loss=LossConfig(type="LOSS_TYPE_CROSS_ENTROPY"))
            except RuntimeError as exc:
                if not is_non_finite_loss(exc):
                    raise
                skipped.append(step)
                in_a_row += 1
                print(f"{step:>4}  {'nan':>8}  {time.monotonic() - t0:>7.2f}  NON_FINITE_LOSS: batch skipped, no optimizer step")
                if in_a_row >= MAX_FAILURES_IN_A_ROW:
                    raise SystemExit(f"{in_a_row} non-finite losses in a row: stopping") from exc
                continue
            in_a_row = 0
            session.trainer.optim_step(adam_params=AdamParams(learning_rate=1e-4))
            losses.append(fb.loss)
            print(f"{step:>4}  {fb.loss:>8.3f}  {time.monotonic() - t0:>7.2f}  ok", flush=True)
    finally:
        session.stop()
        resources.stop()
    print(f"{len(losses)} steps trained, {len(skipped)} skipped (steps {skipped}); "
          f"loss {losses[0]:.3f} -> {losses[-1]:.3f}; {time.monotonic() - started:.1f} s in all")


if __name__ == "__main__":
    main()
