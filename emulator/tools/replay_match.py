"""Which recorded exchange answers a replayed request (:data:`MATCH_RULES`), and why none did.

``--match strict`` (default): method, path, query and the body normalized as ``parity`` normalizes an answer
(ids mapped, timestamps by type, URLs by shape); ``--match loose``: method, path and query only. A near miss
names the most specific reason: already answered, another body (which fields), else the closest request.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from emulator.tools.parity_diff import IdMap, Mismatch, compare
from emulator.tools.recording import decode_body

MODES = ("strict", "loose")
#: The matching rules, in order (README "Record a demo and replay it" lists the same).
MATCH_RULES: tuple[tuple[str, str], ...] = (
    ("method and path", "the same, exactly (paths carry the ids the replay handed out, and the "
                        "`redacted-token-N` of presigned URLs, as the recording does)"),
    ("query", "the same, once redacted as the recorder redacts it (`admin_token`, `api_key`, `tenant`)"),
    ("body (strict only)", "the same bytes, or the same JSON under parity's rules: an id a recorded answer "
                           "holds as recorded, an id none holds mapped to the one sent the first time (until a "
                           "rewind); `*_at` fields and RFC 3339 strings by type; a URL where one was "
                           "recorded (addresses and tokens vary); numbers by value (1 = 1.0); key order and "
                           "whitespace ignored; an empty body is `{}`; a multipart body with its boundary ignored"),
    ("headers", "never (Authorization, Idempotency-Key, User-Agent... vary from run to run)"),
    ("order", "the first unused exchange that matches; an answered one only after a rewind (or with --loop)"),
)
#: Body fields named in a near-miss report.
MAX_BODY_DIFFS = 5
#: Of a request body, what is compared field by field (a larger one matches by its bytes only).
MAX_COMPARED_BYTES = 64 << 20

# The ids of a recorded answer (parity_diff.rule_for's "ids": `id`, `*_id`, `*_key`, `created_by`,
# `next_cursor` strings and `*_ids` arrays), read from its text without parsing it.
_ID_FIELD = re.compile(rb'"(?:id|[A-Za-z0-9_]*_id|[A-Za-z0-9_]*_key|created_by|next_cursor)"\s*:\s*"((?:[^"\\]|\\.)*)"')
_ID_ARRAY = re.compile(rb'"[A-Za-z0-9_]*_ids"\s*:\s*\[([^\]]*)\]')
_STRING = re.compile(rb'"((?:[^"\\]|\\.)*)"')
_BOUNDARY = re.compile(r"boundary=\"?([^\";]+)\"?", re.I)


@dataclass
class SentBody:
    """A request body as replay reads it: its digest and size always, its bytes up to MAX_COMPARED_BYTES."""

    data: bytes
    digest: bytes
    size: int
    content_type: str = ""

    @property
    def complete(self) -> bool:
        return len(self.data) == self.size


class _Trial(IdMap):
    """The pairs one comparison makes, over the replay's: kept only when the request matches."""

    def __init__(self, base: IdMap, recorded_ids: set[str]) -> None:
        super().__init__()
        self.base = base
        self.recorded_ids = recorded_ids

    def pair(self, recorded: str, sent: str) -> str | None:
        if recorded == sent:
            return None
        if recorded in self.recorded_ids:  # handed out by a recorded answer: the client has it as recorded
            return "an id the recorded answers hand out, so sent as recorded"
        known = self.base.forward.get(recorded) or self.forward.get(recorded)
        if known is not None:
            return None if known == sent else f"{known} stood for it earlier"
        other = self.base.backward.get(sent) or self.backward.get(sent)
        if other is not None or sent in self.recorded_ids:
            return f"{sent} stands for {other or sent} already"
        self.forward[recorded] = sent
        self.backward[sent] = recorded
        return None

    def commit(self) -> None:
        self.base.forward.update(self.forward)
        self.base.backward.update(self.backward)


