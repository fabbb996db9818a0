"""The probes, one module per kind of monitor (``http``, ``tcp``, ``cert``, ``cmd``), each an
``async def check(spec) -> CheckResult``; jobs/monitors/probe.py is the interface that picks one and
bounds it in time and in number.

Shared here: the TLS context the probes trust, the words for what went wrong on the network, a
``host:port`` target read, and one object per event loop (asyncio objects belong to the loop
they were made in).
"""

from __future__ import annotations

import asyncio
import errno
import functools
import re
import socket
import ssl
import time
from collections.abc import Callable
from typing import Generic, TypeVar
from urllib.parse import urlsplit

T = TypeVar("T")

SHOWN_CHARS = 200  # of anything a target said, in a reason

_ERRNO_WORDS = {
    errno.ECONNREFUSED: "connection refused",
    errno.ECONNRESET: "connection reset",
    errno.ECONNABORTED: "connection aborted",
    errno.EHOSTUNREACH: "host unreachable",
    errno.ENETUNREACH: "network unreachable",
    errno.ETIMEDOUT: "connection timed out",
    errno.EPIPE: "connection closed while sending",
}
_injected_context: ssl.SSLContext | None = None


def set_ssl_context(context: ssl.SSLContext | None) -> None:
    """Make the http and cert probes trust what ``context`` trusts (tests and benchmarks pass
    one with their local CA); None goes back to the system's trust store."""
    global _injected_context
    _injected_context = context


def ssl_context() -> ssl.SSLContext:
    return _injected_context or _default_context()


@functools.cache
def _default_context() -> ssl.SSLContext:
    return ssl.create_default_context()  # reads the system's CA files: once, not per check


def elapsed_ms(started: float) -> float:
    """Milliseconds since ``started``, a ``time.perf_counter()`` reading."""
    return (time.perf_counter() - started) * 1000


def never_resolves(host: str) -> bool:
    """Whether ``host`` is under ``.invalid``, which no resolver may answer for (RFC 6761
    §6.4): it fails at once, without a query leaving the machine."""
    return host.rstrip(".").lower().rpartition(".")[2] == "invalid"


def split_host_port(target: str, default_port: int | None = None) -> tuple[str, int]:
    """``host:port`` (``[::1]:port`` for IPv6) as a host and a port; ValueError if it is not."""
    try:
        parts = urlsplit(f"//{target.strip()}")
        port = parts.port if parts.port is not None else default_port
    except ValueError:
        port = None
    if port is None or not parts.hostname or parts.path or parts.query or parts.username:
        raise ValueError(f"{target!r} is not host:port, as in example.com:443")
    return parts.hostname, port


def reason(exc: BaseException, host: str) -> str:
    """What went wrong reaching ``host``, in a few words: its name, the connection, or TLS."""
    if isinstance(exc, socket.gaierror):
        return f"DNS lookup failed for {host}"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"TLS: certificate verify failed: {_sentence_part(exc.verify_message or str(exc))}"
    if isinstance(exc, ssl.SSLError):
        what = getattr(exc, "reason", None) or exc.strerror or str(exc)  # "WRONG_VERSION_NUMBER"
        return f"TLS: {clip(what).lower().replace('_', ' ')}"
    if isinstance(exc, OSError) and (words := _errno_words(exc)):
        return words
    if isinstance(exc, OSError) and exc.strerror:
        return _sentence_part(exc.strerror)
    return clip(str(exc) or type(exc).__name__)


def _errno_words(exc: OSError) -> str | None:
    if exc.errno in _ERRNO_WORDS:
        return _ERRNO_WORDS[exc.errno]
    # A host with several addresses (localhost: ::1 and 127.0.0.1) that all failed differently
    # comes back from asyncio as one OSError("Multiple exceptions: [Errno 111] …") with no errno.
    for number in re.findall(r"\[Errno (\d+)\]", str(exc)):
        if int(number) in _ERRNO_WORDS:
            return _ERRNO_WORDS[int(number)]
    return None


def _sentence_part(text: str) -> str:
    """``Hostname mismatch, … .`` as ``hostname mismatch, …``: a part of our sentence."""
    text = clip(text.strip().rstrip("."))
    if text[1:2].islower():  # "Hostname …", not "IP address …"
        return text[:1].lower() + text[1:]
    return text


def clip(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` on one line and at most ``limit`` characters, an ellipsis where it was cut."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class PerLoop(Generic[T]):
    """One object per running event loop, made inside it on first use; the objects of loops
    that have closed are let go when a new loop asks."""

    def __init__(self, make: Callable[[], T]) -> None:
        self.make = make
        self.objects: dict[asyncio.AbstractEventLoop, T] = {}

    def get(self) -> T:
        loop = asyncio.get_running_loop()
        if loop not in self.objects:
            for closed in [known for known in self.objects if known.is_closed()]:
                del self.objects[closed]
            self.objects[loop] = self.make()
        return self.objects[loop]

    def pop(self) -> T | None:
        """This loop's object, forgotten (the next ``get`` makes a new one), or None."""
        return self.objects.pop(asyncio.get_running_loop(), None)

    def clear(self) -> None:
        self.objects.clear()
