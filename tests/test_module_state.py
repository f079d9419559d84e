"""No module-level mutable state in ``emulator/`` (ARCHITECTURE.md, "Rules"; emulator/runtime/README.md, "Concurrency").

Every value a module binds at import time must be immutable all the way down (tuples, frozensets,
read-only mappings, frozen dataclasses, enums, strings, numbers, functions, classes), so that two
``Runtime``s in one process (the pytest plugin runs several) share nothing that one of them can change.
Caches belong to a ``Runtime``; probes are injected; test-only helpers live under ``tests/``.

The few exceptions are listed below, each with why it cannot leak one runtime's state into another.
"""

from __future__ import annotations

import ast
import contextvars
import dataclasses
import enum
import functools
import importlib
import logging
import pkgutil
import re
import types
import typing
from pathlib import Path, PurePath
from typing import Any

import msgspec
import numpy as np
import pytest

import emulator
import tests.pyast as pyast
from tests.pyast import parse as parse_ast

# (module, name) -> why it may stay. A memo of a pure function is not state: it returns the same value
# for the same arguments whoever asked first, and its values are immutable.
ALLOWED: dict[tuple[str, str], str] = {
    ("emulator.clock", "rfc3339"): "pure memo: a timestamp's text (str)",
    ("emulator.clock", "_second"): "pure memo: the text of a whole second (str)",
    ("emulator.http.validation", "_media_type"): "pure memo: a Content-Type header's media type (str)",
    ("emulator.spec", "_parsed"): "the packaged spec files, parsed once and only read (load_spec hands out deep copies)",
    ("emulator.ui.views", "_scenario_tokens"): "pure memo: the keys the shipped scenario files name (a tuple of str)",
    ("emulator.compute.tokenizers", "_qwen35"): "pure memo: a read-only vocabulary loaded from a package",
    ("emulator.compute.weights", "_small_layout"): "pure memo of read-only arrays (writeable=False)",
    ("emulator.compute.tokenizers", "_LOCK"): "guards the one load of that vocabulary when threads race to it",
    ("emulator.app", "_SPEC_CHECK_LOCK"): "one app build at a time swaps connexion's spec check (holds no state)",
    ("emulator.api", "handler_for"): "pure memo: the handler of an operationId (a module-level function)",
    ("emulator.domain.session_models", "_spec"): "pure memo: a frozen ModelSpec per configuration",
    ("emulator.tools.scenarios", "_operations"): "pure memo: the spec's operation table, built once, only read",
}

_SCALARS = (str, bytes, int, float, complex, bool, type(None), range, slice, PurePath, re.Pattern)
_CALLABLES = (type, types.FunctionType, types.BuiltinFunctionType, types.WrapperDescriptorType, types.ModuleType,
              types.MethodType, functools.partial, property, staticmethod, classmethod)
_SPECIAL = (enum.Enum, contextvars.ContextVar, typing.TypeVar, logging.Logger)


def _typing_construct(value: Any) -> bool:
    return typing.get_origin(value) is not None or type(value).__module__ in {"typing", "typing_extensions"}


def _immutable(value: Any, depth: int = 0) -> bool:
    if depth > 20:
        return False
    if isinstance(value, _SCALARS) or isinstance(value, _SPECIAL) or _typing_construct(value):
        return True
    if type(value) is object:  # a sentinel
        return True
    if isinstance(value, (np.generic, np.dtype)):
        return True
    if isinstance(value, np.ndarray):
        return not value.flags.writeable and (value.dtype != object)
    if hasattr(value, "cache_info"):  # an lru_cache is state unless ALLOWED says why not
        return (getattr(value, "__module__", ""), getattr(value, "__qualname__", "")) in ALLOWED
    if callable(value) and isinstance(value, _CALLABLES):
        return True
    if isinstance(value, (tuple, frozenset)):
        return all(_immutable(v, depth + 1) for v in value)
    if isinstance(value, types.MappingProxyType):
        return all(_immutable(k, depth + 1) and _immutable(v, depth + 1) for k, v in value.items())
    if isinstance(value, msgspec.Struct):  # a frozen struct of immutable values (a typed request's default)
        return bool(value.__struct_config__.frozen) and all(
            _immutable(getattr(value, name), depth + 1) for name in value.__struct_fields__)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        params = getattr(type(value), "__dataclass_params__", None)
        return bool(params and params.frozen) and all(
            _immutable(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value))
    return False


