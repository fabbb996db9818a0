"""Text as Telegram takes it: its limits, a cut that says it was cut, and hidden characters
made visible (a card must show what it asks, including what a terminal would not)."""

from __future__ import annotations

import unicodedata

MESSAGE_LIMIT = 4096  # characters of one message (Bot API sendMessage)
CAPTION_LIMIT = 1024  # characters of a document's caption (Bot API sendDocument)
# Control, format, separator, private-use, surrogate and unassigned code points
HIDDEN_CATEGORIES = ("Cc", "Cf", "Zl", "Zp", "Co", "Cs", "Cn")


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, an ellipsis saying it was cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def visible(text: str) -> str:
    """``text`` with every hidden character spelled as an escape, newlines and tabs kept."""
    return "".join(
        f"\\u{ord(char):04x}"
        if char not in "\n\t" and unicodedata.category(char) in HIDDEN_CATEGORIES
        else char
        for char in text
    )
