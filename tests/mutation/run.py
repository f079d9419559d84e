"""``python -m tests.mutation`` (``make mutation``): how much of the emulator's behaviour its tests notice.

Two figures. **The vendor API**: samples mutants of the emulator's domain, render and records code with a fixed
seed (:mod:`tests.mutation.mutants`), and for each one runs the whole contract suite against a fresh
emulator built from a mutated *copy* of the package (the working tree is never touched): the copy
sits in a temporary directory that comes first on ``PYTHONPATH``, so the emulator the suite starts
imports it. **The emulator's control plane** (fault rules, state export and import, the limits file, timing
overrides: :data:`tests.mutation.equivalent.CONTROL_PLANE`), which no contract check can reach: every such
mutant (or ``--control-plane-sample`` of them) runs against the unit test files its row names, from a copy of
``tests/`` beside the mutated package, and counts in a figure of its own.

The suite runs with ``-x`` (a mutant's run ends at its first failure), in two stages that together are the
whole suite: every module but the generated Schemathesis ones (``test_stateless``,
``test_stateful``: most of the suite's time, and most of its start-up, which builds their strategies),
then, only for a mutant the first stage lets through, those two (:data:`STAGES`). Within a stage the
quicker tests go first (:mod:`tests.mutation.ordering`).

A mutant is **killed** when the suite fails (a test failed, or the emulator could not start or
answer: a client notices that too, and so does a run that hangs past ``--timeout``), **survived**
when it passes, **equivalent** when :mod:`tests.mutation.equivalent` lists it with a reason (not run
unless ``--run-equivalent``). Kill rate = killed / (killed + survived), for each figure. First the unmutated
copy must pass (the baseline: the suite, and each set of unit tests), or nothing is measured.

Writes ``tests/mutation/mutation.json`` and ``MUTATION.md`` (the figures, every survivor, every equivalent with
its reason, and what killed the rest), unless ``--no-write``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.mutation import equivalent, report
from tests.mutation.mutants import DEFAULT_TARGETS, Mutant, enumerate_mutants, mutated_source

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SEED = 29
# 135 of the ~1,100 candidates of the vendor API: at least 100 that are not known equivalents.
DEFAULT_SAMPLE = 135
# Measured on this 2-core machine, shared with other work (load 8-10): the same 8 mutants (first stage) took
# 193 s one at a time and 140 s two at a time. A run waits on process start-up and on the emulator it starts,
# so two overlap well; more than the cores would only queue.
DEFAULT_JOBS = 2


@dataclass
class Outcome:
    mutant: Mutant
    status: str                      # killed | survived | equivalent | error
    how: str = ""                    # killed: "test" | "start-up" | "timeout"; equivalent: the reason
    test: str = ""                   # the first failing test
    message: str = ""
    seconds: float = 0.0
    code: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {**self.mutant.to_json(), "status": self.status, "how": self.how, "test": self.test,
                "message": self.message, "seconds": round(self.seconds, 1), "exit_code": self.code}


@dataclass
class Worker:
    """A copy of the ``emulator`` package in its own directory, mutated one file at a time."""

    root: Path
    number: int
    first_only: bool = False
    base: Path = field(init=False)

    def __post_init__(self) -> None:
        self.base = Path(tempfile.mkdtemp(prefix=f"mutation-w{self.number}-"))
        shutil.copytree(self.root / "emulator", self.base / "emulator",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        # The unit tests find the repository at their parent directory: a copy of them here, beside the mutated
        # package, and the rest of the checkout (fixtures, spec, pyproject.toml) linked in, unchanged.
        shutil.copytree(self.root / "tests", self.base / "tests", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        for entry in self.root.iterdir():
            if not entry.name.startswith(".") and entry.name not in ("emulator", "tests"):
                (self.base / entry.name).symlink_to(entry)
        probe = subprocess.run([sys.executable, "-c", "import emulator; print(emulator.__file__)"],
                               capture_output=True, text=True, env=self.env(), cwd=self.base, check=True)
        if not probe.stdout.strip().startswith(str(self.base)):
            raise RuntimeError(f"the copy at {self.base} is not what `import emulator` finds ({probe.stdout.strip()})")

    def env(self) -> dict[str, str]:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env["PYTHONPATH"] = os.pathsep.join([str(self.base), *filter(None, [os.environ.get("PYTHONPATH")])])
        return env

    def _write(self, rel: str, text: str) -> None:
        path = self.base / rel
        path.write_text(text)
        for stale in (path.parent / "__pycache__").glob(f"{path.stem}.*.pyc"):
            stale.unlink()  # never let a cached compile of another version stand in for this one

    def run(self, mutant: Mutant | None, source: str | None, suite_args: list[str], timeout: float,
            unit_tests: tuple[str, ...] = ()) -> Outcome:
        """The contract suite against the mutant, or with ``unit_tests`` those unit test files."""
        placeholder = mutant or _BASELINE
        if mutant is not None and source is not None:
            self._write(mutant.file, source)
        try:
            if unit_tests:
                return _run_unit(self, placeholder, unit_tests, suite_args, timeout)
            return _run_suite(self, placeholder, suite_args, timeout)
        finally:
            if mutant is not None:
                self._write(mutant.file, (self.root / mutant.file).read_text())

    def close(self) -> None:
        shutil.rmtree(self.base, ignore_errors=True)


_BASELINE = Mutant("(none)", "(baseline)", "baseline", "", "", 0, 0, -1)


# The generated Schemathesis modules take most of the suite's time, and most of its start-up (building the
# strategies of every operation on import): they run in a second stage, only for what the first lets through.
SLOW = ("test_stateless", "test_stateful")
STAGES = ([f"--ignore-glob=*{m}.py" for m in SLOW], ["-k", " or ".join(SLOW)])


def stages(suite_args: list[str], first_only: bool = False) -> list[list[str]]:
    """The runs that make up one run of the whole suite (one, when the caller selects tests with -k)."""
    if any(a == "-k" or a.startswith("-k") for a in suite_args):
        return [list(suite_args)]
    chosen = STAGES[:1] if first_only else STAGES
    return [[*suite_args, *stage] for stage in chosen]


RUNNING: set[subprocess.Popen[str]] = set()  # suite runs in flight, ended if the tool is interrupted


def _run_suite(worker: Worker, mutant: Mutant, suite_args: list[str], timeout: float) -> Outcome:
    started = time.monotonic()
    outcome = Outcome(mutant, "survived")
    for args in stages(suite_args, worker.first_only):
        outcome = _run_stage(worker, mutant, args, timeout - (time.monotonic() - started))
        if outcome.status != "survived":
            break
    outcome.seconds = time.monotonic() - started
    return outcome


def _judged(mutant: Mutant, cmd: list[str], cwd: Path, env: dict[str, str], report_dir: Path, timeout: float
            ) -> Outcome | tuple[int, str, str, str, float]:
    """Run ``cmd`` in its own process group (a timeout ends what it started, the emulator too) and read its
    JUnit report: (exit code, output, first failing test, its message, seconds), or the timeout's Outcome."""
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    RUNNING.add(proc)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        proc.communicate()
        return Outcome(mutant, "killed", "timeout", message=f"no verdict within {timeout:.0f} s",
                       seconds=time.monotonic() - started)
    finally:
        if proc.poll() is None:
            _kill_group(proc)
        RUNNING.discard(proc)
    seconds = time.monotonic() - started
    test, message = _first_failure(report_dir / "junit.xml")
    shutil.rmtree(report_dir, ignore_errors=True)
    return proc.returncode, output or "", test, message, seconds


