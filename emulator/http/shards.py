"""A shard of a cluster (``serve --shard I/N``): what it refuses, and the control calls it takes to every shard.

Emulates nothing of the real API. HAProxy sends each tenant's requests to its shard (:mod:`emulator.sharding`);
this step (after auth, before fault rules) answers 421 ``wrong_shard`` to another shard's tenant, and fans
cluster-wide control calls out to every shard (502 ``cluster_partial`` if some did not apply them).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import parse_qsl

import httpx
import orjson

from emulator.errors import Invalid, Misdirected
from emulator.http.asgi import (
    ASGIApp,
    Receive,
    Scope,
    Send,
    call_app,
    header,
    read_body,
    send_json,
)
from emulator.http.auth import is_admin_operation
from emulator.http.call import Call
from emulator.http.envelope import error_body
from emulator.http.errors import ErrorEnvelope
from emulator.runtime import Runtime
from emulator.sharding import Shard

SHARD_HEADER = "X-Emulator-Shard"
TENANT_HEADER = b"x-emulator-tenant"
FAN_OUT_TIMEOUT = 60.0
# Unscoped control calls, by what they mean for a cluster (the others are answered by the shard that gets them).
CLUSTER_WIDE = frozenset({"adminReset", "adminSetSeed", "adminSetClock", "adminAdvanceClock", "adminSetProfile",
                          "adminAddFaults", "adminClearFaults", "adminRemoveFault"})
PER_SHARD = frozenset({"adminExportState", "adminImportState", "adminListEvents", "adminGetPending",
                       "adminStartRecording", "adminStopRecording", "adminGetRecording"})
NEEDS_TENANT = frozenset({"adminLoadScenario", "adminScheduleAction", "adminListActions", "adminCancelAction",
                          "adminRunClock"})
# Request headers a fanned-out call carries on (the admin token among them); the rest are the hop's own.
HOP_HEADERS = frozenset({b"host", b"content-length", b"connection", b"transfer-encoding", b"keep-alive",
                         b"x-emulator-shard", b"accept-encoding"})


def query(scope: Scope) -> dict[str, str]:
    return dict(parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True))


def named_shard(scope: Scope, shard: Shard) -> bool:
    """Whether the request names a shard (``X-Emulator-Shard`` or ``?shard=``); 421 when it names another
    one than ``shard``, 400 when it names none that exists."""
    raw = header(scope, SHARD_HEADER.lower().encode())
    if raw is None:
        raw = query(scope).get("shard")
    if raw is None:
        return False
    text = raw.strip()
    if not text.isdigit() or int(text) >= shard.count:
        raise Invalid(f"{SHARD_HEADER}: a shard of this cluster, 0 to {shard.count - 1}, not {raw!r}",
                      param=SHARD_HEADER, code="unknown_shard")
    if int(text) != shard.index:
        raise Misdirected(f"this is shard {shard.index} of {shard.count}, not shard {text}: the balancer in front "
                          "sent the request to the wrong shard")
    return True


def scoped(scope: Scope) -> bool:
    """Whether a control call names a tenant in its header or query (a balancer routes those by tenant)."""
    return bool(header(scope, TENANT_HEADER) or query(scope).get("tenant"))


@dataclass(slots=True)
class ShardAnswer:
    shard: int
    status: int              # 0: no answer (the error says why)
    body: bytes
    error: str = ""

    def describe(self) -> str:
        if not self.status:
            return f"shard {self.shard}: no answer ({self.error})"
        try:
            message = orjson.loads(self.body)["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = ""
        return f"shard {self.shard}: {self.status}" + (f" ({message})" if message else "")


class FanOut:
    """Requests to the other shards of a cluster, each named with ``X-Emulator-Shard``, through the balancer."""

    def __init__(self, balancer: str, shard: Shard) -> None:
        self.balancer = balancer.rstrip("/")
        self.shard = shard

    def others(self) -> list[int]:
        return [i for i in range(self.shard.count) if i != self.shard.index]

    async def send(self, method: str, target: str, headers: Iterable[tuple[bytes, bytes]], body: bytes = b""
                   ) -> list[ShardAnswer]:
        """``method target`` (a path with its query) to every other shard at once."""
        kept = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in headers if k.lower() not in HOP_HEADERS]
        async with httpx.AsyncClient(base_url=self.balancer, timeout=FAN_OUT_TIMEOUT) as client:
            async def one(index: int) -> ShardAnswer:
                try:
                    resp = await client.request(method, target, content=body or None,
                                                headers=[*kept, (SHARD_HEADER, str(index))])
                except httpx.HTTPError as exc:
                    return ShardAnswer(index, 0, b"", f"{type(exc).__name__}: {exc}")
                return ShardAnswer(index, resp.status_code, resp.content)

            return list(await asyncio.gather(*(one(i) for i in self.others())))


def combine(answers: list[ShardAnswer]) -> tuple[int, bytes]:
    """One answer for a change sent to every shard (``answers[0]`` is this shard's)."""
    counted = [a for a in answers if a.status != 421] or answers[:1]
    first = counted[0]
    if all(200 <= a.status < 300 for a in counted):
        return first.status, first.body
    if all(a.status == first.status for a in counted):  # refused alike everywhere (a bad value): one refusal
        return first.status, first.body
    changed = [str(a.shard) for a in counted if 200 <= a.status < 300]
    message = (f"the call reached only part of the cluster: changed on shard(s) {', '.join(changed) or 'none'}; "
               + "; ".join(a.describe() for a in counted if not 200 <= a.status < 300)
               + ". Nothing was undone: repeat it once every shard is up (GET /_emulator/health with "
               f"{SHARD_HEADER} tells)")
    return 502, orjson.dumps(error_body(message, "server_error", None, "cluster_partial"))


class ShardGuard:
    """The shard step; see emulator/http/README.md. ``balancer``: the cluster's front, for the cluster-wide
    calls (None: they are refused unless a shard is named)."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        shard = runtime.shard
        assert shard is not None
        self.shard = shard
        self.fan_out = FanOut(runtime.config.balancer, shard) if runtime.config.balancer else None

    def everywhere(self, call: Call, scope: Scope) -> FanOut | None:
        """Refuses what this shard does not answer; the fan-out when the call goes to every shard (None: this
        shard answers it alone)."""
        op = call.op
        if op is None:
            return None
        if not is_admin_operation(op):
            if call.caller is not None:
                self.runtime.check_owner(call.caller.project)
            return None
        if named_shard(scope, self.shard) or scoped(scope):
            return None
        here = f"this is shard {self.shard} of a cluster"
        if op in PER_SHARD:
            raise Invalid(f"{here}, and each shard has its own state, event log and recording: name a shard "
                          f"({SHARD_HEADER}: 0 to {self.shard.count - 1}, or ?shard=) or a tenant "
                          "(X-Emulator-Tenant)", param=SHARD_HEADER, code="shard_required")
        if op in NEEDS_TENANT:
            raise Invalid(f"{here}: {op} acts on one tenant (a scenario loads into it; scheduled actions and runs "
                          "of the clock are its own), which lives on one shard; name it with X-Emulator-Tenant "
                          "(the shipped scenarios' own key is demo-key)", param="X-Emulator-Tenant",
                          code="tenant_required")
        if op in CLUSTER_WIDE:
            if self.fan_out is None:
                raise Invalid(f"{here} started without --balancer, so it cannot reach the others: call the "
                              f"balancer, or name this shard ({SHARD_HEADER}: {self.shard.index}) to change it "
                              "alone", param=SHARD_HEADER, code="shard_required")
            return self.fan_out
        return None

    async def send_everywhere(self, fan_out: FanOut, here: ASGIApp, scope: Scope, receive: Receive, send: Send
                              ) -> None:
        """Run the call on this shard (``here``: the request path past this guard) and on every other one."""
        body = await read_body(receive)
        mine = await run_captured(here, scope, body)
        target = scope.get("raw_path") or scope["path"].encode()
        if scope.get("query_string"):
            target += b"?" + scope["query_string"]
        others = await fan_out.send(scope["method"], target.decode("latin-1"), scope["headers"], body)
        status, payload = combine([ShardAnswer(self.shard.index, mine[0], mine[1]), *others])
        await send_json(send, status, payload)


async def run_captured(app: ASGIApp, scope: Scope, body: bytes) -> tuple[int, bytes]:
    """Run ``app`` on a request whose body was already read; returns the status and body it answered."""
    try:
        return await call_app(app, scope, body)
    except Exception as exc:  # noqa: BLE001 - rendered as the error envelope would
        rendered_status, rendered, _ = ErrorEnvelope(app).render(exc, scope)
        return rendered_status, rendered

