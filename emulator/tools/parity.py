"""``together-rl-emulator parity RECORDING``: is the emulator faithful to the traffic a recording holds?

Two judgments: the contract on each exchange (:mod:`emulator.tools.parity_spec`: spec drift per operation), and
the emulator against the recording (requests replayed in order on a fresh emulator, answers compared under
:data:`emulator.tools.parity_diff.RULES`). Exit 0 only when nothing differs beyond the allow-list.
"""

from __future__ import annotations

import fnmatch
import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import httpx
import orjson
import yaml

from emulator.clock import parse_rfc3339, rfc3339
from emulator.tools.parity_diff import IdMap, Mismatch, compare, compare_urls
from emulator.tools.parity_spec import (
    Contract,
    Finding,
    Verdicts,
    json_body,
    judge,
    media_type,
    not_api,
    request_line,
)
from emulator.tools.recording import decode_body

#: Request headers a replay sends as recorded; the API key is the replay's own.
REPLAYED_HEADERS = ("content-type", "idempotency-key", "x-emulator-fault")
DIFFERENCE = "emulator"
#: Answers of a service under load, which a client retries: not replayed (the emulator has no load to match).
BUSY = frozenset({429, 502, 503, 504})


class ParityError(RuntimeError):
    """The run cannot go on (one sentence)."""


@dataclass(frozen=True)
class Allowance:
    """A difference that does not fail the run: where (operation, field; globs, ``[]`` for any index), which
    judgment (``emulator`` for a difference, or a check of the contract), and why."""

    operation: str
    field: str
    reason: str
    check: str = DIFFERENCE

    def admits(self, operation: str, check: str, path: str) -> bool:
        return (fnmatch.fnmatchcase(operation, self.operation) and fnmatch.fnmatchcase(check, self.check)
                and fnmatch.fnmatchcase(re.sub(r"\[\d+\]", "[]", path), self.field))

    def as_json(self) -> dict[str, str]:
        return {"operation": self.operation, "check": self.check, "field": self.field, "reason": self.reason}


#: The shipped allow-list: what may differ between an account and the emulator without the emulator being wrong.
ALLOW_LIST: tuple[Allowance, ...] = (
    Allowance("*", "body.status_details.queue_position",
              "the GPU queue is everyone's: a resource's place in it depends on other customers' resources, "
              "which the emulator does not have"),
    Allowance("*", "body.data[].status_details.queue_position",
              "the same place in the GPU queue, in a list"),
    Allowance("estimateModelResourcesCost", "body.price_per_hour",
              "prices follow the account's plan and the day's rates; the emulator's are the published on-demand ones"),
)


def load_allowances(path: str) -> list[Allowance]:
    """A user's allow-list (YAML or JSON): a list of ``{operation, field, check?, reason}``, a reason each."""
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as exc:
        raise ParityError(f"--allow {path}: {exc}") from None
    if not isinstance(data, list):
        raise ParityError(f"--allow {path}: expected a list of entries with operation, field and reason")
    out = []
    for i, item in enumerate(data):
        if not isinstance(item, dict) or not all(isinstance(item.get(k), str) and item.get(k) for k in
                                                 ("operation", "field", "reason")):
            raise ParityError(f"--allow {path}: entry {i + 1} needs operation, field and a reason (all strings)")
        out.append(Allowance(item["operation"], item["field"], item["reason"], item.get("check", DIFFERENCE)))
    return out


@dataclass
class Difference:
    seq: int
    operation: str
    request: str
    field: str
    rule: str
    recorded: str
    emulator: str
    allowed: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "operation": self.operation, "request": self.request, "field": self.field,
                "rule": self.rule, "recorded": self.recorded, "emulator": self.emulator, "allowed": self.allowed}


