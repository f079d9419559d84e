"""The emulator in your own tests, scripts and notebooks: ``with emulate(seed=7) as emu: ...``.

:func:`emulate` is the context manager; :class:`EmulatorServer` one running emulator (a thread, a subprocess,
or a URL); :class:`Tenant` one API key of it with everything scoped to it (clock, profile, seed, faults,
scenario, state). On a manual clock, :class:`StallGuard` turns a wait nothing can end into a failure saying why.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import httpx

MODES = ("thread", "subprocess")
DEFAULT_START = "2026-01-01T00:00:00Z"   # a tenant's manual clock starts here unless told otherwise
ENV_URL, ENV_KEY = "TOGETHER_BASE_URL", "TOGETHER_API_KEY"
_READY = "listening on "


class EmulatorError(RuntimeError):
    """The emulator could not be started, or refused a control-plane call (the message says why)."""


def _time_text(value: datetime | str | float) -> str:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("a naive datetime is ambiguous: give it a timezone (e.g. tzinfo=UTC)")
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(float(value), tz=UTC).isoformat().replace("+00:00", "Z")
    return str(value)


def _parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class EmulatorServer:
    """One emulator: ``mode="thread"`` (default; in this process), ``"subprocess"`` (``python -m emulator
    serve``), or ``url=...`` (one that is already running; nothing is started or stopped).

    ``args`` are server options as on the command line (``["--validate-responses"]``,
    ``["--limits-file", "limits.yaml"]``). Use it as a context manager, or call :meth:`start` and
    :meth:`close`.
    """

    def __init__(self, mode: str = "thread", args: Sequence[str] = (), *, url: str | None = None,
                 admin_token: str | None = None, startup_timeout: float = 60.0) -> None:
        if url is None and mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        self.mode = "url" if url else mode
        self.args = list(args)
        self.url = url.rstrip("/") if url else ""
        self.admin_token = admin_token
        self.startup_timeout = startup_timeout
        self.started_in: float | None = None      # seconds start() took
        self._stack = ExitStack()
        self._proc: subprocess.Popen[str] | None = None
        self._pump: threading.Thread | None = None
        self._output: list[str] = []
        self._http: httpx.Client | None = None   # made on first use: a server in this process rarely needs it
        self._running = False
        self._runtime: Any = None   # the Runtime of a server in this process (control calls skip HTTP)
        self._count = 0
        # Tenants of a shared server (url mode) get a per-run salt, so that two runs of the same tests never
        # meet; a private server gives each test the same tenant every run (ids, seeded, repeat).
        self._salt = secrets.token_hex(4) if self.mode == "url" else ""

    # --- life -----------------------------------------------------------------------------------------

    def start(self) -> EmulatorServer:
        if self._running:
            return self
        began = time.perf_counter()
        try:
            if self.mode == "thread":
                self.url = self._start_thread()
            elif self.mode == "subprocess":
                self.url = self._start_subprocess()
        except BaseException:
            self._stack.close()
            raise
        self._running = True
        self._stack.callback(setattr, self, "_running", False)
        if self.mode == "url":
            self._call("adminGetClock", "GET", "/_emulator/clock")  # reachable, and the admin token works
        self.started_in = time.perf_counter() - began
        return self

    def close(self) -> None:
        self._stack.close()

    @property
    def http(self) -> httpx.Client:
        """A client of the control plane over HTTP (made on first use: building one loads TLS certificates,
        a tenth of a thread's start-up, and a server in this process is called directly)."""
        if self._http is None:
            headers = {"X-Emulator-Admin-Token": self.admin_token} if self.admin_token else {}
            client = self._http = httpx.Client(base_url=self.url, headers=headers, timeout=60)
            self._stack.callback(setattr, self, "_http", None)
            self._stack.callback(client.close)
        return self._http

    def __enter__(self) -> EmulatorServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start_thread(self) -> str:
        # connexion (through jsonschema) warns about deprecated APIs when it is first imported: not the
        # user's concern, and under `-W error` or `filterwarnings = error` it would fail their test.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
            from emulator.config import ConfigError
            from emulator.runtime import Runtime
            from emulator.tools.server import build_server_app
            from emulator.tools.testing import serve_app

            try:
                config = _config(self.args)
                runtime = Runtime(config)
                app = build_server_app(runtime)
            except ConfigError as exc:
                raise EmulatorError(f"emulator: {exc}") from exc
            self.admin_token = self.admin_token or config.admin_token
            url = self._stack.enter_context(serve_app(app, config))
            self._runtime = runtime
            self._stack.callback(setattr, self, "_runtime", None)
            return url

    def _start_subprocess(self) -> str:
        cmd = [sys.executable, "-m", "emulator", "serve", "--host", "127.0.0.1", "--port", "0", *self.args]
        workdir = self._stack.enter_context(tempfile.TemporaryDirectory(prefix="together-emulator-"))
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        proc = self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                             cwd=workdir, env=env)
        self._stack.callback(self._stop_process)
        found = threading.Event()
        url: list[str] = []

        def pump() -> None:  # keeps reading, so the server never blocks on a full pipe
            assert proc.stdout is not None
            for line in proc.stdout:
                self._output.append(line.rstrip("\n"))
                del self._output[:-200]
                if not url and _READY in line:
                    url.append(line.split(_READY, 1)[1].split()[0])
                    found.set()
            found.set()

        self._pump = threading.Thread(target=pump, name="together-emulator-output", daemon=True)
        self._pump.start()
        found.wait(self.startup_timeout)
        if not url:
            raise EmulatorError("the emulator did not start: " + " | ".join(self._output[-20:]))
        deadline = time.monotonic() + self.startup_timeout
        while True:
            try:
                httpx.get(f"{url[0]}/_emulator/health", timeout=2)
                return url[0]
            except httpx.HTTPError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise EmulatorError("the emulator printed its URL but never answered: "
                                        + " | ".join(self._output[-20:])) from None
                time.sleep(0.02)

    def _stop_process(self) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        if self._pump is not None:
            self._pump.join(timeout=10)  # it ends at the end of the output
        if proc.stdout is not None:
            proc.stdout.close()

    # --- the control plane ------------------------------------------------------------------------------

    def _call(self, operation_id: str, method: str, path: str, tenant: str | None = None, *, json: Any = None,
              params: dict[str, Any] | None = None, path_params: dict[str, str] | None = None) -> Any:
        """One control-plane operation (``admin.yaml``), scoped to ``tenant`` (an API key) when given."""
        if not self._running:
            raise EmulatorError("the emulator is not running (start() it, or use it in a with block)")
        if self._runtime is not None:
            from emulator.api import handler_for

            if not inspect.iscoroutinefunction(handler_for(operation_id)):  # (a scenario calls the app: HTTP)
                return self._call_in_process(operation_id, method, path, tenant, json, params, path_params or {})
        headers = {"X-Emulator-Tenant": tenant} if tenant else None
        resp = self.http.request(method, path, headers=headers, json=json, params=params)
        if resp.status_code != 200:
            raise EmulatorError(f"{method} {path} answered {resp.status_code}: {resp.text[:500]}")
        return resp.json()

    def _call_in_process(self, operation_id: str, method: str, path: str, tenant: str | None, body: Any,
                         params: dict[str, Any] | None, path_params: dict[str, str]) -> Any:
        """The operation's handler, called as the dispatcher would (then the state file is written)."""
        from emulator.api import handler_for
        from emulator.api.request import Request
        from emulator.errors import EmulatorError as Refused
        from emulator.http.errors import status_of

        handler = handler_for(operation_id)
        assert handler is not None, operation_id
        headers = {"x-emulator-tenant": tenant} if tenant else {}
        query = {k: str(v) for k, v in (params or {}).items()}
        runtime = self._runtime
        request = Request(runtime, None, operation_id, path_params, query, headers, body, self.url, method)
        try:
            with runtime.lock:  # the server's own thread may be in a unit of work
                status, payload = handler(request)[:2]
        except Refused as exc:
            raise EmulatorError(f"{method} {path} answered {status_of(exc)[0]}: {exc.message}") from exc
        except (ValueError, TypeError, KeyError) as exc:  # what schema validation refuses over HTTP
            raise EmulatorError(f"{method} {path}: bad request: {exc!r}") from exc
        if status != 200:
            raise EmulatorError(f"{method} {path} answered {status}: {payload!r:.500}")
        return payload

    def tenant(self, api_key: str | None = None, *, name: str | None = None, seed: int | None = None,
               clock: str = "manual", start: datetime | str | float | None = None,
               speed: float | None = None, profile: str | None = None, overrides: Mapping[str, float] | None = None,
               faults: Any = None, scenario: str | None = None) -> Tenant:
        """A fresh tenant: reset, with its own clock (``clock`` mode, starting at ``start``; by default a
        manual or auto clock starts at 2026-01-01T00:00:00Z and a system clock where the global clock is), and
        optionally its own seed, timing profile, fault rules (rules, or the name of a shipped fault file) and
        a scenario.

        ``api_key`` picks the key (default: derived from ``name``, else a counter, so the same test gets the
        same tenant, and the same ids, on every run of a private server).
        """
        if api_key is None:
            self._count += 1
            label = name if name is not None else f"tenant-{self._count}"
            api_key = "emu-" + hashlib.sha256(f"{self._salt}:{label}".encode()).hexdigest()[:24]
        body: dict[str, Any] = {"clock": {"mode": clock}}
        if start is None and clock in ("manual", "auto"):
            start = DEFAULT_START
        if start is not None:
            body["clock"]["now"] = _time_text(start)
        if speed is not None:
            body["clock"]["speed"] = speed
        if seed is not None:
            body["seed"] = seed
        if profile is not None or overrides:
            body["profile"] = {"profile": profile or "instant", "overrides": dict(overrides or {})}
        tenant = Tenant(self, api_key)
        tenant.reset(**body)
        try:
            if faults:
                tenant.add_faults(faults)
            if scenario:
                tenant.load_scenario(scenario)
        except BaseException:
            tenant.close()
            raise
        return tenant


