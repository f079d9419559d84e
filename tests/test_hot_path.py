"""The hot-path machinery keeps the answers exactly what they were (issue 12): routing by path table,
JSON rendered once per session version, remembered base-model rows, directly formatted UUIDs and
timestamps, the simulated model's set operations and small-array paths, no body read for a request that
declares none."""

from __future__ import annotations

import asyncio
import random
import uuid
from datetime import UTC, datetime
from typing import Any

import numpy as np
import orjson
from starlette.testclient import TestClient

from emulator import spec
from emulator.clock import MAX_TIME, rfc3339
from emulator.compute import ComputeError
from emulator.compute import base as base_module
from emulator.compute import weights as weights_module
from emulator.compute.base import BaseModel, base_model
from emulator.compute.bases import BaseModels
from emulator.compute.inputs import _float32_array, check_token_range
from emulator.compute.weights import GradAccum, setdiff_unique, union_sorted, unique_inverse
from emulator.config import Config
from emulator.http.routing import PathTable
from emulator.ids import IdFactory, derive
from emulator.runtime import Runtime
from emulator.tools.server import build_server_app
from tests.helpers import RL, assert_error, create_resource, running_session, submit


def test_route_a_concrete_path_owns_every_method_and_param_segments_still_answer(client: TestClient) -> None:
    resp = client.post(f"{RL}/model-resources/estimate-cost", json={"base_model": "Qwen/Qwen3.8-27B"})
    assert resp.status_code == 200 and "price_per_hour" in resp.json()
    # The concrete path is matched before /model-resources/{model_resources_id} (OpenAPI's rule), for every
    # method: a GET there is not a lookup of a resource named "estimate-cost", and Allow says what is.
    for method, path, allow in (("GET", f"{RL}/model-resources/estimate-cost", "POST"),
                                ("OPTIONS", f"{RL}/model-resources/estimate-cost", "POST"),
                                ("DELETE", "/v1/shaping/prepare-for-fp4-inference", "POST"),
                                ("OPTIONS", f"{RL}/model-resources/some-id", "GET, HEAD"),
                                ("PUT", f"{RL}/model-resources", "GET, HEAD, POST")):
        resp = client.request(method, path)
        assert_error(resp, 405)
        assert resp.headers["allow"] == allow, (method, path)
    # A longer path that no concrete template matches is the template's: a session id that does not exist.
    assert assert_error(client.post(f"{RL}/model-resources/estimate-cost/stop"), 404)["param"] == "model_resources_id"
    assert assert_error(client.get("/v1/shaping/prepare-for-fp4-inference/events"), 404)["param"] == "id"


def test_route_trailing_slash_and_empty_segment_name_no_operation(client: TestClient) -> None:
    assert_error(client.get(f"{RL}/model-resources/"), 404)
    assert_error(client.get(f"{RL}//model-resources"), 404)
    assert_error(client.get(f"{RL}/training-sessions//stop"), 404)


def test_route_head_answers_like_get(client: TestClient) -> None:
    r = create_resource(client)
    resp = client.head(f"{RL}/model-resources/{r['id']}")
    assert resp.status_code == 200 and resp.content == b""


def _spec_table() -> tuple[PathTable, list[str]]:
    table = PathTable()
    templates = []
    for name, base in ((spec.VENDOR, ""), (spec.ADMIN, spec.ADMIN_BASE_PATH)):  # as the app adds them
        for template, item in spec.load_spec(name)["paths"].items():
            templates.append(base + template)
            for method, op in item.items():
                if isinstance(op, dict) and "operationId" in op:
                    table.add(base + template, method, op["operationId"], base)
    return table, templates