def _run_stage(worker: Worker, mutant: Mutant, suite_args: list[str], timeout: float) -> Outcome:
    if timeout <= 0:
        return Outcome(mutant, "killed", "timeout", message="no verdict within the timeout", seconds=0.0)
    report_dir = Path(tempfile.mkdtemp(prefix="mutation-report-", dir=worker.base))
    cmd = [sys.executable, "-m", "contract_tests", "--report", str(report_dir), "-x", "-p", "tests.mutation.ordering",
           *suite_args]
    ran = _judged(mutant, cmd, worker.root, worker.env(), report_dir, timeout)
    if isinstance(ran, Outcome):
        return ran
    code, output, test, message, seconds = ran
    if code == 0:
        return Outcome(mutant, "survived", seconds=seconds, code=code)
    if code == 1:
        return Outcome(mutant, "killed", "test", test, message, seconds, code)
    if code == 4 and "cannot use the target" in output:
        return Outcome(mutant, "killed", "start-up", message=_tail(output), seconds=seconds, code=code)
    return Outcome(mutant, "error", f"exit {code}", test, message or _tail(output), seconds, code)


def _run_unit(worker: Worker, mutant: Mutant, tests: tuple[str, ...], unit_args: list[str], timeout: float
              ) -> Outcome:
    """The unit test files of a control-plane mutant, from the worker's copy (its ``tests`` import the mutated
    package: the copy's directory is the first entry of ``sys.path``)."""
    report_dir = Path(tempfile.mkdtemp(prefix="mutation-unit-", dir=worker.base))
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "--junitxml", str(report_dir / "junit.xml"), *unit_args, *tests]
    ran = _judged(mutant, cmd, worker.base, worker.env(), report_dir, timeout)
    if isinstance(ran, Outcome):
        return ran
    code, output, test, message, seconds = ran
    if code == 0:
        return Outcome(mutant, "survived", seconds=seconds, code=code)
    if code == 1:
        return Outcome(mutant, "killed", "test", test, message, seconds, code)
    if code == 2:  # errors while collecting: the mutated package no longer imports (the baseline did)
        return Outcome(mutant, "killed", "collection", test, message or _tail(output), seconds, code)
    return Outcome(mutant, "error", f"exit {code}", test, message or _tail(output), seconds, code)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=10)
            return
        except subprocess.TimeoutExpired:
            continue


