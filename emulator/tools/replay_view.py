"""The dashboard of a replay server: the emulator's page, drawn from the recording as replayed so far.

Rebuilt from the response bodies answered in the current pass (a rewind starts over), as one tenant,
``replay`` (a recording's API keys are redacted). No fault rules or scenarios: those panels give way to the
replay's progress and a rewind button. Routes and rules are :mod:`emulator.ui.server`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from typing import Any, Protocol, cast

import orjson

from emulator.domain.catalog import BY_NAME
from emulator.domain.kinds import KINDS
from emulator.errors import NotFound
from emulator.http.asgi import Receive, Scope, Send, query_pairs
from emulator.http.auth import check_admin
from emulator.http.envelope import MethodNotAllowed
from emulator.tools.recording import decode_body
from emulator.ui import UI_PATH, stream, views
from emulator.ui import server as ui_server


class ReplayApp(Protocol):
    """What the page reads of :class:`emulator.tools.replay.ReplayApp` (which imports this module)."""

    tenancy: Any
    clock: Any

    def answered(self) -> list[dict[str, Any]]: ...

    def report(self) -> dict[str, Any]: ...

PROJECT = "replay"
_OPERATION = re.compile(r"/v1/rl/training-sessions/([^/]+)/operations/([a-z-]+)(?:/[^/]+)?")


def _kind_of(item: dict[str, Any]) -> str | None:
    status = str(item.get("status") or "")
    if status.startswith("MODEL_RESOURCES_STATUS_"):
        return "model_resources"
    if status.startswith("TRAINING_SESSION_STATUS_"):
        return "training_session"
    if status.startswith("TRAINING_OPERATION_STATUS_"):
        return "operation"
    if str(item.get("type") or "").startswith("CHECKPOINT_TYPE_"):
        return "checkpoint"
    return None


def build(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The objects the answered exchanges showed, their status history and the transitions as events."""
    objects: dict[str, dict[str, dict[str, Any]]] = {"model_resources": {}, "training_session": {},
                                                      "operation": {}, "checkpoint": {}}
    history: dict[str, list[tuple[str, str]]] = {}
    events: list[dict[str, Any]] = []
    prompts: dict[str, list[list[Any]]] = {}  # sample operation id -> the prompts its request sent
    for entry in entries:
        response = entry["response"]
        if not 200 <= int(response["status"]) < 300:
            continue
        try:
            body = orjson.loads(decode_body(response["body"]))
        except orjson.JSONDecodeError:
            continue
        at = str(entry.get("at") or "")
        items = body["data"] if isinstance(body, dict) and isinstance(body.get("data"), list) else [body]
        op_path = _OPERATION.fullmatch(entry["request"]["path"])
        if (op_path is not None and op_path.group(2) in views.SAMPLE_KINDS and entry["request"]["method"] == "POST"
                and isinstance(body, dict) and isinstance(body.get("id"), str)):
            with contextlib.suppress(orjson.JSONDecodeError, AttributeError, TypeError):
                sent = orjson.loads(decode_body(entry["request"]["body"]))
                prompts[body["id"]] = [views.prompt_tokens(mi) for mi in sent.get("model_inputs") or ()]
        for item in items:
            if not isinstance(item, dict) or not isinstance(item.get("id"), str):
                continue
            kind = _kind_of(item)
            if kind is None:
                continue
            if kind == "operation":
                if op_path is None:
                    continue
                previous = objects["operation"].get(item["id"], {})
                item = {**previous, **item, "session_id": op_path.group(1), "kind": op_path.group(2),
                        "created_at": previous.get("created_at", at), "updated_at": at}
                checkpoint = (item.get("output") or {}).get("checkpoint")
                declared = KINDS.get(item["kind"])
                if (isinstance(checkpoint, dict) and isinstance(checkpoint.get("id"), str) and declared is not None
                        and declared.checkpoint_type is not None):
                    objects["checkpoint"].setdefault(checkpoint["id"], {
                        **checkpoint, "session_id": op_path.group(1), "type": declared.checkpoint_type})
            objects[kind][item["id"]] = item
            if kind == "checkpoint":
                continue
            seen = history.setdefault(item["id"], [])
            if not seen or seen[-1][1] != item["status"]:
                events.append({"seq": len(events) + 1, "type": "transition", "project": PROJECT, "at": at,
                               "kind": kind, "id": item["id"], "op_kind": item.get("kind") if kind == "operation" else None,
                               "from": seen[-1][1] if seen else None, "to": item["status"]})
                seen.append((at, item["status"]))
    return {"objects": objects, "history": history, "events": events, "prompts": prompts}


