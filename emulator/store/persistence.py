"""``--state-file``: the state kept on disk as a journal, so every acknowledged change survives ``kill -9``.

JSON lines sealed with ``seq`` and a CRC-32: a whole state document, then one line per change, fsynced before
the request is answered, and rewritten as one document when the lines outgrow it. A damaged file is refused
untouched, a torn end is cut off; a failed write is :class:`~emulator.errors.Unavailable` and undone in memory.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import re
import weakref
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from emulator import compute
from emulator.errors import Unavailable
from emulator.jsontypes import Json
from emulator.store import snapshot
from emulator.store.memory import Store
from emulator.store.tenant import Tenant

log = logging.getLogger("emulator")
COMPACT_MIN_BYTES = 1 << 20
REPLAY_FACTOR = 64          # compact once replaying the lines would cost this many optim steps of every model
REPLAY_MIN_WORK = 1 << 24   # ... and at least this many trained entries stepped (small models: rarely)
_SEAL = re.compile(rb',"crc":"([0-9a-f]{8})"\}$')


class StateFileError(ValueError):
    pass


def seal(record: dict[str, Json]) -> bytes:
    """One line: ``record`` (a JSON object) with ``"crc"`` appended, the CRC-32 of the bytes without it."""
    body = orjson.dumps(record)
    return body[:-1] + b',"crc":"%08x"}\n' % zlib.crc32(body)


def unseal(line: bytes, number: int) -> dict[str, Any]:
    match = _SEAL.search(line)
    if match is None:
        raise StateFileError(f"line {number} carries no checksum (not written by this version, or damaged)")
    body = line[:match.start()] + b"}"
    if zlib.crc32(body) != int(match.group(1), 16):
        raise StateFileError(f"line {number} does not match its checksum: it was changed or damaged")
    try:
        record = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise StateFileError(f"line {number} is not JSON: {exc}") from exc
    if not isinstance(record, dict) or not isinstance(record.get("seq"), int):
        raise StateFileError(f"line {number} has no sequence number")
    return record


class FileIO:
    """The calls that make an appended line durable: the seam where tests put a failing disk."""

    def write(self, fd: int, data: bytes | memoryview) -> int:
        return os.write(fd, data)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)


class StateFile:
    """The journal file: sealed lines, appended durably; what is whole and what was cut short."""

    def __init__(self, path: str | os.PathLike[str], compact_min_bytes: int = COMPACT_MIN_BYTES) -> None:
        self.io = FileIO()
        self.path = Path(path)
        self.compact_min_bytes = compact_min_bytes
        self.seq = 0             # the sequence number of the last whole line
        self.size = 0            # bytes of whole lines: what an append follows
        self.unsealed = False    # the file is a plain state document (an export), not yet a journal
        self._base_bytes = 0
        self._appended = 0
        self.base_work = 0       # trained entries of the models the first line holds (its owner says)
        self._work = 0           # trained entries stepped by the optim steps of later lines: what a load replays
        self.notes: list[str] = []  # what the last load found worth saying (a torn end, a damaged newline, ...)
        self._newline_at: int | None = None  # where the last whole line's newline is to be written

    def lock(self) -> None:
        """Hold the file for this process: an advisory lock (``lockf``) on a file beside it, ``.NAME.lock``,
        which holds the holder's process id. The kernel drops the lock when the process ends, however it
        ends, so a ``kill -9`` leaves nothing to clean up. A second process is refused (two writers would
        each append their own lines, and the next start-up would refuse the file); the same process may open
        its file again (a test restoring it). The lock is not on the journal itself: compaction replaces that
        file, and a lock on the replaced one would hold nothing."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path.with_name(f".{self.path.name}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            os.close(fd)
            if exc.errno not in (errno.EACCES, errno.EAGAIN):
                raise
            raise StateFileError(f"--state-file {self.path} is in use by another emulator (process id "
                                 f"{holder or 'not yet written'}): two servers appending to one file would leave "
                                 "it unloadable, so this one does not start; stop that one or pass another path"
                                 ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        weakref.finalize(self, os.close, fd)  # (closing it drops the lock: only when this file is dropped)

    def load(self) -> dict[str, Any] | None:
        """The state document the file holds (its lines replayed), or None when there is no file yet. What it
        found at the end, which :meth:`mend_end` then settles (a torn line to cut, a newline to write), and
        anything else worth saying at start-up, is in :attr:`notes`."""
        if not self.path.exists():
            return None
        try:
            data = self.path.read_bytes()
        except OSError as exc:
            raise StateFileError(f"cannot read it: {exc.strerror or exc}") from exc
        return self.load_bytes(data)

    def load_bytes(self, data: bytes) -> dict[str, Any]:
        """:meth:`load` of the file's content, read already."""
        self.notes = []
        self._newline_at = None
        end = data.rfind(b"\n") + 1
        lines, tail = data[:end].split(b"\n")[:-1], data[end:]
        size = end
        if tail.strip():
            kept = _verified(tail)
            if kept is not None:  # a whole line: only its newline is missing, or a bit flip changed it
                self.notes.append(f"line {len(lines) + 1}'s newline is {'missing' if kept == tail else 'damaged'}; "
                                  "the line verifies against its checksum, so it is kept and its newline written")
                lines.append(kept)
                self._newline_at = end + len(kept)
                size = self._newline_at + 1
            elif not lines and not _SEAL.search(tail.rstrip()):
                return self._load_document(tail)  # one document with no newline at the end: an export saved by hand
            elif not lines:
                lines = [tail]  # (a lone line that fails its checksum: refused below, naming it)
            else:  # the process died writing it: that request was never answered
                self.notes.append(f"line {len(lines) + 1} ({len(tail)} bytes) is cut short, as when the process "
                                  "dies writing it (that request was never answered); it is dropped")
        if not lines:
            raise StateFileError("the file holds no whole line" if data else "the file is empty")
        if len(lines) == 1 and not _SEAL.search(lines[0].rstrip()):
            return self._load_document(lines[0])
        base = unseal(lines[0], 1)
        seq = base.pop("seq")
        tenants = base.get("tenants")
        if not isinstance(tenants, dict):
            raise StateFileError("line 1 is not a state document")
        bases = compute.BaseModels()  # (shared by the models this load replays)
        replays = {p: snapshot.TenantReplay(t, bases) for p, t in tenants.items() if isinstance(t, dict)}
        for number, line in enumerate(lines[1:], start=2):
            change = unseal(line, number)
            if change["seq"] != seq + 1:
                raise StateFileError(f"line {number} has sequence number {change['seq']}, not {seq + 1}: a line "
                                     "is missing, repeated or out of order")
            seq = change["seq"]
            try:
                replay = _apply(base, replays, change)
            except (KeyError, TypeError, AttributeError, ValueError, compute.ComputeError) as exc:
                raise StateFileError(f"line {number} is not a state change ({exc})") from exc
            if replay is not None and replay.differ:
                self.notes += [f"line {number}: session {sid}'s model replays to other numbers at step {step} than "
                               "when it was written (another numpy or CPU?); it goes on from the replayed ones"
                               for sid, step in replay.differ]
                replay.differ.clear()
        base["tenants"] = {p: replay.document() for p, replay in replays.items()}
        self.seq = seq
        self.size = size
        self._base_bytes = len(lines[0]) + 1
        self._appended = size - self._base_bytes
        self._work = sum(replay.work for replay in replays.values())
        return base

    def _load_document(self, line: bytes) -> dict[str, Any]:
        """A plain state document (``GET /_emulator/state`` saved to a file) to start from: the emulator seals
        it into a journal before its first change."""
        try:
            doc = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise StateFileError(f"line 1 is not JSON: {exc}") from exc
        if not isinstance(doc, dict):
            raise StateFileError("line 1 does not hold a JSON object")
        self.unsealed = True
        self.seq = 0
        self.size = self._base_bytes = len(line)
        self._appended = 0
        return doc

    def mend_end(self) -> None:
        """Make the file end where its last whole line ends, with a newline: cut off what follows (a write the
        process died in, or a failed one), and write the newline a whole last line lacks (:meth:`load`). The
        next line must not be glued to a fragment, nor to a line."""
        try:
            actual = self.path.stat().st_size
        except FileNotFoundError:
            return
        if self._newline_at is not None:
            fd = os.open(self.path, os.O_WRONLY)
            try:
                os.pwrite(fd, b"\n", self._newline_at)
                self.io.fsync(fd)
            finally:
                os.close(fd)
            self._newline_at = None
            actual = max(actual, self.size)
        if actual > self.size:
            os.truncate(self.path, self.size)

    def check_writable(self) -> None:
        """Open the file for appending and close it: a read-only file, directory or file system says so now,
        not at the first request."""
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        os.close(fd)

    def write_all(self, doc: dict[str, Json]) -> None:
        """Replace the file with one whole document, atomically; its sequence number is the last line's."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = seal({**doc, "seq": self.seq})
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                self._write_all(fd, data)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        _fsync_dir(self.path.parent)
        self.size = self._base_bytes = len(data)
        self._appended = 0
        self._work = 0
        self._newline_at = None

    def append(self, change: dict[str, Json], work: int = 0) -> None:
        """Add one line and make it durable before returning; on failure cut it off again and raise."""
        line = seal({"seq": self.seq + 1, **change})
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
            try:
                self._write_all(fd, line)
            finally:
                os.close(fd)
        except OSError:
            try:
                self.mend_end()
            except OSError:
                pass  # the next load cuts it
            raise
        self.seq += 1
        self.size += len(line)
        self._appended += len(line)
        self._work += work

    def _write_all(self, fd: int, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[self.io.write(fd, view):]
        self.io.fsync(fd)

    @property
    def wants_compaction(self) -> bool:
        """When the lines outgrow the first (their bytes), or replaying them would cost more than loading the
        first many times over (the optim steps they make again, each as costly as the step was): so a
        rewrite costs a fixed share of what was appended or of the work done, never one per step."""
        return (self._appended > max(self.compact_min_bytes, 2 * self._base_bytes)
                or self._work > max(REPLAY_MIN_WORK, REPLAY_FACTOR * self.base_work))


def _verified(tail: bytes) -> bytes | None:
    """What follows the last newline, if it is a whole line that lost its newline or whose newline one bit
    flip changed (a line that verifies against its checksum is complete): the line, else None."""
    for line in (tail, tail[:-1]):
        try:
            unseal(line, 0)
        except StateFileError:
            continue
        return line
    return None


def _apply(doc: dict[str, Any], replays: dict[str, snapshot.TenantReplay],
           change: dict[str, Any]) -> snapshot.TenantReplay | None:
    if "reset" in change:
        project = change["reset"]
        if project is None:
            replays.clear()
        else:
            replays.pop(project, None)
    project = change.get("project")
    if project is not None:
        replay = replays.get(project)
        if replay is None:
            replay = replays[project] = snapshot.TenantReplay({"epoch": change["epoch"]})
        elif replay.data.get("epoch") != change["epoch"]:
            raise ValueError(f"tenant {project} changes epoch without a reset")
        replay.apply(change)
    for key in ("seed", "clock", "secret"):
        if key in change and not (key == "seed" and project is not None):  # (a tenant's line: its own seed)
            doc[key] = change[key]
    return replays.get(project) if project is not None else None


def _replay_work(tenant: Tenant, change: dict[str, Any]) -> int:
    """What replaying a tenant's line costs, in trained entries stepped: each optim step it makes again
    passes over every entry of its model."""
    work = 0
    for sid, calls in change.get("model_calls", {}).items():
        steps = sum(1 for call in calls if "update" in call)
        if steps:
            work += steps * tenant.models.live[sid].weights().num_entries
    return work


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
    """Keeps a :class:`StateFile` in step with a :class:`Store`: commits tenants' changes, undoes a change
    the file refused, compacts."""

    def __init__(self, path: str | os.PathLike[str], store: Store, clock: Callable[[], dict[str, Json]],
                 checker: snapshot.Checker, verify: Callable[[Tenant], None] | None = None) -> None:
        self.file = StateFile(path)
        self.store = store
        self.clock = clock
        self.checker = checker
        self.verify = verify
        self.memos: dict[str, snapshot.TenantMemo] = {}   # what the file holds of each tenant, beyond its base
        self.last_error: str | None = None                # the last write the file refused, until one succeeds
        self.broken: str | None = None                    # memory may be ahead of the file: writes are refused

    def open(self) -> dict[str, Any] | None:
        """Lock the file, load it into the store (or create it); returns the document loaded, if any."""
        path = self.file.path
        try:
            self.file.lock()
        except OSError as exc:
            raise StateFileError(f"--state-file {path} cannot be written: {exc.strerror or exc}. The emulator "
                                 "needs to create a lock file beside it (check permissions and mounts)") from exc
        try:
            doc = self.file.load()
            if doc is not None:
                snapshot.import_state(self.store, doc, self.checker, self.verify)
        except (StateFileError, snapshot.StateError) as exc:
            raise StateFileError(f"--state-file {path} cannot be used: {exc}. Move it away or pass another path; "
                                 "the emulator never overwrites a file it cannot read") from exc
        try:
            if doc is None or self.file.unsealed:
                self._write_all()
                self.file.unsealed = False
            else:
                self.file.mend_end()
                self.file.base_work = self._model_entries()
            for note in self.file.notes:
                log.warning("--state-file %s: %s", path, note)
            self.file.check_writable()
            self._reset_changes()
        except OSError as exc:
            raise StateFileError(f"--state-file {path} cannot be written: {exc.strerror or exc}. The emulator "
                                 "needs to append to it (check permissions, free space and mounts)") from exc
        return doc

    def status(self) -> dict[str, Json]:
        return {"path": str(self.file.path), "ok": self.last_error is None and self.broken is None,
                "seq": self.file.seq, "error": self.broken or self.last_error}

    def check_writable(self) -> None:
        """Refuse a write up front while memory may be ahead of the file (a failed undo), unless reloading
        the file now works."""
        if self.broken is not None and not self._reload(None):
            raise Unavailable(f"the state file {self.file.path} could not be read back after a failed write "
                              f"({self.broken}); the emulator takes no writes until it can")

    def commit(self, tenant: Tenant, *, clock: bool = False) -> None:
        """Append what ``tenant`` changed, with the clocks; ``clock``: a line even if nothing else changed (the
        clock moved). Refused: :class:`Unavailable`; the unit of work reloads the tenant (:meth:`reload`) and
        puts back what else it changed."""
        change = snapshot.tenant_change(tenant, self.memos.setdefault(tenant.project, snapshot.TenantMemo()))
        if not change:
            if clock:
                self._append({"clock": self.clock()})
            return
        self._append({"project": tenant.project, "epoch": tenant.epoch, **change, "clock": self.clock()},
                     _replay_work(tenant, change))

    def control(self, *, reset: bool = False, project: str | None = None, tenant: Tenant | None = None) -> None:
        """One line for a control-plane change: the clocks and profiles, after a reset of ``project`` (None:
        everything) when ``reset``, with ``tenant``'s change (a tenant seeded at its reset). Refused:
        :class:`Unavailable`, and nothing is reloaded: the caller puts back what it changed (the store, the
        clocks, these memos: :meth:`save`)."""
        line: dict[str, Json] = {}
        if reset:
            if project is None:
                self.memos.clear()
            else:
                self.memos.pop(project, None)
            line.update(reset=project, seed=self.store.seed)
        work = 0
        if tenant is not None:
            change = snapshot.tenant_change(tenant, self.memos.setdefault(tenant.project, snapshot.TenantMemo()))
            line.update(project=tenant.project, epoch=tenant.epoch, **change)
            work = _replay_work(tenant, change)
        line["clock"] = self.clock()
        self._append(line, work)

    def save(self) -> dict[str, snapshot.TenantMemo]:
        """What the file holds of each tenant (the memos), for :meth:`put_back` along with the store's tenants."""
        return dict(self.memos)

    def put_back(self, memos: dict[str, snapshot.TenantMemo]) -> None:
        self.memos = dict(memos)

    def rewrite(self) -> None:
        """Write the whole store as the file's one document (after a state import). Refused:
        :class:`Unavailable`, with the file as it was; the caller puts back the store it replaced."""
        try:
            self._write_all()
        except OSError as exc:
            self._failed(exc)
        self._reset_changes()

    def reload(self, projects: list[str]) -> bool:
        """Make ``projects``' tenants what the file holds (a unit of work the file refused changed them)."""
        return self._reload(projects)

    def compact(self) -> bool:
        """Write the whole store as the file's one document now, so that the file names exactly what memory
        does (before the blob directory is swept); False, and nothing changed, when the file refuses."""
        if self.broken is not None:
            return False
        try:
            self.file.write_all(snapshot.export_state(self.store, self.clock()))
        except OSError as exc:
            log.warning("--state-file %s: compaction failed (%s)", self.file.path, exc.strerror or exc)
            return False
        self._reset_changes()
        return True

    def _append(self, change: dict[str, Json], work: int = 0) -> None:
        try:
            self.file.append(change, work)
        except OSError as exc:
            self._failed(exc)
        self.last_error = None
        if self.file.wants_compaction:
            try:
                self._write_all()
            except OSError as exc:  # the change is durable already; compaction is tried again later
                log.warning("--state-file %s: compaction failed (%s); the journal keeps growing",
                            self.file.path, exc.strerror or exc)
            else:
                self._reset_changes()

    def _write_all(self) -> None:
        self.file.write_all(snapshot.export_state(self.store, self.clock()))
        self.file.base_work = self._model_entries()

    def _model_entries(self) -> int:
        """The trained entries of every session model in the store: what loading the first line costs."""
        return sum(model.weights().num_entries for project in self.store.projects()
                   if (tenant := self.store.get(project)) is not None for model in tenant.models.live.values())

    def _reset_changes(self) -> None:
        """The file holds the whole store as it is in memory: nothing a tenant noted is left to write, and
        each memo knows every record (so a record touched later is written only if it changed)."""
        self.memos.clear()
        for project in self.store.projects():
            tenant = self.store.get(project)
            if tenant is not None:
                tenant.forget_changes()
                self.memos[project] = snapshot.memo_of(tenant)

    def _failed(self, exc: OSError) -> None:
        """The file refused a change (it is as it was: the torn line is cut): say so. The unit of work that
        made the change undoes it in memory."""
        reason = exc.strerror or str(exc)
        self.last_error = f"{reason} (at {self.file.path})"
        log.error("--state-file %s: a write failed (%s); the change is undone", self.file.path, reason)
        raise Unavailable(f"the state file {self.file.path} could not be written ({reason}); this request changed "
                          "nothing. Retry once the disk has room or is writable again") from exc

    def _reload(self, projects: list[str] | None) -> bool:
        """Make memory what the file holds (``projects``' tenants, or everything); False if the file cannot be
        read back (then writes are refused until it can)."""
        try:
            doc = self.file.load()
            self.file.mend_end()
            assert doc is not None
            doc = snapshot.store_inline_bytes(doc, self.store.blobs)
            if projects is None:
                snapshot.import_state(self.store, doc, self.checker)
                self._reset_changes()
            else:
                for project in projects:
                    data = doc["tenants"].get(project)
                    self.memos.pop(project, None)
                    if data is None:
                        self.store.drop(project)
                    else:
                        tenant = snapshot.build_tenant(self.store, project, data)
                        self.store.put(tenant)
                        self.memos[project] = snapshot.memo_of(tenant)
        except (OSError, StateFileError, snapshot.StateError, AssertionError) as exc:
            self.broken = str(exc)
            log.error("--state-file %s: cannot be read back (%s); writes are refused", self.file.path, exc)
            return False
        self.broken = None
        return True
