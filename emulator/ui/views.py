"""What the dashboard shows, as JSON built from the runtime: the tenant list and one tenant's view.

Every view settles the tenant first, so statuses are those a client would read at the same virtual instant.
Resources and sessions are rendered exactly as the API answers them; operations, samples and checkpoints are
trimmed to what a person reads; timelines come from the bounded event log.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import yaml

from emulator import fixture_files
from emulator.api import render
from emulator.clock import rfc3339
from emulator.compute import tokenizers
from emulator.compute.types import Wire, encode
from emulator.domain.catalog import BY_NAME
from emulator.domain.kinds import KINDS
from emulator.errors import Invalid, NotFound

if TYPE_CHECKING:
    from emulator.runtime import Runtime
    from emulator.store import Tenant

EVENT_SCAN = 50_000      # the event log's own capacity: read it all
RECENT_EVENTS = 200      # newest events sent with a view; the stream adds the rest live
RECENT_OPERATIONS = 100  # rows of the operations table
TIMELINE_MARKS = 500     # latest operations drawn as marks on each session's lane
RECENT_SAMPLES = 10
TENANT_NAMES = 5         # session names listed per tenant on the start page (the newest)
MAX_LOSS_POINTS = 2_000  # per session; longer curves are thinned evenly, keeping the last point
LOSS_KINDS = frozenset(name for name, kind in KINDS.items() if kind.shows_loss)          # a loss curve each
SAMPLE_KINDS = frozenset(name for name, kind in KINDS.items() if kind.shows_samples)   # prompts and completions
KIND_LANES = tuple(sorted(KINDS, key=lambda name: (KINDS[name].lane, name)))  # a session's kinds, top row first
TIMELINE_KINDS = frozenset({"model_resources", "training_session"})
FINISHED = ("COMPLETED", "FAILED")


def tenant_exists(runtime: Runtime, project: str) -> None:
    """404 for a project with no state (a read unit of work would answer an empty one); 421 on a shard of a
    cluster that does not hold it."""
    runtime.check_owner(project)
    if project not in runtime.projects():
        raise NotFound(f"no tenant {project!r}: no API key of that project has called the emulator "
                       "(or it was reset)", param="project", code="unknown_tenant")


def lookup(runtime: Runtime, api_key: str) -> dict[str, Any]:
    """The project an API key belongs to, and whether it has state yet."""
    if not api_key:
        raise Invalid("api_key is required", param="api_key")
    principal = runtime.principal_for(api_key)
    if principal is None:
        raise NotFound("that API key is not in the tokens file", param="api_key", code="unknown_api_key")
    runtime.check_owner(principal.project)
    return {"project": principal.project, "user": principal.user,
            "exists": principal.project in runtime.projects()}


def tenants(runtime: Runtime) -> dict[str, Any]:
    """Every project with state, in the order they first called, with counts by short status (on a shard of a
    cluster: its own, each row naming the shard; the dashboard's server gathers every shard's)."""
    out = []
    for project in runtime.projects():
        with runtime.unit_of_work(project, write=False) as (state, _ctx):
            users = sorted({r.created_by for r in state.resources.values()}
                           | {s.created_by for s in state.sessions.values()})
            names = [s.display_name for s in state.sessions.ordered() if s.display_name]
            out.append({
                "project": project,
                "label": _label(runtime, project, state),
                "users": users,
                "session_names": names[-TENANT_NAMES:],
                "session_names_more": max(0, len(names) - TENANT_NAMES),
                "base_models": sorted({r.base_model for r in state.resources.values()}),
                "resources": _count(state.resources.values()),
                "sessions": _count(state.sessions.values()),
                "operations": len(state.operations),
                "checkpoints": len(state.checkpoints),
                **({"shard": runtime.shard.index} if runtime.shard is not None else {}),
            })
    events = runtime.store.events.since(0, None, EVENT_SCAN)
    return {"data": out, "clock": runtime.clock.describe(), "seq": events[-1]["seq"] if events else 0,
            "events": events[-RECENT_EVENTS:], "faults": runtime.faults.describe()}


def _label(runtime: Runtime, project: str, state: Tenant) -> str | None:
    """A readable name for a project: the scenario loaded into it last while an object it made is still there,
    else the shipped scenarios' public key when the project is that key's (default tenancy: a project id is a
    hash of its key). Other API keys are never shown (a screenshot of the page must not give one away); a
    tokens file's project ids are names already."""
    loaded = getattr(runtime.scenarios, "loaded", None)  # tools.scenarios.Library's record of its loads
    if isinstance(loaded, dict) and project in loaded:
        name, made = loaded[project]
        if any(i in state.resources or i in state.sessions for i in made):
            return f"scenario {name}"
    if runtime.config.tokens_file:  # its project ids and user names are the names
        return None
    for token in _scenario_tokens():
        if runtime.tenancy.project_for_token(token) == project:
            return f"key {token} (the scenarios' key)"
    return None


