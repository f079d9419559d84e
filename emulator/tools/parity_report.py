"""The parity report, in the contract suite's three formats (``contract_tests/report.py``).

``summary.json``, ``summary.md`` (an operation x check matrix, then each finding) and ``junit.xml`` (one test
case per operation and judgment). FAITHFUL only when the contract found no drift and the emulator differed
nowhere beyond the allow-list; a recording with nothing to compare is not faithful either.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from emulator.tools.parity import Report
from emulator.tools.parity_diff import RULES
from emulator.tools.parity_spec import CHECKS

EMULATOR = "emulator_parity"


def faithful(report: Report) -> bool:
    return report.faithful


def as_json(report: Report) -> dict[str, Any]:
    allowed = {id(f): reason for f, reason in report.allowed_findings}
    return {
        "recording": report.recording,
        "verdict": "FAITHFUL" if faithful(report) else "DIFFERS",
        "exchanges": report.exchanges,
        "target": report.target,
        "spec_drift": {
            "judged": report.verdicts.judged,
            "operations": _matrix(report),
            "findings": [{**f.as_json(), "allowed": allowed.get(id(f))} for f in report.verdicts.findings],
            "not_judged": [{"seq": s, "request": r, "reason": why} for s, r, why in report.verdicts.skipped],
        },
        "emulator": {
            "replayed": report.replayed,
            "compared": report.compared,
            "differences": [d.as_json() for d in report.differences],
            "not_compared": report.not_compared,
        },
        "normalization": [{"rule": r.name, "applies_to": r.applies_to, "compared_by": r.compared_by, "why": r.why}
                          for r in RULES],
        "allow_list": [a.as_json() for a in report.allowances],
    }


def _matrix(report: Report) -> dict[str, dict[str, dict[str, int]]]:
    """operation -> check -> passed/failed (the spec checks, and the emulator's comparison)."""
    rows: dict[str, dict[str, dict[str, int]]] = defaultdict(dict)
    for op, checks in report.verdicts.passed.items():
        for check, n in checks.items():
            rows[op].setdefault(check, {"passed": 0, "failed": 0})["passed"] += n
    for f in report.drift:
        rows[f.operation].setdefault(f.check, {"passed": 0, "failed": 0})["failed"] += 1
    compared: dict[str, int] = defaultdict(int)
    failed: dict[str, set[int]] = defaultdict(set)
    for d in report.failing:
        failed[d.operation].add(d.seq)
    for op, n in report.compared_per_operation.items():
        compared[op] = n
    for op in set(compared) | set(failed):
        bad = len(failed.get(op, ()))
        rows[op][EMULATOR] = {"passed": max(compared.get(op, 0) - bad, 0), "failed": bad}
    return {op: dict(sorted(cells.items())) for op, cells in sorted(rows.items())}


def _cell(cell: dict[str, int] | None) -> str:
    if cell is None:
        return "-"
    if cell["failed"]:
        return f"**FAIL {cell['passed']}/{cell['failed']}**"
    return f"{cell['passed']}/0"


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(report: Report) -> str:
    data = as_json(report)
    verdict = data["verdict"]
    target = report.target
    out = ["# Parity report", "", f"**Verdict: {verdict}**", "",
           f"- Recording: `{report.recording}` ({report.exchanges} exchanges)",
           f"- Contract: {report.verdicts.judged} exchanges judged; {len(report.drift)} finding(s) of spec drift",
           (f"- Emulator: {report.compared} exchanges replayed and compared "
            f"({'an emulator started for this run' if target.get('launched') else target.get('base_url', '-')}, "
            f"timing profile {target.get('profile') or 'the emulator default'}); {len(report.failing)} "
            f"difference(s), {len(report.differences) - len(report.failing)} allowed"
            if report.replayed else "- Emulator: not replayed (--spec-only)"),
           "- Cells: `passed/failed` of each check against each operation; `-` not exercised.", ""]
    matrix = data["spec_drift"]["operations"]
    columns = [*CHECKS, EMULATOR]
    out += ["## Operations x checks", "", "| operation | " + " | ".join(columns) + " |",
            "|---|" + "---|" * len(columns)]
    for op, cells in matrix.items():
        out.append(f"| {_md(op)} | " + " | ".join(_cell(cells.get(c)) for c in columns) + " |")
    drift = report.drift
    out += ["", "## Spec drift: where the recorded service and `openapi.yaml` disagree", ""]
    if drift:
        out += ["| operation | check | field | finding | request |", "|---|---|---|---|---|"]
        out += [f"| {_md(f.operation)} | {f.check} | `{_md(f.field)}` | {_md(f.message)} | `{_md(f.request)}` |"
                for f in drift]
    else:
        out.append("None.")
    out += ["", "## Differences: where the emulator answered otherwise", ""]
    if report.failing:
        out += ["| operation | field | rule | recorded | emulator | request |", "|---|---|---|---|---|---|"]
        out += [f"| {_md(d.operation)} | `{_md(d.field)}` | {d.rule} | `{_md(d.recorded)}` | `{_md(d.emulator)}` | "
                f"`{_md(d.request)}` |" for d in report.failing]
    else:
        out.append("None." if report.replayed else "Not replayed.")
    allowed = [d for d in report.differences if d.allowed] + [f for f, _ in report.allowed_findings]
    if allowed:
        out += ["", "## Allowed (the allow-list's reason)", ""]
        out += [f"- `{_md(d.request)}` `{_md(d.field)}`: {_md(d.allowed or '')}"
                for d in report.differences if d.allowed]
        out += [f"- `{_md(f.request)}` {f.check} `{_md(f.field)}`: {_md(reason)}" for f, reason in report.allowed_findings]
    skipped = report.not_compared + [{"request": r, "reason": why} for _, r, why in report.verdicts.skipped]
    if skipped:
        out += ["", "## Not compared", ""]
        out += [f"- `{_md(s['request'])}`: {_md(s['reason'])}" for s in skipped]
    out += ["", "## What is compared, and how (the normalization table)", "",
            "| rule | applies to | compared by | why |", "|---|---|---|---|"]
    out += [f"| {r.name} | {_md(r.applies_to)} | {_md(r.compared_by)} | {_md(r.why)} |" for r in RULES]
    return "\n".join(out) + "\n"


def junit(report: Report) -> str:
    """One test case per operation and judgment (each check of the contract, and the emulator's comparison)."""
    matrix = _matrix(report)
    suite = ElementTree.Element("testsuite", name="parity", tests="0", failures="0", errors="0")
    tests = failures = 0
    findings: dict[tuple[str, str], list[str]] = defaultdict(list)
    for f in report.drift:
        findings[(f.operation, f.check)].append(f"{f.request}: {f.message}")
    for d in report.failing:
        findings[(d.operation, EMULATOR)].append(f"{d.request}: {d.field} ({d.rule}): recorded {d.recorded}, "
                                                 f"emulator {d.emulator}")
    for op, cells in matrix.items():
        for check in cells:
            tests += 1
            case = ElementTree.SubElement(suite, "testcase", classname=f"parity.{op}", name=check)
            lines = findings.get((op, check))
            if lines:
                failures += 1
                failure = ElementTree.SubElement(case, "failure", message=f"{len(lines)} finding(s)")
                failure.text = "\n".join(lines)
    if not faithful(report) and not failures:  # nothing to compare is no pass either
        tests += 1
        failures += 1
        case = ElementTree.SubElement(suite, "testcase", classname="parity", name="verdict")
        ElementTree.SubElement(case, "failure", message="the recording holds no exchange of the API to judge")
    suite.set("tests", str(tests))
    suite.set("failures", str(failures))
    return ElementTree.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def write(report: Report, directory: Path) -> tuple[Path, Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = (directory / "summary.json", directory / "summary.md", directory / "junit.xml")
    paths[0].write_text(json.dumps(as_json(report), indent=2) + "\n")
    paths[1].write_text(markdown(report))
    paths[2].write_text(junit(report))
    return paths
