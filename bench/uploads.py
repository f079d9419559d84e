"""Figures for RELIABILITY.md: what Files API uploads cost a running emulator (issue 39, item 8).

``python -m bench.uploads [--uploads 20] [--mib 64]`` starts ``python -m emulator serve`` (in memory, then with
``--state-file``) and uploads ``--uploads`` files of ``--mib`` MiB each (the largest body by default) to one
project, the SDK's way (the form, then the PUT of the bytes to the presigned URL). It measures the server's
resident memory before and after each upload, the slowest answer a probe got from another client meanwhile
(``GET /_emulator/health`` in a loop: how long the event loop was held), the journal's growth per upload, and
how long a restart with that state file takes to answer. Prints one ``BENCH_JSON`` line.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from bench import procs

SERVE = ["-m", "emulator", "serve", "--host", "127.0.0.1", "--port", "0", "--log-level", "error"]
KEY = "bench-uploads"


def _body(size: int, seed: int) -> Iterator[bytes]:
    """``size`` bytes of JSONL, a MiB at a time (never held whole by the client either)."""
    row = b'{"messages": [{"role": "user", "content": "%d %s"}]}\n'
    chunk = bytearray()
    sent, i = 0, 0
    while sent < size:
        while len(chunk) < (1 << 20):
            chunk += row % (seed * 1_000_000 + i, b"x" * 40)
            i += 1
        piece = bytes(chunk[: min(len(chunk), size - sent)])
        chunk = chunk[len(piece):]
        sent += len(piece)
        yield piece


def _upload(api: httpx.Client, n: int, size: int) -> None:
    form = {"purpose": "fine-tune", "file_name": f"data-{n}.jsonl", "file_type": "jsonl"}
    started = api.post("/v1/files", files={k: (None, v) for k, v in form.items()}, follow_redirects=False)
    assert started.status_code == 302, started.text
    put = httpx.put(started.headers["location"], content=_body(size, n), timeout=300,
                    headers={"Content-Length": str(size)})
    assert put.status_code == 200, put.text


def _probe(url: str, stop: threading.Event, worst: list[float]) -> None:
    with httpx.Client(base_url=url, timeout=60) as c:
        while not stop.is_set():
            start = time.perf_counter()
            c.get("/_emulator/health")
            worst[0] = max(worst[0], time.perf_counter() - start)
            stop.wait(0.01)


def run(work: Path, uploads: int, mib: int, state_file: Path | None) -> dict[str, Any]:
    size = mib << 20
    cmd = list(SERVE) + (["--state-file", str(state_file)] if state_file else [])
    label = "journal" if state_file else "memory"
    with procs.Server(f"uploads-{label}", cmd, work) as srv:
        api = httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=300)
        api.get("/v1/files")
        rss = [procs.rss_of(srv.pid)]
        journal = [state_file.stat().st_size] if state_file else []
        stop, worst = threading.Event(), [0.0]
        prober = threading.Thread(target=_probe, args=(srv.url, stop, worst), daemon=True)
        prober.start()
        t0 = time.monotonic()
        for n in range(uploads):
            _upload(api, n, size)
            rss.append(procs.rss_of(srv.pid))
            if state_file:
                journal.append(state_file.stat().st_size)
        elapsed = time.monotonic() - t0
        stop.set()
        prober.join()
        listed = api.get("/v1/files").json()["data"]
        assert len(listed) == uploads and all(f["bytes"] == size for f in listed), listed[:2]
        api.close()
    out: dict[str, Any] = {
        f"{label}_rss_before_mb": rss[0] / 2**20, f"{label}_rss_after_first_mb": rss[1] / 2**20,
        f"{label}_rss_after_last_mb": rss[-1] / 2**20, f"{label}_rss_max_mb": max(rss) / 2**20,
        f"{label}_growth_first_to_last_mb": (rss[-1] - rss[1]) / 2**20,
        f"{label}_upload_mib_per_s": uploads * mib / elapsed, f"{label}_probe_worst_ms": worst[0] * 1000}
    if state_file:
        growth = [b - a for a, b in zip(journal, journal[1:], strict=False)]
        out["journal_bytes_per_upload_max"] = max(growth)
        blobs = Path(f"{state_file}.blobs")
        out["journal_file_mib"] = state_file.stat().st_size / 2**20
        out["journal_blob_dir_mib"] = (sum(p.stat().st_size for p in blobs.iterdir() if p.is_file()) / 2**20
                                       if blobs.is_dir() else 0.0)
        started = time.perf_counter()
        with procs.Server("uploads-restart", cmd, work) as again:
            out["journal_restart_s"] = again.ready_at - started
            with httpx.Client(base_url=again.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as api:
                out["journal_restart_files"] = len(api.get("/v1/files").json()["data"])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.uploads")
    parser.add_argument("--uploads", type=int, default=20)
    parser.add_argument("--mib", type=int, default=64, help="MiB per upload (default 64: the largest body)")
    args = parser.parse_args(argv)
    out: dict[str, Any] = {"uploads": args.uploads, "upload_mib": args.mib}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for state_file in (None, work / "state" / "state.json"):
            out.update(run(work, args.uploads, args.mib, state_file))
            print(f"so far: {json.dumps(out)}", file=sys.stderr, flush=True)
    print("BENCH_JSON " + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