def _module_names(path: Path) -> list[str]:
    """Names a module binds at its top level: assignments and decorated functions."""
    names: list[str] = []
    for node in parse_ast(path.read_text()).body:
        if isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and node.value is not None and isinstance(node.target, ast.Name):
            names.append(node.target.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.decorator_list:
            names.append(node.name)
    return names


def _modules() -> list[tuple[str, Path]]:
    root = Path(emulator.__file__).parent
    found = [("emulator", root / "__init__.py")]
    for info in pkgutil.walk_packages([str(root)], prefix="emulator."):
        spec = importlib.util.find_spec(info.name)
        if spec is not None and spec.origin and spec.origin.endswith(".py"):
            found.append((info.name, Path(spec.origin)))
    return found


def _mutable_bindings() -> list[str]:
    bad = []
    for name, path in _modules():
        if name.endswith("__main__") or name == "emulator.pytest_plugin":
            continue  # entry points: they run a process or a pytest session, never inside a Runtime
        module = importlib.import_module(name)
        for attr in _module_names(path):
            if attr == "__all__" or (name, attr) in ALLOWED or not hasattr(module, attr):
                continue
            value = getattr(module, attr)
            if not _immutable(value):
                bad.append(f"{name}.{attr}: {type(value).__name__}")
    return bad


def test_no_module_level_mutable_state() -> None:
    bad = _mutable_bindings()
    assert not bad, ("module-level mutable state (make it a tuple/frozenset/MappingProxyType or a frozen "
                     "dataclass, own it by the Runtime, or list it in ALLOWED with why it cannot leak):\n"
                     + "\n".join(bad))


def test_allowed_exceptions_still_exist() -> None:
    """An exception whose binding is gone is removed from the list, so the list stays the truth."""
    stale = [f"{m}.{n}" for (m, n) in ALLOWED if not hasattr(importlib.import_module(m), n)]
    assert not stale, f"ALLOWED names bindings that no longer exist: {stale}"


def test_the_check_sees_mutable_values() -> None:
    """The classifier itself: it must flag what it exists to flag."""
    @functools.lru_cache(maxsize=2)
    def memo(x: int) -> int:
        return x

    @dataclasses.dataclass
    class Loose:
        x: int = 0

    for value in ({}, [], set(), (1, []), types.MappingProxyType({"a": []}), Loose(), memo, np.zeros(2)):
        assert not _immutable(value), value
    frozen = np.zeros(2)
    frozen.flags.writeable = False
    for value in (frozenset({1}), (1, "a"), types.MappingProxyType({"a": (1,)}), frozen, np.uint64(3)):
        assert _immutable(value), value


def test_base_models_are_shared_within_a_runtime_and_never_across() -> None:
    from test_compute_support import make_spec

    from emulator.compute import SessionModel
    from emulator.config import Config
    from emulator.runtime import Runtime

    one, two = Runtime(Config()).store.bases, Runtime(Config()).store.bases
    spec = make_spec()
    assert SessionModel(spec, one).weights().base is SessionModel(spec, one).weights().base
    assert SessionModel(spec, one).weights().base is not SessionModel(spec, two).weights().base
    assert len(one) == len(two) == 1


def test_the_tests_ast_parse_retries_only_cpython_gh_106905(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = ast.parse

    def flaky(source: str, filename: str = "<unknown>") -> ast.Module:
        calls.append(1)
        if len(calls) < 3:
            raise SystemError("AST constructor recursion depth mismatch (before=141, after=161)")
        return real(source, filename)

    monkeypatch.setattr(pyast.ast, "parse", flaky)
    assert isinstance(parse_ast("x = 1"), ast.Module) and len(calls) == 3
    monkeypatch.setattr(pyast.ast, "parse", lambda *a: (_ for _ in ()).throw(SystemError("another bug")))
    with pytest.raises(SystemError, match="another bug"):
        parse_ast("x = 1")