class TenantClock:
    """The tenant's own virtual clock (nobody else's time moves)."""

    def __init__(self, tenant: Tenant) -> None:
        self._tenant = tenant

    def describe(self) -> dict[str, Any]:
        """``{"now", "mode", "speed", "scope"}`` as the control plane shows it."""
        return self._tenant._call("adminGetClock", "GET", "/_emulator/clock")

    def now(self) -> datetime:
        return _parse_time(self.describe()["now"])

    def advance(self, seconds: float) -> datetime:
        """Move this tenant's time forward; what falls due happens at its own virtual time. Returns the new now."""
        if not isinstance(seconds, (int, float)) or isinstance(seconds, bool):
            raise TypeError("seconds must be a number")
        return _parse_time(self._tenant._call("adminAdvanceClock", "POST", "/_emulator/clock/advance",
                                              json={"seconds": seconds})["now"])

    def set(self, now: datetime | str | float | None = None, *, mode: str | None = None,
            speed: float | None = None) -> datetime:
        """Jump to ``now`` (forward; earlier only while the tenant holds nothing), and/or change mode or speed."""
        body: dict[str, Any] = {}
        if now is not None:
            body["now"] = _time_text(now)
        if mode is not None:
            body["mode"] = mode
        if speed is not None:
            body["speed"] = speed
        return _parse_time(self._tenant._call("adminSetClock", "POST", "/_emulator/clock", json=body)["now"])

    def pending(self) -> list[dict[str, Any]]:
        """Every scheduled transition of this tenant, in virtual-time order: ``{"at", "in_seconds", "kind",
        "id", "event", "from", "to", "detail"?}`` (``GET /_emulator/clock/pending``)."""
        return list(self._tenant._call("adminGetPending", "GET", "/_emulator/clock/pending")["data"])

    def waiting(self) -> dict[str, Any] | None:
        """What this tenant's client polls while its manual clock stands still (see :class:`StallGuard`)."""
        waiting: dict[str, Any] | None = self._tenant._call("adminGetPending", "GET", "/_emulator/clock/pending")[
            "waiting"]
        return waiting

    def next(self) -> list[dict[str, Any]]:
        """Move to the next pending transition; returns the transitions crossed, in order (none: nothing was
        pending, and the clock stayed)."""
        return list(self._tenant._call("adminAdvanceClock", "POST", "/_emulator/clock/advance",
                                       json={"to": "next"})["crossed"])

    def run_until(self, target: Any = None, status: str | None = None, *, terminal: bool = False,
                  max_seconds: float | None = None) -> list[dict[str, Any]]:
        """Move through the pending transitions in order until ``target`` (an id, or an object with one: an SDK
        client or response, a dict) reaches ``status`` (``"READY"`` or the API's value), or any final status
        with ``terminal=True``; without a target, until nothing is pending. ``max_seconds`` bounds the virtual
        time it may take (default one day). Returns the transitions crossed; :class:`EmulatorError` naming the
        next pending transition when the condition cannot hold in time."""
        body: dict[str, Any] = {}
        if target is not None:
            if (status is None) == (not terminal):
                raise TypeError("run_until(target, status) or run_until(target, terminal=True)")
            body["until"] = {"id": _object_id(target), **({"terminal": True} if terminal else {"status": status})}
        elif status is not None or terminal:
            raise TypeError("a status or terminal needs the target object")
        if max_seconds is not None:
            body["max_seconds"] = max_seconds
        return list(self._tenant._call("adminRunClock", "POST", "/_emulator/clock/run", json=body)["crossed"])

    def schedule(self, action: str, *, at: datetime | str | float | None = None, delay: float | None = None,
                 **params: Any) -> dict[str, Any]:
        """Schedule ``action`` (``add_fault`` rule=..., ``remove_fault`` name=..., ``stop_resource`` id=...,
        ``expire_session`` id=..., ``capacity_unavailable`` seconds=...) at a virtual time or ``delay`` seconds
        from now; it fires in order with the other transitions. An ``id`` may be an SDK object."""
        body: dict[str, Any] = {"action": action, **params}
        if "id" in body:
            body["id"] = _object_id(body["id"])
        if at is not None:
            body["at"] = _time_text(at)
        if delay is not None:
            body["delay"] = delay
        return dict(self._tenant._call("adminScheduleAction", "POST", "/_emulator/clock/actions", json=body))

    def actions(self) -> list[dict[str, Any]]:
        """This tenant's scheduled actions, with what became of each."""
        return list(self._tenant._call("adminListActions", "GET", "/_emulator/clock/actions")["data"])

    def cancel(self, action_id: str) -> dict[str, Any]:
        return dict(self._tenant._call("adminCancelAction", "DELETE", f"/_emulator/clock/actions/{action_id}",
                                       path_params={"id": action_id}))


