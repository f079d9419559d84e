"""The Files API as the SDK's ``client.files`` uses it: upload, list, retrieve, content, delete.

Emulates ``together==3.1.1``'s ``UploadManager`` flow (create answers 302 to a presigned upload URL, PUT, then
preprocess validates). Differs [inferred]: validation finishes within preprocess; the same upload twice is 409
``{"file_id"}``; no multipart or direct ``/v1/files/upload``; bounded by ``--max-body-bytes`` and a quota.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import BinaryIO

import msgspec
import orjson

from emulator.compute.types import Wire
from emulator.domain.common import lookup
from emulator.domain.context import Ctx
from emulator.domain.limits import Limits
from emulator.errors import Capacity, Exists, Invalid
from emulator.jsontypes import Json
from emulator.store import Tenant
from emulator.store.blobs import Blob
from emulator.store.records import File, ValidationReport

PURPOSES = ("fine-tune", "calibration", "eval", "batch-api")
FILE_TYPES = ("jsonl", "csv", "parquet")
CALIBRATION_PURPOSES = ("calibration", "fine-tune")
CALIBRATION_MAX_BYTES = 64 * 1024 * 1024


class Form(Wire, frozen=True):
    """The upload form's fields (``POST /v1/files``)."""

    purpose: str | None = None
    file_name: str | None = None
    file_type: str | None = None
    checksum: str | None = None


def create(tenant: Tenant, ctx: Ctx, form: Form) -> File:
    """A new file awaiting its bytes (the first step of an upload)."""
    purpose = _field(form.purpose, "purpose")
    if purpose not in PURPOSES:
        raise Invalid(f"purpose must be one of {', '.join(PURPOSES)}, not {purpose!r}", param="purpose")
    name = _field(form.file_name, "file_name")
    file_type = form.file_type or name.rpartition(".")[2]
    if file_type not in FILE_TYPES:
        raise Invalid(f"file_type must be one of {', '.join(FILE_TYPES)}, not {file_type!r}",
                             param="file_type")
    checksum = form.checksum or None
    if checksum is not None:
        for f in tenant.files.values():
            if (f.checksum, f.filename, f.purpose) == (checksum, name, purpose) and f.blob is not None:
                raise Exists(f"file {f.id} has the same name, purpose and content", code="file_exists",
                               extra={"file_id": f.id})
    f = File(id="file-" + tenant.ids.uuid("file"), filename=name, purpose=purpose, file_type=file_type,
             created_at=ctx.now, created_by=ctx.principal.user, checksum=checksum)
    return tenant.files.add(f)


def _field(value: str | None, name: str) -> str:
    if not value:
        raise Invalid(f"{name}: the form field is required", param=name)
    return value


def upload(tenant: Tenant, file_id: str, blob: Blob, size: int) -> None:
    """The bytes PUT to the file's presigned URL (stored: the record names them)."""
    f = tenant.files.get(file_id)
    if f is not None:
        f.blob, f.size = blob, size


def stored_bytes(tenant: Tenant) -> int:
    """What the project's uploads hold: its files' bytes and its payloads' not yet released."""
    return (sum(f.size for f in tenant.files.values() if f.blob is not None)
            + sum(p.size for p in tenant.payloads.values() if p.blob is not None))


def check_room(limits: Limits, size: int, held: int) -> None:
    """429 when ``size`` more bytes of uploads would pass a project's quota, which holds ``held`` already
    (:func:`stored_bytes`, and what is being received)."""
    quota = limits.uploads_mib_per_tenant << 20
    if held + size > quota:
        raise Capacity(f"this upload would pass the project's {limits.uploads_mib_per_tenant} MiB of uploads "
                       f"({held + size} bytes with it, counting files, payloads not yet read and uploads under "
                       "way): delete files first (uploads_mib_per_tenant in --limits-file)", retryable=False,
                       code="upload_quota_exceeded")


def preprocess(tenant: Tenant, file_id: str) -> File:
    f = get(tenant, file_id)
    if f.blob is None:
        raise Invalid(f"file {f.id} has not been uploaded: PUT its bytes to the upload URL first", param="id")
    if f.file_type != "jsonl":
        f.processing_status, f.validation_report = "COMPLETED", None
        return f
    with f.blob.open() as data:  # type: ignore[attr-defined]
        report = msgspec.structs.replace(validate_jsonl(data), file_id=f.id)
    f.validation_report = report
    f.processing_status = "COMPLETED" if report.valid else "INVALID_FORMAT"
    return f