def test_route_an_encoded_slash_stays_inside_its_segment() -> None:
    table, _ = _spec_table()
    target, params, _ = table.match("DELETE", "/_emulator/faults/a/b", b"/_emulator/faults/a%2Fb")
    assert (target, params) == (("adminRemoveFault", "/_emulator"), {"name": "a/b"})
    assert table.match("DELETE", "/_emulator/faults/a/b", b"/_emulator/faults/a/b")[0] is None
    assert table.match("GET", "/v1/rl/model-resources", b"/v1%2frl/model-resources")[0] is None
    rid = "%2F".join(["x", "y"])
    target, params, _ = table.match("GET", "/v1/rl/model-resources/x/y", f"/v1/rl/model-resources/{rid}".encode())
    assert (target, params) == (("getModelResources", ""), {"model_resources_id": "x/y"})


def test_route_lookup_without_backtracking_finds_what_the_full_walk_finds() -> None:
    table, templates = _spec_table()
    literals = sorted({seg for t in templates for seg in t.split("/") if seg and "{" not in seg})
    rnd = random.Random(7)
    checked = found = 0
    for _ in range(4000):
        template = rnd.choice(templates)
        # Parameters take a random id or, often, a literal that names a sibling route there.
        path = "/".join(rnd.choice(literals) if "{" in seg and rnd.random() < 0.5 else
                        (f"id-{rnd.randrange(99)}" if "{" in seg else seg) for seg in template.split("/"))
        walked = table._walk(table.root, path[1:].split("/"), 0, {})
        for method in ("GET", "POST", "DELETE", "PATCH", "PUT", "HEAD"):
            target, params, allowed = table.match(method, path)
            if walked is None:
                assert (target, params, allowed) == (None, {}, set()), (method, path)
                continue
            node, want_params = walked
            want = node.methods.get(method) or (node.methods.get("GET") if method == "HEAD" else None)
            assert target == want, (method, path)
            assert params == (want_params if want else {}), (method, path)
            assert allowed == (set() if want else set(node.methods) | ({"HEAD"} if "GET" in node.methods else set()))
            checked += 1
            found += want is not None
    assert found > checked // 10  # the sample reaches real routes, not just misses


def test_rendered_session_follows_every_change(client: TestClient) -> None:
    s = running_session(client)
    sid = s["id"]

    def listed() -> dict:
        return next(item for item in client.get(f"{RL}/training-sessions").json()["data"] if item["id"] == sid)

    assert listed() == client.get(f"{RL}/training-sessions/{sid}").json()
    assert client.patch(f"{RL}/training-sessions/{sid}", json={"display_name": "renamed"}).status_code == 200
    assert listed()["display_name"] == "renamed"
    assert client.patch(f"{RL}/training-sessions/{sid}", json={"metadata": {"k": "v"}}).status_code == 200
    assert listed()["metadata"] == {"k": "v"}
    assert submit(client, sid, "optim-step", {}).status_code == 200
    assert client.get(f"{RL}/training-sessions/{sid}").json()["step"] == "1"
    assert listed()["step"] == "1"
    assert submit(client, sid, "training-checkpoint").status_code == 200
    client.get(f"{RL}/training-sessions/{sid}")
    assert len(listed()["training_checkpoints"]) == 1
    assert client.post(f"{RL}/training-sessions/{sid}/stop").status_code == 200
    assert listed()["status"] == client.get(f"{RL}/training-sessions/{sid}").json()["status"] != s["status"]


def test_base_model_rows_from_the_cache_are_bit_identical() -> None:
    cached = BaseModel(11, 151_936, 151_935)
    fresh = BaseModel(11, 151_936, 151_935)
    for rows in ([5, 1, 5, 77, 3, 100_000, 1], list(range(40)), [5, 1], [151_935, 0]):
        arr = np.array(rows)
        for _ in range(2):  # the first call computes and remembers, the second answers from the tables
            got_cols, got_logits = cached.prefs(arr)
            want_cols, want_logits = fresh._compute(arr)
            assert got_cols.dtype == want_cols.dtype and got_logits.dtype == want_logits.dtype
            assert np.array_equal(got_cols, want_cols) and np.array_equal(got_logits, want_logits)


