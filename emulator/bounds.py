"""Bounds on what a request may make the emulator hold, checked where the request enters.

Whatever the server holds it must be able to render, export and import again, so three things a client
controls are refused (400) before anything is stored: JSON nested too deep, int64 strings outside the signed
64-bit range, and instants past :data:`~emulator.clock.MAX_TIME` (year 9999).
"""

from __future__ import annotations

import math
import re
from typing import Any

from emulator.clock import MAX_TIME
from emulator.errors import Invalid

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

MAX_JSON_DEPTH = 64
# A request body sits at most five levels down in a state document (document, tenants, project, table,
# record, field) and one more in a journal line; the margin keeps the limit well below orjson's 254.
MAX_STATE_DEPTH = MAX_JSON_DEPTH + 16

# The JSON text is checked, not the parsed value: walking every container in Python cost twice what
# parsing did on a training batch's body; these are a few passes of C over the bytes (~15% of parsing).
_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+"')
_MARKS = b'"[]{}'
_NOT_MARKS = bytes(sorted(set(range(256)) - set(_MARKS)))
_SQUARE = bytes.maketrans(b"{}", b"[]")


def json_too_deep(raw: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether the JSON text ``raw`` (already known to parse) nests arrays and objects more than ``limit``
    deep. Its brackets outside strings, in order, lose their innermost pairs once per pass; what is left
    after ``limit`` passes was deeper."""
    if len(raw) <= 2 * limit:  # each level of valid JSON takes two bytes of brackets: most bodies end here
        return False
    marks = raw.translate(_SQUARE, _NOT_MARKS)  # quotes and brackets, in order
    if len(marks) - marks.count(b'"') <= 2 * limit:
        return False
    if b'"' in marks:
        plain = marks.replace(b'""', b"")  # strings without a bracket or an escaped quote inside
        if b'"' in plain:  # some string holds one: take the strings out of the text exactly
            plain = _STRING.sub(b"", raw).translate(_SQUARE, _NOT_MARKS)
        marks = plain
    for _ in range(limit):
        marks = marks.replace(b"[]", b"")
        if not marks:
            return False
    return True


def depth_message(where: str, limit: int = MAX_JSON_DEPTH) -> str:
    return f"{where} nests arrays and objects more than {limit} levels deep; the emulator keeps at most {limit}"


def later(at: float, seconds: float) -> float:
    """``at`` plus a duration, kept within what can be rendered (year 9999)."""
    return min(at + seconds, MAX_TIME)


def int64(value: Any, param: str) -> int:
    """An int64 request field (a JSON integer or a decimal string) as an int; 400 outside the signed 64-bit
    range or when it is not an integer at all."""
    if isinstance(value, bool):
        raise Invalid(f"{param}: expected an integer, got a boolean", param=param)
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, str):
        text = value.strip()
        if len(text) > 64:  # int() of a huge digit string is slow, and could only be out of range
            raise Invalid(f"{param}: {text[:30]}... is outside the 64-bit integer range", param=param)
        try:
            value = int(text)
        except ValueError:
            raise Invalid(f"{param}: {text[:30]!r} is not an integer", param=param) from None
    if not isinstance(value, int):
        raise Invalid(f"{param}: expected an integer, got {str(value)[:30]}", param=param)
    if not INT64_MIN <= value <= INT64_MAX:
        raise Invalid(f"{param}: {value} is outside the 64-bit integer range "
                             f"({INT64_MIN} to {INT64_MAX})", param=param)
    return value