@functools.cache
def _scenario_tokens() -> tuple[str, ...]:
    """The API keys the shipped scenarios fill (``token:`` of fixtures/scenarios/*.yaml): public, documented."""
    found = []
    for name in fixture_files.names("scenarios"):
        path = fixture_files.named("scenarios", name)
        try:
            doc = yaml.safe_load(path.read_text(encoding="utf-8")) if path is not None else None
        except (OSError, yaml.YAMLError):
            continue
        found.append(str(doc.get("token") or "demo-key") if isinstance(doc, dict) else "demo-key")
    return tuple(dict.fromkeys(found))


def _count(records: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for record in records:
        short = short_status(record.status)
        counts[short] = counts.get(short, 0) + 1
    return counts


def short_status(status: str) -> str:
    """``MODEL_RESOURCES_STATUS_READY`` -> ``READY`` (the full value stays in the data)."""
    return status.rsplit("_STATUS_", 1)[-1]


def tenant(runtime: Runtime, project: str) -> dict[str, Any]:
    tenant_exists(runtime, project)
    with runtime.unit_of_work(project, write=False) as (state, ctx):
        now = ctx.now
        events = runtime.store.events.since(0, project, EVENT_SCAN)
        ops = list(state.operations.values())
        view = {
            "project": project,
            "label": _label(runtime, project, state),
            "now": rfc3339(now),
            "clock": runtime.clocks.describe(project),
            "seq": events[-1]["seq"] if events else 0,
            "resources": [render.model_resources(state, r) for r in reversed(state.resources.ordered())],
            "sessions": [_session(state, s) for s in reversed(state.sessions.ordered())],
            "operations": [_operation(op) for op in reversed(ops[-RECENT_OPERATIONS:])],
            "operations_total": len(ops),
            "losses": _losses(state, ops),
            "sampling": _sampling(state, ops),
            "samples": _samples(state, ops),
            "checkpoints": [_checkpoint(c) for c in reversed(state.checkpoints.ordered())],
            "timeline": _timeline(state, ops, events),
            "events": events[-RECENT_EVENTS:],
            "faults": runtime.faults.describe(),
        }
    return view


def _session(state: Tenant, s: Any) -> dict[str, Any]:
    out = render.session(state, s)
    out["queued_operations"] = len(state.queues.get(s.id) or ())
    return out


def _operation(op: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"id": op.id, "session_id": op.session_id, "kind": op.kind, "status": op.status,
                           "created_at": rfc3339(op.created_at), "updated_at": rfc3339(op.updated_at)}
    if op.output is not None:
        out.update(KINDS[op.kind].dashboard(op.output))
    if op.error is not None:
        out["error"] = {"code": op.error.code, "message": op.error.message}
    return out


def _losses(state: Tenant, ops: list[Any]) -> list[dict[str, Any]]:
    """One curve per session. ``x`` numbers every loss-computing operation the session submitted (completed, failed or
    still to run) in submission order, so a failed one keeps its place: the completed ones carry their loss
    and the metrics their loss returned (``metrics``: name -> values aligned with ``x``, ``None`` where a point
    lacks it; ``loss:sum`` is the loss itself and is left out), the failed ones are listed in ``failed`` with
    their error code. Curves longer than ``MAX_LOSS_POINTS`` are thinned evenly, keeping the last point."""
    per: dict[str, dict[str, Any]] = {}
    for op in ops:
        if op.kind not in LOSS_KINDS:
            continue
        c = per.setdefault(op.session_id, {"n": 0, "x": [], "loss": [], "metrics": [], "failed": []})
        c["n"] += 1
        if op.output is not None and isinstance(op.output.get("loss"), float):
            c["x"].append(c["n"])
            c["loss"].append(op.output["loss"])
            metrics = op.output.get("metrics")
            c["metrics"].append(metrics if isinstance(metrics, dict) else {})
        elif short_status(op.status) == "FAILED":
            c["failed"].append({"x": c["n"], "code": op.error.code if op.error is not None else None})
    out = []
    for session_id, c in per.items():
        x, losses, points = c["x"], c["loss"], c["metrics"]
        if len(losses) > MAX_LOSS_POINTS:
            stride = -(-len(losses) // MAX_LOSS_POINTS)
            keep = list(range(0, len(losses), stride))
            if keep[-1] != len(losses) - 1:
                keep.append(len(losses) - 1)
            x, losses, points = [x[i] for i in keep], [losses[i] for i in keep], [points[i] for i in keep]
        names = list(dict.fromkeys(k for p in points for k in p if k != "loss:sum"))
        s = state.sessions.get(session_id)
        out.append({"session_id": session_id, "label": (s.display_name if s is not None else None) or session_id[:8],
                    "x": x, "loss": losses,
                    "metrics": {k: [_number(p.get(k)) for p in points] for k in names},
                    "failed": c["failed"][-MAX_LOSS_POINTS:], "submitted": c["n"]})
    return out


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _sampling(state: Tenant, ops: list[Any]) -> list[dict[str, Any]]:
    """Per session, what its sampler produced at each weights version (``x``: the trainer step whose weights
    it served): how many completions, their length in tokens (mean, min, max) and how many stopped for each
    stop reason (short names: ``LENGTH``, ``STOP``). Read from the samples whose output is still kept."""
    per: dict[str, dict[int, dict[str, Any]]] = {}
    for op in ops:
        if op.kind not in SAMPLE_KINDS or op.output is None:
            continue
        for r in op.output.get("results") or ():
            segments = r.get("policy_segments") or ()
            version = segments[0].get("version") if segments else None
            if not isinstance(version, int):
                continue
            for seq in r.get("sequences") or ():
                n = len(seq.get("tokens") or ())
                g = per.setdefault(op.session_id, {}).setdefault(
                    version, {"n": 0, "sum": 0, "min": n, "max": n, "stop": {}})
                g["n"] += 1
                g["sum"] += n
                g["min"], g["max"] = min(g["min"], n), max(g["max"], n)
                reason = str(seq.get("stop_reason") or "UNKNOWN").replace("STOP_REASON_", "")
                g["stop"][reason] = g["stop"].get(reason, 0) + 1
    out = []
    for session_id, groups in per.items():
        xs = sorted(groups)[-MAX_LOSS_POINTS:]
        reasons = sorted({r for g in groups.values() for r in g["stop"]})
        s = state.sessions.get(session_id)
        out.append({"session_id": session_id,
                    "label": (s.display_name if s is not None else None) or session_id[:8], "x": xs,
                    "completions": [groups[v]["n"] for v in xs],
                    "length_mean": [groups[v]["sum"] / groups[v]["n"] for v in xs],
                    "length_min": [groups[v]["min"] for v in xs], "length_max": [groups[v]["max"] for v in xs],
                    "stop": {r: [groups[v]["stop"].get(r, 0) for v in xs] for r in reasons}})
    return out


def prompt_tokens(model_input: dict[str, Any]) -> list[Any]:
    return [t for chunk in model_input.get("chunks") or () for t in (chunk.get("encoded_text") or {}).get("tokens") or ()]


def decoded_text(tokens: list[Any], tokenizer: str | None) -> str | None:
    """The tokens' text under the model's real tokenizer, or None where it is not installed (the ids say it
    all: the emulator's own text is the ids)."""
    if not tokenizers.available(tokenizer):
        return None
    try:
        return tokenizers.decode([int(t) for t in tokens], tokenizer)
    except (TypeError, ValueError):  # a prompt of the wrong shape still shows its ids
        return None


def _samples(state: Tenant, ops: list[Any]) -> list[dict[str, Any]]:
    """The latest completed sample operations: each prompt with its completions, and their text where the
    model's tokenizer is installed."""
    out = []
    for op in reversed(ops):
        if op.kind not in SAMPLE_KINDS or op.output is None:
            continue
        session = state.sessions.get(op.session_id)
        model = BY_NAME.get(session.base_model) if session is not None else None
        tokenizer = model.tokenizer if model is not None else None
        sent: dict[str, Any] = encode(op.body) if isinstance(op.body, Wire) else {}  # (the request as read)
        prompts = [prompt_tokens(mi) for mi in sent.get("model_inputs") or ()]
        results = op.output.get("results") or ()
        out.append({
            "id": op.id, "session_id": op.session_id, "at": rfc3339(op.updated_at),
            "weights_version": next((seg.get("version") for r in results for seg in r.get("policy_segments") or ()),
                                    None),
            "results": [{"prompt": prompt, "prompt_text": decoded_text(prompt, tokenizer),
                         "sequences": [{"tokens": seq.get("tokens"), "stop_reason": seq.get("stop_reason"),
                                        "text": decoded_text(seq.get("tokens") or [], tokenizer)}
                                       for seq in r.get("sequences") or ()]}
                        for prompt, r in zip(prompts, results)],
        })
        if len(out) == RECENT_SAMPLES:
            break
    return out


def _checkpoint(c: Any) -> dict[str, Any]:
    return {"id": c.id, "session_id": c.session_id, "type": c.type, "step": str(c.step),
            "created_at": rfc3339(c.created_at), "lora_rank": c.lora_rank}


def _timeline(state: Tenant, ops: list[Any], events: list[dict[str, Any]]) -> dict[str, Any]:
    """One lane per resource and per session (under its resource), of status segments in virtual time; a
    session's lane also carries its operations as marks (the latest ``TIMELINE_MARKS``).

    A segment runs from the transition into a status to the next one (``end`` null: still in it). A mark runs
    from the operation's creation to its last change when it has finished (``end`` null: still queued or
    running); ``more`` counts the session's older operations left out. ``kinds``: the order of a session's
    rows per kind when it unfolds (the kinds' ``lane``).
    """
    changes: dict[str, list[tuple[str, str]]] = {}
    for e in events:
        if e.get("type") == "transition" and e.get("kind") in TIMELINE_KINDS:
            changes.setdefault(e["id"], []).append((e["at"], e["to"]))
    by_session: dict[str, list[Any]] = {}
    for op in ops:
        by_session.setdefault(op.session_id, []).append(op)

    def row(kind: str, record: Any, label: str, parent: str | None) -> dict[str, Any]:
        seen = changes.get(record.id)
        if not seen:  # its transitions left the log (or came from an imported state)
            seen = [(rfc3339(record.updated_at), record.status)]
        segments = [{"status": status, "start": at, "end": seen[i + 1][0] if i + 1 < len(seen) else None}
                    for i, (at, status) in enumerate(seen)]
        return {"id": record.id, "kind": kind, "label": label, "parent": parent, "segments": segments}

    def mark(op: Any) -> dict[str, Any]:
        done = short_status(op.status) in FINISHED
        return {"id": op.id, "kind": op.kind, "status": op.status, "start": rfc3339(op.created_at),
                "end": rfc3339(op.updated_at) if done else None}

    rows = []
    for r in state.resources.ordered():
        rows.append(row("model_resources", r, r.base_model, None))
        for sid in state.sessions_of.get(r.id, ()):
            s = state.sessions.get(sid)
            if s is not None:
                lane = row("training_session", s, s.display_name or s.id, r.id)
                mine = by_session.get(sid, [])
                lane["marks"] = [mark(op) for op in mine[-TIMELINE_MARKS:]]
                lane["more"] = max(0, len(mine) - TIMELINE_MARKS)
                rows.append(lane)
    return {"rows": rows, "kinds": list(KIND_LANES)}
