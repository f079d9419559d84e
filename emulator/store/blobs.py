"""Uploaded bytes (Files API files, offloaded operation payloads) kept on disk, named by their SHA-256.

A record names its bytes (:class:`Blob`), so neither memory nor a ``--state-file`` line holds them. With
``--state-file F`` the directory is ``F.blobs``; without one, a temporary directory of the runtime's.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import re
import secrets
import shutil
import tempfile
import weakref
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

log = logging.getLogger("emulator")
DIGEST = re.compile(r"[0-9a-f]{64}")
INCOMING = ".incoming"
FLUSH_BYTES = 1 << 20          # an upload is written to disk a MiB at a time, off the event loop
SWEEP_MIN_BYTES = 64 << 20     # the directory grows at least this much between sweeps


class Blob(str):
    """The name of some stored bytes (their SHA-256, hex) that knows where they are. A ``str``: a record holding
    one serializes it as the plain name, and compares equal to it."""

    path: Path

    def __new__(cls, name: str, path: Path) -> Blob:
        blob = super().__new__(cls, name)
        blob.path = path
        return blob

    def __getnewargs__(self) -> tuple[str, Path]:  # type: ignore[override]  # (copies keep the path)
        return str(self), self.path

    def open(self) -> BinaryIO:
        return open(self.path, "rb")  # noqa: SIM115 - the caller closes it (a response streams from it)

    def read(self) -> bytes:
        return self.path.read_bytes()


class BlobWriter:
    """One upload on its way to disk: :meth:`write` its chunks, :meth:`finish`, then :meth:`BlobStore.commit`
    it, or :meth:`abort` (always safe to call: it removes what was not committed)."""

    def __init__(self, directory: Path, durable: bool) -> None:
        self.path = directory / f"{secrets.token_hex(8)}.part"
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        self._durable = durable
        self._hash = hashlib.sha256()
        self._pending = bytearray()
        self.size = 0
        self.digest: str | None = None

    async def write(self, chunk: bytes) -> None:
        self.size += len(chunk)
        self._pending += chunk
        if len(self._pending) >= FLUSH_BYTES:
            await self._flush()

    async def _flush(self) -> None:
        data, self._pending = bytes(self._pending), bytearray()
        if data:
            await asyncio.to_thread(self._write, data)

    def _write(self, data: bytes) -> None:
        assert self._fd is not None
        self._hash.update(data)  # (hashlib lets go of the GIL for large buffers)
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]

    async def finish(self) -> str:
        """Everything is written (and fsynced with a journal); returns the digest."""
        await self._flush()
        fd = self._fd
        assert fd is not None
        if self._durable:
            await asyncio.to_thread(os.fsync, fd)
        os.close(fd)
        self._fd = None
        self.digest = self._hash.hexdigest()
        return self.digest

    def abort(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


class BlobStore:
    """The blob directory of one runtime (see emulator/store/README.md). ``root`` None: a temporary one."""

    def __init__(self, root: str | os.PathLike[str] | None = None, *, durable: bool = False) -> None:
        self._root = Path(root) if root is not None else None
        self._owned = root is None
        self.durable = durable
        self._ready = False
        self.stored_bytes = 0      # in the directory, as far as this process knows (exact after a sweep)
        self.live_bytes = 0        # referenced at the last sweep

    @property
    def root(self) -> Path:
        """The directory, made on first use (an emulator that never receives an upload makes none)."""
        if not self._ready:
            if self._root is None:
                self._root = Path(tempfile.mkdtemp(prefix="together-rl-emulator-blobs-"))
                weakref.finalize(self, shutil.rmtree, str(self._root), True)
            self._root.mkdir(parents=True, exist_ok=True)
            incoming = self._root / INCOMING
            shutil.rmtree(incoming, ignore_errors=True)  # uploads a process died receiving
            incoming.mkdir(exist_ok=True)
            self._ready = True
        assert self._root is not None
        return self._root

    def writer(self) -> BlobWriter:
        return BlobWriter(self.root / INCOMING, self.durable)

    def commit(self, writer: BlobWriter) -> Blob:
        """Put a finished upload in place under its digest (the same bytes stored twice are one file)."""
        assert writer.digest is not None, "finish() the writer first"
        path = self.root / writer.digest
        new = not path.exists()
        os.replace(writer.path, path)
        if self.durable:
            _fsync_dir(self.root)
        if new:
            self.stored_bytes += writer.size
        return Blob(writer.digest, path)

    def put(self, data: bytes) -> Blob:
        """Store bytes in hand (a document that still carries them inline)."""
        digest = hashlib.sha256(data).hexdigest()
        path = self.root / digest
        if not path.exists():
            part = self.root / INCOMING / f"{secrets.token_hex(8)}.part"
            part.write_bytes(data)
            if self.durable:
                fd = os.open(part, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            os.replace(part, path)
            if self.durable:
                _fsync_dir(self.root)
            self.stored_bytes += len(data)
        return Blob(digest, path)

    def ref(self, name: str, size: int) -> Blob:
        """The blob a document names; ``LookupError`` saying why when it is not here whole."""
        if not isinstance(name, str) or DIGEST.fullmatch(name) is None:
            raise LookupError(f"{name!r} is not a blob name (64 lower-case hex digits, a SHA-256)")
        path = self.root / name
        try:
            actual = path.stat().st_size
        except FileNotFoundError:
            raise LookupError(f"its bytes (blob {name}) are not in {self.root}: uploaded bytes live beside the "
                              "state, not in the document") from None
        if actual != size:
            raise LookupError(f"its size {size} is not the size of its data ({actual} bytes, blob {name})")
        return Blob(name, path)

    def names(self) -> set[str]:
        """The blobs in the directory now."""
        root = self._root
        if root is None or not root.is_dir():
            return set()
        with os.scandir(root) as entries:
            return {entry.name for entry in entries if DIGEST.fullmatch(entry.name) is not None}

    def discard(self, names: Iterable[str]) -> None:
        """Delete blobs stored for what was then refused (an import), which nothing names."""
        for name in names:
            if self._root is not None and DIGEST.fullmatch(name) is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self._root / name)

    @property
    def wants_sweep(self) -> bool:
        return self.stored_bytes - self.live_bytes >= max(SWEEP_MIN_BYTES, self.live_bytes)

    def sweep(self, referenced: Iterable[str]) -> int:
        """Delete every blob not in ``referenced``; returns the bytes freed. Only call it when nothing that may
        come back (a journal line not yet written, a change to be undone) names a blob outside ``referenced``."""
        root = self._root
        if root is None or not root.is_dir():
            return 0
        keep = set(referenced)
        freed = live = 0
        with os.scandir(root) as entries:
            for entry in entries:
                if DIGEST.fullmatch(entry.name) is None or not entry.is_file(follow_symlinks=False):
                    continue
                size = entry.stat().st_size
                if entry.name in keep:
                    live += size
                    continue
                try:
                    os.unlink(entry.path)
                    freed += size
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    live += size  # still there
                    log.warning("blob %s could not be deleted: %s", entry.path, exc)
        self.stored_bytes = self.live_bytes = live
        return freed

    def close(self) -> None:
        """Remove a temporary directory now (it is removed at exit anyway)."""
        if self._owned and self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._ready = False
            self._root = None


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


__all__ = ["DIGEST", "Blob", "BlobStore", "BlobWriter"]
