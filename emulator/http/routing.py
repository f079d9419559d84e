"""The routing step: the operationId of a request by a precompiled path table, in a few dictionary lookups.

A trie of path segments built once from the specs' ``paths``, literal segments before ``{param}`` ones
(OpenAPI's rule). A method the template does not answer is 405 with ``Allow``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from emulator.http.asgi import Scope, encoded_slash
from emulator.http.call import Call
from emulator.http.envelope import MethodNotAllowed


class _Node:
    __slots__ = ("literal", "param", "param_name", "methods")

    def __init__(self) -> None:
        self.literal: dict[str, _Node] = {}
        self.param: _Node | None = None
        self.param_name = ""
        self.methods: dict[str, tuple[str, str]] = {}   # method -> (operationId, api base path)


class PathTable:
    def __init__(self) -> None:
        self.root = _Node()
        # Paths without parameters, answered by one lookup (most creates and lists are).
        self.literal: dict[str, dict[str, tuple[str, str]]] = {}

    def add(self, path: str, method: str, operation_id: str, base_path: str) -> None:
        if "{" not in path:
            self.literal.setdefault(path, {})[method.upper()] = (operation_id, base_path)
        node = self.root
        for segment in path.strip("/").split("/"):
            if segment.startswith("{") and segment.endswith("}"):
                if node.param is None:
                    node.param = _Node()
                    node.param_name = segment[1:-1]
                elif node.param_name != segment[1:-1]:
                    raise ValueError(f"{path}: parameter {segment} clashes with {{{node.param_name}}}")
                node = node.param
            else:
                node = node.literal.setdefault(segment, _Node())
        node.methods[method.upper()] = (operation_id, base_path)

    def match(self, method: str, path: str, raw_path: bytes | None = None
              ) -> tuple[tuple[str, str] | None, dict[str, str], set[str]]:
        """((operationId, base path) or None, path params, methods answered at the path: filled only when
        the path's template does not answer ``method``). ``raw_path`` (still percent-encoded) is read
        only when it has an encoded slash: that slash is part of a segment, e.g. a fault rule named
        ``a/b`` in ``/_emulator/faults/a%2Fb``."""
        encoded = encoded_slash(raw_path)
        if encoded:
            path = raw_path.decode("latin-1")  # type: ignore[union-attr]  # (encoded: not None)
        else:
            methods = self.literal.get(path)
            if methods is not None:  # a concrete path: no template can take it from its own
                return _answer(methods, method, {})
        if not path.startswith("/") or "//" in path:
            return None, {}, set()
        segments = path[1:].split("/")
        if encoded:
            segments = [unquote(segment) for segment in segments]
        if segments and segments[-1] == "" and len(segments) > 1:
            return None, {}, set()  # a trailing slash names no operation
        found = self._follow(segments)
        if found is None or not found[0].methods:
            found = self._walk(self.root, segments, 0, {})
        if found is None:
            return None, {}, set()
        return _answer(found[0].methods, method, found[1])

    def _follow(self, segments: list[str]) -> tuple[_Node, dict[str, str]] | None:
        """The node at the end of the path, following literals first and a parameter otherwise, without
        backtracking. When it ends a template, :meth:`_walk` (which tries literals before parameters)
        would have found the same template first; this is the common case, answered without recursion."""
        node = self.root
        params: dict[str, str] = {}
        for segment in segments:
            child = node.literal.get(segment)
            if child is None:
                child = node.param
                if child is None or not segment:
                    return None
                params[node.param_name] = segment
            node = child
        return node, params

    def _walk(self, node: _Node, segments: list[str], i: int, params: dict[str, str]
              ) -> tuple[_Node, dict[str, str]] | None:
        """The first template that matches the path, literal segments tried before a parameter."""
        if i == len(segments):
            return (node, params) if node.methods else None
        segment = segments[i]
        child = node.literal.get(segment)
        if child is not None:
            found = self._walk(child, segments, i + 1, params)
            if found is not None:
                return found
        if node.param is not None and segment:
            return self._walk(node.param, segments, i + 1, {**params, node.param_name: segment})
        return None


def _answer(methods: dict[str, tuple[str, str]], method: str, params: dict[str, str]
            ) -> tuple[tuple[str, str] | None, dict[str, str], set[str]]:
    """The route of ``method`` among a template's methods (HEAD answered as GET), or the methods it allows."""
    target = methods.get(method) or (methods.get("GET") if method == "HEAD" else None)
    if target is not None:
        return target, params, set()
    return None, {}, set(methods) | ({"HEAD"} if "GET" in methods else set())


class Router:
    """The routing step: a request's operationId, its API's base path and its path parameters."""

    def __init__(self) -> None:
        self.table = PathTable()

    def add_api(self, paths: dict[str, Any], base: str) -> None:
        """Every operation of a spec's ``paths``, served under ``base``."""
        for template, item in paths.items():
            for method, op in item.items():
                if isinstance(op, dict) and "operationId" in op:
                    self.table.add(base + template, method, op["operationId"], base)

    def route(self, scope: Scope) -> Call:
        """A 405 when the path's template does not answer the method; an unknown path has no operation (the
        dispatcher's 404)."""
        method = scope["method"]
        path = scope["path"]
        methods = self.table.literal.get(path)
        if methods is not None:  # a path without parameters (most creates and lists): what match() would answer
            target = methods.get(method)
            raw_path = scope.get("raw_path")
            if target is not None and (raw_path is None or raw_path.find(b"%") < 0):  # (no encoded slash)
                return Call(target[0], target[1], {})
        target, params, allowed = self.table.match(method, path, scope.get("raw_path"))
        if target is None:
            if allowed:
                raise MethodNotAllowed(method, scope["path"], sorted(allowed))
            return Call(None, "", params)
        return Call(target[0], target[1], params)
