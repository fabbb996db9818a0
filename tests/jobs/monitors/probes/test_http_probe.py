"""The http probe against real servers on 127.0.0.1: aiohttp.web for the well-behaved ones, raw
asyncio servers for the faults (a reset, a stall), a TLS server with a self-signed certificate.
Each failure reads DOWN with its reason in words; nothing here leaves the machine."""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import ssl
import struct
import tracemalloc
from dataclasses import dataclass

import pytest
from aiohttp import web

from bot.monitors.monitor import CheckResult, MonitorKind, MonitorSpec
from jobs.monitors import probe
from tests.helpers.tls import self_signed

BIG_BODY = 50 * 1024 * 1024
CHUNK = b"x" * 65_536
BARRIER = web.AppKey("barrier", asyncio.Barrier)


def spec(url: str, **fields) -> MonitorSpec:
    return MonitorSpec(name="site", kind=MonitorKind.HTTP, target=url, **fields)


@pytest.fixture(autouse=True)
async def _fresh_probes():
    yield
    await probe.close()
    probe.set_ssl_context(None)
    probe.set_concurrency(probe.DEFAULT_CONCURRENCY)


@dataclass
class Seen:
    """What a test server saw."""

    sent: int = 0
    finished: bool = False
    done: asyncio.Event | None = None
    open: int = 0  # connections or requests under way
    peak: int = 0

    def enter(self) -> None:
        self.open += 1
        self.peak = max(self.peak, self.open)


@contextlib.asynccontextmanager
async def web_server(app: web.Application, ssl_context: ssl.SSLContext | None = None):
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"{'https' if ssl_context else 'http'}://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def raw_server(handle):
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()


def site(seen: Seen) -> web.Application:
    async def ok(request):
        return web.Response(text="all systems green")

    async def status(request):
        return web.Response(status=int(request.match_info["code"]), text="status page")

    async def hop(request):
        left = int(request.match_info["left"])
        raise web.HTTPFound("/ok" if left == 0 else f"/hop/{left - 1}")

    async def loop(request):
        raise web.HTTPFound("/loop")

    async def to_ftp(request):
        raise web.HTTPFound("ftp://127.0.0.1/file")

    async def slow(request):
        await asyncio.sleep(0.3)
        return web.Response(text="late but fine")

    async def text(request):
        return web.Response(text=request.query["body"])

    async def big(request):
        return await stream_big(request, seen, request.query.get("first", ""))

    async def barrier(request):
        seen.enter()
        try:
            await request.app[BARRIER].wait()
            return web.Response(text="together")
        finally:
            seen.open -= 1

    app = web.Application()
    app[BARRIER] = asyncio.Barrier(5)
    routes = {"/ok": ok, "/status/{code}": status, "/hop/{left}": hop, "/loop": loop}
    routes |= {"/ftp": to_ftp, "/slow": slow, "/text": text, "/big": big, "/barrier": barrier}
    app.add_routes([web.get(path, handler) for path, handler in routes.items()])
    return app


async def stream_big(request, seen: Seen, first: str) -> web.StreamResponse:
    seen.done = asyncio.Event()
    response = web.StreamResponse()
    response.content_length = BIG_BODY
    await response.prepare(request)
    try:
        await response.write(first.encode())
        while seen.sent < BIG_BODY - len(first):
            await response.write(CHUNK)
            seen.sent += len(CHUNK)
        seen.finished = True
    except ConnectionError:
        pass  # the probe hung up, as it should after its 1 MiB
    finally:
        seen.done.set()
    return response


async def test_an_answering_site_is_up_with_its_status_and_time():
    async with web_server(site(Seen())) as base:
        result = await probe.check(spec(f"{base}/ok", body_contains="green"))
    assert result.ok and result.error is None
    assert re.fullmatch(r"200 in \d+ ms", result.detail)
    assert result.latency_ms > 0


async def test_a_wrong_status_is_down_naming_the_status_and_what_was_expected():
    async with web_server(site(Seen())) as base:
        default = await probe.check(spec(f"{base}/status/503"))
        listed = await probe.check(spec(f"{base}/status/404", expect_status=(200, 204)))
        accepted = await probe.check(spec(f"{base}/status/404", expect_status=(404,)))
    assert default == CheckResult.down("status 503, expected 200–399", default.latency_ms)
    assert listed.error == "status 404, expected 200 or 204"
    assert accepted.ok


async def test_redirects_are_followed_up_to_five_and_a_loop_is_down():
    async with web_server(site(Seen())) as base:
        five = await probe.check(spec(f"{base}/hop/4"))
        six = await probe.check(spec(f"{base}/hop/5"))
        loop = await probe.check(spec(f"{base}/loop"))
        ftp = await probe.check(spec(f"{base}/ftp"))
    assert five.ok
    assert six.error == loop.error == "redirect loop or more than 5 redirects"
    assert ftp.error == "redirected to a URL that is not http or https: ftp://127.0.0.1/file"


async def test_a_body_without_the_text_is_down_naming_the_text():
    async with web_server(site(Seen())) as base:
        result = await probe.check(spec(f"{base}/ok", body_contains="red alert"))
    assert result.error == "'red alert' not found in the body"


