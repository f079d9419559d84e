"""The dashboard's HTTP side (/_emulator/ui): page, assets, data views, the SSE stream, admin token;
and DELETE /_emulator/faults/{name}, which the page's fault list uses."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from emulator.config import Config
from emulator.runtime import Runtime
from emulator.ui import Dashboard
from tests.conftest import make_client
from tests.helpers import (
    RL,
    advance,
    assert_error,
    ce_sample,
    create_resource,
    create_session,
    run_op,
    running_session,
)

UI = "/_emulator/ui"
FB = {"loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}, "samples": [ce_sample([1, 2, 3, 4], [5, 6, 7])]}


def project_of(client: TestClient, key: str = "test-token") -> str:
    resp = client.get(f"{UI}/api/lookup", params={"api_key": key})
    assert resp.status_code == 200, resp.text
    return resp.json()["project"]


def view(client: TestClient, project: str) -> dict[str, Any]:
    resp = client.get(f"{UI}/api/tenants/{project}")
    assert resp.status_code == 200, resp.text
    return resp.json()


# --- the page and its assets -------------------------------------------------------------------

def test_ui_page_is_served_with_a_same_origin_policy(client: TestClient) -> None:
    for path in (UI, f"{UI}/"):
        resp = client.get(path)
        assert resp.status_code == 200, resp.text
        assert resp.headers["content-type"].startswith("text/html")
        assert "default-src 'self'" in resp.headers["content-security-policy"]
        assert '<script src="/_emulator/ui/static/dashboard.js">' in resp.text


def test_ui_assets_reference_nothing_outside_the_server(client: TestClient) -> None:
    # Every src/href in the page is a path on this server; no script or stylesheet names a host.
    page = client.get(UI).text
    refs = re.findall(r'(?:src|href)="([^"]*)"', page)
    assert refs and all(ref.startswith(("/_emulator/ui", "/docs/", "data:")) for ref in refs), refs
    for asset in ("dashboard.js", "dashboard.css"):
        text = client.get(f"{UI}/static/{asset}").text
        assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", text), asset
        assert "@import" not in text and "fonts.googleapis" not in text


def test_ui_static_assets_come_from_the_package_with_the_chart_licence(client: TestClient) -> None:
    js = client.get(f"{UI}/static/vendor/uPlot.iife.min.js")
    assert js.status_code == 200 and js.headers["content-type"].startswith("text/javascript")
    assert "uPlot" in js.text[:200]
    assert "MIT License" in client.get(f"{UI}/static/vendor/LICENSE").text
    assert "uplot" in client.get(f"{UI}/static/vendor/README.md").text
    assert client.get(f"{UI}/static/dashboard.css").headers["content-type"].startswith("text/css")


def test_ui_unknown_asset_or_route_is_404_error_data(client: TestClient) -> None:
    assert_error(client.get(f"{UI}/static/nope.js"), 404)
    assert_error(client.get(f"{UI}/static/../server.py"), 404)
    assert_error(client.get(f"{UI}/static/vendor"), 404)
    assert_error(client.get(f"{UI}/nope"), 404)


def test_ui_answers_get_only(client: TestClient) -> None:
    assert assert_error(client.post(UI), 405)["code"] == "method_not_allowed"
    assert_error(client.delete(f"{UI}/api/tenants"), 405)


# --- data views --------------------------------------------------------------------------------

def test_ui_tenants_lists_projects_with_state(client: TestClient, runtime: Runtime) -> None:
    assert client.get(f"{UI}/api/tenants").json()["data"] == []
    create_resource(client)
    other = make_client(runtime, "other-key")
    running_session(other)
    data = client.get(f"{UI}/api/tenants").json()
    rows = {row["project"]: row for row in data["data"]}
    mine, theirs = project_of(client), project_of(client, "other-key")
    assert set(rows) == {mine, theirs}
    assert rows[mine]["resources"] == {"READY": 1} and rows[mine]["sessions"] == {}
    assert rows[theirs]["sessions"] == {"RUNNING": 1}
    assert data["clock"]["mode"] == "manual" and data["seq"] >= 1


def test_ui_lookup_maps_an_api_key_to_its_project(client: TestClient) -> None:
    found = client.get(f"{UI}/api/lookup", params={"api_key": "never-used"}).json()
    assert found["project"].startswith("proj_") and found["exists"] is False
    assert_error(client.get(f"{UI}/api/lookup"), 400)


def test_ui_tenant_view_shows_objects_losses_samples_checkpoints(client: TestClient) -> None:
    s = running_session(client, display_name="run-a")
    sid = s["id"]
    losses = [run_op(client, sid, "forward-backward", FB)["output"]["loss"] for _ in range(3)]
    run_op(client, sid, "optim-step", {"adam_params": {"learning_rate": 1e-4}})
    run_op(client, sid, "sample", {"model_inputs": [{"chunks": [{"encoded_text": {"tokens": [1, 2]}}]}],
                                   "num_samples": 2, "sampling_params": {"max_tokens": 3}})
    ckpt = run_op(client, sid, "inference-checkpoint")["output"]["checkpoint"]
    v = view(client, project_of(client))
    assert [r["id"] for r in v["resources"]] == [s["model_resources_id"]]
    assert v["resources"][0]["status"] == "MODEL_RESOURCES_STATUS_READY"
    assert [x["id"] for x in v["sessions"]] == [sid] and v["sessions"][0]["display_name"] == "run-a"
    [curve] = v["losses"]
    assert {k: curve[k] for k in ("session_id", "label", "x", "loss", "failed", "submitted")} == \
        {"session_id": sid, "label": "run-a", "x": [1, 2, 3], "loss": losses, "failed": [], "submitted": 3}
    assert v["operations_total"] == 6
    assert [op["kind"] for op in v["operations"]][:2] == ["inference-checkpoint", "sample"]
    assert v["operations"][-1]["loss"] == losses[0]
    [smp] = v["samples"]
    assert smp["results"][0]["prompt"] == [1, 2] and len(smp["results"][0]["sequences"]) == 2
    assert smp["weights_version"] == 0
    assert [c["id"] for c in v["checkpoints"]] == [ckpt["id"]]
    # One lane per resource and per session; the session's operations are marks on its lane.
    rows = v["timeline"]["rows"]
    assert [row["kind"] for row in rows] == ["model_resources", "training_session"]
    assert rows[1]["parent"] == rows[0]["id"] and rows[1]["label"] == "run-a" and rows[1]["more"] == 0
    marks = rows[1]["marks"]
    assert [m["kind"] for m in marks] == ["forward-backward"] * 3 + ["optim-step", "sample", "inference-checkpoint"]
    assert all(m["status"].endswith("COMPLETED") and m["end"] >= m["start"] for m in marks)


def test_ui_loss_curve_numbers_every_forward_backward_and_places_the_failed_ones(client: TestClient,
                                                                                 runtime: Runtime) -> None:
    # The bad-day demo's NaN failures: x counts every forward-backward submitted, so a failure keeps its place.
    runtime.faults.load({"name": "nan-loss", "match": {"operation_id": "createForwardBackward"},
                         "trigger": {"nth": [2, 4]},
                         "effect": {"operation_fails": "TRAINING_OPERATION_ERROR_CODE_NON_FINITE_LOSS"}})
    sid = running_session(client, display_name="bad-day")["id"]
    ops = [run_op(client, sid, "forward-backward", FB) for _ in range(5)]
    assert [op["status"].rsplit("_", 1)[1] for op in ops] == ["COMPLETED", "FAILED", "COMPLETED", "FAILED", "COMPLETED"]
    [curve] = view(client, project_of(client))["losses"]
    assert curve["x"] == [1, 3, 5] and curve["loss"] == [ops[i]["output"]["loss"] for i in (0, 2, 4)]
    assert curve["failed"] == [{"x": 2, "code": "TRAINING_OPERATION_ERROR_CODE_NON_FINITE_LOSS"},
                               {"x": 4, "code": "TRAINING_OPERATION_ERROR_CODE_NON_FINITE_LOSS"}]
    assert curve["submitted"] == 5
    # The metrics the loss returned, aligned with x; loss:sum is the loss itself and is left out.
    assert set(curve["metrics"]) == {"loss/mean", "loss/num_tokens", "loss/weight_sum"}
    assert curve["metrics"]["loss/mean"] == [ops[i]["output"]["metrics"]["loss/mean"] for i in (0, 2, 4)]


def test_ui_grpo_metrics_and_sampling_per_weights_version(client: TestClient) -> None:
    sid = running_session(client, display_name="grpo")["id"]
    prompt = [1, 2, 3]
    sync = {"weight_sync_type": "WEIGHT_SYNC_TYPE_SYNCHRONOUS"}
    lengths: dict[int, list[int]] = {}
    for step in range(2):
        run_op(client, sid, "weights-sync", sync)
        out = run_op(client, sid, "sample", {"model_inputs": [{"chunks": [{"encoded_text": {"tokens": prompt}}]}],
                                             "num_samples": 4, "sampling_params": {"max_tokens": 6, "seed": step}})
        seqs = out["output"]["results"][0]["sequences"]
        lengths[step] = [len(q["tokens"]) for q in seqs]
        samples = []
        for q in seqs:
            toks = prompt + [int(t) for t in q["tokens"]]
            n, k = len(q["tokens"]), len(prompt) - 1
            samples.append({"model_input": {"chunks": [{"encoded_text": {"tokens": toks[:-1]}}]},
                            "loss_fn_inputs": {"target_tokens": {"data": toks[1:], "dtype": "int64"},
                                               "logprobs": {"data": [0.0] * k + q["logprobs"], "dtype": "float32"},
                                               "advantages": {"data": [0.0] * k + [1.0] * n, "dtype": "float32"},
                                               "mask": {"data": [0.0] * k + [1.0] * n, "dtype": "float32"}}})
        run_op(client, sid, "forward-backward", {"loss": {"type": "LOSS_TYPE_GRPO"}, "samples": samples})
        run_op(client, sid, "optim-step", {"adam_params": {"learning_rate": 1e-3}})
    v = view(client, project_of(client))
    [curve] = v["losses"]
    for name in ("loss/ratio/mean", "loss/clip/high_fraction", "loss/clip/low_fraction", "loss/kl_sample/mean",
                 "loss/num_tokens"):
        assert len(curve["metrics"][name]) == 2 and all(isinstance(x, float) for x in curve["metrics"][name]), name
    assert curve["metrics"]["loss/num_tokens"] == [float(sum(lengths[0])), float(sum(lengths[1]))]
    [sampled] = v["sampling"]
    assert sampled["label"] == "grpo" and sampled["x"] == [0, 1]  # the weights versions the sampler served
    assert sampled["completions"] == [4, 4]
    assert sampled["length_mean"] == [sum(lengths[0]) / 4, sum(lengths[1]) / 4]
    assert sampled["length_min"] == [min(lengths[0]), min(lengths[1])]
    assert sampled["length_max"] == [max(lengths[0]), max(lengths[1])]
    assert set(sampled["stop"]) <= {"LENGTH", "STOP"}
    assert [sum(n[i] for n in sampled["stop"].values()) for i in (0, 1)] == [4, 4]


def test_ui_tenants_have_readable_names(client: TestClient, runtime: Runtime) -> None:
    running_session(client, display_name="quick-start")
    assert client.post("/_emulator/scenarios/two-sessions-step-40").status_code == 200
    rows = {row["project"]: row for row in client.get(f"{UI}/api/tenants").json()["data"]}
    mine, demo = rows[project_of(client)], rows[project_of(client, "demo-key")]
    assert mine["label"] is None and mine["session_names"] == ["quick-start"]
    assert mine["base_models"] == ["Qwen/Qwen3.8-27B"]
    assert demo["label"] == "scenario two-sessions-step-40"
    assert demo["session_names"] == ["sweep-lr-1e-4", "sweep-lr-3e-4"] and demo["session_names_more"] == 0
    assert view(client, demo["project"])["label"] == "scenario two-sessions-step-40"
    # Reset and used again by a client, the tenant is no longer the scenario's.
    assert client.post("/_emulator/reset", json={"tenant": "demo-key"}).status_code == 200
    with make_client(runtime, "demo-key") as c:
        running_session(c, display_name="mine-now")
    row = next(r for r in client.get(f"{UI}/api/tenants").json()["data"] if r["project"] == demo["project"])
    assert row["label"] == "key demo-key (the scenarios' key)" and row["session_names"] == ["mine-now"]
    # The scenarios' public key names its tenant before any scenario is loaded into it; no other key is shown.
    other = Runtime(Config(clock="manual"))
    with make_client(other, "demo-key") as c:
        create_resource(c)
        [row] = c.get(f"{UI}/api/tenants").json()["data"]
        assert row["label"] == "key demo-key (the scenarios' key)" and row["session_names"] == []


def test_ui_timeline_segments_follow_transitions_in_virtual_time(realistic_client: TestClient) -> None:
    r = create_resource(realistic_client)
    advance(realistic_client, 300)
    v = view(realistic_client, project_of(realistic_client))
    [row] = v["timeline"]["rows"]
    assert row["id"] == r["id"]
    segments = [(seg["status"].rsplit("_", 1)[1], seg["start"][11:19], seg["end"] and seg["end"][11:19])
                for seg in row["segments"]]
    # Realistic profile: no queue ahead (45 s per resource ahead), then CREATING for 180 s.
    assert [s[0] for s in segments] == ["PENDING", "CREATING", "READY"]
    assert segments[-1][2] is None  # still READY
    assert all(seg[2] == nxt[1] for seg, nxt in zip(segments, segments[1:]))
    assert v["now"][11:19] == "00:05:00"


def test_ui_view_settles_like_a_read(realistic_client: TestClient) -> None:
    r = create_resource(realistic_client)
    advance(realistic_client, 300)  # nobody reads: the resource's record still says PENDING
    v = view(realistic_client, project_of(realistic_client))
    assert v["resources"][0]["status"] == "MODEL_RESOURCES_STATUS_READY"
    assert realistic_client.get(f"{RL}/model-resources/{r['id']}").json()["updated_at"] == \
        v["resources"][0]["updated_at"]


def test_ui_unknown_tenant_is_404_for_page_data_and_stream(client: TestClient, runtime: Runtime) -> None:
    for path in (f"{UI}/tenants/proj_nope", f"{UI}/api/tenants/proj_nope", f"{UI}/api/stream?project=proj_nope"):
        assert assert_error(client.get(path), 404)["code"] == "unknown_tenant", path
    assert "proj_nope" not in runtime.store.projects()


def test_ui_tenant_page_for_a_known_tenant(client: TestClient) -> None:
    create_resource(client)
    resp = client.get(f"{UI}/tenants/{project_of(client)}")
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/html")


def test_ui_stream_rejects_a_bad_since(client: TestClient) -> None:
    assert_error(client.get(f"{UI}/api/stream?since=x"), 400)
    assert_error(client.get(f"{UI}/api/stream", headers={"Last-Event-ID": "-3"}), 400)


# --- admin token -------------------------------------------------------------------------------

@pytest.fixture
def guarded() -> TestClient:
    runtime = Runtime(Config(clock="manual", admin_token="s3cret", validate_responses=True))
    with make_client(runtime) as c:
        create_resource(c)
        c.runtime = runtime  # type: ignore[attr-defined]
        yield c


def test_ui_without_the_admin_token_is_401_error_data(guarded: TestClient) -> None:
    project = guarded.runtime.tenancy.project_for_token("test-token")  # type: ignore[attr-defined]
    paths = [UI, f"{UI}/tenants/{project}", f"{UI}/api/tenants", f"{UI}/api/tenants/{project}",
             f"{UI}/api/lookup?api_key=k", f"{UI}/api/stream", f"{UI}/api/stream?project={project}",
             f"{UI}/api/tenants/proj_unknown"]
    for path in paths:
        err = assert_error(guarded.get(path), 401)
        assert err["code"] == "invalid_admin_token", path
        assert_error(guarded.get(path, params={"admin_token": "wrong"}), 401)


def test_ui_accepts_the_admin_token_as_header_or_query(guarded: TestClient) -> None:
    project = guarded.runtime.tenancy.project_for_token("test-token")  # type: ignore[attr-defined]
    assert guarded.get(f"{UI}/api/tenants/{project}", headers={"X-Emulator-Admin-Token": "s3cret"}).status_code == 200
    assert guarded.get(f"{UI}/api/tenants/{project}?admin_token=s3cret").status_code == 200
    assert guarded.get(f"{UI}?admin_token=s3cret").status_code == 200
    # Static assets hold no state and need no token (like /docs).
    assert guarded.get(f"{UI}/static/dashboard.js").status_code == 200


def test_admin_token_query_parameter_is_for_the_dashboard_only(guarded: TestClient) -> None:
    assert_error(guarded.get("/_emulator/clock?admin_token=s3cret"), 401)
    assert guarded.get("/_emulator/clock", headers={"X-Emulator-Admin-Token": "s3cret"}).status_code == 200


# --- removing one fault rule ---------------------------------------------------------------------

def test_admin_remove_fault_removes_one_rule_and_its_counter(client: TestClient) -> None:
    rules = [{"name": "a", "match": {"operation_id": "listModelResources"}, "effect": {"status": 503}},
             {"name": "b", "match": {"operation_id": "getModelResources"}, "effect": {"status": 500}}]
    assert client.post("/_emulator/faults", json=rules).status_code == 200
    assert_error(client.get(f"{RL}/model-resources"), 503)
    resp = client.delete("/_emulator/faults/a")
    assert resp.status_code == 200, resp.text
    assert [r["name"] for r in resp.json()["data"]] == ["b"]
    assert client.get(f"{RL}/model-resources").status_code == 200
    assert client.post("/_emulator/faults", json=rules[0]).status_code == 200  # the name is free again
    assert [r["matched"] for r in client.get("/_emulator/faults").json()["data"]] == [0, 0]


def test_admin_remove_fault_unknown_name_is_404(client: TestClient) -> None:
    err = assert_error(client.delete("/_emulator/faults/nope"), 404)
    assert err["param"] == "name"


# --- the stream, driven as ASGI (a TestClient would buffer the whole response) ----------------------

Events = list[tuple[str, Any, int]]


def read_stream(app: Any, query: str, until: Callable[[Events], bool], headers: list[tuple[bytes, bytes]] | None = None,
                timeout: float = 5.0, between: Callable[[Events], None] | None = None) -> tuple[Events, bool]:
    """GET the stream; parse events until ``until(events)`` holds, then disconnect.

    Returns the events and whether the client had to disconnect (False: the server ended the stream).
    ``between`` runs after each chunk, to change the world while the stream is open.
    """
    events: Events = []
    status: list[int] = []

    async def main() -> bool:
        stop = asyncio.Event()
        buffer = b""

        async def receive() -> dict[str, Any]:
            await stop.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            nonlocal buffer
            if message["type"] == "http.response.start":
                status.append(message["status"])
                return
            buffer += message.get("body", b"")
            while b"\n\n" in buffer:
                block, buffer = buffer.split(b"\n\n", 1)
                fields = dict(line.split(": ", 1) for line in block.decode().splitlines())
                if "event" in fields:
                    events.append((fields["event"], orjson.loads(fields["data"]), int(fields["id"])))
            if until(events):
                stop.set()
            elif between is not None:
                between(events)

        scope = {"type": "http", "method": "GET", "path": f"{UI}/api/stream", "query_string": query.encode(),
                 "headers": headers or [], "scheme": "http", "server": ("127.0.0.1", 8765)}
        await asyncio.wait_for(app(scope, receive, send), timeout)
        return stop.is_set()

    disconnected = asyncio.run(main())
    assert status == [200]
    return events, disconnected


def fast(runtime: Runtime, stream_seconds: float = 3.0) -> Dashboard:
    return Dashboard(runtime, tick_seconds=0.01, stream_seconds=stream_seconds)


def transitions(events: Events) -> list[tuple[str, str]]:
    return [(e["kind"], e["to"].rsplit("_", 1)[1]) for name, data, _ in events if name == "log" for e in data
            if e.get("type") == "transition"]


def test_stream_sends_clock_faults_and_the_log(client: TestClient, runtime: Runtime) -> None:
    create_resource(client)
    project = project_of(client)
    events, _ = read_stream(fast(runtime), f"project={project}",
                            lambda ev: {"clock", "faults", "log"} <= {name for name, _, _ in ev})
    names = [name for name, _, _ in events]
    assert names[:3] == ["log", "clock", "faults"]
    assert transitions(events)[0] == ("model_resources", "PENDING")
    clock = next(data for name, data, _ in events if name == "clock")
    assert clock == {**runtime.clock.describe(), "scope": "global"}


def test_stream_settles_the_tenant_when_the_manual_clock_moves(realistic_client: TestClient,
                                                               realistic_runtime: Runtime) -> None:
    create_resource(realistic_client)
    project = project_of(realistic_client)
    moved = []

    def move_clock_once(events: Events) -> None:
        if not moved:  # no request at all: only the stream can settle the tenant
            moved.append(realistic_runtime.clock.advance(300))

    events, _ = read_stream(fast(realistic_runtime), f"project={project}",
                            lambda ev: ("model_resources", "READY") in transitions(ev), between=move_clock_once)
    assert transitions(events) == [("model_resources", s) for s in ("PENDING", "CREATING", "READY")]


def test_stream_settles_in_system_mode_without_any_request() -> None:
    runtime = Runtime(Config(clock="system", speed=2000, profile="realistic"))
    with make_client(runtime) as c:
        create_resource(c)  # READY after 225 virtual seconds: about 0.11 s of real time
        # (until READY and a second tick: on a loaded machine 0.11 s may pass before the stream's first tick)
        events, _ = read_stream(fast(runtime), f"project={project_of(c)}",
                                lambda ev: ("model_resources", "READY") in transitions(ev)
                                and sum(name == "clock" for name, _, _ in ev) >= 2)
    assert ("model_resources", "CREATING") in transitions(events)
    clocks = [data["now"] for name, data, _ in events if name == "clock"]
    assert len(clocks) >= 2 and clocks == sorted(clocks)  # system time moves: a clock event per tick


def test_stream_resumes_after_last_event_id(client: TestClient, runtime: Runtime) -> None:
    r = create_resource(client)
    project = project_of(client)
    first, _ = read_stream(fast(runtime), f"project={project}", lambda ev: any(n == "log" for n, _, _ in ev))
    last_id = max(seq for name, _, seq in first if name == "log")
    create_session(client, r["id"])
    again, _ = read_stream(fast(runtime), f"project={project}&since=0",
                           lambda ev: any(n == "log" for n, _, _ in ev),
                           headers=[(b"last-event-id", str(last_id).encode())])
    # Last-Event-ID wins over since: only the session's events (settled by the stream itself).
    assert transitions(again) == [("training_session", "CREATING"), ("training_session", "RUNNING")]


def test_stream_tells_when_the_tenant_is_reset(client: TestClient, runtime: Runtime) -> None:
    create_resource(client)
    project = project_of(client)
    done = []

    def reset_once(events: Events) -> None:
        if not done and any(n == "clock" for n, _, _ in events):
            done.append(client.post("/_emulator/reset", json={"tenant": "test-token"}).status_code)

    events, _ = read_stream(fast(runtime), f"project={project}",
                            lambda ev: any(n == "tenant" for n, _, _ in ev), between=reset_once)
    assert ("tenant", {"exists": False}) in [(n, d) for n, d, _ in events]
    assert project not in runtime.store.projects()  # the stream does not bring the tenant back


def test_stream_without_a_project_follows_every_tenant(client: TestClient, runtime: Runtime) -> None:
    create_resource(client)
    make_client(runtime, "other-key").post(f"{RL}/model-resources", json={"base_model": "Qwen/Qwen3.8-27B"})
    events, _ = read_stream(fast(runtime), "", lambda ev: len(transitions(ev)) >= 2)
    tenants = {e["project"] for name, data, _ in events if name == "log" for e in data}
    assert tenants == {project_of(client), project_of(client, "other-key")}


def test_stream_ends_by_itself_so_shutdown_never_waits_long(runtime: Runtime) -> None:
    events, disconnected = read_stream(fast(runtime, stream_seconds=0.05), "", lambda ev: False)
    assert disconnected is False
    assert [name for name, _, _ in events] == ["clock", "faults"]