def _segments(history: list[tuple[str, str]]) -> list[dict[str, Any]]:
    return [{"status": status, "start": at, "end": history[i + 1][0] if i + 1 < len(history) else None}
            for i, (at, status) in enumerate(history)]


def _count(records: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in records:
        short = str(r["status"]).rsplit("_STATUS_", 1)[-1]
        out[short] = out.get(short, 0) + 1
    return out


def tenant_view(app: ReplayApp) -> dict[str, Any]:
    built = build(app.answered())
    objects, history = built["objects"], built["history"]
    resources = list(objects["model_resources"].values())
    sessions = list(objects["training_session"].values())
    ops = list(objects["operation"].values())
    ops.sort(key=lambda op: op["created_at"])
    names = {s["id"]: s.get("display_name") for s in sessions}
    losses: dict[str, list[float]] = {}
    for op in ops:
        loss = (op.get("output") or {}).get("loss")
        if op["kind"] in views.LOSS_KINDS and isinstance(loss, (int, float)):
            losses.setdefault(op["session_id"], []).append(float(loss))

    def operation(op: dict[str, Any]) -> dict[str, Any]:
        out = {k: op.get(k) for k in ("id", "session_id", "kind", "status", "created_at", "updated_at")}
        output = op.get("output") or {}
        for key in ("loss", "step", "weights_version"):
            if key in output:
                out[key] = output[key]
        if op.get("error"):
            out["error"] = {"code": op["error"].get("code"), "message": op["error"].get("message")}
        return out

    rows = []
    for r in resources:
        rows.append({"id": r["id"], "kind": "model_resources", "label": r.get("base_model", ""), "parent": None,
                     "segments": _segments(history.get(r["id"], []))})
        for s in sessions:
            if s.get("model_resources_id") != r["id"]:
                continue
            marks = [{"id": op["id"], "kind": op["kind"], "status": op["status"], "start": op["created_at"],
                      "end": op["updated_at"] if str(op["status"]).endswith(("COMPLETED", "FAILED")) else None}
                     for op in ops if op["session_id"] == s["id"]]
            rows.append({"id": s["id"], "kind": "training_session", "label": s.get("display_name") or s["id"],
                         "parent": r["id"], "segments": _segments(history.get(s["id"], [])), "marks": marks,
                         "more": 0})
    clock = {**app.clock.describe(), "scope": "global"}
    events = built["events"]
    return {
        "project": PROJECT, "now": clock["now"], "clock": clock, "seq": len(events),
        "resources": resources[::-1],
        "sessions": [{**s, "queued_operations": 0, "policy_state": s.get("policy_state") or
                      {"applied_weights_version": "", "target_weights_version": ""}} for s in sessions[::-1]],
        "operations": [operation(op) for op in ops[::-1][:100]], "operations_total": len(ops),
        "losses": [{"session_id": sid, "label": names.get(sid) or sid[:8], "x": list(range(1, len(v) + 1)), "loss": v}
                   for sid, v in losses.items()],
        "samples": _samples(ops, sessions, built["prompts"]),
        "checkpoints": [{"id": c["id"], "session_id": c.get("session_id", ""), "type": c.get("type", ""),
                         "step": str(c.get("step", "")), "created_at": c.get("created_at", "")}
                        for c in objects["checkpoint"].values()][::-1],
        "timeline": {"rows": rows},
        "events": events[-200:],
        "faults": [],
        "replay": app.report(),
    }


def _samples(ops: list[dict[str, Any]], sessions: list[dict[str, Any]],
             prompts: dict[str, list[list[Any]]]) -> list[dict[str, Any]]:
    """The latest completed samples, each prompt with its completions (text where the tokenizer is installed)."""
    models = {s["id"]: BY_NAME.get(str(s.get("base_model"))) for s in sessions}
    out = []
    for op in reversed(ops):
        results = (op.get("output") or {}).get("results")
        if op["kind"] not in views.SAMPLE_KINDS or not isinstance(results, list):
            continue
        model = models.get(op["session_id"])
        tokenizer = model.tokenizer if model is not None else None
        sent = prompts.get(op["id"]) or [[] for _ in results]
        out.append({
            "id": op["id"], "session_id": op["session_id"], "at": op["updated_at"],
            "weights_version": next((seg.get("version") for r in results for seg in r.get("policy_segments") or ()),
                                    None),
            "results": [{"prompt": prompt, "prompt_text": views.decoded_text(prompt, tokenizer),
                         "sequences": [{"tokens": seq.get("tokens"), "stop_reason": seq.get("stop_reason"),
                                        "text": views.decoded_text(seq.get("tokens") or [], tokenizer)}
                                       for seq in r.get("sequences") or ()]}
                        for prompt, r in zip(sent, results)],
        })
        if len(out) == views.RECENT_SAMPLES:
            break
    return out


def tenants_view(app: ReplayApp) -> dict[str, Any]:
    view = tenant_view(app)
    row = {"project": PROJECT, "users": [], "resources": _count(view["resources"]),
           "sessions": _count(view["sessions"]), "operations": view["operations_total"],
           "checkpoints": len(view["checkpoints"])}
    return {"data": [row] if view["resources"] or view["sessions"] else [], "clock": view["clock"],
            "seq": view["seq"], "events": view["events"], "faults": [], "replay": view["replay"]}


class ReplayDashboard:
    def __init__(self, app: ReplayApp, tick_seconds: float = stream.TICK_SECONDS,
                 stream_seconds: float = stream.STREAM_SECONDS) -> None:
        self.app = app
        self.tick_seconds = tick_seconds
        self.stream_seconds = stream_seconds
        # The page and its assets, served as the emulator serves them (they read no runtime).
        self.static = ui_server.Dashboard(cast(Any, None))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"][len(UI_PATH):] or "/"
        if scope["method"] != "GET":
            raise MethodNotAllowed(scope["method"], scope["path"], ["GET"])
        if path.startswith("/static/"):
            await self.static._send_static(send, path[len("/static/"):])
            return
        query = dict(query_pairs(scope))
        check_admin(scope, self.app.tenancy, given=query.get("admin_token"))
        if path in ("/", f"/tenants/{PROJECT}", f"/tenants/{PROJECT}/"):
            await self.static._send_static(send, "index.html", csp=True)
        elif path == "/api/tenants":
            await ui_server.send_json(send, tenants_view(self.app))
        elif path == f"/api/tenants/{PROJECT}":
            await ui_server.send_json(send, tenant_view(self.app))
        elif path == "/api/lookup":
            await ui_server.send_json(send, {"project": PROJECT, "user": None, "exists": True})
        elif path == "/api/stream":
            await self._stream(receive, send)
        else:
            raise NotFound(f"no dashboard route {scope['path']} on a replay server", code="unknown_endpoint")

    async def _stream(self, receive: Receive, send: Send) -> None:
        """What changed, every tick: ``log`` when more exchanges were answered (the page then reloads its
        view), ``clock`` when the replay clock moved."""
        gone = asyncio.Event()

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()

        watcher = asyncio.create_task(watch())
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-store")]})
        answered, last_clock = -1, None
        try:
            await send({"type": "http.response.body", "body": b"retry: %d\n\n" % stream.RETRY_MS, "more_body": True})
            for _ in range(max(1, round(self.stream_seconds / self.tick_seconds))):
                chunks = []
                report = self.app.report()
                if report["answered"] != answered:
                    answered = report["answered"]
                    chunks.append(stream.sse("log", [], answered))
                clock = {**self.app.clock.describe(), "scope": "global"}
                if clock != last_clock:
                    last_clock = clock
                    chunks.append(stream.sse("clock", clock, answered))
                if chunks:
                    await send({"type": "http.response.body", "body": b"".join(chunks), "more_body": True})
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(gone.wait(), self.tick_seconds)
                if gone.is_set():
                    return
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            watcher.cancel()
