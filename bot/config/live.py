"""``aegis.yaml`` as the running system sees it: read again when the file changes, no restart.

Every process holds one :class:`LiveConfig`. ``current()`` looks at the file's size and
modification time at most once a second, and reads it again when they changed. A file that
fails its checks is not used: the last good one stays in force, the problem is logged once
and shown by ``/status`` until the file is fixed. A process that starts while the file is bad
runs on the built-ins alone until it is fixed.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from bot.config.file import Config, load_config
from bot.errors import PolicyConfigError

logger = logging.getLogger(__name__)


class LiveConfig:
    def __init__(self, path: Path | None, *, look_every: float = 1.0) -> None:
        self.path = path
        self.look_every = look_every
        self.problem: str | None = None  # why the file on disk is not the one in force
        self._stamp = self._file_stamp()
        try:
            self._config = load_config(path)
        except PolicyConfigError as exc:
            # The commands refuse to start on a bad file (aegis/cli.py); a process that builds
            # its platform later, when the file has just gone bad, runs on the built-ins alone
            # (fewer agents and tools, never more) until the file is fixed.
            logger.error("aegis.yaml is not used, only the built-ins: %s", exc)
            self._config, self._stamp, self.problem = load_config(None), None, str(exc)
        self._looked_at = time.monotonic()

    def current(self) -> Config:
        moment = time.monotonic()
        if moment - self._looked_at >= self.look_every:
            self._looked_at = moment
            stamp = self._file_stamp()
            if stamp != self._stamp:
                self._reload(stamp)
        return self._config

    def _reload(self, stamp) -> None:
        try:
            config = load_config(self.path)
        except PolicyConfigError as exc:
            if str(exc) != self.problem:
                logger.warning("aegis.yaml changed but is not used: %s", exc)
            self.problem = str(exc)
            return  # the stamp stays old, so the file is read again on the next look
        self._config, self._stamp, self.problem = config, stamp, None
        logger.info(
            "aegis.yaml changed: %d agents, %d schedules", len(config.agents), len(config.schedules)
        )

    def _file_stamp(self) -> tuple[int, int] | None:
        if self.path is None:
            return None
        try:
            status = self.path.stat()
        except OSError:
            return None
        return status.st_mtime_ns, status.st_size