@dataclass
class Report:
    recording: str
    exchanges: int
    verdicts: Verdicts
    differences: list[Difference] = field(default_factory=list)
    not_compared: list[dict[str, Any]] = field(default_factory=list)
    compared: int = 0
    target: dict[str, Any] = field(default_factory=dict)
    allowances: list[Allowance] = field(default_factory=list)
    allowed_findings: list[tuple[Finding, str]] = field(default_factory=list)
    replayed: bool = True
    compared_per_operation: dict[str, int] = field(default_factory=dict)

    @property
    def drift(self) -> list[Finding]:
        allowed = {id(f) for f, _ in self.allowed_findings}
        return [f for f in self.verdicts.findings if id(f) not in allowed]

    @property
    def failing(self) -> list[Difference]:
        return [d for d in self.differences if d.allowed is None]

    @property
    def faithful(self) -> bool:
        """Nothing differs beyond the allow-list, and something was judged (an empty run vouches for nothing)."""
        return not self.drift and not self.failing and (self.verdicts.judged > 0 or self.compared > 0)

    def apply(self, allowances: list[Allowance]) -> None:
        self.allowances = allowances
        for d in self.differences:
            d.allowed = next((a.reason for a in allowances if a.admits(d.operation, DIFFERENCE, d.field)), None)
        self.allowed_findings = []
        for f in self.verdicts.findings:
            reason = next((a.reason for a in allowances if a.admits(f.operation, f.check, f.field)), None)
            if reason is not None:
                self.allowed_findings.append((f, reason))


# --- the replay ----------------------------------------------------------------------------------------------

