"""The private internals of dependencies that the emulator builds on, checked against the versions they were
written for (issue 25: each is kept only for a measured gain, named in BENCHMARKS.md, "Private internals").

When a dependency moves past the version below, these tests fail first and say which module to re-read
against the new upstream source. Re-verify it (``make test``; ``make bench`` for the gain), then widen the
version here, in the module's comment and in ``pyproject.toml``.
"""

from __future__ import annotations

import inspect
from importlib.metadata import version

import pytest

# dependency -> (versions verified: a prefix of the version string, the modules that rely on its internals)
VERIFIED = {
    "connexion": ("3.3.", "emulator/http/validation.py (RequestValidationMiddleware/API/Operation), "
                          "emulator/app.py (Specification._validate_spec, skipped while the app is built; the spec "
                          "middlewares' add_api called without ConnexionMiddleware), "
                          "emulator/http/pipeline.py (the routing scope key of ResponseValidationMiddleware)"),
    "uvicorn": ("0.55.", "emulator/http/server.py (HttpToolsProtocol subclass: the connection guards)"),
}


@pytest.mark.parametrize("dist", sorted(VERIFIED))
def test_the_dependency_is_the_version_its_internals_were_verified_against(dist: str) -> None:
    prefix, where = VERIFIED[dist]
    got = version(dist)
    assert got.startswith(prefix), (
        f"{dist} {got} is installed, but {where} use(s) private internals verified against {dist} {prefix}x only. "
        f"Re-read those modules against {dist} {got}'s source, run make test and make bench, then update "
        f"tests/test_dependency_internals.py, the version comment in the module and pyproject.toml.")


def test_connexion_internals_the_emulator_subclasses_are_there() -> None:
    from connexion.json_schema import Draft4RequestValidator
    from connexion.middleware.request_validation import (
        RequestValidationAPI,
        RequestValidationMiddleware,
        RequestValidationOperation,
    )
    from connexion.utils import is_null, is_nullable

    assert callable(Draft4RequestValidator) and callable(is_null) and callable(is_nullable)
    assert "operation" in inspect.signature(RequestValidationOperation.__init__).parameters
    assert issubclass(RequestValidationAPI, object) and hasattr(RequestValidationMiddleware, "api_cls")


def test_connexion_spec_middlewares_build_without_their_container() -> None:
    """emulator/app.py builds the request validators (and, with --validate-responses, connexion's response
    validation) by calling each spec middleware's ``add_api`` itself, as ``ConnexionMiddleware`` did when it
    built its stack, and ``emulator/http/pipeline.py`` hands response validation the operation under
    connexion's routing scope key."""
    from connexion.middleware.abstract import ROUTING_CONTEXT, RoutedMiddleware
    from connexion.middleware.main import ConnexionMiddleware
    from connexion.middleware.response_validation import ResponseValidationMiddleware
    from connexion.spec import Specification

    from emulator.http.pipeline import ROUTING

    assert ROUTING == ROUTING_CONTEXT, "connexion renamed its routing scope key: see emulator/http/pipeline.py"
    assert issubclass(ResponseValidationMiddleware, RoutedMiddleware)
    assert list(inspect.signature(RoutedMiddleware.add_api).parameters) == ["self", "specification", "kwargs"]
    assert "return api" in inspect.getsource(RoutedMiddleware.add_api), "add_api no longer returns the API built"
    assert list(inspect.signature(Specification.load).parameters)[:1] == ["spec"]
    assert isinstance(Specification.__dict__.get("base_path"), property) and "raw" in Specification.__dict__
    # What ConnexionMiddleware passes to each spec middleware (app.py passes the same for its options).
    source = inspect.getsource(ConnexionMiddleware._build_middleware_stack)
    assert "app.add_api(" in source and "base_path=api.base_path" in source, (
        "ConnexionMiddleware registers specs on its middlewares differently now: re-read emulator/app.py")


