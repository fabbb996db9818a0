"""``aegis logs [-f] [-n N]``: the end of the log file ``aegis up`` writes in the data dir."""

from __future__ import annotations

import os
import time
from collections import deque

from aegis.runtime import LOG_FILE
from bot.config.settings import Settings

FOLLOW_EVERY = 0.5  # seconds between looks at the file for new lines


def print_logs(settings: Settings, out, *, lines: int = 50, follow: bool = False) -> int:
    path = settings.data_dir / LOG_FILE
    if not path.exists():
        out.write(
            f"No log file at {path.resolve()}: only `aegis up` writes one. The Procfile's "
            "processes log to their process manager (journalctl -u 'aegis*').\n"
        )
        return 1
    with open(path, encoding="utf-8", errors="replace") as file:
        for line in deque(file, maxlen=max(lines, 0)):
            out.write(line)
        out.flush()
        if not follow:
            return 0
        try:
            _follow(path, file, out)
        except KeyboardInterrupt:
            return 0
    return 0


def _follow(path, file, out) -> None:
    """Print what is appended, and carry on into the new file when the log is rotated."""
    inode = os.fstat(file.fileno()).st_ino
    while True:
        line = file.readline()
        if line:
            out.write(line)
            out.flush()
            continue
        time.sleep(FOLLOW_EVERY)
        try:
            rotated = os.stat(path).st_ino != inode
        except FileNotFoundError:
            continue  # between the rename and the new file
        if rotated:
            file.close()
            file = open(path, encoding="utf-8", errors="replace")  # noqa: SIM115
            inode = os.fstat(file.fileno()).st_ino