async def test_a_body_is_matched_against_the_regex():
    async with web_server(site(Seen())) as base:
        url = f"{base}/text?body=queue+depth:+12"
        matched = await probe.check(spec(url, body_matches=r"depth: \d+"))
        unmatched = await probe.check(spec(url, body_matches=r"depth: 0\b"))
    assert matched.ok
    assert unmatched.error == r"/depth: 0\b/ not matched in the body"


async def test_a_regex_that_runs_past_its_time_limit_is_down():
    # (a|aa)+$ passes the static check (overlapping branches are left to the time limit) but
    # backtracks exponentially on a run of a's that does not end the body.
    async with web_server(site(Seen())) as base:
        url = f"{base}/text?body={'a' * 64}!"
        result = await probe.check(spec(url, body_matches=r"(a|aa)+$"))
    assert result.error == "body regex ran past its time limit"


async def test_a_catastrophic_regex_is_down_with_the_refusal():
    async with web_server(site(Seen())) as base:
        result = await probe.check(spec(f"{base}/ok", body_matches=r"(a+)+$"))
    assert result.error.startswith("body_matches: a repeat inside a repeat")


async def test_an_answer_slower_than_the_bound_is_down_with_both_times():
    async with web_server(site(Seen())) as base:
        slow = await probe.check(spec(f"{base}/slow", max_latency_ms=100))
        roomy = await probe.check(spec(f"{base}/slow", max_latency_ms=60_000))
    assert re.fullmatch(r"answered in \d+ ms, over the 100 ms bound", slow.error)
    assert roomy.ok


async def test_a_50_mb_body_is_read_only_to_1_mib():
    seen = Seen()
    async with web_server(site(seen)) as base:
        tracemalloc.start()
        try:
            found = await probe.check(spec(f"{base}/big?first=hello", body_contains="hello"))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        await asyncio.wait_for(seen.done.wait(), 30)
        missing = await probe.check(spec(f"{base}/big", body_contains="ok"))
        await asyncio.wait_for(seen.done.wait(), 30)
    assert found.ok
    assert missing.error == "body over 1 MiB read; 'ok' not found in what was read"
    assert not seen.finished and seen.sent < BIG_BODY / 2  # the probe hung up early
    assert peak < 8 * 1024 * 1024  # this process (server included) never held the body


async def test_a_name_under_invalid_is_down_as_a_failed_dns_lookup():
    result = await probe.check(spec("http://nosuch.invalid/health"))
    assert result.error == "DNS lookup failed for nosuch.invalid"


async def test_only_http_and_https_urls_are_probed():
    for target in ("ftp://127.0.0.1/", "file:///etc/passwd", "127.0.0.1:80", "http://[::1"):
        assert (await probe.check(spec(target))).error == "only http and https URLs"


async def test_a_closed_port_is_down_as_connection_refused():
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))  # bound, never listening: connecting is refused
        port = unused.getsockname()[1]
        result = await probe.check(spec(f"http://127.0.0.1:{port}/"))
    assert result.error == "connection refused"


async def test_a_connection_reset_is_down_as_such():
    async def reset(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.get_extra_info("socket").setsockopt(
            socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
        )
        writer.transport.abort()  # with a linger of 0: an RST, not a FIN

    async with raw_server(reset) as base:
        result = await probe.check(spec(f"{base}/"))
    assert result.error == "connection reset"


async def stall(seen: Seen):
    """A server that answers with headers and then never sends the body."""

    async def handle(reader, writer):
        seen.enter()
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nthe start")
            await reader.read()  # until the probe hangs up
        finally:
            seen.open -= 1
            writer.close()

    return raw_server(handle)


async def test_headers_then_silence_is_down_at_the_timeout():
    async with await stall(Seen()) as base:
        result = await probe.check(spec(f"{base}/", timeout_seconds=0.5, body_contains="x"))
    assert result.error == "no answer within 0.5 s"
    assert result.latency_ms is not None


async def test_fifty_stalled_probes_are_in_flight_at_once():
    seen = Seen()
    async with await stall(seen) as base:
        results = await asyncio.gather(
            *(probe.check(spec(f"{base}/{n}", timeout_seconds=1.0)) for n in range(50))
        )
    assert {result.error for result in results} == {"no answer within 1 s"}
    assert seen.peak == 50  # all waited out their timeouts side by side, not one after another


async def test_the_concurrency_bound_holds_probes_back():
    probe.set_concurrency(5)
    seen = Seen()
    async with web_server(site(seen)) as base:
        # The server answers requests five at a time (a barrier of 5): more in flight than the
        # bound would show in the peak, fewer would never get past the barrier.
        results = await asyncio.gather(*(probe.check(spec(f"{base}/barrier")) for _ in range(10)))
    assert all(result.ok for result in results)
    assert seen.peak == 5


async def test_https_with_an_untrusted_certificate_is_down_until_it_is_trusted(tmp_path):
    cert_file, key_file = self_signed(tmp_path)
    serving = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    serving.load_cert_chain(cert_file, key_file)
    async with web_server(site(Seen()), serving) as base:
        untrusted = await probe.check(spec(f"{base}/ok"))
        trusting = ssl.create_default_context(cafile=cert_file)
        probe.set_ssl_context(trusting)
        trusted = await probe.check(spec(f"{base}/ok"))
    assert untrusted.error == "TLS: certificate verify failed: self-signed certificate"
    assert trusted.ok
