"""An emulator whose store is filled in-process, then served over HTTP like ``python -m emulator serve``.

``python -m bench.filled --sessions N [--token T] [--serve]``: builds the emulator's ``Runtime`` and
app, creates ``N / 5`` READY LoRA model resources and ``N`` RUNNING, idle training sessions through
the domain functions (the same code the HTTP handlers call, minus HTTP), and prints one
``BENCH_JSON`` line with resident memory measured after the app was built (``rss_base``), after the
resources (``rss_resources``) and after the sessions (``rss_sessions``), each after a full garbage
collection. With ``--serve`` it then listens on a loopback port so the bench can time list requests
against a store of that size.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time
from typing import Any

BASE_MODEL = "Qwen/Qwen3.8-27B"
PER_RESOURCE = 5


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def settled_rss() -> int:
    gc.collect()
    return rss_bytes()


def fill(runtime: Any, token: str, sessions: int) -> dict[str, Any]:
    from emulator.domain import model_resources as resources_domain
    from emulator.domain import sessions as sessions_domain

    principal = runtime.principal_for(token)
    resources = -(-sessions // PER_RESOURCE)
    out: dict[str, Any] = {"sessions": sessions, "resources": resources}
    # Touch the tenant once so its fixed cost lands in the baseline.
    with runtime.unit_of_work(principal, write=True):
        pass
    out["rss_base"] = settled_rss()
    started = time.perf_counter()
    resource_ids = []
    with runtime.unit_of_work(principal, write=True) as (state, ctx):
        for _ in range(resources):
            r = resources_domain.create(state, ctx, resources_domain.CreateRequest(base_model=BASE_MODEL,
                                                                                   lora_enabled=True))
            resource_ids.append(r.id)
    with runtime.unit_of_work(principal, write=False) as (state, ctx):
        assert all(state.resources[rid].status.endswith("READY") for rid in resource_ids), (
            "resources not READY"
        )
    out["rss_resources"] = settled_rss()
    with runtime.unit_of_work(principal, write=True) as (state, ctx):
        made = 0
        for rid in resource_ids:
            for _ in range(min(PER_RESOURCE, sessions - made)):
                sessions_domain.create(state, ctx, sessions_domain.CreateRequest(model_resources_id=rid))
                made += 1
    with runtime.unit_of_work(principal, write=False) as (state, ctx):
        running = sum(1 for s in state.sessions.values() if s.status.endswith("RUNNING"))
        assert running == sessions, f"{running} of {sessions} sessions RUNNING"
    out["rss_sessions"] = settled_rss()
    out["fill_seconds"] = time.perf_counter() - started
    out["oldest_resource_id"] = resource_ids[0]
    out["events_logged"] = len(runtime.store.events._events)  # noqa: SLF001 - reported, not used
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.filled")
    parser.add_argument("--sessions", type=int, required=True)
    parser.add_argument("--token", default="bench-token")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--serve", action="store_true")
    args = parser.parse_args(argv)

    from emulator.config import Config
    from emulator.runtime import Runtime
    from emulator.tools.server import build_server_app

    runtime = Runtime(Config(host=args.host, port=args.port))
    app = build_server_app(runtime)
    report = fill(runtime, args.token, args.sessions)
    print("BENCH_JSON " + json.dumps(report), flush=True)
    if args.serve:
        from bench.serve import serve

        serve(app, args.host, args.port, "Bench filled emulator")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
