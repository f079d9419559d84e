"""Contract suite for Together AI's RL / post-training HTTP API (``openapi.yaml``).

It judges ANY implementation: the local emulator, the real service, a third party.

Run it
======

    python -m contract_tests                                   # starts `python -m emulator serve --port 0`
    python -m contract_tests --base-url URL --token TOKEN      # any other implementation
        [--second-token T2] [--report DIR] [--max-examples N] [--seed N] [--allow-create-resources]
        [--keep-state] [--realistic-base-url URL]
    pytest --pyargs contract_tests --base-url URL --token TOKEN    # the same tests under plain pytest
    pytest -p contract_tests.plugin ...                        # the plugin by name; in a checkout also
    pytest contract_tests --base-url URL --token TOKEN         # (the package's conftest registers it)

Exit status 0 only when the target conforms; a run that executed no test, could not use its target, hit
a collection error or was interrupted does not (see "The verdict" below). Unknown options of
``python -m contract_tests`` go to pytest (``-k``, ``-x``, ``-v``, ``--tb=long``). Every option can also
come from the environment (:mod:`contract_tests.environment`): ``CONTRACT_BASE_URL``, ``CONTRACT_TOKEN``,
``CONTRACT_SECOND_TOKEN``, ``CONTRACT_ADMIN_TOKEN``, ``CONTRACT_SEED``, ``CONTRACT_SPEC``, then the SDK's
``TOGETHER_BASE_URL`` and ``TOGETHER_API_KEY``. Without ``--base-url`` the suite starts the emulator itself on a free
port with a tokens file (two tenants, unknown tokens refused), reads its URL from the first line it
prints and stops it at the end; ``--emulator-arg=ARG`` (repeatable) is passed through, e.g.
``--emulator-arg=--defect=step_decreases`` (TEST-ONLY defects, see ``emulator/tools/defects.py``) or
``--emulator-arg="--profile realistic" --emulator-arg="--clock manual"``.

The report (``--report DIR``, default ``reports/contract`` for ``python -m contract_tests``):
``junit.xml`` (one test case per test, one per operation for the generated tests), ``summary.json``
(every operationId x every check: passed/failed counts and the first failure messages) and
``summary.md`` (the same as readable tables, plus notes, failures and skips). Checks a run cannot make
against its target are listed in all three as "not run", with the flag that would run them: the
realistic-profile checks need an emulator on the realistic profile, which the suite starts only when it
starts the main emulator itself (or finds on an emulator target that gives tenants timing profiles of their
own); otherwise ``--realistic-base-url URL`` names one.

The run and the verdict
=======================

A banner names the target, the seed (a random one when none is given, so that ``--seed N`` repeats the
run), the contract's version and digest and the selection in force. Long waits report progress; tracebacks
are short; setup errors with one cause (a module's shared resource) show the traceback once and name
it elsewhere; a failing test shows the request that failed as a ``curl`` command (``$CONTRACT_TOKEN`` for the
token, with a line saying to export it). The verdict is "CONFORMS" only when at least one test was executed, none failed and no check
failed, and the run had no problem: an unusable target, a collection error, an interruption or no
test executed is "DOES NOT CONFORM", named in both summaries and as an error test case
``contract_tests.verdict`` of ``junit.xml``, with a non-zero exit.

Against an emulator the suite keeps to its tenants: each gets a virtual clock of its own
(``/_emulator/clock`` with ``X-Emulator-Tenant``), so its waits move nobody else's time, and parallel
runs on one emulator, each with its own ``--token``, never disturb each other. At the end it stops the
model resources it created that are still active (on any target) and resets its tenants on an emulator
(``--keep-state`` keeps them).

Markers
=======

Every test carries exactly one of:

* ``real_safe``: runs against any implementation; needs nothing but the public API.
* ``emulator_only``: needs the emulator control plane (``/_emulator/clock`` to make time pass).
  Skipped with a reason when ``GET /_emulator/health`` is not 200.

and, when it creates billable objects (model resources, sessions, operations, shaping jobs), also:

* ``creates_resources``: skipped against a target without a control plane (the real service) unless
  ``--allow-create-resources`` is given; ``--no-create-resources`` skips them everywhere. Against
  the real service the default run therefore only reads (lists, supported-models, unknown ids,
  refused requests) and never starts a GPU.

What is checked
===============

``test_stateless``: every operation of ``openapi.yaml``, Schemathesis-generated requests (examples,
coverage and fuzzing phases, ``--max-examples`` each), judged one check at a time: no server
errors, documented status codes, documented content types, response schemas, negative data
rejected, positive data accepted, required headers, auth enforced (``ignored_auth``, or
``auth_required`` against an emulator that accepts any token), ``ErrorData`` on every error; see
:mod:`contract_tests.checks` for the expected statuses and why.

``test_stateful``: a Schemathesis state machine built from the spec's OpenAPI links (create a
resource, attach sessions, submit every operation kind, poll them under their kind, payload URLs,
shaping jobs), with the same checks plus ``use_after_free`` and ``ensure_resource_availability``.

``test_scenarios``: the seed flows by hand: list sessions with every filter (status, several
statuses, model_resources_id, created_by=me and by id, combined) and cursor pagination; create a
session; stop a resource without ``force`` (refused, nothing changes) and with it (resource and
sessions stop, a second stop is a 400 and changes nothing); stop a resource without sessions.

``test_lifecycle``: one rule per test, using the copy of the documented lifecycles in
:mod:`contract_tests.lifecycle` (the suite never imports the emulator): statuses move only along
documented edges and terminal states never revert (checked on every read of every object),
``step`` never decreases and matches the last optim-step, ``updated_at >= created_at``, created
objects are listed for their tenant and invisible to another, cursors walk every item exactly once,
operations reach a terminal state within ``--op-timeout`` (advancing ``/_emulator/clock`` when
available), COMPLETED operations carry an ``output`` of the right shape per kind, checkpoints are
registered where the docs say, ``Idempotency-Key`` replays return the original operation, stop is
idempotent in effect, unknown ids are 404, every error body is ``ErrorData``, a full-weight resource
holds one session (429), and (emulator only) idle resources expire with their sessions.

Semantic checks, one module per area (each module's docstring lists its rules): ``test_shaping``
(shaping jobs driven to ``completed`` or ``cancelled``), ``test_updates`` (PATCH merge semantics, ``updated_at``
moving with every visible change, documented defaults and bounds), ``test_resume`` (resume restores weights,
step and optimizer as ``load_optimizer`` says; what cannot resume is refused; checkpoint registration;
``base_weights_ref``), ``test_capabilities`` (what ``GET /v1/rl/supported-models`` promises per model, and
the session caps), ``test_moe_payloads`` (routed-experts keys, payload ownership), ``test_failures``
(emulator only: failures injected by named fault rules, as the API shows them) and ``test_realistic``
(emulator only: lifecycles on the ``realistic`` timing profile, driven by a manual clock, on a second
emulator the suite starts itself or ``--realistic-base-url``; "not run" in the report without either). What the API cannot tell a client they read
from the named tables of :mod:`contract_tests.capabilities`.

``tests/test_contract_selftest.py`` proves the suite can fail: it runs it against every TEST-ONLY
defect of the emulator and requires a failure that names the broken behaviour, and against the
healthy emulator and requires a pass.
"""
