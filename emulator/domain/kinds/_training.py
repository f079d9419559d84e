"""What the two kinds that train on a batch of samples share: how long they run, their outputs' size, the loss.

Duration: tokens in the batch times ``forward_backward_seconds_per_token``. Their requests are released when the
operation finishes (a batch is 100-200 bytes per token; a long loop would otherwise keep every batch it sent,
also in ``--state-file``); idempotency compares the body's hash, which stays.
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from emulator.compute.types import ModelInput, Sample
from emulator.domain.durations import Timing, TimingParam
from emulator.jsontypes import Json, JsonObject
from emulator.store.records import Operation

SECONDS_PER_TOKEN = TimingParam("forward_backward_seconds_per_token", instant=0.0, realistic=0.0002,
                                doc="per token of the batch")


def token_count(model_input: ModelInput) -> int:
    return sum(len(c.encoded_text.tokens) for c in model_input.chunks if c.encoded_text is not None)


def seconds(timing: Timing, samples: Sequence[Sample]) -> float:
    return sum(token_count(sample.model_input) for sample in samples) * timing.seconds(SECONDS_PER_TOKEN)


def output_size(op: Operation) -> int:
    """The JSON size of per-token outputs (0 without them: a loss and its metrics are small)."""
    out = op.output
    return len(orjson.dumps(out)) if out and out.get("loss_fn_outputs") else 0


def dashboard(output: JsonObject) -> dict[str, Json]:
    return {"loss": output.get("loss")}
