"""What a presigned URL does to its tenant, in the domain's terms (the file server, :mod:`emulator.http.files`,
reaches the domain only through here, as every request does through ``emulator.api``): an upload's bytes
kept in their record within the project's quota, a payload read back, a checkpoint's files. Not a handler
module: presigned URLs are no operation of the spec.
"""

from __future__ import annotations

from emulator.domain import checkpoints, files, payloads

check_room = files.check_room                   # refused (429) past the project's upload quota
stored_bytes = files.stored_bytes               # what the project's uploads hold now
keep_payload = payloads.put                     # a payload's bytes, into its record
keep_file = files.upload                        # a Files API file's bytes, into its record
released_message = payloads.released_message    # why a payload's bytes are gone (its operation read them)
checkpoint_files = checkpoints.files            # a checkpoint's files of a variant

__all__ = ["check_room", "checkpoint_files", "keep_file", "keep_payload", "released_message", "stored_bytes"]