def test_connexion_still_checks_specs_where_the_app_skips_it() -> None:
    """emulator/app.py swaps ``Specification._validate_spec`` while it builds the app: connexion 3.3 must still
    call that one classmethod from ``Specification.__init__``, and no subclass may override it."""
    from connexion.spec import OpenAPISpecification, Specification, Swagger2Specification

    assert isinstance(Specification.__dict__.get("_validate_spec"), classmethod), (
        "connexion's Specification._validate_spec is gone or no longer a classmethod: re-read emulator/app.py")
    assert "self._validate_spec(raw_spec)" in inspect.getsource(Specification.__init__), (
        "connexion's Specification.__init__ no longer calls _validate_spec(raw_spec): re-read emulator/app.py")
    overriding = [c.__name__ for c in (OpenAPISpecification, Swagger2Specification) if "_validate_spec" in c.__dict__]
    assert overriding == [], f"{overriding} override _validate_spec: emulator/app.py would no longer skip it"


def _counting_spec_checks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    import connexion.spec

    seen: list[str] = []
    real = connexion.spec.create_spec_validator

    def counting(spec: dict) -> object:
        seen.append(spec.get("info", {}).get("title", "?"))
        return real(spec)

    monkeypatch.setattr(connexion.spec, "create_spec_validator", counting)
    return seen


def test_building_the_app_skips_connexions_spec_check_and_restores_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from connexion.spec import Specification

    from emulator.app import EmulatorApp
    from emulator.config import Config
    from emulator.runtime import Runtime

    original = Specification.__dict__["_validate_spec"]
    seen = _counting_spec_checks(monkeypatch)
    EmulatorApp(Runtime(Config()))
    assert seen == [], "building the app validated its packaged specs: the skip of emulator/app.py is not in force"
    assert Specification.__dict__["_validate_spec"] is original
    Specification.from_dict({"openapi": "3.0.3", "info": {"title": "after", "version": "1"}, "paths": {}})
    assert seen == ["after"]


def test_the_skip_holds_only_in_the_thread_that_builds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another thread's spec is validated while the app is built, and concurrent builds leave connexion's own
    method in place, whatever the order in which they finish."""
    import threading

    from connexion.exceptions import InvalidSpecification
    from connexion.spec import Specification

    from emulator import app

    original = Specification.__dict__["_validate_spec"]
    inside, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def build() -> None:
        try:
            with app._packaged_specs():
                inside.set()
                assert release.wait(30)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    builder = threading.Thread(target=build)
    builder.start()
    try:
        assert inside.wait(30)
        with pytest.raises(InvalidSpecification):  # "paths" is required by the OpenAPI schema
            Specification.from_dict({"openapi": "3.0.3", "info": {"title": "other", "version": "1"}})
        others = [threading.Thread(target=build) for _ in range(3)]
        for t in others:
            t.start()
    finally:
        release.set()
        builder.join(30)
    for t in others:
        t.join(30)
    assert errors == []
    assert Specification.__dict__["_validate_spec"] is original


def test_uvicorn_internals_the_emulator_subclasses_are_there() -> None:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    hooks = ["connection_made", "on_message_begin", "on_url", "on_header", "send_400_response", "pause_writing",
             "resume_writing", "on_headers_complete", "on_body", "on_message_complete", "connection_lost"]
    missing = [name for name in hooks if not callable(getattr(HttpToolsProtocol, name, None))]
    assert missing == [], f"uvicorn's HttpToolsProtocol lost {missing}: emulator/http/server.py overrides them"
    # The guards read these attributes of the protocol (the send timeout: is writing paused?).
    source = inspect.getsource(HttpToolsProtocol.__init__) + inspect.getsource(HttpToolsProtocol.connection_made)
    for attr in ("self.loop", "self.flow", "self.transport"):
        assert attr in source, f"uvicorn's HttpToolsProtocol no longer sets {attr}: see emulator/http/server.py"


def test_the_server_runs_on_the_guarded_protocol() -> None:
    """The guards are in force (not silently replaced by uvicorn's h11 fallback) in this environment."""
    from emulator.http.server import guarded_protocol

    protocol = guarded_protocol(10.0, 60.0)
    assert not isinstance(protocol, str), "httptools is missing: the connection guards are off"
    assert protocol.__name__ == "GuardedHttpToolsProtocol"
