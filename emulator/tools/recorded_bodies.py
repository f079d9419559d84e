"""How a recording writes a body: its secrets redacted, streamed piece by piece into the JSON line.

A body is kept once, as the recorder's chunks, and encoded one chunk at a time (UTF-8 as a JSON string, else
base64): the bytes of ``orjson.dumps({"text": body})`` without a second whole copy. Presigned-URL tokens become
``redacted-token-N``, other URLs' signature parameters ``<redacted>``.
"""

from __future__ import annotations

import base64
import codecs
import re
from collections.abc import Iterable, Iterator

import orjson

# The token of a presigned URL of the emulator (emulator.http.files).
PRESIGNED = re.compile(rb"(/_files/(?:payloads|checkpoints|uploads)/)([A-Za-z0-9_.-]+)")
# A URL with a query, and in it a parameter whose name says it carries a signature or a credential (S3, GCS,
# Azure, CDNs). Only text is searched: binary bodies (model files) are left as they are.
SIGNED_URL = re.compile(rb"https?://[^\s\"'<>\\?#]*\?[^\s\"'<>\\#]+", re.I)
SIGNED_PARAM = re.compile(
    rb"([?&][A-Za-z0-9_.-]*(?:signature|credential|token|sig|policy|key|secret|password)[A-Za-z0-9_.-]*=)"
    rb"([^&]+)", re.I)
REDACTED_VALUE = b"<redacted>"
# Bodies up to this size are redacted whole; larger ones chunk by chunk with a carried tail (a match may
# straddle two chunks), which gives the same bytes.
WHOLE_BODY_BYTES = 1 << 20
_CARRY = 4096
_BATCH = 64 * 1024 + 2 * _CARRY


class Redactor:
    """Placeholders for presigned tokens, numbered in order of first appearance across a recording."""

    def __init__(self) -> None:
        self.tokens: dict[bytes, bytes] = {}

    def _placeholder(self, m: re.Match[bytes]) -> bytes:
        token = self.tokens.setdefault(m.group(2), b"redacted-token-%d" % (len(self.tokens) + 1))
        return m.group(1) + token

    def redact(self, data: bytes, text: bool = True) -> bytes:
        """``data`` with its presigned tokens replaced, and with ``text`` its URLs' signatures too."""
        if b"/_files/" in data:
            data = PRESIGNED.sub(self._placeholder, data)
        if text and b"?" in data:
            data = SIGNED_URL.sub(lambda m: SIGNED_PARAM.sub(_redacted_value, m.group(0)), data)
        return data

    def text(self, value: str) -> str:
        return self.redact(value.encode("utf-8")).decode("utf-8")

    def stream(self, chunks: Iterable[bytes], text: bool = True) -> Iterator[bytes]:
        """The redacted body, chunk by chunk; joined, exactly ``redact(b"".join(chunks), text)``."""
        pending: list[bytes] = []
        size = 0
        for chunk in chunks:
            pending.append(chunk)
            size += len(chunk)
            if size < _BATCH:  # small chunks are gathered first: each pass scans a window of _CARRY bytes
                continue
            buffer = b"".join(pending) if len(pending) > 1 else pending[0]
            cut = _safe_cut(buffer)
            if cut:
                yield self.redact(buffer[:cut], text)
            pending, size = [buffer[cut:]], len(buffer) - cut
        if size:
            yield self.redact(b"".join(pending), text)

    def scan(self, chunks: Iterable[bytes]) -> None:
        """Number the tokens of a body without writing it (placeholders follow the recording's order)."""
        for _ in self.stream(chunks, text=False):
            pass


def _redacted_value(m: re.Match[bytes]) -> bytes:
    return m.group(1) + REDACTED_VALUE


def _safe_cut(buffer: bytes) -> int:
    """How much of ``buffer`` can be redacted now: up to ``_CARRY`` bytes from its end, and never inside
    something a later chunk might extend (a presigned path or a signed query parameter)."""
    cut = len(buffer) - _CARRY
    if cut <= 0:
        return 0
    for pattern in (PRESIGNED, SIGNED_URL):
        for m in pattern.finditer(buffer, max(0, cut - _CARRY)):
            if m.start() < cut <= m.end() or m.end() == len(buffer):
                cut = min(cut, m.start())
    # A match can also begin in the kept tail: nothing before the cut depends on it.
    return max(cut, 0)


def is_utf8(chunks: Iterable[bytes]) -> bool:
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        for chunk in chunks:
            decoder.decode(chunk)
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True


def body_json(chunks: list[bytes], redactor: Redactor) -> Iterator[str]:
    """The recorded form of a body, ``{"text": ...}`` or ``{"base64": ...}``, as pieces of JSON text.

    Redacting replaces ASCII with ASCII, so whether the body is UTF-8 is read from the chunks as received
    (a body that is not UTF-8 keeps its URL signatures: it is binary, a model file).
    """
    total = sum(len(c) for c in chunks)
    if total <= WHOLE_BODY_BYTES:
        data = b"".join(chunks)
        try:
            yield orjson.dumps({"text": redactor.redact(data).decode("utf-8")}).decode()
        except UnicodeDecodeError:
            yield orjson.dumps({"base64": base64.b64encode(redactor.redact(data, text=False)).decode()}).decode()
        return
    if is_utf8(chunks):
        decoder = codecs.getincrementaldecoder("utf-8")()
        yield '{"text":"'
        for piece in redactor.stream(chunks):
            text = decoder.decode(piece)
            if text:
                yield orjson.dumps(text).decode()[1:-1]  # JSON escaping is per character
        yield '"}'
        return
    yield '{"base64":"'
    rest = b""
    for piece in redactor.stream(chunks, text=False):
        piece = rest + piece if rest else piece
        whole = len(piece) - len(piece) % 3  # base64 of 3-byte groups concatenates
        yield base64.b64encode(piece[:whole]).decode()
        rest = piece[whole:]
    yield base64.b64encode(rest).decode() + '"}'
