"""``together-rl-emulator parity`` (issue 41, items 2 to 5): the contract judged on a recording, the emulator
replayed against it, and reports that fit CI.

Every recording of ``fixtures/parity/`` is judged here (so ``make test`` fails when the emulator moves away
from what it recorded): the emulator-made ones must show nothing, each altered one exactly its alteration.
The rest proves each rule can fail: ids, timestamps, model outputs, pacing, what is not replayable, the
allow-list. (That the installed wheel runs it: tests/test_install.py; the README's commands: test_readme.py.)
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from emulator import fixture_files
from emulator.__main__ import main
from emulator.config import Config
from emulator.runtime import Runtime
from emulator.tools import parity, parity_report
from emulator.tools.parity_diff import RULES
from emulator.tools.parity_spec import CHECKS
from emulator.tools.recording import Recorder, RecordingApp, load_recording
from emulator.tools.server import build_server_app
from tests.recordings import ALTERED, PARITY, PARITY_DIRECTORY, altered

EMULATOR_MADE = tuple(sorted(PARITY))
# What each altered recording must show, and nothing else: the contract's findings (seq, check, field) and the
# emulator's differences (seq, rule, field).
EXPECTED: dict[str, tuple[set[tuple[int, str, str]], set[tuple[int, str, str]]]] = {
    "altered-renamed-field": ({(4, "response_schema", "body.lora_enabled"), (4, "fields_documented", "body.lora")},
                              {(4, "everything else", "body.lora"), (4, "everything else", "body.lora_enabled")}),
    "altered-extra-enum-value": ({(26, "enum_known", "body.data[0].type")},
                                 {(26, "everything else", "body.data[0].type")}),
    "altered-status-code": ({(6, "status_declared", "status")}, {(6, "status", "status")}),
    "altered-lifecycle-order": ({(4, "lifecycle_order", "body.status")},
                                {(3, "everything else", "body.status"), (4, "everything else", "body.status")}),
    "altered-missing-field": ({(7, "response_schema", "body.step")}, {(7, "everything else", "body.step")}),
}


@pytest.fixture(scope="module")
def emulator_url() -> Iterator[str]:
    """One emulator for the module; each run replays in a tenant of its own."""
    with parity.fresh_emulator() as url:
        yield url


def entries_of(name: str) -> list[dict[str, Any]]:
    return load_recording(fixture_files.resolve("parity", name))


def judged(entries: list[dict[str, Any]], url: str, **kw: Any) -> parity.Report:
    return parity.run(entries, "test", base_url=url, **kw)


def findings(report: parity.Report) -> set[tuple[int, str, str]]:
    return {(f.seq, f.check, f.field) for f in report.drift}


def differences(report: parity.Report) -> set[tuple[int, str, str]]:
    return {(d.seq, d.rule, d.field) for d in report.failing}


def test_every_parity_fixture_is_declared_here() -> None:
    assert set(fixture_files.names("parity")) == set(EMULATOR_MADE) | set(EXPECTED) == set(PARITY) | set(ALTERED)


@pytest.mark.parametrize("name", EMULATOR_MADE)
def test_an_emulator_made_recording_shows_no_difference(name: str, emulator_url: str) -> None:
    entries = entries_of(name)
    report = judged(entries, emulator_url)
    assert findings(report) == set() and differences(report) == set(), parity_report.markdown(report)
    assert report.verdicts.judged > 40 and report.compared > 40 and parity_report.faithful(report)
    # Everything of the vendor's API was compared; only the emulator's own control calls were not.
    assert {n["reason"] for n in report.not_compared} <= {"not the vendor's API (the emulator's control plane or docs)"}
    assert report.compared + len(report.not_compared) == len(entries)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_an_altered_recording_shows_exactly_its_alteration(name: str, emulator_url: str) -> None:
    report = judged(entries_of(name), emulator_url)
    want_findings, want_differences = EXPECTED[name]
    assert findings(report) == want_findings, parity_report.markdown(report)
    assert differences(report) == want_differences, parity_report.markdown(report)
    assert not parity_report.faithful(report)


@pytest.mark.parametrize("name", sorted(ALTERED))
def test_an_altered_recording_is_its_base_with_one_change(name: str) -> None:
    base = PARITY_DIRECTORY / f"{ALTERED[name].base}.jsonl"
    assert altered(name, base) == (PARITY_DIRECTORY / f"{name}.jsonl").read_text(), \
        "re-make it: .venv/bin/python -m tests.recordings parity/" + name
    changed = [a["seq"] for a, b in zip(load_recording(str(base)), entries_of(name)) if a != b]
    assert changed == sorted({seq for seq, _, _ in EXPECTED[name][0] | EXPECTED[name][1]})


# --- the rules, each able to fail ------------------------------------------------------------------------------

def _tour() -> list[dict[str, Any]]:
    return copy.deepcopy(entries_of("api-tour"))


def _edit(entries: list[dict[str, Any]], seq: int, change: Any) -> list[dict[str, Any]]:
    entry = next(e for e in entries if e["seq"] == seq)
    body = orjson.loads(entry["response"]["body"]["text"])
    change(body)
    entry["response"]["body"] = {"text": orjson.dumps(body).decode()}
    return entries


def test_ids_are_mapped_and_one_that_changes_its_meaning_is_a_difference(emulator_url: str) -> None:
    entries = _tour()
    session_id = orjson.loads(next(e for e in entries if e["seq"] == 6)["response"]["body"]["text"])["id"]
    _edit(entries, 7, lambda b: b.update(model_resources_id=session_id))  # the session's id where the resource's is
    report = judged(entries, emulator_url)
    (d,) = report.failing
    assert (d.seq, d.rule, d.field) == (7, "ids", "body.model_resources_id") and session_id in d.recorded


def test_model_outputs_are_compared_by_type_and_shape_not_value(emulator_url: str) -> None:
    def other_values(b: dict[str, Any]) -> None:
        b["output"]["loss"] = 0.125
        b["output"]["metrics"]["loss/mean"] = 99.0
        b["output"]["loss_fn_outputs"][0]["tensors"]["logprobs"]["data"] = [0.0, -1.0, -2.0, -3.0]

    assert judged(_edit(_tour(), 11, other_values), emulator_url).failing == []

    def other_shape(b: dict[str, Any]) -> None:
        b["output"]["loss"] = "46.8"
        b["output"]["loss_fn_outputs"][0]["tensors"]["logprobs"]["data"] = [0.0, -1.0]

    report = judged(_edit(_tour(), 11, other_shape), emulator_url)
    assert differences(report) == {
        (11, "model output", "body.output.loss"),
        (11, "model output", "body.output.loss_fn_outputs[0].tensors.logprobs.data.length")}


def test_timestamps_are_compared_by_type(emulator_url: str) -> None:
    assert judged(_edit(_tour(), 4, lambda b: b.update(created_at="2031-05-06T07:08:09Z")), emulator_url).failing == []
    report = judged(_edit(_tour(), 4, lambda b: b.update(created_at=1767225600)), emulator_url)
    assert differences(report) == {(4, "timestamps", "body.created_at")}
    assert report.failing[0].recorded == "integer" and report.failing[0].emulator == "RFC 3339 string"


def test_the_replay_follows_the_recorded_pacing(emulator_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """api-tour lets 3 h 20 min pass: without the pacing, the download URL would not have expired nor the
    resource stopped for inactivity."""
    monkeypatch.setattr(parity.Replay, "pace", lambda self, at: None)
    report = judged(entries_of("api-tour"), emulator_url)
    assert {(d.seq, d.field) for d in report.failing if d.field in ("status", "body.status")} == {
        (50, "status"), (53, "body.status"), (54, "body.status")}


def _realistic_recording(tmp_path: Path) -> list[dict[str, Any]]:
    """A resource and a session made on the realistic profile, read as time passes (minutes of it)."""
    runtime = Runtime(Config(clock="manual", profile="realistic", seed=3))
    out = tmp_path / "realistic.jsonl"
    recorder = Recorder(str(out), runtime.clock.now, canonical=True)
    app = RecordingApp(build_server_app(runtime), recorder)
    with TestClient(app, base_url="http://127.0.0.1:8765", headers={"Authorization": "Bearer k"}) as c:
        r = c.post("/v1/rl/model-resources", json={"base_model": "Qwen/Qwen3.8-27B", "lora_enabled": True}).json()
        for seconds in (30, 60, 200):
            runtime.clock.advance(seconds)
            c.get(f"/v1/rl/model-resources/{r['id']}")
        s = c.post("/v1/rl/training-sessions", json={"model_resources_id": r["id"]}).json()
        runtime.clock.advance(25)
        c.get(f"/v1/rl/training-sessions/{s['id']}")
    recorder.close()
    return load_recording(str(out))


def test_the_timing_profile_and_the_pacing_together_reproduce_a_realistic_run(tmp_path: Path,
                                                                            emulator_url: str) -> None:
    entries = _realistic_recording(tmp_path)
    statuses = [orjson.loads(e["response"]["body"]["text"])["status"] for e in entries]
    assert len(set(statuses)) >= 4, statuses  # it went through its lifecycle
    assert judged(entries, emulator_url, profile="realistic").failing == []
    instant = judged(entries, emulator_url, profile="instant")
    assert {d.field for d in instant.failing} >= {"body.status"}  # the instant profile is ahead of the recording


def test_what_cannot_be_replayed_is_listed_not_compared(emulator_url: str) -> None:
    tour = {e["seq"]: e for e in _tour()}
    before = copy.deepcopy(tour[4])
    before["seq"] = 1
    before["request"]["path"] = "/v1/rl/model-resources/made-before-the-recording"
    proxied = copy.deepcopy(tour[1])
    proxied["seq"], proxied["note"] = 2, "answered by the proxy, not the upstream: cannot reach the upstream x"
    proxied["response"]["status"] = 502
    outside = copy.deepcopy(tour[32])
    _edit([outside], 32, lambda b: b.update(upload_url="https://r2.example.com/b/p?X-Amz-Signature=<redacted>"))
    busy = copy.deepcopy(tour[5])
    busy["seq"], busy["response"]["status"] = 5, 503  # then its retry (seq 5 again, as the recording has it)
    busy["response"]["body"] = {"text": '{"error":{"message":"overloaded","type":"server_error"}}'}
    entries = [before, proxied, tour[3], tour[4], busy, *(tour[s] for s in range(5, 8)), outside, tour[34], tour[35],
               tour[46]]
    report = judged(entries, emulator_url)
    reasons = {n["seq"]: n["reason"] for n in report.not_compared}
    assert reasons.keys() == {1, 2, 5, 34, 35, 46}
    assert reasons[5].startswith("the service answered 503 (busy or unavailable")
    assert "no earlier answer of the recording handed out" in reasons[1]
    assert reasons[2].startswith("not the service's answer: answered by the proxy")
    assert "went to an object store around the proxy" in reasons[34]
    assert "no earlier answer" in reasons[35]  # the operation that payload would have made
    assert "control plane" in reasons[46]
    assert report.failing == [] and report.compared == 6
    assert {s for s, _, _ in report.verdicts.skipped} == {2}  # the proxy's own answer is not the service's


def test_the_shipped_allow_list_admits_a_place_in_the_gpu_queue(emulator_url: str) -> None:
    report = judged(_edit(_tour(), 3, lambda b: b["status_details"].update(queue_position=7)), emulator_url)
    (d,) = report.differences
    assert d.field == "body.status_details.queue_position" and "GPU queue" in (d.allowed or "")
    assert report.failing == [] and parity_report.faithful(report)
    assert all(a.reason for a in parity.ALLOW_LIST)


# --- the command and its reports --------------------------------------------------------------------------------

def test_reports_in_three_formats(tmp_path: Path, emulator_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["parity", "altered-renamed-field", "--base-url", emulator_url, "--report", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 1 and "verdict: DIFFERS" in out
    data = json.loads((tmp_path / "summary.json").read_text())
    assert data["verdict"] == "DIFFERS"
    assert {(f["seq"], f["check"], f["field"]) for f in data["spec_drift"]["findings"]} == EXPECTED[
        "altered-renamed-field"][0]
    assert {d["field"] for d in data["emulator"]["differences"]} == {"body.lora", "body.lora_enabled"}
    assert data["spec_drift"]["operations"]["getModelResources"]["fields_documented"]["failed"] == 1
    assert [r["rule"] for r in data["normalization"]] == [r.name for r in RULES]
    markdown = (tmp_path / "summary.md").read_text()
    assert "**Verdict: DIFFERS**" in markdown and "| getModelResources |" in markdown
    assert "`body.lora_enabled`" in markdown and "## What is compared, and how" in markdown
    suite = ElementTree.parse(tmp_path / "junit.xml").getroot()
    failed = {(c.get("classname"), c.get("name")) for c in suite.iter("testcase") if c.find("failure") is not None}
    assert failed == {("parity.getModelResources", "response_schema"), ("parity.getModelResources",
                      "fields_documented"), ("parity.getModelResources", "emulator_parity")}
    assert suite.get("failures") == "3" and int(suite.get("tests") or 0) > 50


def test_a_faithful_run_exits_0_and_the_allow_flag_adds_entries_with_reasons(tmp_path: Path, emulator_url: str,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parity", "api-tour", "--base-url", emulator_url, "--report", str(tmp_path / "a")]) == 0
    assert "verdict: FAITHFUL" in capsys.readouterr().out
    allow = tmp_path / "allow.yaml"
    allow.write_text("- {operation: createSession, field: status, reason: our gateway answers 201}\n"
                     "- {operation: createSession, check: status_declared, field: status, reason: the same}\n")
    assert main(["parity", "altered-status-code", "--base-url", emulator_url, "--allow", str(allow),
                 "--report", str(tmp_path / "b")]) == 0
    data = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert data["verdict"] == "FAITHFUL" and data["emulator"]["differences"][0]["allowed"] == "our gateway answers 201"
    allow.write_text("- {operation: createSession, field: status}\n")
    assert main(["parity", "altered-status-code", "--allow", str(allow)]) == 2
    assert "entry 1 needs operation, field and a reason" in capsys.readouterr().err


def test_the_command_fails_in_one_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["parity", "api-tuor"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no shipped parity fixture" in err and "api-tour" in err
    assert main(["parity", "api-tour", "--base-url", "http://127.0.0.1:1", "--report", "r"]) == 2  # nothing there
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot reach the emulator at http://127.0.0.1:1" in err
    assert main(["parity"]) == 2 and "name a recording" in capsys.readouterr().err
    assert main(["parity", "--rules"]) == 0
    out = capsys.readouterr().out
    assert all(r.name in out for r in RULES) and "GPU queue" in out
    assert list(tmp_path.iterdir()) == []  # no report for a run that could not be made


def test_spec_only_judges_without_replaying(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parity", "altered-missing-field", "--spec-only", "--report", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "emulator: not replayed" in out and "drift  #7" in out and "differs" not in out
    data = json.loads((tmp_path / "summary.json").read_text())
    assert data["emulator"]["replayed"] is False and data["emulator"]["differences"] == []
    assert set(CHECKS) >= {f["check"] for f in data["spec_drift"]["findings"]}


def test_it_needs_nothing_of_the_contract_extra(tmp_path: Path) -> None:
    """A plain `pip install` is enough: nothing of the `contract` extra (pytest, Schemathesis, Hypothesis) is
    imported. (requests is not blocked: connexion, a base dependency, needs it.)"""
    code = ("import sys\n"
            "for name in ('pytest', 'schemathesis', 'hypothesis'):\n"
            "    sys.modules[name] = None\n"
            "from emulator.__main__ import main\n"
            "sys.exit(main(['parity', 'altered-status-code', '--spec-only', '--report', 'r']))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 1 and "createSession status_declared status" in proc.stdout, proc.stdout + proc.stderr


def test_base_url_replays_against_an_emulator_that_wants_its_admin_token(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from emulator.tools.testing import serve_in_thread

    recording = tmp_path / "short.jsonl"
    recording.write_text("".join(orjson.dumps(e).decode() + "\n" for e in entries_of("api-tour")[:5]))
    with serve_in_thread(Config(admin_token="admin-t")) as (url, _runtime):
        assert main(["parity", str(recording), "--base-url", url, "--report", str(tmp_path / "r")]) == 2
        assert "pass --admin-token" in capsys.readouterr().err
        assert main(["parity", str(recording), "--base-url", url, "--admin-token", "admin-t",
                     "--report", str(tmp_path / "r")]) == 0
    assert "verdict: FAITHFUL" in capsys.readouterr().out


def test_an_empty_recording_vouches_for_nothing(tmp_path: Path, emulator_url: str) -> None:
    report = judged([e for e in entries_of("api-tour") if e["request"]["path"].startswith("/_emulator/")], emulator_url)
    assert report.verdicts.judged == 0 and report.compared == 0 and not report.faithful
    assert 'name="verdict"' in parity_report.junit(report) and "DIFFERS" in parity_report.markdown(report)
