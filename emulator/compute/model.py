"""One training session's simulated model: loss and gradients, optimizer updates, sampling, checkpoints.

Emulates the trainer + generator pair behind a session (the package README has the model). Differs: it
conditions on the previous token only, generalises across rows only through the shared tail, models LoRA by
capacity and step size, and keeps pending gradients out of a checkpoint (as a real trainer does).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import numpy as np

from emulator import rules
from emulator.compute import export as _export
from emulator.compute.base import base_model
from emulator.compute.bases import BaseModels
from emulator.compute.errors import NON_FINITE_LOSS, RESOURCE_EXHAUSTED, ComputeError, invalid
from emulator.compute.inputs import parse_gradients, parse_int, parse_samples, parse_tokens, state_int
from emulator.compute.losses import compute, parse_loss
from emulator.compute.optim import OptState, update
from emulator.compute.sampling import decodable, generate, parse_sampling_params, topk_row
from emulator.compute.spec import MAX_SAMPLE_TOKENS, ModelSpec
from emulator.compute.tokenizers import numeric_piece, piece_function
from emulator.compute.types import (
    AdamParams,
    Gradient,
    Loss,
    ModelInput,
    MuonParams,
    Sample,
    SamplingParams,
    decode,
)
from emulator.compute.weights import GradAccum, Weights, all_finite, backward, flat_keys
from emulator.jsontypes import Json

STATE_FORMAT = "together-rl-emulator/session-model"
STATE_VERSION = 1


def _floats(arr: np.ndarray) -> list[float]:
    return [float(x) for x in arr.tolist()]


class SessionModel:
    """The simulated model of one session. Every public method either completes or raises
    :class:`ComputeError` without changing the model."""

    step: int

    def __init__(self, spec: ModelSpec, bases: BaseModels | None = None) -> None:
        spec.validate()
        self.spec = spec
        base = base_model(int(spec.seed), int(spec.vocab_size), spec.eos, bases)
        self._weights = Weights.initial(base)
        self._opt = OptState.zeros(self._weights)
        self._acc = GradAccum.empty()
        self.step = 0
        self._export_step = 0
        self.last_optim_info: dict[str, float] = {}
        self.version = 0  # counts changes to the state :meth:`to_state` exports (persistence writes on change)
        self._changes: list[dict[str, Json]] | None = None  # the calls since _changes_from, when tracked
        self._changes_from = 0
        self._changes_weights: list[tuple[int, Weights]] = []

    # --- introspection -------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return self._weights.vocab_size

    @property
    def eos_token_id(self) -> int:
        return self._weights.base.eos

    @property
    def has_pending_gradients(self) -> bool:
        return not self._acc.is_empty

    def nbytes(self) -> int:
        """Bytes held in arrays (weights, optimizer state, pending gradients)."""
        return self._weights.nbytes() + self._opt.nbytes() + self._acc.nbytes()

    def weights(self) -> Weights:
        """An immutable snapshot of the current parameters (what a weights sync publishes)."""
        return self._weights

    # --- training ------------------------------------------------------------------------------
    def loss_and_grad(self, samples: Sequence[Sample], loss: Loss, *, forward_only: bool = False,
                      return_loss_fn_outputs: bool = False) -> dict[str, Json]:
        cfg = parse_loss(loss)
        s = self.spec
        batch = parse_samples(samples, vocab_size=self.vocab_size, max_batch_size=s.max_batch_size,
                              max_seq_length=s.max_seq_length, required=cfg.required_inputs)
        lp, rs, ridx = self._weights.token_logprobs(batch.prevs, batch.targets)
        res = compute(cfg, batch, lp)
        if not math.isfinite(res.loss) or not (res.dlp_finite or all_finite(res.dlp)):
            raise ComputeError(NON_FINITE_LOSS, f"the {cfg.type} loss is not finite ({res.loss}); check the "
                               "logprobs/advantages inputs for extreme values")
        if not all(map(math.isfinite, res.metrics.values())):  # (the names only when one is not)
            bad = [k for k, v in res.metrics.items() if not math.isfinite(v)]
            raise ComputeError(NON_FINITE_LOSS, f"non-finite loss metrics {bad}")
        new_acc = self._acc
        if not forward_only:
            grad = backward(rs, ridx, batch.targets, res.dlp)
            new_acc = self._acc.merge(grad, self.vocab_size)
        outputs: list[Json] = []
        if return_loss_fn_outputs:
            shown = np.where(res.counted, lp, 0.0)
            for i in range(batch.num_samples):
                a, b = int(batch.offsets[i]), int(batch.offsets[i + 1])
                outputs.append({"tensors": {"logprobs": {"data": _floats(shown[a:b]), "dtype": "float32",
                                                         "shape": [b - a]}}})
        if new_acc is not self._acc:
            self._acc = new_acc
            self.version += 1
            if self._changes is not None:
                self._note({"loss_and_grad": {"samples": msgspec.to_builtins(samples),
                                              "loss": msgspec.to_builtins(loss)}})
        return {"loss": float(res.loss), "loss_fn_outputs": outputs,
                "metrics": {k: float(v) for k, v in res.metrics.items()}}

    def accumulate_gradients(self, samples: Sequence[Sample], gradients: Sequence[Gradient]) -> dict[str, Json]:
        """Accumulate caller-supplied d loss / d logprob (one value per token) through the same backward
        path. ``weights``/``mask`` are validated but not applied: the gradients are taken as given (the
        SDK's tinker path sends zero weights alongside real gradients)."""
        s = self.spec
        batch = parse_samples(samples, vocab_size=self.vocab_size, max_batch_size=s.max_batch_size,
                              max_seq_length=s.max_seq_length, required=("target_tokens",))
        dlp = parse_gradients(gradients, batch)
        _, rs, ridx = self._weights.token_logprobs(batch.prevs, batch.targets)
        grad = backward(rs, ridx, batch.targets, dlp)
        if not (all_finite(grad.vals) and all_finite(grad.tail)):
            raise ComputeError(NON_FINITE_LOSS,
                               "the supplied gradients produce non-finite parameter gradients")
        self._acc = self._acc.merge(grad, self.vocab_size)
        self.version += 1
        if self._changes is not None:
            self._note({"accumulate_gradients": {"samples": msgspec.to_builtins(samples),
                                                 "gradients": msgspec.to_builtins(gradients)}})
        return {}

    def update(self, adam_params: AdamParams | None, muon_params: MuonParams | None) -> int:
        new_w, new_opt, info = update(self.spec, self._weights, self._opt, self._acc, adam_params,
                                          muon_params)
        # (update refuses non-finite weights itself: NON_FINITE_LOSS, before anything here changes)
        self._weights, self._opt, self._acc = new_w, new_opt, GradAccum.empty()
        self.version += 1
        self.step += 1
        self._export_step = self.step
        self.last_optim_info = info
        if self._changes is not None:
            self._note({"update": {"adam_params": msgspec.to_builtins(adam_params),
                                   "muon_params": msgspec.to_builtins(muon_params), "check": weights_check(new_w)}})
        return self.step

    # --- changes, for a journal ----------------------------------------------------------------
    def track_changes(self) -> None:
        """Note every change from now on (a journal holds the model as it is now): :meth:`changes_since`."""
        self._changes = []
        self._changes_from = self.version
        self._changes_weights = [(self.step, self._weights)]

    def _note(self, call: dict[str, Json]) -> None:
        if self._changes is not None:
            self._changes.append(call)
            if "update" in call:
                self._changes_weights.append((self.step, self._weights))

    def changes_since(self, version: int) -> tuple[list[dict[str, Json]], list[tuple[int, Weights]]] | None:
        """The calls that changed the model since ``version``, JSON-ready, for :meth:`replay`, and the weights
        the model had at each step on the way (step, weights), the first being those at ``version``. None
        unless every call was noted (then a journal writes :meth:`to_state`). What it returns is forgotten
        here: the journal holds it now. The calls hold the caller's request values, which must not change."""
        changes = self._changes
        if changes is None or version != self._changes_from:
            return None
        if len(changes) != self.version - version:  # every change moves the version by one
            return None
        passed = self._changes_weights
        self.track_changes()
        return changes, passed

    def replay(self, calls: Sequence[Json]) -> tuple[dict[int, Weights], list[int]]:
        """Make the calls of :meth:`changes_since` again, in order; the same calls on the same state give the
        same bits. Returns the weights at each step passed through (the current ones included), and the steps
        whose weights differ from the ones noted when the calls were first made (another numpy or CPU may
        round differently). Raises :class:`ComputeError` if a call fails; the model may then be half-replayed."""
        weights = {self.step: self._weights}
        differ = []
        for call in calls:
            if not isinstance(call, Mapping) or len(call) != 1:
                raise invalid(f"not a model change: {str(call)[:100]}")
            (name, args), = call.items()
            if not isinstance(args, Mapping):
                raise invalid(f"not the arguments of a model change: {str(args)[:100]}")
            if name == "loss_and_grad":
                self.loss_and_grad(decode(args["samples"], tuple[Sample, ...]), decode(args["loss"], Loss))
            elif name == "accumulate_gradients":
                self.accumulate_gradients(decode(args["samples"], tuple[Sample, ...]),
                                          decode(args["gradients"], tuple[Gradient, ...]))
            elif name == "update":
                self.update(decode(args.get("adam_params"), AdamParams | None),  # type: ignore[arg-type]
                            decode(args.get("muon_params"), MuonParams | None))  # type: ignore[arg-type]
                weights[self.step] = self._weights
                if args.get("check") is not None and args["check"] != weights_check(self._weights):
                    differ.append(self.step)
            else:
                raise invalid(f"unknown model change {name!r}")
        return weights, differ

    # --- sampling ------------------------------------------------------------------------------
    def sample(self, weights: Weights, model_inputs: Sequence[ModelInput], *, num_samples: int,
               sampling_params: SamplingParams | None, prompt_logprobs: bool, topk_prompt_logprobs: int, seed: int,
               version: int) -> dict[str, Json]:
        if not isinstance(weights, Weights):
            raise invalid("weights must be a Weights snapshot")
        if weights.vocab_size != self.vocab_size:
            raise invalid("the weights snapshot belongs to a model with a different vocabulary")
        cfg = parse_sampling_params(sampling_params, int(seed))
        num_samples = parse_int(num_samples, "num_samples")
        if num_samples < rules.NUM_SAMPLES.low:
            raise invalid(f"num_samples must be >= {rules.NUM_SAMPLES.low}, got {num_samples}")
        topk = parse_int(topk_prompt_logprobs or 0, "topk_prompt_logprobs")
        bounds = rules.TOPK_PROMPT_LOGPROBS
        if not bounds.low <= topk <= bounds.high:
            raise invalid(f"topk_prompt_logprobs must be in [{bounds.low}, {bounds.high}], got {topk}")
        if not model_inputs:
            raise invalid("model_inputs must be a non-empty list")
        prompts = [parse_tokens(mi, f"model_inputs[{i}]", self.vocab_size)
                   for i, mi in enumerate(model_inputs)]
        for i, p in enumerate(prompts):
            if p.size == 0:
                raise invalid(f"model_inputs[{i}] has no tokens")
            if p.size + cfg.max_tokens > self.spec.context_length:
                raise invalid(f"model_inputs[{i}]: prompt ({p.size} tokens) + max_tokens ({cfg.max_tokens}) "
                              f"exceeds the model's context_length {self.spec.context_length}")
        if len(prompts) * num_samples * cfg.max_tokens > MAX_SAMPLE_TOKENS:
            raise ComputeError(RESOURCE_EXHAUSTED,
                               f"this request could generate more than {MAX_SAMPLE_TOKENS} tokens; split it")
        groups = generate(weights, prompts, num_samples, cfg, self.spec.ends,
                          piece_function(self.spec.tokenizer) if cfg.stop else numeric_piece,
                          self.spec.sampled_vocab)
        # log-probs of every sampled token, by the same function the loss uses
        prevs: list[np.ndarray] = []
        targets: list[np.ndarray] = []
        for p, group in zip(prompts, groups):
            for toks, _ in group:
                if toks:
                    t = np.asarray(toks, dtype=np.int64)
                    prevs.append(np.concatenate([p[-1:], t[:-1]]))
                    targets.append(t)
        lps = (weights.token_logprobs(np.concatenate(prevs), np.concatenate(targets))[0] if targets
               else np.empty(0))
        results = []
        cursor = 0
        for p, group in zip(prompts, groups):
            seqs: list[Json] = []
            for j, (toks, reason) in enumerate(group):
                n = len(toks)
                seqs.append({"tokens": [str(t) for t in toks], "logprobs": _floats(lps[cursor:cursor + n]),
                             "stop_reason": reason,
                             "prompt_cache_hit_tokens": 0 if j == 0 else (int(p.size) // 16) * 16})
                cursor += n
            result: dict[str, Json] = {"sequences": seqs, "policy_segments": [{"start_token": 0,
                                                                                "version": int(version)}]}
            if prompt_logprobs or topk:
                plp, rs, ridx = weights.token_logprobs(p[:-1], p[1:])
                if prompt_logprobs:
                    result["prompt_logprobs"] = [0.0] + _floats(plp)
                if topk:
                    rs = decodable(rs, self.spec.sampled_vocab)  # (what the generator could have sampled)
                    entries: list[Json] = [{}]
                    for i in range(p.size - 1):
                        ids, vals = topk_row(rs, int(ridx[i]), topk)
                        entries.append({"token_ids": ids, "logprobs": vals})
                    result["topk_prompt_logprobs"] = entries
            results.append(result)
        return {"results": results}

    # --- checkpoints ---------------------------------------------------------------------------
    def to_state(self, *, include_optimizer: bool = True) -> dict[str, Json]:
        """JSON-ready state. With ``include_optimizer`` it also carries the optimizer moments and any
        gradients accumulated since the last optimizer step, so a restored model continues exactly."""
        acc = self._acc
        v = self.vocab_size
        pending: dict[str, Json] = {"entry_rows": (acc.keys // v).tolist(), "entry_cols": (acc.keys % v).tolist(),
                   "entry_grad": acc.vals.tolist(), "rows": acc.rows.tolist(),
                   "row_tail_grad": acc.tail.tolist()}
        return {"format": STATE_FORMAT, "version": STATE_VERSION, "step": self.step,
                "weights": self._weights.to_state(),
                "optimizer": self._opt.to_state() if include_optimizer else None,
                "pending_gradients": pending if include_optimizer and not acc.is_empty else None}

    @classmethod
    def from_state(cls, spec: ModelSpec, state: Mapping[str, Any], *, load_optimizer: bool = True,
                   bases: BaseModels | None = None) -> SessionModel:
        """Restore a model. The base model (seed, end token) comes from the state, so a resumed session
        continues the checkpoint's model even if its own spec carries another seed."""
        if not isinstance(state, Mapping) or state.get("format") != STATE_FORMAT:
            raise invalid("not a session-model state")
        if int(state.get("version", 0)) != STATE_VERSION:
            raise invalid(f"unsupported session-model state version {state.get('version')!r}")
        model = cls(spec, bases)
        weights = Weights.from_state(state["weights"], bases)
        if weights.vocab_size != model.vocab_size:
            raise invalid(f"checkpoint vocabulary {weights.vocab_size} does not match the model's "
                          f"{model.vocab_size}")
        model._weights = weights
        step = state_int(state.get("step", 0), "model state: step")
        opt_state = state.get("optimizer")
        if load_optimizer and opt_state is not None:
            model._opt = OptState.from_state(opt_state, weights)
            model.step = step
            pend = state.get("pending_gradients")
            if pend:
                try:
                    keys = flat_keys(pend["entry_rows"], pend["entry_cols"], weights.vocab_size,
                                     "pending gradients")
                    acc = GradAccum(keys, np.asarray(pend["entry_grad"], dtype=np.float64),
                                    np.asarray(pend["rows"], dtype=np.int64),
                                    np.asarray(pend["row_tail_grad"], dtype=np.float64))
                except (KeyError, TypeError, ValueError, OverflowError) as exc:
                    raise invalid(f"malformed pending gradients: {exc}") from exc
                acc.check(weights.vocab_size)
                model._acc = acc
        else:
            model._opt = OptState.zeros(weights)
            model.step = 0
        model._export_step = step
        return model

    def export_files(self, variant: str) -> list[tuple[str, bytes]]:
        return _export.export_files(self.spec, self._weights, self._export_step, variant)


def weights_check(weights: Weights) -> list[int]:
    """A fingerprint of trained weights (their size and Adler-32 of their values): what a replayed optim
    step must reproduce. Cheap next to the step itself (one pass over the bytes, no copy)."""
    theta, beta = np.ascontiguousarray(weights.theta), np.ascontiguousarray(weights.beta)  # (no copy: they are)
    return [weights.num_entries, zlib.adler32(beta.data, zlib.adler32(theta.data))]


def load_files(files: list[tuple[str, bytes]]) -> dict[str, Json]:
    """Parse files from :meth:`SessionModel.export_files` (see :func:`emulator.compute.export.load_files`)."""
    return _export.load_files(files)


__all__ = ["SessionModel", "load_files", "weights_check"]
