"""The fixtures users load by name: scenarios, fault files, recordings, tokens files and parity recordings.

Their one source is the top-level ``fixtures/``; the wheel carries it as ``emulator/fixtures/`` (read through
``importlib.resources``), a checkout reads the top-level one. A plain name (letters, digits, ``-``, ``_``)
names a shipped fixture (``--faults bad-day``); anything else, or an unknown name, is the user's own path.
"""

from __future__ import annotations

import os
import re
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from types import MappingProxyType

#: Each kind of fixture: its directory under ``fixtures/`` and the extension of its files.
KINDS = MappingProxyType({"scenarios": ".yaml", "faults": ".yaml", "recordings": ".jsonl", "tokens": ".yaml",
                          "parity": ".jsonl"})
_NAME = re.compile(r"[\w-]+")


def root() -> Traversable:
    """``fixtures/``: the packaged copy in a wheel, else the checkout's top-level directory."""
    packaged = resources.files("emulator").joinpath("fixtures")
    if packaged.joinpath("README.md").is_file():
        return packaged
    return Path(__file__).resolve().parent.parent / "fixtures"


def directory(kind: str) -> Traversable:
    if kind not in KINDS:
        raise ValueError(f"no kind of fixture {kind!r}; kinds: {', '.join(KINDS)}")
    return root().joinpath(kind)


def names(kind: str) -> list[str]:
    """The shipped fixtures of one kind, sorted."""
    folder, ext = directory(kind), KINDS[kind]
    if not folder.is_dir():
        return []
    return sorted(p.name.removesuffix(ext) for p in folder.iterdir() if p.name.endswith(ext) and p.is_file())


def named(kind: str, name: str) -> Traversable | None:
    """The shipped fixture ``name`` names, or None when ``name`` is not the plain name of one."""
    if not _NAME.fullmatch(name):
        return None
    path = directory(kind).joinpath(name + KINDS[kind])
    return path if path.is_file() else None


def resolve(kind: str, value: str) -> str:
    """The file to read for ``value``: the shipped fixture it names, else ``value`` itself as a path.

    Raises :class:`LookupError`, naming the shipped fixtures, when ``value`` is a plain name that is
    neither a shipped fixture nor an existing file (a mistyped name, most likely).
    """
    path = named(kind, value)
    if path is not None:
        return str(path)  # a file system path: see emulator/README.md
    if _NAME.fullmatch(value) and not os.path.exists(value):
        raise LookupError(f"no file {value!r}, and no shipped {kind} fixture of that name "
                          f"(shipped: {', '.join(names(kind)) or 'none'})")
    return value
