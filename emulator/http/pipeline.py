"""The request path of the vendor API and the control plane: one ASGI entry that runs its steps as plain calls.

Route -> auth -> (shard guard) -> fault rules -> request validation -> dispatch, each step in its own module,
what they learn handed on in a :class:`~emulator.http.call.Call`; every error is rendered in one place
(``ErrorEnvelope``). With ``--validate-responses`` connexion's response validation wraps the dispatch step.
"""

from __future__ import annotations

import functools
from typing import Any

from emulator.http.asgi import Receive, Scope, Send, declares_body, rest_of_body
from emulator.http.auth import Auth
from emulator.http.dispatch import Dispatcher
from emulator.http.errors import ErrorEnvelope
from emulator.http.faults import FaultRules
from emulator.http.routing import Router
from emulator.http.shards import ShardGuard
from emulator.http.validation import RequestValidation

# Where the pipeline hands a request to connexion's response validation (--validate-responses only): connexion
# finds the operation under its routing key; the dispatch step finds the call under ours.
ROUTING = "connexion_routing"
CALL = "emulator_call"


class Pipeline:
    def __init__(self, router: Router, auth: Auth, shards: ShardGuard | None, faults: FaultRules,
                 validation: RequestValidation, dispatcher: Dispatcher) -> None:
        self.router = router
        self.auth = auth
        self.shards = shards
        self.faults = faults
        self.validation = validation
        self.checks = validation.operations
        self.dispatcher = dispatcher
        # connexion's ResponseValidationMiddleware around :meth:`dispatch_validated` (--validate-responses)
        self.responses: Any = None
        self.errors = ErrorEnvelope(None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send, fanned_out: bool = False) -> None:
        """``fanned_out``: the call already passed the shard guard, which runs it here on a captured answer."""
        if scope["type"] != "http":
            return
        try:
            call = self.router.route(scope)
            call.caller = self.auth.authenticate(scope, call.op)
            if self.shards is not None and not fanned_out:
                fan_out = self.shards.everywhere(call, scope)
                if fan_out is not None:
                    here = functools.partial(self.__call__, fanned_out=True)
                    await self.shards.send_everywhere(fan_out, here, scope, receive, send)
                    return
            rule = self.faults.pick(call, scope)
            if rule is not None and await self.faults.apply(rule, call, send):
                return
            checks = self.checks.get((call.base, call.op))  # (RequestValidation.operation, without its call)
            if checks is not None:
                if checks.params:
                    checks.check(call, scope)
                if checks.reads_body:  # (read here, not in a coroutine of the step's: one fewer per request)
                    raw = b""
                    if declares_body(scope):  # read_body's first message, read here: a coroutine fewer
                        message = await receive()
                        if message["type"] != "http.disconnect" and not message.get("more_body", False):
                            raw = message.get("body", b"")  # (the usual body: one message, nothing to join)
                            if type(raw) is not bytes:
                                raw = bytes(raw)
                        else:
                            raw = await rest_of_body(message, receive)
                    checks.check_body(call, scope, raw)
            if self.responses is None:
                await self.dispatcher(call, scope, receive, send)
            else:
                extensions = scope.setdefault("extensions", {})
                extensions[ROUTING] = {"api_base_path": call.base, "operation_id": call.op}
                extensions[CALL] = call
                await self.responses(scope, receive, send)
        except Exception as exc:  # noqa: BLE001 - the one place the request path's errors are rendered
            await self.errors.answer(exc, scope, send)

    async def dispatch_validated(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.dispatcher(scope["extensions"][CALL], scope, receive, send)
