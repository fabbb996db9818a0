"""Text as Telegram takes it: its limits, a cut that says it was cut, hidden characters made
visible (a card must show what it asks, including what a terminal would not), and the HTML the
chat is written in.

Every message the outbox sends is Telegram HTML (parse_mode HTML). A view writes ``Html``, the
one type whose tags are meant: ``html()`` fills a template and escapes what it is given, so
what a user or an agent wrote can never become a tag (nor an ``&`` Telegram refuses to parse).
A plain ``str`` handed to the outbox is escaped whole, so a message nobody formatted reads
exactly as it was written.
"""

from __future__ import annotations

import html as _html
import re
import unicodedata
from numbers import Number

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


class Html(str):
    """Telegram HTML whose tags are meant. Adding or joining plain text escapes that text, so
    the result is still safe; any other ``str`` operation gives a plain ``str`` back."""

    __slots__ = ()

    def __add__(self, other: str) -> Html:
        return Html(str.__add__(self, escape(other)))

    def __radd__(self, other: str) -> Html:
        return Html(str.__add__(escape(other), self))

    def join(self, items) -> Html:
        return Html(str.join(self, (escape(item) for item in items)))


def escape(text: str) -> Html:
    """``text`` as HTML: as it is when it is ``Html`` already, else with ``&``, ``<`` and ``>``
    escaped (the three Telegram requires; quotes only matter inside a tag's attribute)."""
    if isinstance(text, Html):
        return text
    return Html(_html.escape(str(text), quote=False))


def html(template: str, *args, **kwargs) -> Html:
    """``template`` (written by us, its tags meant) filled like ``str.format``, every value
    escaped; numbers keep their format specs (``{:,}``)."""
    return Html(template.format(*map(_field, args), **{k: _field(v) for k, v in kwargs.items()}))


def _field(value):
    return value if isinstance(value, Number) else escape(value)


def bold(text: str) -> Html:
    return html("<b>{}</b>", text)


def italic(text: str) -> Html:
    return html("<i>{}</i>", text)


def code(text: str) -> Html:
    """Monospace, for what is typed (a shell command, a tool's name); one tap copies it."""
    return html("<code>{}</code>", text)


def pre(text: str) -> Html:
    """A monospace block, for what a program printed."""
    return html("<pre>{}</pre>", text)


def link(url: str, text: str) -> Html:
    return html('<a href="{}">{}</a>', Html(_html.escape(url, quote=True)), text)


_TAG = re.compile(r"<[^>]*>")


def plain(text: str) -> str:
    """What Telegram shows for the HTML ``text``, without its formatting (a file's contents,
    a caption, a count of characters)."""
    return _html.unescape(_TAG.sub("", text))
