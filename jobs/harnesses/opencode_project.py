"""A project's own OpenCode configuration must not widen what OpenCode's built-in tools may do.

aegis gives OpenCode a configuration that denies its mutating built-ins (harnesses/cli_specs.py),
but OpenCode merges configs key by key and a project's file is read after the one aegis points
it at. So before an OpenCode run, every config it would read from the working directory up to
the project's git root is looked at, and a run whose project sets permissions, tools, agents,
modes or plugins is refused, with the file named.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from bot.errors import HarnessFailed

# What a project config may not set (they could widen the rules above), and where OpenCode looks
# for one: opencode.json(c) in the working directory and each directory up to the nearest git
# root, and the same in .opencode/ directories, which also hold agents, plugins and tools.
OPENCODE_WIDENING_KEYS = ("permission", "tools", "agent", "mode", "default_agent", "plugin")
OPENCODE_CONFIG_NAMES = ("opencode.json", "opencode.jsonc")
OPENCODE_WIDENING_DIRS = ("agent", "agents", "mode", "modes", "plugin", "plugins", "tool", "tools")


def refuse_widening_config(workdir: Path) -> None:
    """HarnessFailed if a project config OpenCode would read from ``workdir`` could widen what
    its built-in tools may do; one that cannot be read is refused too (fail closed)."""
    for folder in (workdir.resolve(), *workdir.resolve().parents):
        for base in (folder, folder / ".opencode"):
            for name in OPENCODE_CONFIG_NAMES:
                path = base / name
                if not path.is_file():
                    continue
                try:
                    config = json.loads(_strip_jsonc(path.read_text(encoding="utf-8")))
                except (OSError, UnicodeDecodeError, ValueError):
                    config = None
                if not isinstance(config, dict):
                    raise HarnessFailed(
                        f"OpenCode would read {path}, which aegis cannot parse, so it cannot "
                        "tell whether it lets OpenCode's own tools write or run commands; "
                        "refused."
                    )
                widening = sorted(key for key in OPENCODE_WIDENING_KEYS if key in config)
                if widening:
                    raise HarnessFailed(
                        f"OpenCode would read {path}, which sets {', '.join(widening)}: that "
                        "could let OpenCode's own tools write files or run commands outside "
                        "aegis's gate; refused (remove those keys from it, or use another "
                        "workdir)."
                    )
        dot = folder / ".opencode"
        found = [name for name in OPENCODE_WIDENING_DIRS if (dot / name).exists()]
        if found:
            raise HarnessFailed(
                f"OpenCode would load {', '.join(found)} from {dot}: that could give it tools "
                "or permissions outside aegis's gate; refused."
            )
        if (folder / ".git").exists():
            return  # OpenCode looks no further up than the project's git root


def _strip_jsonc(text: str) -> str:
    """JSON from JSONC: comments and trailing commas removed, strings left as they are."""
    out: list[str] = []
    index, length = 0, len(text)
    while index < length:
        char = text[index]
        if char == '"':
            end = index + 1
            while end < length and text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            out.append(text[index : end + 1])
            index = end + 1
        elif text.startswith("//", index):
            newline = text.find("\n", index)
            index = length if newline < 0 else newline
        elif text.startswith("/*", index):
            close = text.find("*/", index + 2)
            index = length if close < 0 else close + 2
        else:
            out.append(char)
            index += 1
    return re.sub(r",(\s*[}\]])", r"\1", "".join(out))