class Matcher:
    """Matches requests to the exchanges of a recording under one mode; keeps the ids it mapped."""

    def __init__(self, entries: list[dict[str, Any]], mode: str = "strict") -> None:
        if mode not in MODES:
            raise ValueError(f"--match must be one of {', '.join(MODES)}, not {mode!r}")
        self.entries = entries
        self.mode = mode
        self.ids = IdMap()                       # recorded id -> the id the client sent in its place
        self._digests: dict[int, bytes] = {}     # of recorded request bodies, as first needed
        self._recorded_ids: set[str] | None = None
        self._fields: dict[int, dict[str, Any] | None] = {}  # recorded bodies, flattened (near misses)

    def rewind(self) -> None:
        """A new pass may be a new client: the ids it mapped are forgotten."""
        self.ids = IdMap()

    # --- matching --------------------------------------------------------------------------------------------

    def same_route(self, i: int, method: str, path: str, query: str) -> bool:
        r = self.entries[i]["request"]
        return bool(r["method"] == method and r["path"] == path and r.get("query", "") == query)

    def find(self, method: str, path: str, query: str, body: SentBody,
             candidates: Iterable[int]) -> tuple[int | None, _Trial | None]:
        """The first of ``candidates`` that matches, and the id pairs its body made (to :meth:`keep`)."""
        for i in candidates:
            if not self.same_route(i, method, path, query):
                continue
            if self.mode == "loose":
                return i, None
            trial = self._trial()
            if not self.body_differences(i, body, trial):
                return i, trial
        return None, None

    def keep(self, trial: _Trial | None) -> None:
        if trial is not None:
            trial.commit()

    def _trial(self) -> _Trial:
        if self._recorded_ids is None:
            self._recorded_ids = _answered_ids(self.entries)
        return _Trial(self.ids, self._recorded_ids)

    def body_differences(self, i: int, sent: SentBody, trial: _Trial | None = None) -> list[Mismatch]:
        """How a recorded request's body differs from the sent one under the rules ([]: it does not)."""
        if self._digest(i) == sent.digest:
            return []
        request = self.entries[i]["request"]
        recorded = decode_body(request.get("body") or {})
        if not sent.complete:
            return [Mismatch("body", "bytes", f"{len(recorded)} bytes", f"{sent.size} bytes (too large to compare "
                             "field by field: other bytes)")]
        theirs, mine = _json(recorded), _json(sent.data)
        if isinstance(theirs, (dict, list)) or isinstance(mine, (dict, list)):
            theirs = {} if theirs is None and isinstance(mine, dict) else theirs
            mine = {} if mine is None and isinstance(theirs, dict) else mine
            if theirs is _NOT_JSON or mine is _NOT_JSON:
                return [Mismatch("body", "bytes", _kind(theirs, recorded), _kind(mine, sent.data))]
            return list(compare(theirs, mine, trial or self._trial(), ""))
        theirs_boundary = _boundary((request.get("headers") or {}).get("content-type", ""))
        mine_boundary = _boundary(sent.content_type)
        if theirs_boundary and mine_boundary:
            if (recorded.replace(theirs_boundary.encode(), b"<boundary>")
                    == sent.data.replace(mine_boundary.encode(), b"<boundary>")):
                return []
        elif recorded == sent.data:
            return []
        return [Mismatch("body", "bytes", _kind(theirs, recorded), _kind(mine, sent.data))]

    def _digest(self, i: int) -> bytes:
        digest = self._digests.get(i)
        if digest is None:
            digest = self._digests[i] = hashlib.sha256(decode_body(self.entries[i]["request"].get("body") or {})).digest()
        return digest

    # --- near misses ---------------------------------------------------------------------------------------

    def near_miss(self, used: list[bool], order: list[int], method: str, path: str, query: str,
                  body: SentBody) -> str:
        """Why no recorded exchange answers this request, the most specific reason first:

        1. the same request (under the mode) was answered already in this pass: rewind;
        2. (strict) exchanges of the same method, path and query have another body: the closest one's fields;
        3. else the closest recorded request and how it differs (method, path segments, query, body fields).
        """
        if not self.entries:
            return "the recording is empty"
        route = [i for i in range(len(self.entries)) if self.same_route(i, method, path, query)]
        differences: dict[bytes, list[Mismatch]] = {}  # by recorded body: a loop records the same one often
        for i in route:
            if used[i] and (self.mode == "loose" or not self._differences(i, body, differences)):
                step = order.index(i) + 1 if i in order else None
                when = f" at step {step} of this pass" if step else ""
                return (f"already answered: this request was answered{when} (recorded #{_seq(self.entries, i)}); "
                        "rewind with POST /_emulator/replay/rewind to answer it again, or replay with --loop")
        if route:  # strict: the body is what differs
            best = min(route, key=lambda i: (len(self._differences(i, body, differences)), used[i], i))
            diffs = self._differences(best, body, differences)
            shown = [f"{m.field}: sent {m.emulator}, recorded {m.recorded}" for m in diffs[:MAX_BODY_DIFFS]]
            if len(diffs) > MAX_BODY_DIFFS:
                shown.append(f"{len(diffs) - MAX_BODY_DIFFS} more body field(s)")
            again = "; it was answered already too" if used[best] else ""
            return (f"the body differs from recorded #{_seq(self.entries, best)} (the same method, path and query): "
                    f"{'; '.join(shown)}{again} (replay --match loose ignores bodies)")
        return closest(self.entries, used, method, path, query, body.data, self._fields)

    def _differences(self, i: int, body: SentBody, seen: dict[bytes, list[Mismatch]]) -> list[Mismatch]:
        digest = self._digest(i)
        if digest not in seen:
            seen[digest] = self.body_differences(i, body)
        return seen[digest]


def _seq(entries: list[dict[str, Any]], i: int) -> Any:
    return entries[i].get("seq", i + 1)


def _answered_ids(entries: list[dict[str, Any]]) -> set[str]:
    """Every id the recorded answers hand out (what a client of the replay can only have as recorded)."""
    found: set[str] = set()
    for e in entries:
        data = decode_body(e["response"].get("body") or {})
        for m in _ID_FIELD.finditer(data):
            found.add(_unescape(m.group(1)))
        for m in _ID_ARRAY.finditer(data):
            found.update(_unescape(s) for s in _STRING.findall(m.group(1)))
    found.discard("")
    return found


