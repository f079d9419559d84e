"""Known mutants that no client of the API can tell apart from the healthy emulator, each with its reason; and
the mutants of the emulator's own control plane, which its unit tests (``tests/``) must catch instead.

A row matches a mutant by file, the enclosing function or class (``scope``, an ``fnmatch`` pattern),
its kind, and optionally text that its code before / after must contain. Rows are as narrow as the
reason: "this number is not part of the contract" covers every number of that table, "this check
is a cache" covers that cache only. Mutants matched by :data:`TABLE` are reported as *equivalent* and left
out of the kill rate; ``--run-equivalent`` runs them anyway, and a matched mutant that the suite kills means
the row is wrong.

Three reasons recur:

- **same behaviour**: the mutant changes code whose result the API never shows (a cache, an
  optimisation, bookkeeping only the dashboard or the event log reads);
- **not reachable from the API**: code only the emulator's own failures reach (a bug of its model);
- **not part of the contract**: numbers the real service does not publish and the emulator chose
  (timing durations, prices): any value conforms, so no contract check can fix one.

What only the emulator's control plane reaches (:data:`CONTROL_PLANE`: fault rules, state export and import,
the ``--limits-file`` and timing-profile overrides) is real behaviour all the same, just not the vendor API's:
the contract suite cannot judge it, so those mutants run against the unit tests each row names, and count in a
figure of their own. So do the emulator's own choices where the contract leaves the answer open but a client of
the emulator sees it (the X-Emulator-Warning of an ignored field and ``--strict``'s 400, bounds it refuses at
submit, inputs it releases): another server conforms with another choice, the emulator's unit tests hold its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

from tests.mutation.mutants import Mutant


@dataclass(frozen=True)
class Equivalent:
    file: str
    scope: str
    kind: str | None
    reason: str
    before: str | None = None     # text the mutant's "before" must contain
    after: str | None = None      # text the mutant's "after" must contain
    line: str | None = None       # text the source line it is on must contain

    def matches(self, m: Mutant) -> bool:
        return _matches(self, m)


@dataclass(frozen=True)
class ControlPlane:
    """Mutants of behaviour only the emulator's control plane reaches; ``tests`` are the unit test files
    (repository-relative) that must catch them."""

    file: str
    scope: str
    kind: str | None
    area: str
    tests: tuple[str, ...]
    before: str | None = None
    after: str | None = None
    line: str | None = None

    def matches(self, m: Mutant) -> bool:
        return _matches(self, m)


def _matches(row: Equivalent | ControlPlane, m: Mutant) -> bool:
    return (m.file == row.file and fnmatchcase(m.scope, row.scope)
            and (row.kind is None or m.kind == row.kind)
            and (row.before is None or row.before in m.before)
            and (row.after is None or row.after in m.after)
            and (row.line is None or row.line in m.context))


TIMING = "not part of the contract: the durations of the timing profiles are the emulator's [inferred] orders " \
         "of magnitude (the real ones are unpublished); any value conforms"
SHOWN = "the API answers the changed number and enforces it alike (GET /v1/rl/supported-models shows it, the " \
        "trainer applies it): no client can tell it from the catalog's"
PRICE = "not part of the contract: prices are the emulator's illustration (estimate-cost answers some USD price)"
SCHEMA = "same behaviour: makes a domain check looser than the request schema, which refuses those values " \
         "(400) before the domain runs"
RETENTION = "not part of the contract: acts only once a tenant's large operation outputs pass the emulator's " \
            "256 MiB budget, which no contract run reaches (the real service's retention is undocumented)"
OPERATIONS = "not part of the contract: acts only once a session has more than the emulator's 1,000 finished " \
             "operations (limits.finished_operations_per_session), which no contract run reaches (the real " \
             "service's retention is undocumented)"
METADATA = "not part of the contract: how large a session's metadata may be is undocumented for the real service; " \
           "the emulator's 16 KiB is its own bound on memory, far above what a contract run sends"


TABLE: tuple[Equivalent, ...] = (
    Equivalent("emulator/domain/timing.py", "<module>", "constant", TIMING),
    Equivalent("emulator/domain/durations.py", "Timing", "constant", TIMING),
    *(Equivalent(f"emulator/domain/kinds/{name}.py", "<module>", "constant", TIMING, line="TimingParam(")
      for name in ("_training", "_checkpoint", "optim_step", "weights_sync", "sample")),
    Equivalent("emulator/domain/limits.py", "Limits", "constant",
               "not part of the contract: how many routed-experts keys a session keeps (1024), how much large "
               "output a tenant keeps (256 MiB) and how many finished operations a session keeps (1,000) are the "
               "emulator's own bounds on memory, undocumented for the real service and never reached by a contract "
               "run", line="_per_"),
    # Session metadata size: the emulator's own bound (16 KiB of JSON, [inferred]; the real limit is undocumented).
    # A bound moved a little, or gone, answers alike for the metadata any client has reason to send; dropping the
    # metadata or refusing all of it (other mutants of _bounded_metadata) is not listed here.
    *(Equivalent(file, scope, kind, METADATA, before=before, line=line) for file, scope, kind, before, line in (
        ("emulator/domain/limits.py", "Limits", "constant", "session_metadata_kib=", None),
        ("emulator/domain/sessions.py", "_bounded_metadata", "constant", None, "<< 10"),
        ("emulator/domain/sessions.py", "_bounded_metadata", "comparison", "> limit", None),
        ("emulator/domain/sessions.py", "_bounded_metadata", "drop raise", "metadata is larger than", None))),
    Equivalent("emulator/domain/fault_effects.py", "apply", "and/or",
               "same behaviour: an operation_fails effect is applied only to a request answered under 400, whose "
               "operation exists (made or read by it); a fault code set on an operation already finished is never "
               "read (it only decides how a running operation ends; a state export would show it)",
               before="op is not None and"),
    *(Equivalent("emulator/domain/catalog.py", "<module>", "constant", SHOWN, before=f"{name}=")
      for name in ("lora_max_batch_size", "lora_max_seq_length", "lora_max_rank", "full_max_batch_size",
                   "full_max_seq_length", "context_length")),
    Equivalent("emulator/domain/catalog.py", "<module>", "constant",
               "not part of the contract: a base model's vocabulary size is its tokenizer's, which no API answer "
               "states; clients send the ids their tokenizer makes", before="vocab_size="),
    Equivalent("emulator/domain/catalog.py", "<module>", "constant", PRICE, before="price_per_gpu_hour="),
    # A kind's lane orders its row among a session's kinds on the dashboard, which is no part of the API.
    *(Equivalent(f"emulator/domain/kinds/{name}.py", "<module>", "constant",
                 "not part of the contract: the dashboard's drawing order of a session's kinds", before="lane=")
      for name in ("forward_backward", "custom_forward_backward", "optim_step", "sample", "weights_sync",
                   "inference_checkpoint", "training_checkpoint")),
    Equivalent("emulator/store/records.py", "Notes.note", None,
               "same behaviour: the body of a Protocol's method, never called (the notes are a ChangeLog or "
               "Unjournaled)"),
    Equivalent("emulator/domain/catalog.py", "<module>", "constant", PRICE, before="trainer_gpus="),
    Equivalent("emulator/domain/catalog.py", "CatalogModel.to_json", "constant",
               "the meaning of sampling_defaults.logprobs is undocumented (the emulator returns every sampled "
               "token's log-probability whatever it says)", before="logprobs="),
    Equivalent("emulator/domain/model_resources.py", "estimate_cost", None, PRICE, line="gpus ="),
    Equivalent("emulator/domain/model_resources.py", "estimate_cost", None, PRICE, line="round(gpus"),
    *(Equivalent("emulator/domain/cascade.py", scope, "delete assignment",
                 "same behaviour: expires_at is shown, extended and acted on only while a resource is READY, and a "
                 "stopping or failed resource never is again", before="r.expires_at = None")
      for scope in ("_stopping", "fail_resource")),
    *(Equivalent("emulator/store/records.py", "check_edge", kind,
                 "same behaviour: an assertion that never fires: every status change the emulator makes is along a "
                 "documented edge (the contract's observer checks the same on every read); weakened or dropped, it "
                 "changes nothing", before=before)
      for kind, before in (("drop raise", None), ("early return", None),
                           ("and/or", "allowed is None or new not in allowed"))),
    # An operation whose model raised an unexpected exception (a bug of the emulator) fails with INTERNAL_ERROR
    # rather than wedging its session's queue; no request reaches that in a healthy emulator.
    *(Equivalent("emulator/domain/operations.py", "on_complete", "delete assignment",
                 "not reachable from the API: runs only when the emulator's own model raises an unexpected "
                 "exception (a bug); tests/test_api_sessions_operations.py injects one", line=line)
      for line in ("op.output = None", "op.error = error_detail(INTERNAL_ERROR")),
    Equivalent("emulator/domain/gpu_queue.py", "enter", "delete assignment",
               "same behaviour: the dequeue event is scheduled for exit_at whatever the field holds; on_dequeue reads "
               "queue_exit_at only to skip an event that a hold has overtaken, and a hold sets its own (only the "
               "integrity check of a state import would notice)", before="r.queue_exit_at = exit_at"),
    Equivalent("emulator/domain/gpu_queue.py", "leave", "delete assignment",
               "same behaviour: queue_exit_at is read only while a resource is PENDING (on_dequeue checks the status "
               "first), and a resource that left the queue never is again", before="r.queue_exit_at = None"),
    *(Equivalent("emulator/domain/catalog.py", "<module>", "constant",
                 "not part of the contract: a model's special token ids and tokenizer size are its tokenizer's, which "
                 "no API answer states (Qwen3.5's are pinned to the real tokenizer by the unit tests: a control-plane "
                 "row; the other models' tokenizers are not installed here)", before=before)
      for before in ("end_of_text_token_id=", "chat_end_token_id=", "tokenizer_size=")),
    *(Equivalent("emulator/domain/catalog.py", "CatalogModel", "constant",
                 "same behaviour: this field's default is never used (every catalog model names its end-of-text and "
                 "chat-end tokens)", before=f"{name}=") for name in ("end_of_text_token_id", "chat_end_token_id")),
    Equivalent("emulator/domain/operations.py", "submit", "drop raise",
               "not part of the contract: the answer to an Idempotency-Key reused with another body is undocumented "
               "(\"a changed body needs a new key\"); returning the original operation, as the mutant does, or refusing "
               "both keep the changed body from running", before="Idempotency-Key"),
    Equivalent("emulator/domain/model_resources.py", "touch", "delete assignment",
               "same behaviour: ModelResource.last_activity is bookkeeping nothing reads (only a state export shows "
               "it; expires_at is what counts)", before="r.last_activity ="),
    # The transition table is an assertion: allowing one more edge changes nothing the code does, and taking away an
    # edge the emulator never takes neither. No shaping job ever fails (the real causes are a bad calibration file
    # or an internal error, neither of which the emulator has), so the error edges of its table are never taken.
    *(Equivalent("emulator/store/records.py", "<module>", "enum swap",
                 "same behaviour: takes the shaping job edge to error/user_error (which the emulator never takes: no job "
                 "fails) out of the transition table, and allows one that no code takes",
                 before=before, line=f"Q.{row}: frozenset(")
      for row in ("PENDING", "QUEUED", "RUNNING") for before in ("Q.ERROR", "Q.USER_ERROR")),
    # Output retention: a tenant keeps the newest 256 MiB of large outputs (limits.operation_outputs_mib_per_tenant).
    # What only acts beyond that budget is never reached by a contract run (the real retention is undocumented);
    # releasing outputs within the budget is observable, and test_updates reads old outputs back.
    *(Equivalent("emulator/domain/operations.py", scope, None, RETENTION, line=line) for scope, line in (
        ("_keep_output", "kept = _kept_outputs("), ("_keep_output", "budget.total += size"),
        ("_keep_output", "<< 20"), ("_keep_output", "budget.total -= old_size"),
        ("_keep_output", "if old is not None and old.output is not None"), ("_keep_output", "old.output ="),
        ("_keep_output", "old.output_released ="), ("_keep_output", "old.body ="),
        ("_kept_outputs", "done = ["), ("_kept_outputs", "budget.kept = deque"),
        ("_kept_outputs", "budget.total = sum"), ("<module>", "LARGE_OUTPUT_BYTES ="))),
    Equivalent("emulator/domain/operations.py", "_keep_output", "comparison", RETENTION,
               before="budget.total > limit", after="budget.total >= limit"),
    Equivalent("emulator/domain/operations.py", "_keep_output", "comparison", RETENTION, before="len(kept) > 1"),
    Equivalent("emulator/domain/operations.py", "_keep_output", "constant", RETENTION, line="len(kept) > 1"),
    Equivalent("emulator/domain/kinds/_training.py", "output_size", None, RETENTION),
    Equivalent("emulator/domain/operations.py", "_large_output", None, RETENTION),
    Equivalent("emulator/domain/operations.py", "_check_output_kept", None, RETENTION),
    # Bounds the request schema already enforces (inactive_timeout 300-86400, seconds 60-86400, display_name
    # maxLength 128, num_generator_replicas minimum 0, a file's purpose enum; connexion refuses with 400 before the
    # domain runs): a domain check made looser changes nothing.
    *(Equivalent(f"emulator/domain/{module}.py", scope, "drop raise", SCHEMA, before=text)
      for module, scope, text in (("model_resources", "_validated_settings", "inactive_timeout must be between"),
                                  ("model_resources", "extend_expiry", "seconds must be between"),
                                  ("sessions", "_check_display_name", "display_name must be at most"),
                                  ("model_resources", "_validated_settings", "num_generator_replicas must be >= "),
                                  ("files", "create", "purpose must be one of"))),
    Equivalent("emulator/domain/shaping.py", "_resolve_inputs", "drop raise",
               "same answer: without a model id the next check refuses the request with the same 400 and param",
               before="inputs.model_object_id is required"),
    Equivalent("emulator/api/render.py", "model_resources", "and/or",
               "same behaviour: expires_at is set exactly while a resource is READY (set when it becomes READY, cleared "
               "when it stops or fails), so either condition shows it at the same times", before="r.expires_at is not None"),
    Equivalent("emulator/domain/model_resources.py", "on_dequeue", "constant",
               "same behaviour: a PENDING resource always has its queue_exit_at (set when it enters the queue or is "
               "held), so the fallback for None is never used", line="r.queue_exit_at or 0"),
    *(Equivalent("emulator/store/records.py", "Session", "constant",
                 "same behaviour: this field's default is never used (a session is always created with its step and "
                 "versions: 0, or the resumed checkpoint's step)", before=f"{name}=")
      for name in ("step", "trainer_step", "target_weights_version", "applied_weights_version")),
    Equivalent("emulator/api/render.py", "operation", "and/or",
               "same behaviour: an operation has an output exactly when it is COMPLETED (an output is set as it "
               "completes; only retention beyond the 256 MiB budget clears one)", before="op.output is not None"),
    Equivalent("emulator/domain/operations.py", "on_complete", None, RETENTION,
               line="# the session's queue has moved on whatever happens here"),
    # Operation retention: only the loop that forgets a session's oldest finished operations beyond the limit
    # (and whether it starts one early) is out of reach; the bookkeeping every completion runs (_finished, the
    # append in _retire) is not listed: a mutant there fails every completion.
    *(Equivalent("emulator/domain/operations.py", "_retire", None, OPERATIONS, line=line) for line in (
        "while len(done) > limit", "if old is None or old.status not in", "if tenant.idempotency.get(key) == old.id",
        "tenant.payloads.get(old.payload_id) if", "if payload is not None and payload.released_by == old.id",
        "if s is not None:", "s.evicted_operations += 1")),
    Equivalent("emulator/domain/operations.py", "_retire", "early return", OPERATIONS),
    Equivalent("emulator/domain/model_resources.py", "_shown", "comparison",
               "same value: the ASCII escape of a space or a tilde (unicode_escape) is that character itself, so "
               "moving either end of the printable range changes no quoted key", before="' ' <= c <= '~'"),
    # How long an operation runs, from its body: only the timing profiles' durations use these (a mutant that
    # makes one return None or raise elsewhere is not listed: the operation never finishes, or fails).
    Equivalent("emulator/domain/kinds/_training.py", "token_count", "comparison", TIMING + " (here: the tokens a "
               "training batch's duration counts)"),
    Equivalent("emulator/domain/kinds/sample.py", "_output_size", None, RETENTION),
    *(Equivalent("emulator/domain/kinds/__init__.py", scope, None,
                 "not reachable from the API: checks the kinds' declarations as the registry loads them (a broken "
                 "one stops the emulator's start-up)") for scope in ("_load", "_params")),
    Equivalent("emulator/domain/kinds/sample.py", "_seconds", "and/or", TIMING + " (here: how many tokens an "
               "operation's duration counts)"),
    Equivalent("emulator/domain/operations.py", "_seconds", "constant", TIMING + " (here: how long an operation whose "
               "body the model will refuse runs before it fails)"),
    Equivalent("emulator/domain/session_models.py", "<module>", "constant",
               "same behaviour: the size of a cache of frozen model specs", before="maxsize="),
    Equivalent("emulator/domain/shaping.py", "<module>", "enum swap",
               "not part of the contract: the level of the events of a job's steps is undocumented (Info or "
               "Warning, both documented levels)", before="'Info'", line="level: str ="),
    # The calibration check's empty-file test: a file with no rows never validates as a conversation dataset
    # (validate_jsonl: "the file has no rows"), so the check before it refuses such a file with the same 400 and param.
    *(Equivalent("emulator/domain/files.py", "check_calibration", kind,
                 "not reachable from the API: the check before it refuses a file with no rows (it never validates as "
                 "a conversation dataset) with the same 400 and param", before=before)
      for kind, before in (("and/or", "f.size == 0"), ("drop raise", "is empty"))),
    Equivalent("emulator/domain/sessions.py", "_lora_config", "comparison",
               "same behaviour: the default LoRA config interned once per tenant is a cache; a create that skips it "
               "builds the same default config, checked against the same max_rank", before="interned.rank <="),
    Equivalent("emulator/domain/sessions.py", "_lora_config", "drop raise",
               "not part of the contract: what a server does with lora_config on a full-weight resource is "
               "undocumented (the SDK says a seed is \"ignored when LoRA is off\", so it may well accept it)",
               before="lora_config is only valid on a LoRA-enabled"),
    Equivalent("emulator/domain/kinds/weights_sync.py", "_execute", "enum swap",
               "same behaviour: weight_sync_type is required by the request schema (a 400 before the domain runs), "
               "so this default is never used", line='request.weight_sync_type or'),
    Equivalent("emulator/domain/model_resources.py", "_optimizer", "comparison",
               "same behaviour: an optimizer config with neither adam nor muon is adam wherever it is read (the answer "
               "shows {adam: {}}, the trainer steps with adam), so leaving out the explicit default changes no answer "
               "(only a state export, of the control plane, shows adam: null)", before="adam is None"),
    Equivalent("emulator/domain/kinds/weights_sync.py", "_seconds", "enum swap",
               "not part of the contract: how long a weights sync takes (the default there is never used either: the "
               "request schema requires weight_sync_type)", line='request.weight_sync_type in ('),
)


STATE_TESTS = ("tests/test_recording_persistence.py", "tests/test_import_fuzz.py", "tests/test_journal.py")
WARNING_TESTS = ("tests/test_api_loss_params.py", "tests/test_hostile.py")
CONTROL_PLANE: tuple[ControlPlane, ...] = (
    # --limits-file (and EMULATOR_LIMITS_FILE): parsed at start-up; tests/test_limits.py serves with bad and good files.
    *(ControlPlane("emulator/domain/limits.py", scope, None, "limits file", ("tests/test_limits.py",))
      for scope in ("Limits.from_mapping", "_known", "_count")),
    # Timing overrides: --profile-file at start-up, and a tenant's POST /_emulator/profile {"overrides": ...}.
    ControlPlane("emulator/domain/durations.py", "Timing.with_overrides", None, "timing overrides",
                 ("tests/test_tenant_control.py",)),
    # State export / import (GET/PUT /_emulator/state, --state-file): the records' own (de)serialisation, and the
    # file statuses only the state document's schema reads.
    ControlPlane("emulator/store/records.py", "to_dict", None, "state export and import", STATE_TESTS),
    ControlPlane("emulator/store/records.py", "from_dict", None, "state export and import", STATE_TESTS),
    ControlPlane("emulator/store/records.py", "<module>", "enum swap", "state export and import", STATE_TESTS,
                 line="FILE_STATUSES ="),
    # ... and what a state import checks of an operation kind's stored request and output (the kinds' registry).
    ControlPlane("emulator/domain/kinds/__init__.py", "decode_body", None, "state export and import", STATE_TESTS),
    ControlPlane("emulator/domain/kinds/__init__.py", "<module>", "enum swap", "state export and import", STATE_TESTS,
                 line="_UNFINISHED ="),
    ControlPlane("emulator/domain/kinds/_checkpoint.py", "check_output", None, "state export and import", STATE_TESTS),
    ControlPlane("emulator/domain/kind.py", "counter_output", "constant", "state export and import", STATE_TESTS),
    # Scheduled actions (POST /_emulator/clock/actions) and what comes next on a tenant's timeline (the clock's
    # moves to the next event: POST /_emulator/clock/next, the auto clock): reached only through the control plane
    # or a clock mode the contract suite does not run (its tenants have manual clocks of their own).
    ControlPlane("emulator/domain/actions.py", "*", None, "scheduled actions",
                 ("tests/test_clock_control.py", "tests/test_refused_control.py")),
    ControlPlane("emulator/store/records.py", "<module>", "enum swap", "scheduled actions",
                 ("tests/test_clock_control.py", "tests/test_refused_control.py"), before="A."),
    ControlPlane("emulator/domain/upcoming.py", "*", None, "clock moves to the next event",
                 ("tests/test_clock_control.py", "tests/test_plugin_clock.py")),
    # Fault rules (POST /_emulator/faults): which resource a resource_error rule fired on a session's request fails.
    ControlPlane("emulator/domain/fault_effects.py", "apply", "comparison", "fault rules", ("tests/test_faults.py",),
                 line="resource_id = named.resource_id if named.resource_id is not None"),
    # The emulator's own choices where the contract leaves any answer open: real behaviour a client of the emulator
    # sees, that no contract check may fix (another server conforms with another choice); its unit tests do.
    # Accepted-and-ignored fields: the X-Emulator-Warning a client sees, and the 400 of --strict (an opt-in the
    # contract suite cannot detect: a strict server refuses what the real service accepts).
    *(ControlPlane(file, scope, kind, "warnings and --strict", WARNING_TESTS, line=line)
      for file, scope, kind, line in (("emulator/domain/context.py", "Ctx.ignored", None, None),
                                      ("emulator/domain/model_resources.py", "_optimizer", None, "dropped"))),
    # Bounds the emulator refuses at submit (400) where the real service's are unpublished: whether a sample of more
    # than its context length, or of more num_samples than the 2,000,000 tokens one request may generate, is refused
    # at submit or fails when it runs is undocumented (the contract accepts both: flows.op_refused).
    *(ControlPlane("emulator/domain/kinds/sample.py", "_check_bounds", kind, "bounds refused at submit",
                   ("tests/test_hostile.py",), before=before)
      for kind, before in (("comparison", "num_samples > MAX_SAMPLE_TOKENS"), ("drop raise", "num_samples:"),
                           ("drop raise", "sampling_params.max_tokens:"))),
    # Inputs released once read, to bound memory (a finished forward-backward's body, an uploaded payload): no answer
    # shows an operation's request, and how long a payload lives is undocumented (a server that kept it conforms).
    ControlPlane("emulator/domain/common.py", "release_inputs", None, "released inputs",
                 ("tests/test_api_sessions_operations.py",)),
    # Operation retention: how many finished operations a session forgot (the emulator's own 404 code
    # operation_not_retained, and the state export).
    ControlPlane("emulator/store/records.py", "Session", "constant", "operation retention", ("tests/test_hostile.py",),
                 before="evicted_operations="),
    # A dataset's validation report: where it says a file breaks a rule (the line it counts from 1; the wording of
    # FileValidationReport.error is the emulator's).
    ControlPlane("emulator/domain/files.py", "validate_jsonl", "constant", "dataset validation", ("tests/test_files.py",),
                 line="enumerate("),
    # The tokenizers (the size of Qwen3.5's, the ids the generator may sample; the end-of-text ids a sample stops at):
    # no answer states them; the unit tests pin them to the real tokenizers'.
    *(ControlPlane("emulator/domain/catalog.py", "<module>", "constant", "tokenizers",
                   ("tests/test_compute_sampling.py", "tests/test_sdk_tokenizer.py"), line=line)
      for line in ("QWEN35_TOKENIZER_SIZE =", "QWEN35_END_OF_TEXT =", "QWEN35_IM_END =")),
)


def match(m: Mutant) -> Equivalent | None:
    return next((row for row in TABLE if row.matches(m)), None)


def control_plane(m: Mutant) -> ControlPlane | None:
    """The control-plane row of a mutant (its unit tests), or None for a mutant of the vendor API."""
    return next((row for row in CONTROL_PLANE if row.matches(m)), None)
