"""Refused means not applied, the control plane included: what a 503 leaves behind, and what a restart loses.

``python -m bench.refusals [--runs 20] [--steps 60] [--refuse 0.35] [--seed 0]``: each run starts an emulator
in process with ``--state-file`` on a disk that refuses a write (ENOSPC, half of it written) for about a
third of the requests, and makes random calls as two tenants and as the operator: clock advances (up to
7,200 s, global or a tenant's), moves to the next transition and runs, clock modes and instants, timing
profiles, tenant and global resets (with a seed, a clock, a profile), reseeds, tenant imports, fault rules
with a ``first_n`` trigger, and vendor writes (resources, sessions, forward-backward, PATCH, stop). Before
and after each call answered 503 ``storage_unavailable`` it reads what a client can see (the clocks and
profiles, global and both tenants', the event log, the fault rules with their counters, the whole state):
any difference is a refusal that was kept. At the end it restarts on the file and compares the restored
emulator with the one that answered: any difference is something acknowledged that was lost (fault rules
aside: their answers say that a restart does not keep them). Prints one ``BENCH_JSON`` line.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import random
import tempfile
from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from emulator.config import Config
from emulator.runtime import Runtime
from emulator.tools.server import build_server_app
from tests.full_disk import FullDisk

RL = "/v1/rl"
BASE = "Qwen/Qwen3.8-27B"
KEYS = ("bench-a", "bench-b")
FB = {"samples": [{"model_input": {"chunks": [{"encoded_text": {"tokens": [1, 2, 3]}}]},
                   "loss_fn_inputs": {"target_tokens": {"data": [2, 3, 4], "dtype": "int64"},
                                      "weights": {"data": [1.0, 1.0, 1.0], "dtype": "float32"}}}],
      "loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}}


def _client(runtime: Runtime) -> TestClient:
    return TestClient(build_server_app(runtime), base_url="http://127.0.0.1:8765")


def _as(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _scoped(key: str) -> dict[str, str]:
    return {"X-Emulator-Tenant": key}


def _seen(client: TestClient, with_events: bool = True) -> dict[str, Any]:
    """What a client can see of the emulator (reads settle what is due, as any read does)."""
    out: dict[str, Any] = {"state": client.get("/_emulator/state").json()}
    for key in (None, *KEYS):
        headers = _scoped(key) if key else {}
        out[f"clock {key}"] = client.get("/_emulator/clock", headers=headers).json()
        out[f"profile {key}"] = client.get("/_emulator/profile", headers=headers).json()
    if with_events:
        out["events"] = client.get("/_emulator/events", params={"limit": 10_000}).json()["data"]
        out["faults"] = client.get("/_emulator/faults").json()["data"]
    return out


class Run:
    def __init__(self, rng: random.Random, path: Path) -> None:
        self.rng = rng
        self.path = path
        self.profile = rng.choice(["instant", "realistic"])
        self.runtime = Runtime(Config(clock="manual", profile=self.profile, state_file=str(path)))
        self.disk = FullDisk()
        assert self.runtime.persistence is not None
        self.runtime.persistence.file.io = self.disk
        self.resources: dict[str, list[str]] = {k: [] for k in KEYS}
        self.sessions: dict[str, list[str]] = {k: [] for k in KEYS}

    def call(self, client: TestClient) -> tuple[str, Any]:
        """One random call: (what it was, the response)."""
        rng = self.rng
        key = rng.choice(KEYS)
        scope = rng.choice([_scoped(key), {}])
        action = rng.choice(["advance", "advance", "next", "run", "clock", "now", "profile", "reset-tenant",
                             "reset-all", "seed", "import", "fault", "resource", "resource", "session", "fb",
                             "fb", "patch", "stop"])
        if action == "advance":
            return action, client.post("/_emulator/clock/advance", json={"seconds": rng.choice([1, 30, 600, 7200])},
                                       headers=scope)
        if action == "next":
            return action, client.post("/_emulator/clock/advance", json={"to": "next"}, headers=_scoped(key))
        if action == "run":
            return action, client.post("/_emulator/clock/run", json={"max_seconds": 3600}, headers=_scoped(key))
        if action == "clock":
            return action, client.post("/_emulator/clock", json={"mode": rng.choice(["manual", "auto"]),
                                                                 "speed": rng.choice([1, 2])}, headers=scope)
        if action == "now":
            now = client.get("/_emulator/clock", headers=scope).json()["now"]
            year = int(now[:4]) + 1
            return action, client.post("/_emulator/clock", json={"now": f"{year}{now[4:]}"}, headers=scope)
        if action == "profile":
            return action, client.post("/_emulator/profile", json={"profile": rng.choice(["instant", "realistic"])},
                                       headers=scope)
        if action == "reset-tenant":
            body: dict[str, Any] = rng.choice([{}, {"seed": rng.randrange(100)}, {"keep_settings": True},
                                               {"profile": {"profile": "realistic"}}])
            self.resources[key], self.sessions[key] = [], []
            return action, client.post("/_emulator/reset", json=body, headers=_scoped(key))
        if action == "reset-all":
            if rng.random() < 0.7:  # (rarely: it forgets everything)
                return self.call(client)
            self.resources = {k: [] for k in KEYS}
            self.sessions = {k: [] for k in KEYS}
            return action, client.post("/_emulator/reset", json={})
        if action == "seed":
            return action, client.post("/_emulator/seed", json={"seed": rng.randrange(100)}, headers=_scoped(key))
        if action == "import":
            other = KEYS[1 - KEYS.index(key)]
            doc = client.get("/_emulator/state", headers=_scoped(other)).json()
            self.resources[key], self.sessions[key] = list(self.resources[other]), list(self.sessions[other])
            return action, client.put("/_emulator/state", json=doc, headers=_scoped(key))
        if action == "fault":
            rule = {"name": f"f{rng.randrange(10**6)}", "trigger": {"first_n": 1},
                    "match": {"operation_id": rng.choice(["createModelResources", "createSession"])},
                    "effect": rng.choice([{"queue_position": 3}, {"status": 503}, {"latency_ms": 0}])}
            return action, client.post("/_emulator/faults", json=rule, headers=scope)
        if action == "resource" or not self.resources[key]:
            resp = client.post(f"{RL}/model-resources", json={"base_model": BASE, "inactive_timeout": 600},
                               headers=_as(key))
            if resp.status_code == 200:
                self.resources[key].append(resp.json()["id"])
            return "resource", resp
        if action == "session" or not self.sessions[key]:
            resp = client.post(f"{RL}/training-sessions", json={"model_resources_id": rng.choice(self.resources[key])},
                               headers=_as(key))
            if resp.status_code == 200:
                self.sessions[key].append(resp.json()["id"])
            return "session", resp
        sid = rng.choice(self.sessions[key])
        if action == "fb":
            return action, client.post(f"{RL}/training-sessions/{sid}/operations/forward-backward", json=FB,
                                       headers={**_as(key), "Idempotency-Key": f"k{rng.randrange(10**6)}"})
        if action == "patch":
            return action, client.patch(f"{RL}/training-sessions/{sid}", json={"metadata": {"n": str(rng.random())}},
                                        headers=_as(key))
        return action, client.post(f"{RL}/model-resources/{rng.choice(self.resources[key])}/stop",
                                   params={"force": "true"}, headers=_as(key))


def run_once(rng: random.Random, steps: int, refuse: float, totals: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as where:
        path = Path(where) / "state.jsonl"
        run = Run(rng, path)
        with _client(run.runtime) as client:
            for _ in range(steps):
                refusing = rng.random() < refuse
                before = _seen(client) if refusing else None
                run.disk.full = refusing
                try:
                    action, resp = run.call(client)
                finally:
                    run.disk.full = False
                if resp.status_code == 503 and resp.json().get("error", {}).get("code") == "storage_unavailable":
                    totals["refused"] += 1
                    totals["refused_by_action"][action] += 1
                    if _seen(client) != before:
                        totals["refused_kept"] += 1
                        totals["kept_by_action"][action] += 1
                elif resp.status_code < 400:
                    totals["acknowledged"] += 1
            live = _seen(client, with_events=False)
        restored = Runtime(Config(clock="manual", profile=run.profile, state_file=str(path)))  # (the same command)
        with _client(restored) as client:
            after = _seen(client, with_events=False)
        differ = sorted(k for k in live if after.get(k) != live[k])
        if differ:
            totals["runs_restart_differs"] += 1
            for k in differ:
                totals["lost_by_kind"][k.split(" ")[0]] += 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.refusals")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--refuse", type=float, default=0.35, help="share of calls the disk refuses")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.getLogger("emulator").setLevel(logging.CRITICAL)  # (every refusal logs an error: that is the point)
    totals: dict[str, Any] = {"runs": args.runs, "steps": args.steps, "refused": 0, "refused_kept": 0,
                              "acknowledged": 0, "runs_restart_differs": 0,
                              "refused_by_action": collections.Counter(), "kept_by_action": collections.Counter(),
                              "lost_by_kind": collections.Counter()}
    rng = random.Random(args.seed)
    for _ in range(args.runs):
        run_once(rng, args.steps, args.refuse, totals)
    print("BENCH_JSON " + json.dumps(totals, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
