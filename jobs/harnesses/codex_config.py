"""The MCP servers a Codex run must not reach: every one its config layers declare but aegis's.

Codex has no flag like Claude Code's --strict-mcp-config: a run aegis starts would also get
each MCP server of the owner's ~/.codex/config.toml (and of a project's .codex/config.toml),
whose tools never pass aegis's gate (one set to approve, or marked read-only, runs at once).
So each of the owner's is switched off for the run (``-c mcp_servers.<name>.enabled=false``,
the highest config layer), and a project that declares its own is refused. A file that cannot
be read, or a server name that cannot be written as a key, is refused: fail closed.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

from bot.errors import HarnessFailed

SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,100}\Z")
SYSTEM_CONFIG = Path("/etc/codex/config.toml")


def foreign_servers_off(workdir: Path, keep: str) -> list[str]:
    """``-c`` overrides that switch off every MCP server of the system's and the owner's config
    ($CODEX_HOME, ~/.codex by default) but ``keep``. A project's .codex/config.toml (in the
    workdir or a folder above it) that declares one refuses the run instead: Codex reads it
    only for a project it trusts, and switching off a server it never loaded leaves one with
    no transport, which stops Codex (seen with 0.171)."""
    home = Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex")
    overrides = []
    for path in dict.fromkeys([SYSTEM_CONFIG, home / "config.toml"]):
        for name in sorted(_servers(path) - {keep}):
            if not SERVER_NAME.match(name):
                raise HarnessFailed(
                    f"{path} declares an MCP server named {name[:60]!r}, which aegis cannot "
                    "switch off for a Codex run (only letters, digits, - and _); rename it"
                )
            overrides += ["-c", f"mcp_servers.{name}.enabled=false"]
    resolved = workdir.resolve()
    for folder in (resolved, *resolved.parents):
        path = folder / ".codex" / "config.toml"
        if _servers(path) - {keep}:
            raise HarnessFailed(
                f"{path} declares MCP servers of its own, which a Codex run could use outside "
                "aegis's gate; remove them from it, or give the agent another workdir"
            )
    return overrides


def _servers(path: Path) -> set[str]:
    """The MCP servers a Codex config file declares (none if there is no such file)."""
    if not path.is_file():
        return set()
    try:
        config = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise HarnessFailed(
            f"Codex would read {path}, which aegis cannot read ({type(exc).__name__}), so it "
            "cannot tell which MCP servers to switch off; refused"
        ) from None
    servers = config.get("mcp_servers")
    return set(servers) if isinstance(servers, dict) else set()
