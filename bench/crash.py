"""Acknowledged writes against what a restart finds, over many ``kill -9`` runs, with a disk that fills.

``python -m bench.crash [--runs 20] [--seconds 1.5] [--disk-kib 768]``: each run starts an emulator with
```--state-file`` (on a small tmpfs when this process may mount one, so writes also meet a full disk; a new
file every third run, the same file across the others), makes
writes from three threads as fast as it answers (resource creates, session metadata PATCHes with a new key
each, forward-backward submits with an ``Idempotency-Key``), kills it with SIGKILL at a random moment,
restarts it on the same file and checks that every write that was acknowledged (200) is there, that no
refused write (503) is, and that the file loads. Prints one ``BENCH_JSON`` line with the totals; the
figures of RELIABILITY.md come from it.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench import procs
from bench.client import Client

R = "/v1/rl/model-resources"
S = "/v1/rl/training-sessions"
FB = {"samples": [{"model_input": {"chunks": [{"encoded_text": {"tokens": [1, 2, 3]}}]},
                   "loss_fn_inputs": {"target_tokens": {"data": [2, 3, 4], "dtype": "int64"},
                                      "weights": {"data": [1.0, 1.0, 1.0], "dtype": "float32"}}}],
      "loss": {"type": "LOSS_TYPE_CROSS_ENTROPY"}}


def _mount(where: Path, kib: int) -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kib}k", "tmpfs", str(where)],
                          capture_output=True).returncode == 0


class Writer:
    """Writes of one kind until told to stop; remembers what was acknowledged and what was refused."""

    def __init__(self, url: str, kind: str, sid: str, run: int) -> None:
        self.client = Client(url, token="crash")
        self.kind = kind
        self.sid = sid
        self.run = run
        self.acked: list[Any] = []
        self.refused: list[Any] = []
        self.stop = threading.Event()

    def loop(self) -> None:
        i = 0
        while not self.stop.is_set():
            i += 1
            key = f"r{self.run}-{self.kind}-{i}"
            try:
                if self.kind == "resource":
                    status, body = self.client.request("POST", R, {"base_model": "Qwen/Qwen3.5-4B"})
                    mark = json.loads(body).get("id") if status == 200 else key
                elif self.kind == "metadata":
                    status, _ = self.client.request("PATCH", f"{S}/{self.sid}", {"metadata": {key: "x" * 200}})
                    mark = key
                else:
                    status, body = self.client.request("POST", f"{S}/{self.sid}/operations/forward-backward", FB,
                                                       headers={"Idempotency-Key": key})
                    mark = (key, json.loads(body).get("id")) if status == 200 else (key, None)
            except (OSError, http.client.HTTPException):
                return  # the server is gone: whatever was in flight was never acknowledged
            if status == 200:
                self.acked.append(mark)
            elif status == 503:
                self.refused.append(mark)


def one_run(run: int, work: Path, disk: Path, seconds: float, rng: random.Random) -> dict[str, Any]:
    state = disk / "state.jsonl"  # (the servers' logs stay in work: the disk fills)
    if run % 3 == 0:
        state.unlink(missing_ok=True)  # a fresh file every third run, so the disk fills again and again
    cmd = ["-m", "emulator", "serve", "--port", "0", "--state-file", str(state), "--clock", "manual"]
    with procs.Server(f"crash-{run}", cmd, work) as srv:
        c = Client(srv.url, token="crash")
        status, body = c.request("POST", R, {"base_model": "Qwen/Qwen3.5-4B"})
        if status != 200:  # the disk is full from an earlier run: nothing to do but count it
            return {"acked": 0, "refused": 1, "lost": 0, "kept_refused": 0, "loaded": True}
        rid = json.loads(body)["id"]
        c.request("GET", f"{R}/{rid}")
        status, body = c.request("POST", S, {"model_resources_id": rid})
        sid = json.loads(body)["id"] if status == 200 else ""
        c.request("GET", f"{S}/{sid}")
        writers = [Writer(srv.url, kind, sid, run) for kind in ("resource", "metadata", "fb")]
        threads = [threading.Thread(target=w.loop, daemon=True) for w in writers]
        for t in threads:
            t.start()
        time.sleep(rng.uniform(0.2, seconds))
        os.kill(srv.proc.pid, signal.SIGKILL)
        srv.proc.wait()
        for w in writers:
            w.stop.set()
        for t in threads:
            t.join(timeout=10)
    out = {"acked": sum(len(w.acked) for w in writers), "refused": sum(len(w.refused) for w in writers),
           "lost": 0, "kept_refused": 0, "loaded": False}
    try:
        again = procs.Server(f"crash-{run}-restart", cmd, work)
    except RuntimeError:
        return out  # the file did not load: counted as not loaded
    with again:
        out["loaded"] = True
        c = Client(again.url, token="crash")
        status, body = c.request("GET", f"{S}/{sid}")
        metadata = json.loads(body).get("metadata", {}) if status == 200 else {}
        status, body = c.request("GET", "/_emulator/state")
        keys = {entry[2] for tenant in json.loads(body)["tenants"].values() for entry in tenant["idempotency"]}
        for w in writers:
            for mark in w.acked:
                out["lost"] += not _present(c, w.kind, mark, sid, metadata, keys)
            for mark in w.refused:
                out["kept_refused"] += _present(c, w.kind, mark, sid, metadata, keys)
    return out


def _present(c: Client, kind: str, mark: Any, sid: str, metadata: dict[str, Any], keys: set[str]) -> bool:
    """Whether a write is in the restarted state, by reads only (a write could meet the full disk)."""
    if kind == "resource":
        return c.request("GET", f"{R}/{mark}")[0] == 200
    if kind == "metadata":
        return mark in metadata
    key, op_id = mark
    if op_id is None:  # a refused submit: kept if its key names an operation
        return key in keys
    return c.request("GET", f"{S}/{sid}/operations/forward-backward/{op_id}")[0] == 200


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.crash")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=1.5, help="longest a run writes before its kill")
    parser.add_argument("--disk-kib", type=int, default=768, help="size of the tmpfs the state file is on")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    totals = {"runs": args.runs, "acked": 0, "refused": 0, "lost": 0, "kept_refused": 0, "not_loaded": 0}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        disk = work / "disk"
        disk.mkdir()
        mounted = _mount(disk, args.disk_kib)
        totals["full_disk"] = mounted
        try:
            for run in range(args.runs):
                got = one_run(run, work, disk, args.seconds, rng)
                for key in ("acked", "refused", "lost", "kept_refused"):
                    totals[key] += got[key]
                totals["runs_with_refusals"] = totals.get("runs_with_refusals", 0) + (got["refused"] > 0)
                totals["not_loaded"] += not got["loaded"]
        finally:
            if mounted:
                subprocess.run(["umount", "-l", str(disk)], check=False)
    print("BENCH_JSON " + json.dumps(totals), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
