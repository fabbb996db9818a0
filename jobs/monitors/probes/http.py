"""The http probe: GET an http or https URL, following up to MAX_REDIRECTS redirects, and judge
the status, the body (at most BODY_CAP bytes of it are read, however long it is) and the time it
took, headers and body read.

One aiohttp session per event loop holds the pool of connections (made inside the loop, closed
by ``close()``). It keeps no cookies, so one monitor's never reach another's target, and its
only limit in time is the probe's ceiling (jobs/monitors/probe.py).
"""

from __future__ import annotations

import asyncio
import functools
import socket
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp

from bot.errors import MonitorRefused
from bot.monitors.monitor import CheckResult, MonitorSpec
from bot.monitors.pattern import compile_pattern, matches
from jobs.monitors.probes import PerLoop, clip, elapsed_ms, never_resolves, reason, ssl_context

MAX_REDIRECTS = 5
BODY_CAP = 1024 * 1024
REGEX_SECONDS = 0.1
USER_AGENT = "aegis-monitor"
# A redirect to ftp:, mailto: … or to no URL at all has an error of its own from aiohttp 3.10 on.
_BAD_REDIRECT = getattr(aiohttp, "RedirectClientError", ())


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes  # at most BODY_CAP bytes
    cut: bool  # there was more than BODY_CAP


class _Resolver(aiohttp.ThreadedResolver):
    """The system's resolver, except that a name under .invalid fails without a query."""

    async def resolve(self, host: str, port: int = 0, family: int = socket.AF_INET) -> list:
        if never_resolves(host):
            raise socket.gaierror(socket.EAI_NONAME, f"{host} never resolves (RFC 6761)")
        return await super().resolve(host, port, family)


def _new_session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        # limit=0: no cap of the connector's own; jobs/monitors/probe.py bounds how many run at once
        connector=aiohttp.TCPConnector(limit=0, resolver=_Resolver()),
        cookie_jar=aiohttp.DummyCookieJar(),
        headers={"User-Agent": USER_AGENT},
        timeout=aiohttp.ClientTimeout(total=None),
    )


_sessions = PerLoop(_new_session)


async def close() -> None:
    """Close this loop's session and its pooled connections; the next check opens a new one."""
    session = _sessions.pop()
    if session is not None:
        await session.close()


async def check(spec: MonitorSpec) -> CheckResult:
    host = _http_host(spec.target)
    if host is None:
        return CheckResult.down("only http and https URLs")
    started = time.perf_counter()
    try:
        answer = await _fetch(spec.target)
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        return CheckResult.down(_reason(exc, host), elapsed_ms(started))
    latency = elapsed_ms(started)
    problem = await _problem(spec, answer, latency)
    if problem is not None:
        return CheckResult.down(problem, latency)
    return CheckResult(True, latency, detail=f"{answer.status} in {latency:.0f} ms")


@functools.lru_cache(maxsize=1024)  # a target is checked every interval: read it once
def _http_host(target: str) -> str | None:
    """The host of an http or https URL; None for anything else."""
    try:
        url = urlsplit(target)
        return url.hostname if url.scheme.lower() in ("http", "https") else None
    except ValueError:  # "Invalid IPv6 URL"
        return None


async def _fetch(url: str) -> Answer:
    session = _sessions.get()
    # aiohttp's max_redirects counts the redirect it refuses to follow: one more lets 5 through.
    request = session.get(url, max_redirects=MAX_REDIRECTS + 1, ssl=ssl_context())
    async with request as response:
        body, cut = await _read_capped(response.content)
        # Leaving the block with the body unread closes the connection instead of pooling it.
        return Answer(response.status, body, cut)


async def _read_capped(content: aiohttp.StreamReader) -> tuple[bytes, bool]:
    """At most BODY_CAP bytes of the body, and whether there was more. aiohttp stops reading
    the socket while its buffer is full, so what is not asked for is never in memory."""
    body = bytearray()
    while chunk := await content.read(BODY_CAP + 1 - len(body)):
        body += chunk
        if len(body) > BODY_CAP:
            del body[BODY_CAP:]
            return bytes(body), True
    return bytes(body), False


async def _problem(spec: MonitorSpec, answer: Answer, latency: float) -> str | None:
    """Why the answer does not count as up, if it does not: its status, its body, its time."""
    return (
        _status_problem(spec, answer.status)
        or await _body_problem(spec, answer)
        or _latency_problem(spec, latency)
    )


def _status_problem(spec: MonitorSpec, status: int) -> str | None:
    if spec.expect_status:
        if status in spec.expect_status:
            return None
        expected = " or ".join(str(code) for code in spec.expect_status)
    elif 200 <= status <= 399:
        return None
    else:
        expected = "200–399"
    return f"status {status}, expected {expected}"


def _latency_problem(spec: MonitorSpec, latency: float) -> str | None:
    if spec.max_latency_ms is None or latency <= spec.max_latency_ms:
        return None
    return f"answered in {latency:.0f} ms, over the {spec.max_latency_ms} ms bound"


async def _body_problem(spec: MonitorSpec, answer: Answer) -> str | None:
    if spec.body_contains is None and spec.body_matches is None:
        return None
    text = answer.body.decode("utf-8", errors="replace")
    if spec.body_contains is not None and spec.body_contains not in text:
        return _not_found(f"'{clip(spec.body_contains, 60)}' not found", answer.cut)
    if spec.body_matches is not None:
        return await _regex_problem(spec.body_matches, text, answer.cut)
    return None


async def _regex_problem(pattern: str, text: str, cut: bool) -> str | None:
    try:
        compiled = _pattern(pattern)
        # In a thread: a search may take up to REGEX_SECONDS, too long to hold the loop up.
        found = await asyncio.to_thread(matches, compiled, text, timeout=REGEX_SECONDS)
    except MonitorRefused as exc:
        return str(exc)
    except TimeoutError:
        return "body regex ran past its time limit"
    return None if found else _not_found(f"/{clip(pattern, 60)}/ not matched", cut)


# A pattern is read once per worker, not once per check; a refused one is not kept.
_pattern = functools.lru_cache(maxsize=256)(compile_pattern)


def _not_found(what: str, cut: bool) -> str:
    if cut:
        return f"body over {BODY_CAP // (1024 * 1024)} MiB read; {what} in what was read"
    return f"{what} in the body"


def _reason(exc: Exception, host: str) -> str:
    """What went wrong, in words: aiohttp's errors unwrapped to the network's where they can be."""
    if isinstance(exc, aiohttp.TooManyRedirects):
        return f"redirect loop or more than {MAX_REDIRECTS} redirects"
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return reason(exc.certificate_error, exc.host)
    if isinstance(exc, aiohttp.ClientConnectorError):
        return reason(exc.os_error, exc.host)
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the server closed the connection without an answer"
    if isinstance(exc, aiohttp.ClientPayloadError):
        return "the body was cut short"
    if isinstance(exc, _BAD_REDIRECT):
        return f"redirected to a URL that is not http or https: {clip(str(exc), 100)}"
    if isinstance(exc, aiohttp.InvalidURL):
        return f"not a valid http(s) URL: {clip(str(exc.url), 100)}"  # the target's or a redirect's
    if isinstance(exc, aiohttp.ClientResponseError):
        return f"not a valid HTTP answer: {clip(exc.message or type(exc).__name__)}"
    return reason(exc, host)
