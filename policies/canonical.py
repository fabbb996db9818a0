"""Canonical JSON and the approval hash, fixed by the design.

An approval is bound to ``sha256(canonical_json({"agent": slug, "tool": name, "args": args}))``:
sorted keys, no insignificant whitespace, UTF-8 (not ``\\u`` escapes), and no NaN or infinity,
which have no JSON spelling and would make two different calls hash alike or not at all.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> bytes:
    """Raises ValueError for NaN or infinity, TypeError for what JSON cannot hold."""
    text = json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return text.encode("utf-8")


def approval_hash(agent: str, tool: str, args: Any) -> str:
    document = {"agent": agent, "tool": tool, "args": args}
    return hashlib.sha256(canonical_json(document)).hexdigest()