def _lines(data: bytes | BinaryIO | Iterable[bytes]) -> Iterable[bytes]:
    # bytes.splitlines() of the whole file, a line at a time ("\r" alone also ends a line)
    if isinstance(data, bytes):
        yield from data.splitlines()
        return
    for chunk in data:
        yield from chunk.splitlines()


def validate_jsonl(data: bytes | BinaryIO | Iterable[bytes]) -> ValidationReport:
    """The validation report of a JSONL dataset (emulator/domain/README.md): its bytes, or a file of them read a
    line at a time."""
    formats: set[str] = set()
    has_tools = False
    lines = 0
    for number, line in enumerate(_lines(data), 1):
        if not line.strip():
            continue
        lines += 1
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            return _invalid(f"line {number} is not valid JSON: {exc}")
        if not isinstance(row, dict):
            return _invalid(f"line {number} is not a JSON object")
        kind, problem = _row_format(row)
        if problem:
            return _invalid(f"line {number}: {problem}")
        formats.add(kind)
        has_tools = has_tools or bool(row.get("tools"))
    if lines == 0:
        return _invalid("the file has no rows")
    if len(formats) > 1:
        return _invalid(f"rows mix dataset formats ({', '.join(sorted(formats))})")
    return ValidationReport(valid=True, dataset_format=formats.pop(), nlines=lines, dataset_has_tools=has_tools)


def _row_format(row: dict[str, Json]) -> tuple[str, str | None]:
    if "messages" in row:
        messages = row["messages"]
        if not isinstance(messages, list) or not messages:
            return "", "messages must be a non-empty array"
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                return "", f"messages[{i}] must be an object with a string role"
        if "tools" in row and not isinstance(row["tools"], list):
            return "", "tools must be an array"
        return "CONVERSATION", None
    if "prompt" in row and "completion" in row:
        return "INSTRUCTION", None
    if isinstance(row.get("text"), str):
        return "GENERAL", None
    return "", "a row needs messages, prompt and completion, or text"


def _invalid(message: str) -> ValidationReport:
    return ValidationReport(valid=False, error_type="INVALID_FORMAT", error=message)


def get(tenant: Tenant, file_id: str) -> File:
    return lookup(tenant.files, file_id, "file", "id")


def list_(tenant: Tenant) -> list[File]:
    return list(reversed(tenant.files.ordered()))


def content(tenant: Tenant, file_id: str) -> BinaryIO:
    """The file's bytes, open for reading (the caller closes it); they stay readable whatever happens next."""
    f = get(tenant, file_id)
    if f.blob is None:
        raise Invalid(f"file {f.id} has not been uploaded", param="id")
    return f.blob.open()  # type: ignore[attr-defined, no-any-return]


def delete(tenant: Tenant, file_id: str) -> File:
    f = get(tenant, file_id)
    tenant.files.remove(f.id)
    return f


def check_calibration(tenant: Tenant, file_id: str, param: str) -> None:
    """A shaping job's calibration file, as documented; a 400 naming the first rule it breaks."""
    f = tenant.files.get(file_id)
    if f is None:
        raise Invalid(f"calibration file {file_id!r} does not exist in this project", param=param)
    if f.purpose not in CALIBRATION_PURPOSES:
        raise Invalid(f"calibration file {f.id} has purpose {f.purpose!r}; upload it with purpose "
                             "'calibration' (or 'fine-tune')", param=param)
    if f.blob is None:
        raise Invalid(f"calibration file {f.id} has not finished uploading", param=param)
    report = f.validation_report or ValidationReport(valid=False)
    if f.processing_status != "COMPLETED" or report.dataset_format != "CONVERSATION":
        why = report.error or (f"its format is {report.dataset_format}" if report.dataset_format
                               else f"its processing_status is {f.processing_status}")
        raise Invalid(f"calibration file {f.id} has not passed validation as a conversation dataset "
                             f"(jsonl rows with messages): {why}", param=param)
    if f.size == 0 or not report.nlines:
        raise Invalid(f"calibration file {f.id} is empty", param=param)
    if f.size > CALIBRATION_MAX_BYTES:
        raise Invalid(f"calibration file {f.id} is {f.size} bytes; at most 64 MiB ({CALIBRATION_MAX_BYTES}) "
                             "is allowed", param=param)
