"""``ast.parse`` for the tests, proof against CPython 3.11.7's gh-106905.

In 3.11.7 the recursion counter of the AST conversion is per interpreter, not per thread: while another thread of
the process converts an AST too, ``ast.parse`` can fail with ``SystemError: AST constructor recursion depth
mismatch`` (seen in make test under two busy loops). The parse itself is deterministic, so that error alone is
retried; any other error, a SyntaxError included, is raised as it is. Fixed in CPython 3.11.8.
"""

from __future__ import annotations

import ast

_GH_106905 = "AST constructor recursion depth mismatch"
_ATTEMPTS = 5


def parse(source: str | bytes, filename: str = "<unknown>") -> ast.Module:
    for attempt in range(1, _ATTEMPTS + 1):
        try:
            return ast.parse(source, filename)
        except SystemError as exc:
            if _GH_106905 not in str(exc) or attempt == _ATTEMPTS:
                raise
    raise AssertionError("unreachable")
