"""The conformance report: a per-operation x per-check matrix, written as JSON and Markdown.

Every check the suite runs records one outcome against the operationId it judged (the stateless and
stateful Schemathesis tests record every built-in check per request; the lifecycle checks record
their own rule names). JUnit XML comes from pytest itself (``--junitxml``), plus an error test case
``contract_tests.verdict`` when the run cannot vouch for the target (see :meth:`Results.conforms`).

The verdict is honest: the target conforms only when at least one test was executed, none failed or
errored, no check failed, and the run had no problem (the target could not be used, collection failed,
the run was interrupted). Each problem is named in both summaries. Checks the run could not make against
this target (the realistic-profile ones without an emulator to run them on) are listed as "not run", with the
flag that would run them, in both summaries and as properties of junit.xml's test suite.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CROSS_CUTTING = "(cross-cutting)"
GENERATED_CHECKS = ("not_a_server_error", "status_code_conformance", "content_type_conformance",
                    "response_schema_conformance", "negative_data_rejection", "positive_data_acceptance",
                    "missing_required_header", "ignored_auth", "auth_required", "unsupported_method",
                    "use_after_free", "ensure_resource_availability", "error_envelope")


@dataclass
class Cell:
    passed: int = 0
    failed: int = 0
    messages: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "failed": self.failed, "messages": self.messages}


class Results:
    def __init__(self) -> None:
        self.cells: dict[str, dict[str, Cell]] = defaultdict(dict)
        self.tests: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self.problems: list[str] = []          # why the run cannot vouch for the target
        self.not_run: list[dict[str, str]] = []  # checks this run could not make: which, why, the flag that runs them
        self.seed: int | None = None
        self.run: dict[str, Any] = {}          # the banner: target, seed, spec, selection
        self.started = time.time()

    def record(self, operation: str | None, check: str, ok: bool, message: str | None = None) -> None:
        cell = self.cells[operation or CROSS_CUTTING].setdefault(check, Cell())
        if ok:
            cell.passed += 1
        else:
            cell.failed += 1
            if message and len(cell.messages) < 5:
                text = message.strip()
                if text not in cell.messages:
                    cell.messages.append(text[:2000])

    def add_test(self, nodeid: str, outcome: str, duration: float, markers: list[str], message: str = "",
                 curl: str | None = None) -> None:
        entry = {"nodeid": nodeid, "outcome": outcome, "duration": round(duration, 3), "markers": markers,
                 "message": message[:2000]}
        if curl:
            entry["curl"] = curl
        self.tests.append(entry)

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def skipped_checks(self, what: str, reason: str, flag: str) -> str:
        """Record a group of checks this run did not make (said as "not run" in every report); its message."""
        entry = {"checks": what, "reason": reason, "flag": flag}
        if entry not in self.not_run:
            self.not_run.append(entry)
        return f"not run: {what}: {reason}"

    def problem(self, text: str) -> None:
        """Something that keeps the run from vouching for the target (it then does not conform)."""
        if text not in self.problems:
            self.problems.append(text)

    def executed(self) -> int:
        return sum(1 for t in self.tests if t["outcome"] in ("passed", "failed"))

    def conforms(self) -> bool:
        failed = any(t["outcome"] in ("failed", "error") for t in self.tests)
        return not (self.failed or failed or self.problems) and self.executed() > 0

    def failure_count(self) -> int:
        return sum(c.failed for row in self.cells.values() for c in row.values())

    @property
    def failed(self) -> bool:
        return any(c.failed for row in self.cells.values() for c in row.values())

    def write(self, directory: Path, target: dict[str, Any], operations: list[str]) -> tuple[Path, Path]:
        directory.mkdir(parents=True, exist_ok=True)
        checks = sorted({check for row in self.cells.values() for check in row})
        rows = list(operations) + sorted(op for op in self.cells if op not in operations)
        outcomes: dict[str, int] = defaultdict(int)
        for test in self.tests:
            outcomes[test["outcome"]] += 1
        data = {
            "target": target,
            "duration_seconds": round(time.time() - self.started, 1),
            "tests": {"totals": dict(outcomes), "items": self.tests},
            "checks": checks,
            "operations": {op: {check: cell.as_json() for check, cell in sorted(self.cells.get(op, {}).items())}
                           for op in rows},
            "notes": self.notes,
            "seed": self.seed,
            "run": self.run,
            "problems": self.problems,
            "not_run": self.not_run,
            "conforms": self.conforms(),
        }
        json_path = directory / "summary.json"
        json_path.write_text(json.dumps(data, indent=2) + "\n")
        md_path = directory / "summary.md"
        md_path.write_text(self._markdown(data, rows, checks))
        return json_path, md_path

    @staticmethod
    def _cell(cell: dict[str, Any] | None) -> str:
        if cell is None:
            return "-"
        if cell["failed"]:
            return f"**FAIL {cell['passed']}/{cell['failed']}**"
        return f"{cell['passed']}/0"

    def _markdown(self, data: dict[str, Any], rows: list[str], checks: list[str]) -> str:
        verdict = "CONFORMS" if data["conforms"] else "DOES NOT CONFORM"
        target = data["target"]
        totals = ", ".join(f"{n} {k}" for k, n in sorted(data["tests"]["totals"].items())) or "no tests"
        run = data.get("run") or {}
        out = [
            "# Contract conformance report",
            "",
            f"**Verdict: {verdict}**",
            "",
        ]
        if data["problems"]:
            out += ["The run cannot vouch for the target:", ""] + [f"- **{p}**" for p in data["problems"]] + [""]
        out += [
            (f"- Target: `{target.get('base_url')}` (control plane: {target.get('control_plane')}, "
             f"started by the suite: {target.get('launched')})"),
            f"- Seed: `{data['seed']}` (repeat the run with `--seed {data['seed']}`); contract: {run.get('spec', '?')}",
            f"- Selection: {run.get('selection', '?')}; creates_resources: {run.get('creates_resources', '?')}",
            f"- Tests: {totals}; {data['duration_seconds']} s",
            "- Cells: `passed/failed` outcomes of each check against each operation; `-` not exercised.",
            "",
        ]
        if data["not_run"]:
            out += ["## Not run", ""] + [f"- **{n['checks']}**: not run: {n['reason']} (`{n['flag']}`)"
                                         for n in data["not_run"]] + [""]
        if data["notes"]:
            out += ["## Notes", ""] + [f"- {n}" for n in data["notes"]] + [""]
        generated = [c for c in GENERATED_CHECKS if c in checks]
        out += ["## Operations x generated-request checks (Schemathesis)", ""]
        out.append("| operation | " + " | ".join(generated) + " |")
        out.append("|---|" + "---|" * len(generated))
        for op in rows:
            cells = data["operations"].get(op, {})
            out.append(f"| {op} | " + " | ".join(self._cell(cells.get(c)) for c in generated) + " |")
        rules = [c for c in checks if c not in GENERATED_CHECKS]
        out += ["", "## Operations x contract rules (lifecycle checks and scenarios)", ""]
        out.append("| operation | rules judged (passed/failed) |")
        out.append("|---|---|")
        for op in rows:
            cells = data["operations"].get(op, {})
            judged = [f"{c} {self._cell(cells[c])}" for c in rules if c in cells]
            out.append(f"| {op} | " + (", ".join(judged) or "-") + " |")
        failures = [(op, check, cell) for op, cells in data["operations"].items()
                    for check, cell in cells.items() if cell["failed"]]
        if failures:
            out += ["", "## Failures", ""]
            for op, check, cell in failures:
                out.append(f"### {op} / {check}")
                out.append("")
                for message in cell["messages"]:
                    out += ["```", message, "```"]
                out.append("")
        failed_tests = [t for t in data["tests"]["items"] if t["outcome"] in ("failed", "error")]
        if failed_tests:
            out += ["", "## Failed tests", ""]
            for t in failed_tests:
                out.append(f"- `{t['nodeid']}`")
                if t.get("curl"):
                    out += ["", "  ```sh", *(f"  {line}" for line in t["curl"].splitlines()), "  ```"]
        skipped = [t for t in data["tests"]["items"] if t["outcome"] == "skipped"]
        if skipped:
            out += ["", "## Skipped tests", ""]
            out += [f"- `{t['nodeid']}`: {t['message']}" for t in skipped]
        return "\n".join(out) + "\n"


RESULTS = Results()