def test_untrained_rows_normalised_from_the_cache_equal_the_general_path() -> None:
    """A row no session trained is normalised once and remembered (``BaseModel.untrained``); what the
    cache answers must be, bit for bit, what the general path computes for the same row among trained
    ones, and what a fresh computation gives. Tiny vocabularies (rows without tail columns) too."""
    for vocab in (151_936, 8, 6):
        cached, fresh = BaseModel(11, vocab, vocab - 1), BaseModel(11, vocab, vocab - 1)
        rows = np.array(sorted({0, 1, 2, 3, vocab // 2, vocab - 1}), dtype=np.int64)
        for _ in range(2):  # computed and remembered, then answered from the tables
            for got, want in zip(cached.untrained(rows), fresh._compute_untrained(rows), strict=True):
                assert got.dtype == want.dtype and np.array_equal(got, want)
        # weights with rows 1 and 2 trained (a gradient on them taken as their deltas), then all rows again
        initial = weights_module.Weights.initial(cached)
        rs0 = initial.rowset(np.array([1, 2], dtype=np.int64))
        grad = weights_module.backward(rs0, np.array([0, 1]), np.array([3, 4]) % vocab, np.array([-1.0, -0.5]))
        trained = weights_module.Weights(cached, grad.keys, np.zeros(grad.keys.size), grad.vals, grad.rows, grad.tail)
        rs_fresh, rs_mixed = initial.rowset(rows), trained.rowset(rows)
        assert initial.rows.size == 0 and trained.rows.size == 2  # the cached path and the general one
        for i, row in enumerate(rows.tolist()):
            if row in (1, 2):
                continue
            a, b = int(rs_fresh.offsets[i]), int(rs_fresh.offsets[i + 1])
            c, d = int(rs_mixed.offsets[i]), int(rs_mixed.offsets[i + 1])
            assert rs_fresh.logz[i].tobytes() == rs_mixed.logz[i].tobytes(), (vocab, row)
            assert rs_fresh.probs[a:b].tobytes() == rs_mixed.probs[c:d].tobytes()
            assert rs_fresh.tail_p[i].tobytes() == rs_mixed.tail_p[i].tobytes()
        assert rs_fresh.all_tails == rs_mixed.all_tails == (vocab > 8)


def test_base_model_row_cache_full_still_answers(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(base_module, "ROW_CACHE_ROWS", 8)
    model = BaseModel(3, 5_000, 4_999)
    rows = np.arange(20)
    cols, logits = model.prefs(rows)
    want_cols, want_logits = BaseModel(3, 5_000, 4_999)._compute(rows)
    assert np.array_equal(cols, want_cols) and np.array_equal(logits, want_logits)
    for got, want in zip(model.untrained(rows), BaseModel(3, 5_000, 4_999)._compute_untrained(rows), strict=True):
        assert np.array_equal(got, want)
    assert len(model._rows.slots) == 0  # 20 new rows do not fit in 8: nothing was remembered


def test_base_models_are_shared_per_seed_vocabulary_and_end_token() -> None:
    bases = BaseModels()
    assert base_model(4, 1000, 999, bases) is base_model(4, 1000, 999, bases)
    assert base_model(4, 1000, 999, bases) is not base_model(5, 1000, 999, bases)
    assert base_model(4, 1000, 999) is not base_model(4, 1000, 999)  # without a runtime's: nothing shared
    small = BaseModels(limit=2)
    first = base_model(1, 1000, 999, small)
    base_model(2, 1000, 999, small)
    base_model(3, 1000, 999, small)
    assert len(small) == 2 and base_model(1, 1000, 999, small) is not first  # the oldest went first


def test_ids_uuid_is_what_the_uuid_module_formats() -> None:
    ids = IdFactory(7, "proj")
    for i in range(2000):
        kind = ("x", "session", "")[i % 3]
        counter = ids.counter
        digest = ids._digest(kind)
        assert digest == derive(7, "proj", kind, counter + 1)  # the documented derivation
        ids.counter = counter
        assert ids.uuid(kind) == str(uuid.UUID(bytes=digest[:16], version=4))


def test_rfc3339_is_what_datetime_formats() -> None:
    def reference(ts: float) -> str:
        return datetime.fromtimestamp(round(ts, 3), tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"

    rng = random.Random(3)
    stamps = [0.0, 0.0005, 0.0015, 59.9995, 86399.9996, 1767225599.9995, 1767225600.0, MAX_TIME - 0.0004]
    stamps += [rng.uniform(0, MAX_TIME) for _ in range(5000)]
    stamps += [1767225600 + rng.randrange(10**6) / 1000 + rng.choice((0.0, 0.0005, 0.00049, 0.00051))
               for _ in range(5000)]
    for ts in stamps:
        assert rfc3339(ts) == reference(ts), ts


def test_small_set_operations_equal_numpys() -> None:
    """The model's set helpers answer exactly what numpy does, on both sides of their small-size paths."""
    rng = np.random.default_rng(5)
    for _ in range(3000):
        n, m = int(rng.integers(0, 80)), int(rng.integers(0, 80))
        hi = int(rng.choice([3, 50, 1 << 40]))
        a = rng.integers(-hi, hi, n, dtype=np.int64)
        b = rng.integers(-hi, hi, m, dtype=np.int64)
        u, inv = unique_inverse(a)
        nu, ninv = np.unique(a, return_inverse=True)
        assert u.dtype == inv.dtype == np.int64
        assert np.array_equal(u, nu) and np.array_equal(inv, ninv.reshape(-1))
        ua, ub = np.unique(a), np.unique(b)
        assert np.array_equal(union_sorted(ua, ub), np.union1d(ua, ub))
        assert np.array_equal(union_sorted(a, b), np.union1d(a, b))  # repeats inside an operand too
        for left in (ua, a):  # numpy's assume_unique answer differs when ``a`` repeats: the helper follows it
            got = setdiff_unique(left, ub)
            assert got.dtype == np.int64 and np.array_equal(got, np.setdiff1d(left, ub, assume_unique=True))


def test_small_array_paths_equal_numpys() -> None:
    """Row counts of a gradient and the token range check answer as numpy does on both sides of their
    small-size paths."""
    rng = np.random.default_rng(7)
    v = 50
    for _ in range(500):
        rows = np.unique(rng.integers(0, v, int(rng.integers(0, 12)), dtype=np.int64))
        keys = np.unique(rng.integers(0, v * v, int(rng.integers(0, 300)), dtype=np.int64))
        acc = GradAccum(keys, np.zeros(keys.size), rows, np.zeros(rows.size))
        expect = keys.searchsorted((rows + 1) * v) - keys.searchsorted(rows * v)
        got = acc.row_counts(v)
        assert got.dtype == np.int64 and np.array_equal(got, expect)
        toks = rng.integers(-2, v + 2, int(rng.integers(0, 70)), dtype=np.int64)
        bad = np.nonzero((toks < 0) | (toks >= v))[0]
        try:
            check_token_range(toks, "t", v)
            assert bad.size == 0
        except ComputeError as exc:
            assert bad.size and exc.message == (f"t: token {int(toks[bad[0]])} at position {int(bad[0])} "
                                                f"is outside the vocabulary [0, {v})")


def test_float32_inputs_short_lists_equal_the_numpy_path() -> None:
    """Short lists of loss inputs are range-checked in Python (``_float32_array``): what they give, and
    what they refuse, must be what the numpy path does for the same values in a long list."""
    f32 = float(np.finfo(np.float32).max)
    pool: list[Any] = [0, 1, -1, 0.5, -0.0, 1e-45, 3.3e38, -f32, f32, 2**60, 1e300, -1e39, 16777217,
                       float("nan"), float("inf"), True, "2.5", 10**400, None]
    rng = random.Random(11)

    def outcome(data: list[Any]) -> Any:
        try:
            return _float32_array(data, "w").tobytes()
        except ComputeError as exc:
            return "refused: " + exc.message.split(":")[1]
    for _ in range(3000):
        data = [rng.choice(pool) for _ in range(rng.randint(1, 6))]
        long = data + [0.0] * 70  # past the short-list path
        short, reference = outcome(data), outcome(long)
        if isinstance(reference, bytes):
            assert isinstance(short, bytes) and short == reference[: 8 * len(data)], data
        else:
            assert short == reference, data


def _drive(app: Any, method: str, path: str, headers: list[tuple[bytes, bytes]], body: bytes | None
           ) -> tuple[int, bytes, int]:
    """One request straight into the ASGI app: (status, body, how many times it called ``receive``)."""
    calls = 0
    out: dict[str, Any] = {"body": b""}

    async def receive() -> dict[str, Any]:
        nonlocal calls
        calls += 1
        if body is None:
            raise AssertionError("receive() called for a request that declared no body")
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            out["status"] = message["status"]
        else:
            out["body"] += message.get("body", b"")

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "path": path,
             "raw_path": path.encode(), "query_string": b"", "scheme": "http", "root_path": "",
             "server": ("127.0.0.1", 8765), "client": ("127.0.0.1", 5000), "state": {},
             "headers": [(b"host", b"127.0.0.1:8765"), (b"authorization", b"Bearer t"), *headers]}
    asyncio.run(app(scope, receive, send))
    return out["status"], out["body"], calls


def test_requests_that_declare_no_body_are_answered_without_receiving_one() -> None:
    app = build_server_app(Runtime(Config(clock="manual")))
    json_hdr = (b"content-type", b"application/json")
    raw = b'{"base_model": "Qwen/Qwen3.8-27B", "lora_enabled": true}'
    status, body, calls = _drive(app, "POST", f"{RL}/model-resources",
                                 [json_hdr, (b"content-length", str(len(raw)).encode())], raw)
    assert (status, calls) == (200, 1), body
    rid = orjson.loads(body)["id"]
    # No Content-Length and no Transfer-Encoding (RFC 9112 6.3), or a declared length of 0: no body to wait for.
    for extra in ([], [(b"content-length", b"0")]):
        status, body, calls = _drive(app, "GET", f"{RL}/model-resources/{rid}", extra, None)
        assert (status, calls) == (200, 0), body
        status, body, calls = _drive(app, "GET", f"{RL}/training-sessions", extra, None)  # validated query
        assert (status, calls) == (200, 0), body
    s = orjson.loads(_drive(app, "POST", f"{RL}/training-sessions",
                            [json_hdr, (b"transfer-encoding", b"chunked")],
                            orjson.dumps({"model_resources_id": rid}))[1])
    status, body, calls = _drive(app, "POST", f"{RL}/training-sessions/{s['id']}/operations/optim-step",
                                 [(b"idempotency-key", b"k1")], None)
    assert (status, calls) == (200, 0), body  # an optional body, absent
    status, body, calls = _drive(app, "POST", f"{RL}/training-sessions", [json_hdr], None)
    assert status == 400 and calls == 0 and orjson.loads(body)["error"]["code"] == "missing_body", body


def test_a_table_is_never_copied_with_its_lookups_bound_to_the_original_rows() -> None:
    """Table.get/read/peek are the rows dict's own bound methods (the commonest store call); a copy of the
    table would keep answering from the original's rows, so copying one is refused."""
    import copy

    import pytest

    from emulator.store.memory import EventLog
    from emulator.store.tenant import Tenant

    table = Tenant("p", 7, EventLog()).sessions
    for make_copy in (copy.copy, copy.deepcopy):
        with pytest.raises(TypeError, match="not copied"):
            make_copy(table)