def _tail(output: str, lines: int = 6) -> str:
    return " | ".join(line.strip() for line in output.strip().splitlines()[-lines:])[:600]


def _first_failure(junit: Path) -> tuple[str, str]:
    """The first failed or errored test case of a run and the first line of its message."""
    if not junit.exists():
        return "", ""
    try:
        tree = ET.parse(junit)
    except ET.ParseError:
        return "", ""
    for case in tree.iter("testcase"):
        for tag in ("failure", "error"):
            node = case.find(tag)
            if node is not None:
                name = f"{case.get('classname', '')}::{case.get('name', '')}".removeprefix("::")
                text = (node.get("message") or node.text or "").strip().splitlines()
                return name, (text[0] if text else "")[:400]
    return "", ""


# --- the run ----------------------------------------------------------------------------------------

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tests.mutation", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"sampling seed (default {DEFAULT_SEED})")
    p.add_argument("--sample", type=int, default=DEFAULT_SAMPLE,
                   help=f"mutants of the vendor API to sample (default {DEFAULT_SAMPLE}; 0: every candidate)")
    p.add_argument("--control-plane-sample", type=int, default=0,
                   help="mutants of the emulator's control plane to sample, each run against its unit tests "
                        "(default 0: every one)")
    p.add_argument("--only", action="append", default=[],
                   help="run only the mutants whose id is this, or whose key contains it (repeatable; no sampling)")
    p.add_argument("--files", action="append", default=None,
                   help=f"glob of files to mutate, repository-relative (repeatable; default {', '.join(DEFAULT_TARGETS)})")
    p.add_argument("--jobs", type=int, default=DEFAULT_JOBS,
                   help=f"mutants run at once, each with its own copy (default {DEFAULT_JOBS})")
    p.add_argument("--timeout", type=float, default=None,
                   help="seconds a mutant's run may take before it counts as killed (hung); default 3x the baseline")
    p.add_argument("--suite-arg", action="append", default=[],
                   help="extra argument for `python -m contract_tests` (repeatable), e.g. --suite-arg=-k --suite-arg=X")
    p.add_argument("--unit-arg", action="append", default=[],
                   help="extra argument for the unit test runs of the control-plane mutants (repeatable)")
    p.add_argument("--run-equivalent", action="store_true", help="also run the mutants the table calls equivalent")
    p.add_argument("--first-stage-only", action="store_true",
                   help="a quicker, partial measure: leave out the generated Schemathesis tests (test_stateless, "
                        "test_stateful); never for the figures of MUTATION.md")
    p.add_argument("--skip-baseline", action="store_true",
                   help="do not first check that the suite passes against the unmutated copy (quick smoke runs only)")
    p.add_argument("--list", action="store_true", help="print the sampled mutants and exit")
    p.add_argument("--no-write", action="store_true", help="print the results only (no tests/mutation/mutation.json, MUTATION.md)")
    p.add_argument("--json", default=str(ROOT / "tests" / "mutation" / "mutation.json"))
    p.add_argument("--markdown", default=str(ROOT / "MUTATION.md"))
    return p.parse_args(argv)