class Replay:
    """Sends recorded requests to an emulator, as one tenant of its own on a manual clock."""

    def __init__(self, base_url: str, *, admin_token: str | None = None, key: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.key = key or f"parity-{secrets.token_hex(6)}"
        self.admin = {"X-Emulator-Admin-Token": admin_token} if admin_token else {}
        self.http = httpx.Client(base_url=self.base_url, timeout=120, follow_redirects=False)
        self.now: float | None = None

    def close(self) -> None:
        self.http.close()

    def _control(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            resp = self.http.post(f"/_emulator/{path}", json=body,
                                  headers={**self.admin, "X-Emulator-Tenant": self.key})
        except httpx.HTTPError as exc:
            raise ParityError(f"cannot reach the emulator at {self.base_url}: {exc}") from None
        if resp.status_code != 200:
            raise ParityError(f"{self.base_url} answered POST /_emulator/{path} with {resp.status_code} "
                              f"({resp.text[:200]}); parity replays against the emulator (pass --admin-token "
                              "if it has one)")
        result: dict[str, Any] = resp.json()
        return result

    def start(self, at: float, profile: str | None, seed: int | None) -> None:
        """A fresh tenant whose manual clock reads ``at`` (the recording's first instant)."""
        body: dict[str, Any] = {"clock": {"mode": "manual", "now": rfc3339(at)}}
        if profile:
            body["profile"] = {"profile": profile}
        if seed is not None:
            body["seed"] = seed
        self._control("reset", body)
        self.now = at

    def pace(self, at: float) -> None:
        """Move the tenant's clock to ``at`` (never back: the recording's instants only go forward)."""
        if self.now is not None and at > self.now:
            self._control("clock/advance", {"seconds": at - self.now})
            self.now = at

    def send(self, entry: dict[str, Any], ids: IdMap) -> httpx.Response:
        request = entry["request"]
        path = "/".join(ids.translate(seg) for seg in request["path"].split("/"))
        query = request.get("query") or ""
        if query:
            query = urlencode([(k, ids.translate(v)) for k, v in parse_qsl(query, keep_blank_values=True)])
        headers = {k: v for k, v in (request.get("headers") or {}).items() if k in REPLAYED_HEADERS}
        if "authorization" in (request.get("headers") or {}):
            headers["Authorization"] = f"Bearer {self.key}"
        body = decode_body(request.get("body") or {})
        if body and "json" in headers.get("content-type", ""):
            try:
                body = orjson.dumps(_translate(orjson.loads(body), ids))
            except orjson.JSONDecodeError:
                pass
        try:
            return self.http.request(request["method"], path + (f"?{query}" if query else ""), headers=headers,
                                     content=body or None)
        except httpx.HTTPError as exc:
            raise ParityError(f"the emulator at {self.base_url} did not answer {request_line(entry)}: {exc}") from None


def _translate(value: Any, ids: IdMap) -> Any:
    if isinstance(value, str):
        return ids.translate(value)
    if isinstance(value, list):
        return [_translate(v, ids) for v in value]
    if isinstance(value, dict):
        return {k: _translate(v, ids) for k, v in value.items()}
    return value


def _request_ids(entry: dict[str, Any], params: dict[str, str]) -> list[str]:
    """The ids a request names: its path parameters and the ``*_id`` fields and ``after`` of its body and query."""
    names = list(params.values())
    query = entry["request"].get("query") or ""
    names += [v for k, v in parse_qsl(query, keep_blank_values=True) if k == "after" or k.endswith("_id") and v]
    body = json_body(entry["request"])
    if isinstance(body, dict):
        names += [v for k, v in body.items() if k.endswith("_id") and isinstance(v, str) and v]
    return names


def _outside_payloads(entry: dict[str, Any], body: Any) -> list[str]:
    """Payload ids whose upload URL is not on the recorded server: their bytes went around the proxy."""
    if not (isinstance(body, dict) and isinstance(body.get("upload_url"), str) and isinstance(body.get("payload_id"), str)):
        return []
    recorded_host = urlsplit(entry.get("base_url") or "").netloc
    return [body["payload_id"]] if urlsplit(body["upload_url"]).netloc != recorded_host else []


def replay(entries: list[dict[str, Any]], replayer: Replay, contract: Contract, report: Report, *,
           profile: str | None = "instant", seed: int | None = None) -> None:
    ids = IdMap()
    outside: set[str] = set()
    started = False
    for entry in entries:
        request, recorded = entry["request"], entry["response"]
        seq, line = int(entry.get("seq", 0)), request_line(entry)
        matched = contract.match(request["method"], request["path"])
        operation = matched[0] if matched else ("(presigned URL)" if request["path"].startswith("/_files/")
                                                else f"{request['method']} {request['path']}")

        def skip(why: str, _seq: int = seq, _line: str = line, _op: str = operation) -> None:
            report.not_compared.append({"seq": _seq, "operation": _op, "request": _line, "reason": why})

        if not_api(request["path"]) and not request["path"].startswith("/_files/"):
            skip("not the vendor's API (the emulator's control plane or docs)")
            continue
        if entry.get("note"):
            skip(f"not the service's answer: {entry['note']}")
            continue
        if int(recorded["status"]) in BUSY:
            skip(f"the service answered {recorded['status']} (busy or unavailable; a client retries): the emulator "
                 "has no load to match, and replaying it would apply a request the service did not")
            continue
        named = _request_ids(entry, matched[2] if matched else {})
        if request["path"].startswith("/_files/"):
            named.append(request["path"].split("/")[3] if request["path"].count("/") >= 3 else "")
        unknown = [n for n in named if n and n not in ids.forward]
        if unknown and 200 <= int(recorded["status"]) < 300:
            skip(f"names {unknown[0]}, which no earlier answer of the recording handed out (it existed before "
                 "the recording began, or came from an exchange not compared)")
            continue
        body_in = json_body(request)
        if isinstance(body_in, dict) and body_in.get("payload_id") in outside:
            skip(f"reads payload {body_in['payload_id']}, whose bytes went to an object store around the proxy")
            continue
        at = parse_rfc3339(entry["at"]) if entry.get("at") else None
        if not started:
            replayer.start(at if at is not None else 0.0, profile, seed)
            started = True
        if at is not None:
            replayer.pace(at)
        answer = replayer.send(entry, ids)
        report.compared += 1
        report.compared_per_operation[operation] = report.compared_per_operation.get(operation, 0) + 1
        recorded_body = json_body(recorded)
        outside.update(_outside_payloads(entry, recorded_body))
        for m in _differences(entry, recorded_body, answer, ids, operation):
            report.differences.append(Difference(seq, operation, line, m.field, m.rule, m.recorded, m.emulator))


def _differences(entry: dict[str, Any], recorded_body: Any, answer: httpx.Response, ids: IdMap,
                 operation: str) -> Iterator[Mismatch]:
    recorded = entry["response"]
    status = int(recorded["status"])
    if status != answer.status_code:
        detail = ""
        if answer.status_code >= 400:
            try:
                detail = f" ({answer.json()['error']['message'][:150]})"
            except (ValueError, KeyError, TypeError):
                detail = ""
        yield Mismatch("status", "status", str(status), f"{answer.status_code}{detail}")
        if status // 100 != answer.status_code // 100:
            return  # another kind of answer: its body says nothing more
    headers = recorded.get("headers") or {}
    want, got = media_type(headers), (answer.headers.get("content-type") or "").partition(";")[0].strip().lower()
    if want and want != got:
        yield Mismatch("headers.content-type", "media type", want, got or "(none)")
    if "location" in headers:
        if "location" not in answer.headers:
            yield Mismatch("headers.location", "urls", headers["location"], "(absent)")
        else:
            yield from (Mismatch("headers.location", m.rule, m.recorded, m.emulator)
                        for m in compare_urls(headers["location"], answer.headers["location"], ids, "headers.location"))
    raw = decode_body(recorded.get("body") or {})
    if entry["request"]["path"].startswith("/_files/checkpoints/"):  # model weights: presence only
        if bool(raw) != bool(answer.content):
            yield Mismatch("body", "file bodies", f"{len(raw)} bytes", f"{len(answer.content)} bytes")
        return
    if recorded_body is not None or want == "application/json":
        try:
            mine = answer.json() if answer.content.strip() else None
        except ValueError:
            yield Mismatch("body", "file bodies", "JSON", f"{len(answer.content)} bytes that are not JSON")
            return
        if recorded_body is None and raw.strip():
            yield Mismatch("body", "file bodies", f"{len(raw)} bytes that are not JSON", "JSON")
            return
        yield from compare(recorded_body, mine, ids, operation)
        return
    if raw != answer.content:
        yield Mismatch("body", "file bodies", f"{len(raw)} bytes", f"{len(answer.content)} bytes (other bytes)")


# --- the whole run -----------------------------------------------------------------------------------------------

@contextmanager
def _emulator(base_url: str | None) -> Iterator[tuple[str, bool]]:
    """(``base_url``, False), or (a fresh emulator's URL, True)."""
    if base_url:
        yield base_url, False
        return
    with fresh_emulator() as url:
        yield url, True


@contextmanager
def fresh_emulator() -> Iterator[str]:
    """A fresh emulator (manual clock) served from a thread of this process on a free loopback port."""
    import threading

    import uvicorn

    from emulator.config import Config
    from emulator.http.server import bind, uvicorn_config
    from emulator.runtime import Runtime
    from emulator.tools.server import build_server_app

    config = Config(clock="manual", host="127.0.0.1", port=0)
    app = build_server_app(Runtime(config))
    sock = bind("127.0.0.1", 0)
    # uvloop where it is installed, as `serve` runs: a loopback round trip to a thread's plain asyncio loop
    # took ~44 ms here (measured on a loaded 2-core host), to uvloop's 0.4 ms.
    server = uvicorn.Server(uvicorn_config(app, config, loop="auto"))
    ready = threading.Event()
    server_started = server.startup

    async def startup(sockets: Any = None) -> None:
        await server_started(sockets=sockets)
        ready.set()

    server.startup = startup  # type: ignore[method-assign]
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="parity-emulator", daemon=True)
    thread.start()
    try:
        if not ready.wait(30) or not server.started:
            raise ParityError("the emulator did not start")
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def run(entries: list[dict[str, Any]], recording: str, *, base_url: str | None = None,
        admin_token: str | None = None, profile: str | None = "instant", seed: int | None = None,
        allow: list[Allowance] | None = None, replay_it: bool = True, contract: Contract | None = None) -> Report:
    """Judge a recording against the contract and, unless ``replay_it`` is false, the emulator against it."""
    contract = contract or Contract()
    report = Report(recording, len(entries), judge(entries, contract), replayed=replay_it)
    if replay_it:
        with _emulator(base_url) as (url, launched):
            replayer = Replay(url, admin_token=admin_token, key=None if base_url else "parity-replay")
            report.target = {"base_url": url, "launched": launched, "tenant_key": replayer.key, "profile": profile,
                             "seed": seed}
            try:
                replay(entries, replayer, contract, report, profile=profile, seed=seed)
            finally:
                replayer.close()
    report.apply([*ALLOW_LIST, *(allow or [])])
    return report