def _object_id(target: Any) -> str:
    """The id of what a test holds: an id, a dict with one, or an SDK object (``model_resources_id``,
    ``session_id``, or ``id``)."""
    if isinstance(target, str):
        return target
    if isinstance(target, Mapping) and isinstance(target.get("id"), str):
        return str(target["id"])
    for attr in ("model_resources_id", "session_id", "id"):
        value = getattr(target, attr, None)
        if isinstance(value, str):
            return value
    raise TypeError(f"cannot tell the id of {type(target).__name__}: give the id")


class ClockStalled(EmulatorError):
    """A test waited on a tenant whose manual clock nothing moves (raised by :class:`StallGuard`)."""


class StallGuard:
    """Turns a wait that cannot end into a failure that says why, within a few seconds.

    A client polling an object that waits for a transition on a manual clock waits for ever (the SDK's
    ``ready_timeout`` defaults to no limit). The emulator notes such polls (``waiting`` of
    ``GET /_emulator/clock/pending``); this guard, a thread, asks every ``period`` seconds, and once a wait has
    lasted ``after`` seconds of real time (while the main thread is inside the SDK, or after three polls
    without progress) it raises :class:`ClockStalled` in the main thread: through a signal, which interrupts
    a blocking wait (POSIX only; elsewhere, and outside the main thread, the guard does nothing).
    """

    def __init__(self, tenant: Tenant, after: float = 2.5, period: float = 0.2) -> None:
        self.tenant = tenant
        self.after = after
        self.period = period
        self.message: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._signal: int | None = None
        self._saved: Any = None
        self._armed = False
        self._sent = False

    def __enter__(self) -> StallGuard:
        import signal

        main = threading.main_thread()
        if threading.current_thread() is not main or not hasattr(signal, "pthread_kill"):
            return self
        for signum in (getattr(signal, "SIGUSR1", None), getattr(signal, "SIGUSR2", None)):
            current = signal.getsignal(signum) if signum is not None else None
            if signum is not None and (current in (signal.SIG_DFL, None)
                                       or isinstance(getattr(current, "__self__", None), StallGuard)):
                self._signal = signum   # free, or an earlier guard's inert handler (see __exit__)
                break
        if self._signal is None:  # (both taken by the user's own code: no guard, rather than a clash)
            return self
        self._saved = signal.signal(self._signal, self._raise)
        self._armed = True
        self._thread = threading.Thread(target=self._watch, args=(main.ident,), name="together-emulator-stall-guard",
                                        daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        import signal

        self._armed = False
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        # Once a signal was sent, our (now inert) handler stays: restored, a signal still on its way would meet
        # the default action, which ends the process.
        if self._signal is not None and self._saved is not None and not self._sent:
            signal.signal(self._signal, self._saved)

    def _raise(self, signum: int, frame: Any) -> None:
        if self._armed and self.message is not None:
            self._armed = False
            raise ClockStalled(self.message)

    def _watch(self, main_ident: int | None) -> None:
        import signal

        while not self._stop.wait(self.period):
            try:
                waiting = self.tenant.clock.waiting()
            except Exception:  # noqa: BLE001 - the server went away, or the test reset it: nothing to guard
                continue
            if waiting is None or waiting["seconds"] < self.after:
                continue
            if waiting["polls"] < 3 and not _in_sdk(main_ident):
                continue  # one look at a waiting object, then other work: not a wait
            self.message = stalled_message(waiting)
            if self._armed and main_ident is not None and self._signal is not None:
                self._sent = True
                signal.pthread_kill(main_ident, self._signal)
            return


def _in_sdk(ident: int | None) -> bool:
    """Whether that thread is inside a call of the Together SDK (``together.*``): a blocking call that polls."""
    frame = sys._current_frames().get(ident) if ident is not None else None
    while frame is not None:
        if str(frame.f_globals.get("__name__", "")).startswith("together."):
            return True
        frame = frame.f_back
    return False


def stalled_message(waiting: Mapping[str, Any]) -> str:
    """The one sentence a stalled test fails with: what it waits for, and the two ways out."""
    what = f"{waiting['kind']} {waiting['id']} ({waiting['status']})"
    nxt = waiting.get("next")
    if nxt is None:
        return (f"together_emulator: the test waits on {what}, but nothing pending would move it on this "
                f"tenant's manual clock; look at together_emulator.clock.pending() and the events")
    return (f"together_emulator: the test waits on {what}, but this tenant's clock is manual and nothing "
            f"advanced it for {waiting['seconds']:.1f} s; the next transition, {nxt['kind']} {nxt['id']} to "
            f"{nxt['to']}, is due at {nxt['at']} ({nxt['in_seconds']:g} s ahead): advance the clock "
            f"(together_emulator.clock.next() or .run_until(...)) or use the auto clock "
            f"(@pytest.mark.together_emulator(clock=\"auto\"), or --together-emulator-clock=auto)")


class Tenant:
    """One API key of an emulator, with its own clock; what a test or a notebook works with.

    ``url`` and ``api_key`` are what the SDK needs (``env`` has them as ``TOGETHER_BASE_URL`` and
    ``TOGETHER_API_KEY``); ``headers`` is the ``Authorization`` header for plain HTTP clients.
    """

    def __init__(self, server: EmulatorServer, api_key: str) -> None:
        self.server = server
        self.api_key = api_key
        self.clock = TenantClock(self)

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}

    @property
    def env(self) -> dict[str, str]:
        return {ENV_URL: self.url, ENV_KEY: self.api_key}

    def _call(self, operation_id: str, method: str, path: str, **kwargs: Any) -> Any:
        return self.server._call(operation_id, method, path, tenant=self.api_key, **kwargs)

    def reset(self, **settings: Any) -> dict[str, Any]:
        """Forget the tenant's state, clock, profile and seed; ``settings`` set up the fresh tenant
        (``seed``, ``clock={"mode", "now", "speed"}``, ``profile={"profile", "overrides"}``)."""
        return self._call("adminReset", "POST", "/_emulator/reset", json=settings)

    def add_faults(self, rules: Any) -> list[dict[str, Any]]:
        """Fault rules (one, a list, or ``{"rules": [...]}``, see ``emulator/faults.py``; or the name of a shipped
        fault file, ``"nan-storm"``) for this tenant only."""
        if isinstance(rules, str):
            rules = {"fixture": rules}
        return self._call("adminAddFaults", "POST", "/_emulator/faults", json=rules)["data"]

    def faults(self) -> list[dict[str, Any]]:
        return self._call("adminListFaults", "GET", "/_emulator/faults")["data"]

    def clear_faults(self) -> None:
        self._call("adminClearFaults", "DELETE", "/_emulator/faults")

    def remove_fault(self, name: str) -> None:
        self._call("adminRemoveFault", "DELETE", f"/_emulator/faults/{name}", path_params={"name": name})

    def load_scenario(self, name: str) -> dict[str, Any]:
        """Load a named scenario (``GET /_emulator/scenarios``) into this tenant; returns the ids it saved."""
        return self._call("adminLoadScenario", "POST", f"/_emulator/scenarios/{name}", path_params={"name": name})

    def set_profile(self, profile: str, overrides: Mapping[str, float] | None = None) -> dict[str, Any]:
        return self._call("adminSetProfile", "POST", "/_emulator/profile",
                          json={"profile": profile, "overrides": dict(overrides or {})})

    def events(self, since: int = 0) -> list[dict[str, Any]]:
        return self._call("adminListEvents", "GET", "/_emulator/events", params={"since": since})["data"]

    def state(self) -> dict[str, Any]:
        """The tenant's state document (``PUT`` it back with :meth:`load_state`, into this or another tenant)."""
        return self._call("adminExportState", "GET", "/_emulator/state")

    def load_state(self, doc: Mapping[str, Any]) -> None:
        self._call("adminImportState", "PUT", "/_emulator/state", json=dict(doc))

    def close(self) -> None:
        """Forget everything of the tenant (state, clock, profile, seed and fault rules)."""
        if self.server._running:
            self.reset()
            self.clear_faults()

    @contextmanager
    def environ(self) -> Iterator[Tenant]:
        """``TOGETHER_BASE_URL`` / ``TOGETHER_API_KEY`` set to this tenant within the block (then restored)."""
        saved = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)
        try:
            yield self
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def _config(args: Sequence[str]) -> Any:
    """A server Config from command-line options (the environment's EMULATOR_* variables are not read: a
    test's emulator is what its code says)."""
    from emulator.config import ConfigError, add_server_arguments, config_from_args

    parser = argparse.ArgumentParser(prog="emulator", add_help=False)
    add_server_arguments(parser)
    parsed, unknown = parser.parse_known_args(list(args))
    if unknown:
        raise ConfigError(f"unknown server options {unknown} (see `together-rl-emulator serve --help`)")
    return replace(config_from_args(parsed, environ={}), host="127.0.0.1", port=0)


