"""``--state-file``: the state kept on disk as a journal, so every acknowledged change survives ``kill -9``.

The file is JSON lines. The first line is a whole state document (the format of ``GET /_emulator/state``);
each later line records what one request changed: for each tenant it touched, the records that changed
or are new, the session models that trained, the published weights that moved, the new idempotency keys
(:func:`~emulator.store.snapshot.export_tenant_changes`), or ``null`` when the tenant was reset; whether
everything was reset; the seed, clock and presigned grants. A line is appended and fsynced before the
request is answered, so the cost of a write follows what the request changed, not the size of the
tenant or of the whole state. When the appended lines outgrow the first one, the file is rewritten as a
single document (temporary file, fsync, rename).

Loading replays the lines over the first one and imports the result through the same checks as
``PUT /_emulator/state``. A last line cut short (the process died while writing it, so its request was
never answered) is dropped; any other damage refuses the file, which is then never overwritten.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import orjson

from emulator.store import snapshot
from emulator.store.memory import Store

COMPACT_MIN_BYTES = 1 << 20


class StateFileError(ValueError):
    pass


class StateFile:
    def __init__(self, path: str | os.PathLike[str], compact_min_bytes: int = COMPACT_MIN_BYTES) -> None:
        self.path = Path(path)
        self.compact_min_bytes = compact_min_bytes
        self._base_bytes = 0
        self._appended = 0

    def load(self) -> dict[str, Any] | None:
        """The state document the file holds (lines replayed), or None when there is no file yet."""
        if not self.path.exists():
            return None
        try:
            lines = self.path.read_bytes().split(b"\n")
        except OSError as exc:
            raise StateFileError(f"cannot read it: {exc}") from exc
        while lines and not lines[-1].strip():
            lines.pop()
        if not lines:
            raise StateFileError("the file is empty")
        try:
            doc = orjson.loads(lines[0])
        except orjson.JSONDecodeError as exc:
            raise StateFileError(f"line 1 is not JSON: {exc}") from exc
        if not isinstance(doc, dict):
            raise StateFileError("line 1 does not hold a JSON object")
        positions: dict[str, dict[str, dict[str, int]]] = {}
        for number, line in enumerate(lines[1:], start=2):
            try:
                change = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                if number == len(lines):
                    break  # torn by a crash mid-write: that request was never answered
                raise StateFileError(f"line {number} is not JSON: {exc}") from exc
            if not isinstance(change, dict) or not isinstance(change.get("tenants"), dict):
                raise StateFileError(f"line {number} is not a state change")
            try:
                _apply(doc, change, positions)
            except (KeyError, TypeError, AttributeError) as exc:
                raise StateFileError(f"line {number} is not a state change ({exc!r})") from exc
        self._base_bytes = len(lines[0])
        self._appended = sum(len(line) + 1 for line in lines[1:])
        return doc

    def write_all(self, doc: dict[str, Any]) -> None:
        """Replace the file with one whole document, atomically."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = orjson.dumps(doc) + b"\n"
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        _fsync_dir(self.path.parent)
        self._base_bytes = len(data)
        self._appended = 0

    def append(self, change: dict[str, Any]) -> None:
        """Add one change and make it durable before returning (the fsync dwarfs the open and close)."""
        line = orjson.dumps(change) + b"\n"
        with open(self.path, "ab") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
        self._appended += len(line)

    @property
    def wants_compaction(self) -> bool:
        return self._appended > max(self.compact_min_bytes, 2 * self._base_bytes)


def _apply(doc: dict[str, Any], change: dict[str, Any], positions: dict[str, dict[str, dict[str, int]]]) -> None:
    tenants = doc.setdefault("tenants", {})
    if change.get("reset_all"):
        tenants.clear()
        positions.clear()
    for project, changes in change["tenants"].items():
        if changes is None:
            tenants.pop(project, None)
            positions.pop(project, None)
        else:
            snapshot.apply_tenant_changes(tenants.setdefault(project, {}), changes, positions.setdefault(project, {}))
    for key in ("seed", "clock", "presigned"):
        if key in change:
            doc[key] = change[key]


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Persistence:
    """Keeps a :class:`StateFile` in step with a :class:`Store`."""

    def __init__(self, path: str | os.PathLike[str], store: Store, clock: Callable[[], dict[str, Any]],
                 events: Collection[str]) -> None:
        self.file = StateFile(path)
        self.store = store
        self.clock = clock
        self.events = events
        self.memos: dict[str, snapshot.TenantMemo] = {}   # what the file holds of each tenant, beyond line 1

    def restore(self) -> dict[str, Any] | None:
        """Load the file into the store (or create it); returns the document loaded, if any."""
        try:
            doc = self.file.load()
            if doc is not None:
                snapshot.import_state(self.store, doc, self.events)
        except (StateFileError, snapshot.StateError) as exc:
            raise StateFileError(f"--state-file {self.file.path} cannot be used: {exc}. Move it away or pass "
                                 "another path; the emulator never overwrites a file it cannot read") from exc
        self.store.take_dirty()
        if doc is None:
            self.file.write_all(snapshot.export_state(self.store, self.clock()))
        return doc

    def flush(self, force: bool = False) -> None:
        """Write what changed since the last flush (with ``force``, at least the seed, clock and grants)."""
        reset_all, dirty = self.store.take_dirty()
        if not (force or reset_all or dirty):
            return
        if reset_all:
            self.memos.clear()
        tenants: dict[str, Any] = {}
        for project in sorted(dirty):
            if self.store.get(project) is None:
                tenants[project] = None
                self.memos.pop(project, None)
                continue
            with self.store.transaction(project, write=False) as state:
                tenants[project] = snapshot.export_tenant_changes(state, self.memos.setdefault(project,
                                                                                               snapshot.TenantMemo()))
        change = {"reset_all": reset_all, "tenants": tenants, "seed": self.store.seed, "clock": self.clock(),
                  "presigned": self.store.presigned.export()}
        self.file.append(change)
        if self.file.wants_compaction:
            self.file.write_all(snapshot.export_state(self.store, self.clock()))
            # Line 1 now holds everything; the next line of a tenant restates it whole, which is correct.
            self.memos.clear()
