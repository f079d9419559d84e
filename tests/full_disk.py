"""A disk that fills up on demand, through the journal's FileIO seam: the tests of refused writes and
``python -m bench.refusals`` use the same one."""

from __future__ import annotations

import errno
import os
from typing import Any

from emulator.store.persistence import FileIO


class FullDisk(FileIO):
    """Writes half of what it is given, then fails with ENOSPC, while ``full`` is set."""

    def __init__(self) -> None:
        self.full = False

    def write(self, fd: int, data: Any) -> int:
        if self.full:
            os.write(fd, bytes(data[: len(data) // 2]))
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(fd, data)
