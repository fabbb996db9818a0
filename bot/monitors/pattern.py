r"""The regular expression an http monitor's body must match (``body_matches``): refused when it
is declared if it is invalid, too long or catastrophic, and searched with a hard time limit.

Catastrophic means a repeat inside a repeat, like ``(a+)+$`` or ``(\w+\s?)*$``: on a body
that almost matches, a backtracking engine tries every way of sharing the text between the two
and takes exponential time. The check walks the parse tree, so it is deterministic (no timing).
It is conservative: ``(\w+\.)+`` is safe yet refused, and the message says how to write it
(a possessive ``\w++`` or an atomic ``(?>\w+)`` inner repeat, which never gives back).

Overlapping alternatives, like ``(a|aa)+$``, are allowed: telling them apart would mean
comparing what each branch can match, which a parse-tree walk cannot do soundly. The time limit
of ``matches`` is what bounds those (and anything else the walk lets through).

The tree comes from the standard library's parser; the search is done by the ``regex`` package
(its default syntax is the standard one), which can stop a search at a time limit.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import regex

from bot.errors import MonitorRefused

try:
    from re import _parser as sre_parse  # 3.11+; the parser is private, its old name deprecated
except ImportError:  # pragma: no cover
    import sre_parse

FIELD = "body_matches"
MAX_LENGTH = 500
# A repeat that may match more than this many times is as good as unbounded for backtracking.
WIDE = 100
_BACKTRACKING = (sre_parse.MAX_REPEAT, sre_parse.MIN_REPEAT)
# What matched inside these is never given back, so a repeat in them cannot be shared out again.
_SEALED = tuple(
    getattr(sre_parse, name)
    for name in ("ATOMIC_GROUP", "POSSESSIVE_REPEAT", "ASSERT", "ASSERT_NOT")
    if hasattr(sre_parse, name)
)


def compile_pattern(text: str) -> regex.Pattern:
    """``text`` compiled for ``matches``; MonitorRefused says what is wrong with it."""
    if len(text) > MAX_LENGTH:
        raise MonitorRefused(FIELD, f"{len(text)} characters, over the {MAX_LENGTH} allowed")
    try:
        tree = sre_parse.parse(text)
        compiled = regex.compile(text)
    except (sre_parse.error, regex.error) as exc:
        raise MonitorRefused(FIELD, f"not a valid regular expression: {exc}") from None
    if _nested_repeat(tree):
        raise MonitorRefused(
            FIELD,
            "a repeat inside a repeat, like (a+)+, can take forever on some bodies; "
            "make the inner one possessive (a++) or atomic ((?>a+))",
        )
    return compiled


def matches(compiled: regex.Pattern, text: str, *, timeout: float = 0.1) -> bool:
    """Whether ``compiled`` is found in ``text``; TimeoutError after ``timeout`` seconds."""
    # concurrent: the search lets go of the GIL, so it can run in a thread beside the loop.
    return compiled.search(text, timeout=timeout, concurrent=True) is not None


def _nested_repeat(tree: Any) -> bool:
    """Whether some repeat of more than one holds another, one of the two wide."""
    for op, av in tree:
        if op in _BACKTRACKING and av[1] > 1:
            inner = [most for most in _repeats_in(av[2]) if most > 1]
            if inner and (av[1] > WIDE or max(inner) > WIDE):
                return True
        if any(_nested_repeat(sub) for sub in _subpatterns(av)):
            return True
    return False


def _repeats_in(tree: Any) -> Iterator[int]:
    """The most times each backtracking repeat in ``tree`` may match, sealed parts left out."""
    for op, av in tree:
        if op in _SEALED:
            continue
        if op in _BACKTRACKING:
            yield av[1]
        for sub in _subpatterns(av):
            yield from _repeats_in(sub)


def _subpatterns(av: Any) -> Iterator[Any]:
    """The parts of a node's arguments that are patterns themselves: a group's body, a branch's
    alternatives, a repeat's body, a conditional's two arms."""
    if isinstance(av, sre_parse.SubPattern):
        yield av
    elif isinstance(av, tuple | list):
        for item in av:
            yield from _subpatterns(item)