@contextmanager
def emulate(*, seed: int | None = None, clock: str = "manual", start: datetime | str | float | None = None,
            speed: float | None = None, profile: str | None = None, overrides: Mapping[str, float] | None = None,
            faults: Any = None, scenario: str | None = None, api_key: str | None = None, mode: str = "thread",
            args: Sequence[str] = (), server: EmulatorServer | None = None, url: str | None = None,
            set_env: bool = True, stall_after: float | None = 2.5) -> Iterator[Tenant]:
    """An emulator (started for the block, unless ``server`` or ``url`` names one) and a fresh tenant of it;
    ``TOGETHER_BASE_URL`` and ``TOGETHER_API_KEY`` point at it within the block (``set_env=False``: not).

    The tenant has its own ``clock`` (``"manual"``: time moves only through ``emu.clock``, from 2026-01-01
    unless ``start`` says otherwise; ``"auto"``: manual, and it jumps to what a client waits for, so the SDK's
    blocking calls return at once with realistic virtual times; ``"system"``: real time x ``speed``), and
    optionally its own ``seed``, timing ``profile`` (``"instant"``, ``"realistic"``, with ``overrides``), fault
    rules (or a shipped fault file's name) and a named ``scenario``. On a manual clock a wait that nothing can
    end fails after ``stall_after`` seconds with :class:`ClockStalled` (:class:`StallGuard`; None: never).
    """
    with ExitStack() as stack:
        if server is None:
            server = stack.enter_context(EmulatorServer(mode, args, url=url))
        else:
            server.start()
        tenant = server.tenant(api_key, seed=seed, clock=clock, start=start, speed=speed, profile=profile,
                               overrides=overrides, faults=faults, scenario=scenario)
        stack.callback(tenant.close)
        if set_env:
            stack.enter_context(tenant.environ())
        if clock == "manual" and stall_after is not None:
            stack.enter_context(StallGuard(tenant, after=stall_after))
        yield tenant