def select(candidates: list[Mutant], args: argparse.Namespace) -> tuple[list[Mutant], list[Mutant]]:
    """(mutants of the vendor API, for the contract suite; mutants of the control plane, for the unit tests)."""
    if args.only:
        chosen = [m for m in candidates if any(o == m.id or o in m.key for o in args.only)]
        missing = [o for o in args.only if not any(o == m.id or o in m.key for m in candidates)]
        if missing:
            raise SystemExit(f"no mutant matches {missing} (the code may have changed; see --list)")
        return ([m for m in chosen if equivalent.control_plane(m) is None],
                [m for m in chosen if equivalent.control_plane(m) is not None])
    api = [m for m in candidates if equivalent.control_plane(m) is None]
    plane = [m for m in candidates if equivalent.control_plane(m) is not None]
    return _sample(api, args.sample, args.seed), _sample(plane, args.control_plane_sample, args.seed)


def _sample(pool: list[Mutant], n: int, seed: int) -> list[Mutant]:
    return list(pool) if n <= 0 or n >= len(pool) else random.Random(seed).sample(pool, n)


def log(message: str) -> None:
    print(f"[mutation {time.strftime('%H:%M:%S')}] {message}", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    candidates, vocab = enumerate_mutants(ROOT, args.files or DEFAULT_TARGETS)
    chosen, plane = select(candidates, args)
    if args.list:
        for m in chosen:
            row = equivalent.match(m)
            print(f"{m.id}  {m.describe()}" + (f"  [equivalent: {row.reason}]" if row else ""))
        for m in plane:
            cp = equivalent.control_plane(m)
            assert cp is not None
            print(f"{m.id}  {m.describe()}  [control plane, {cp.area}: {' '.join(cp.tests)}]")
        print(f"{len(chosen)} mutants of the vendor API and {len(plane)} of the control plane, of {len(candidates)} "
              "candidates")
        return 0
    # The suite's own seed (its generated tests) is fixed too, so that a run is repeatable mutant by mutant.
    suite_args = list(args.suite_arg)
    if not any(a == "--seed" or a.startswith("--seed=") for a in suite_args):
        suite_args = ["--seed", str(args.seed), *suite_args]
    started = time.monotonic()
    outcomes: list[Outcome] = []
    to_run: list[tuple[Mutant, str, tuple[str, ...]]] = []   # (mutant, its source, unit tests or () for the suite)
    for m in chosen:
        row = equivalent.match(m)
        if row is not None and not args.run_equivalent:
            outcomes.append(Outcome(m, "equivalent", row.reason))
            continue
        to_run.append((m, mutated_source(ROOT, m, vocab), ()))
    for m in plane:
        cp = equivalent.control_plane(m)
        assert cp is not None
        to_run.append((m, mutated_source(ROOT, m, vocab), cp.tests))
    unit_sets = sorted({tests for _, _, tests in to_run if tests})
    log(f"{len(chosen)} mutants of the vendor API and {len(plane)} of the control plane, of {len(candidates)} "
        f"candidates (seed {args.seed}); {len(to_run)} to run, {len(outcomes)} known equivalent; {args.jobs} at a time")
    workers = [Worker(ROOT, i, args.first_stage_only) for i in range(max(1, min(args.jobs, len(to_run) or 1)))]
    signal.signal(signal.SIGTERM, _interrupted)
    unit_timeouts: dict[tuple[str, ...], float] = {}
    try:
        if args.skip_baseline:
            baseline = Outcome(_BASELINE, "skipped")
            timeout = args.timeout or 900
            unit_timeouts = {tests: args.timeout or 900 for tests in unit_sets}
        else:
            baseline = Outcome(_BASELINE, "skipped")
            if any(not tests for _, _, tests in to_run):
                baseline = workers[0].run(None, None, suite_args, timeout=args.timeout or 900)
                if baseline.status != "survived":
                    log(f"the contract suite does not pass against the unmutated copy ({baseline.status}, "
                        f"{baseline.how}): {baseline.test} {baseline.message}")
                    return 2
                log(f"baseline: the suite passes against the unmutated copy in {baseline.seconds:.0f} s")
            timeout = args.timeout or max(180.0, 3 * baseline.seconds)
            for tests in unit_sets:
                unit = workers[0].run(None, None, args.unit_arg, timeout=args.timeout or 900, unit_tests=tests)
                if unit.status != "survived":
                    log(f"the unit tests {' '.join(tests)} do not pass against the unmutated copy ({unit.status}, "
                        f"{unit.how}): {unit.test} {unit.message}")
                    return 2
                unit_timeouts[tests] = args.timeout or max(120.0, 3 * unit.seconds)
                log(f"baseline: {' '.join(tests)} pass against the unmutated copy in {unit.seconds:.0f} s")
        free = list(workers)
        lock = threading.Lock()
        done = [0]

        def one(item: tuple[Mutant, str, tuple[str, ...]]) -> Outcome:
            mutant, source, tests = item
            with lock:
                worker = free.pop()
            try:
                if tests:
                    outcome = worker.run(mutant, source, args.unit_arg, unit_timeouts[tests], unit_tests=tests)
                else:
                    outcome = worker.run(mutant, source, suite_args, timeout)
            finally:
                with lock:
                    free.append(worker)
            with lock:
                done[0] += 1
                log(f"{done[0]}/{len(to_run)} {outcome.status:8} {outcome.seconds:5.0f} s  "
                    + ("[unit tests] " if tests else "") + mutant.describe()
                    + (f"  <- {outcome.test or outcome.how}" if outcome.status == "killed" else ""))
            return outcome

        pool = ThreadPoolExecutor(max_workers=len(workers))
        try:
            ran = list(pool.map(one, to_run))
        except KeyboardInterrupt:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown()
    except KeyboardInterrupt:
        log("interrupted: ending the runs in flight")
        for proc in list(RUNNING):
            _kill_group(proc)
        return 130
    finally:
        for w in workers:
            w.close()
    outcomes.extend(o for o, (_, _, tests) in zip(ran, to_run, strict=True) if not tests)
    plane_outcomes = [o for o, (_, _, tests) in zip(ran, to_run, strict=True) if tests]
    elapsed = time.monotonic() - started
    api_candidates = [m for m in candidates if equivalent.control_plane(m) is None]
    result = summarize(args, api_candidates, chosen, outcomes, baseline.seconds, elapsed, suite_args)
    result["control_plane"] = summarize_control_plane(candidates, plane, plane_outcomes, args)
    s, c = result["summary"], result["control_plane"]["summary"]
    log(f"vendor API, the contract suite: killed {s['killed']}, survived {s['survived']}, equivalent "
        f"{s['equivalent']}, errors {s['errors']}: kill rate {report.shown_rate(s['kill_rate_percent'])} of "
        f"{s['non_equivalent']} non-equivalent mutants")
    log(f"control plane, the unit tests: killed {c['killed']}, survived {c['survived']}, errors {c['errors']}: kill "
        f"rate {report.shown_rate(c['kill_rate_percent'])} of {c['killed'] + c['survived']} mutants ({elapsed / 60:.1f} min "
        "in all)")
    for o in [*outcomes, *plane_outcomes]:
        if o.status in ("survived", "error") or (o.status == "killed" and args.run_equivalent
                                                  and equivalent.match(o.mutant)):
            log(f"{o.status}: {o.mutant.id} {o.mutant.describe()} {o.how} {o.message[:200]}")
    if not args.no_write:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
        Path(args.markdown).write_text(report.markdown(result))
        log(f"wrote {args.json} and {args.markdown}")
    return 1 if s["errors"] or c["errors"] else 0


def summarize_control_plane(candidates: list[Mutant], plane: list[Mutant], outcomes: list[Outcome],
                            args: argparse.Namespace) -> dict[str, Any]:
    """The unit tests' figure on the control-plane mutants, by area."""
    count = {k: sum(1 for o in outcomes if o.status == k) for k in ("killed", "survived", "error")}
    scored = count["killed"] + count["survived"]
    by_area: dict[str, dict[str, Any]] = {}
    for m in candidates:
        cp = equivalent.control_plane(m)
        if cp is not None:
            row = by_area.setdefault(cp.area, {"tests": list(cp.tests), "candidates": 0, "killed": 0, "survived": 0,
                                               "error": 0})
            row["candidates"] += 1
    for o in outcomes:
        cp = equivalent.control_plane(o.mutant)
        assert cp is not None
        by_area[cp.area][o.status] += 1
    order = {m.id: i for i, m in enumerate(sorted(plane, key=lambda m: (m.file, m.line, m.kind)))}
    return {
        "selection": {"sample": len(plane)} if args.control_plane_sample > 0 and not args.only else
                     {"every": len(plane)},
        "unit_args": list(args.unit_arg),
        "summary": {"run": len(outcomes), "killed": count["killed"], "survived": count["survived"],
                    "errors": count["error"],
                    "kill_rate_percent": round(100 * count["killed"] / scored, 1) if scored else None},
        "by_area": by_area,
        "killed_by": _killed_by(outcomes),
        "results": [o.to_json() for o in sorted(outcomes, key=lambda o: order.get(o.mutant.id, 0))],
    }


def _interrupted(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _git_head() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def summarize(args: argparse.Namespace, candidates: list[Mutant], chosen: list[Mutant], outcomes: list[Outcome],
              baseline_seconds: float, elapsed: float, suite_args: list[str]) -> dict[str, Any]:
    order = {m.id: i for i, m in enumerate(sorted(chosen, key=lambda m: (m.file, m.line, m.kind)))}
    outcomes = sorted(outcomes, key=lambda o: order.get(o.mutant.id, 0))
    count = {k: sum(1 for o in outcomes if o.status == k) for k in ("killed", "survived", "equivalent", "error")}
    scored = count["killed"] + count["survived"]
    by_kind: dict[str, dict[str, int]] = {}
    for o in outcomes:
        row = by_kind.setdefault(o.mutant.kind, {"killed": 0, "survived": 0, "equivalent": 0, "error": 0})
        row[o.status] += 1
    total_by_kind: dict[str, int] = {}
    for m in candidates:
        total_by_kind[m.kind] = total_by_kind.get(m.kind, 0) + 1
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": _git_head(),
        "seed": args.seed,
        "selection": {"only": args.only} if args.only else {"sample": len(chosen)},
        "files": list(args.files or DEFAULT_TARGETS),
        "candidates": len(candidates),
        "candidates_by_kind": total_by_kind,
        "suite_runs": [["-x", "-p", "tests.mutation.ordering", *a] for a in stages(suite_args, args.first_stage_only)],
        "jobs": args.jobs,
        "baseline_seconds": round(baseline_seconds, 1),
        "elapsed_minutes": round(elapsed / 60, 1),
        "summary": {"sampled": len(chosen), "killed": count["killed"], "survived": count["survived"],
                    "equivalent": count["equivalent"], "errors": count["error"], "non_equivalent": scored,
                    "kill_rate_percent": round(100 * count["killed"] / scored, 1) if scored else None},
        "by_kind": by_kind,
        "killed_by": _killed_by(outcomes),
        "results": [o.to_json() for o in outcomes],
    }


def _killed_by(outcomes: list[Outcome]) -> dict[str, int]:
    out: dict[str, int] = {}
    for o in outcomes:
        if o.status == "killed":
            module = o.test.split("::")[0].rsplit(".", 1)[-1] if o.test else f"({o.how})"
            out[module] = out.get(module, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))