def _unescape(raw: bytes) -> str:
    try:
        value = orjson.loads(b'"' + raw + b'"')
    except orjson.JSONDecodeError:
        return raw.decode("utf-8", "replace")
    return str(value)


def _boundary(content_type: str) -> str | None:
    if not content_type.lower().startswith("multipart/"):
        return None
    m = _BOUNDARY.search(content_type)
    return m.group(1) if m else None


def _kind(value: Any, data: bytes) -> str:
    if not data.strip():
        return "(empty)"
    if value is _NOT_JSON or value is None:
        return f"{len(data)} bytes"
    return f"{len(data)} bytes of JSON"


# --- the closest recorded request (no exchange of the same method, path and query) -----------------------------

def closest(entries: list[dict[str, Any]], used: list[bool], method: str, path: str, query: str,
            body: bytes, cache: dict[int, dict[str, Any] | None] | None = None) -> str:
    """The closest recorded request and how it differs: most path segments in place, then the same method,
    the same query, most body fields alike; an unused exchange before a used one."""
    segments = path.split("/")
    mine = _json(body)
    flat = _flatten(mine) if isinstance(mine, dict) else None
    cache = {} if cache is None else cache

    def recorded_fields(i: int) -> dict[str, Any] | None:
        """A recorded request's JSON body, flattened (None: no JSON object), parsed once per replay."""
        if i not in cache:
            other = _json(decode_body(entries[i]["request"].get("body") or {}))
            cache[i] = _flatten(other) if isinstance(other, dict) else None
        return cache[i]

    def score(i: int) -> tuple[float, int]:
        r = entries[i]["request"]
        theirs = r["path"].split("/")
        same = sum(a == b for a, b in zip(segments, theirs)) / max(len(segments), len(theirs))
        s = 3 * same + (2 if r["method"] == method else 0) + (1 if r.get("query", "") == query else 0)
        other = recorded_fields(i) if flat is not None else None
        if flat is not None and other is not None:
            keys = set(flat) | set(other)
            s += sum(flat.get(k, _MISSING) == other.get(k, _MISSING) for k in keys) / max(1, len(keys))
        return s, 0 if not used[i] else -1  # unused ones first on a tie

    best = max(range(len(entries)), key=score)
    r = entries[best]["request"]
    diffs = []
    if r["method"] != method:
        diffs.append(f"method {method}, recorded {r['method']}")
    if r["path"] != path:
        theirs = r["path"].split("/")
        if len(theirs) != len(segments):
            diffs.append(f"path {path}, recorded {r['path']}")
        else:
            diffs.extend(f"path segment {n}: {a!r}, recorded {b!r}" for n, (a, b) in enumerate(zip(segments, theirs))
                         if a != b)
    if r.get("query", "") != query:
        diffs.append(f"query {query!r}, recorded {r.get('query', '')!r}")
    other = _json(decode_body(r.get("body") or {}))
    if isinstance(mine, dict) and isinstance(other, dict):
        a, b = _flatten(mine), _flatten(other)
        fields = [k for k in sorted(set(a) | set(b)) if a.get(k, _MISSING) != b.get(k, _MISSING)]
        for k in fields[:MAX_BODY_DIFFS]:
            diffs.append(f"body.{k}: sent {_show(a.get(k, _MISSING))}, recorded {_show(b.get(k, _MISSING))}")
        if len(fields) > MAX_BODY_DIFFS:
            diffs.append(f"{len(fields) - MAX_BODY_DIFFS} more body field(s)")
    elif (mine is None) != (other is None) or (body.strip() and mine != other):
        diffs.append("the body differs")
    where = (f"closest recorded request: #{_seq(entries, best)} {r['method']} {r['path']}"
             f"{'?' + r['query'] if r.get('query') else ''}{' (answered already)' if used[best] else ''}")
    return f"{where}; differs in {'; '.join(diffs)}"


@dataclass(frozen=True)
class _Missing:
    """A body field one side lacks (None would be a JSON null)."""

    def __repr__(self) -> str:
        return "(absent)"


_MISSING = _Missing()
_NOT_JSON = _Missing()  # a body that does not parse as JSON


def _show(value: Any) -> str:
    text = repr(value) if isinstance(value, _Missing) else orjson.dumps(value).decode()
    return text if len(text) <= 60 else text[:57] + "..."


def _json(data: bytes) -> Any:
    if not data.strip():
        return None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return _NOT_JSON


def _flatten(value: Any, prefix: str = "", out: dict[str, Any] | None = None, depth: int = 0) -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``; lists stay whole (a list of tokens is one field)."""
    out = {} if out is None else out
    if isinstance(value, dict) and depth < 8:
        for k, v in value.items():
            _flatten(v, f"{prefix}{k}.", out, depth + 1)
    else:
        out[prefix.rstrip(".")] = value
    return out


__all__ = ["MATCH_RULES", "MODES", "Matcher", "SentBody", "closest"]
