"""What the domain layer tells the simulated model about a training session, plus its fixed constants.

Emulates the per-session configuration a real trainer receives (base model limits, LoRA or full weight, the
optimizer). Differs: a bigram table stands in for a transformer, so some constants (learning-rate scale, LoRA
capacity) translate the real hyperparameters into that tiny model; each constant says why it has its value.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from emulator import defaults
from emulator.compute.errors import invalid


@dataclass(frozen=True)
class ModelSpec:
    """Session configuration. ``lora_rank=None`` means a full-weight session.

    ``seed`` selects the analytic *base* model (which tokens each token prefers). Two sessions
    with the same ``seed`` and ``vocab_size`` start from identical models, so the domain should
    derive it from the base model when sessions of one base model are meant to agree.
    ``eos_token_id`` (optional, an addition to the agreed interface) overrides the default end
    token ``vocab_size - 1``: the one the base model prefers in some rows. ``end_token_ids`` are every
    token that ends generation (default: the end token alone); a real model may have several (Qwen:
    ``<|im_end|>`` and ``<|endoftext|>``). ``tokenizer`` names the real tokenizer that decodes the ids
    (:mod:`emulator.compute.tokenizers`); without one, token ``t`` reads ``" " + str(t)``.
    ``tokenizer_size``: how many ids the tokenizer has (default: all ``vocab_size``); the ids from it up to
    ``vocab_size`` are the embedding's padding, which the generator never samples (:mod:`.sampling`).
    """

    vocab_size: int
    max_seq_length: int
    max_batch_size: int
    context_length: int
    lora_rank: int | None
    lora_alpha: float | None
    train_unembed: bool
    seed: int
    optimizer: str
    eos_token_id: int | None = None
    end_token_ids: tuple[int, ...] = ()
    tokenizer: str | None = None
    tokenizer_size: int | None = None

    def __post_init__(self) -> None:
        # (from JSON a list: a frozen value needs a tuple)
        object.__setattr__(self, "end_token_ids", tuple(int(t) for t in self.end_token_ids))

    @property
    def ends(self) -> frozenset[int]:
        """Every token that ends a generated sequence."""
        return frozenset((self.eos, *self.end_token_ids))

    @property
    def sampled_vocab(self) -> int:
        """The ids the generator may sample: ``[0, sampled_vocab)``, the tokenizer's."""
        return int(self.vocab_size) if self.tokenizer_size is None else int(self.tokenizer_size)

    @property
    def is_lora(self) -> bool:
        return self.lora_rank is not None

    @property
    def eos(self) -> int:
        return self.vocab_size - 1 if self.eos_token_id is None else int(self.eos_token_id)

    @property
    def alpha(self) -> float:
        return DEFAULT_LORA_ALPHA if self.lora_alpha is None else float(self.lora_alpha)

    @property
    def lora_row_capacity(self) -> int | None:
        """Most individually trained non-preferred next tokens one row may hold (None = unlimited)."""
        return None if self.lora_rank is None else LORA_ENTRIES_PER_RANK * int(self.lora_rank)

    @property
    def lr_multiplier(self) -> float:
        """How much one unit of learning rate moves a logit in this session (see ``LR_SCALE``)."""
        if self.lora_rank is None:
            return LR_SCALE * FULL_WEIGHT_LR_FACTOR
        return LR_SCALE * self.alpha / REFERENCE_LORA_ALPHA

    def validate(self) -> None:
        """Raise INVALID_INPUT if the spec is unusable. A spec is a frozen value and every model built checks its
        own, mostly one of the few the domain builds (``session_models._spec``): a valid one is checked once."""
        if "_valid" not in self.__dict__:
            self._check()
            object.__setattr__(self, "_valid", True)  # (not a field: equality, hashing and asdict ignore it)

    def _check(self) -> None:
        if int(self.vocab_size) < 2:
            raise invalid(f"vocab_size must be >= 2, got {self.vocab_size}")
        for name in ("max_seq_length", "max_batch_size", "context_length"):
            if int(getattr(self, name)) < 1:
                raise invalid(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.lora_rank is not None and int(self.lora_rank) < 1:
            raise invalid(f"lora_rank must be >= 1, got {self.lora_rank}")
        if self.lora_alpha is not None and not float(self.lora_alpha) > 0:
            raise invalid(f"lora_alpha must be > 0, got {self.lora_alpha}")
        if self.optimizer not in ("adam", "muon"):
            raise invalid(f"optimizer must be 'adam' or 'muon', got {self.optimizer!r}")
        if not 1 <= self.sampled_vocab <= int(self.vocab_size):
            raise invalid(f"tokenizer_size must be in [1, {self.vocab_size}], got {self.tokenizer_size}")
        for token in self.ends:  # (an end token the generator could never sample would never end a sequence)
            if not 0 <= token < self.sampled_vocab:
                raise invalid(f"end token {token} is outside the tokenizer's ids [0, {self.sampled_vocab})")


# --- base model shape ------------------------------------------------------------------------------
#: Preferred next tokens per row. Each row of the base table is flat (logit 0) except for these.
NUM_PREFERRED = 8
#: Logit of preferred slot i is ``log(V) + PREF_LADDER[i] + PREF_JITTER * u`` (u seeded in [0, 1)).
#: Offsetting by log(V) keeps the shape vocabulary-independent: the top token holds ~35-40% of the
#: probability, the eight preferred tokens ~96%, the flat tail ~4% spread over the rest.
PREF_LADDER = (2.0, 1.5, 1.0, 0.5, 0.0, -0.5, -1.0, -1.5)
PREF_JITTER = 0.5
#: One row in EOS_ROW_PERIOD (seeded) has the end token among its preferred tokens, in this slot, so
#: free-running generation ends on its own now and then (a mean of roughly 50 tokens).
EOS_ROW_PERIOD = 4
EOS_SLOT = 3
#: Version tag of the analytic base formula, written into exported configs.
BASE_FORMULA = "bigram-ladder-v1"

# --- optimisation ----------------------------------------------------------------------------------
#: One Adam step moves a trained parameter by about ``learning_rate``. In a transformer a logit is a
#: sum over thousands of hidden units (d_model ~ 2-5k), each moved coherently by that step, so the
#: logit moves by roughly ``learning_rate * 10^3``. The bigram table has exactly one parameter per
#: logit, so the emulator multiplies the learning rate by this factor. With it, the defaults and
#: lr=1e-4 memorise an 8-token sequence in a few dozen steps, as a LoRA run does.
LR_SCALE = 2000.0
#: LoRA's optimal learning rate is ~10x full fine-tuning's (a LoRA moves far fewer weights per step),
#: so a full-weight session's parameters respond 10x more strongly to the same learning rate.
FULL_WEIGHT_LR_FACTOR = 10.0
#: Under Adam a LoRA update changes the weights by about ``alpha/r * r * lr`` (r coherent rank-one
#: directions, each scaled by alpha/r): proportional to alpha and independent of the rank. The
#: emulator therefore scales the step by ``alpha / REFERENCE_LORA_ALPHA``; the reference is the default
#: alpha (the vendor's 64), so ``LR_SCALE`` is calibrated for a session created without ``lora_config``.
DEFAULT_LORA_ALPHA = float(defaults.LORA["alpha"])
REFERENCE_LORA_ALPHA = DEFAULT_LORA_ALPHA
#: A LoRA's capacity: each row may hold individual parameters for at most ``4 * rank`` next tokens
#: beyond its preferred ones; further targets share the row's tail parameter (cannot be singled out).
LORA_ENTRIES_PER_RANK = 4
#: Muon's learning rates are ~100x Adam's (0.02 vs 1e-4..1e-3) because its update is an orthogonal
#: matrix whose entries are ~1/sqrt(d) in size. This divisor (~sqrt(4096)) maps it onto the same scale.
MUON_LR_DIVISOR = 64.0
#: Newton-Schulz quintic coefficients used by Muon.
NS_COEFFS = (3.4445, -4.7750, 2.0315)

#: Optimizer settings of a step that leaves them out: the vendor's (:mod:`emulator.defaults`), and learning
#: rates the vendor does not state [inferred: Adam 1e-4, the usual LoRA rate; Muon 0.02, its paper's].
ADAM_DEFAULTS = MappingProxyType({"learning_rate": 1e-4, **defaults.ADAM})
MUON_DEFAULTS = MappingProxyType({"learning_rate": 0.02, **defaults.MUON})

# --- sampling --------------------------------------------------------------------------------------
#: ``sampling_params`` a sample leaves out: the vendor's (:mod:`emulator.defaults`; the catalog's
#: ``sampling_defaults`` show the same ``max_tokens`` and ``temperature``).
DEFAULT_MAX_TOKENS = int(defaults.SAMPLING["max_tokens"])
DEFAULT_TEMPERATURE = float(defaults.SAMPLING["temperature"])
DEFAULT_TOP_P = float(defaults.SAMPLING["top_p"])
DEFAULT_TOP_K = int(defaults.SAMPLING["top_k"])

# --- budgets (RESOURCE_EXHAUSTED beyond these) ----------------------------------------------------
#: Trained (row, next-token) entries one session may hold (~40 bytes each with optimizer state).
MAX_ENTRIES = 4_000_000
#: Generated tokens one sample call may produce (prompts x num_samples x max_tokens).
MAX_SAMPLE_TOKENS = 2_000_000

__all__ = ["ModelSpec"]
