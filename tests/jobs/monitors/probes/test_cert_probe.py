"""The cert probe against TLS servers on 127.0.0.1 with certificates made here: a local CA and
leaves for chosen names and expiries. The CA is trusted through ``probe.set_ssl_context``."""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import ssl
from datetime import UTC, datetime, timedelta

import pytest

from bot.monitors.monitor import MonitorKind, MonitorSpec
from jobs.monitors import probe
from tests.helpers.tls import Issued, make_ca, make_leaf


def spec(target: str, **fields) -> MonitorSpec:
    return MonitorSpec(name="cert", kind=MonitorKind.CERT, target=target, **fields)


def in_days(days: float) -> datetime:
    return datetime.now(UTC) + timedelta(days=days)


@pytest.fixture(scope="module")
def ca() -> Issued:
    return make_ca()


@pytest.fixture
def trust_ca(ca):
    probe.set_ssl_context(ssl.create_default_context(cadata=ca.pem().decode()))
    yield
    probe.set_ssl_context(None)


@contextlib.asynccontextmanager
async def tls_server(leaf: Issued, directory):
    """A TLS server on 127.0.0.1 showing ``leaf``; yields its port."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*leaf.files(directory))

    async def handle(reader, writer):
        with contextlib.suppress(OSError):
            await reader.read()  # until the probe hangs up
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()


# Half a day past the whole number, so the count cannot slip by one during the test.
async def test_a_valid_certificate_far_from_expiry_is_up_with_the_days_left(ca, trust_ca, tmp_path):
    leaf = make_leaf(ca, ["localhost", "127.0.0.1"], in_days(400.5))
    async with tls_server(leaf, tmp_path) as port:
        by_address = await probe.check(spec(f"127.0.0.1:{port}"))
        by_name = await probe.check(spec(f"localhost:{port}"))
    assert by_address.ok and by_name.ok
    assert by_address.detail == "400 days left"
    assert by_address.latency_ms > 0


async def test_a_certificate_near_expiry_is_down_naming_the_days_and_the_date(
    ca, trust_ca, tmp_path
):
    leaf = make_leaf(ca, ["127.0.0.1"], in_days(9.5))
    async with tls_server(leaf, tmp_path) as port:
        warned = await probe.check(spec(f"127.0.0.1:{port}", warn_days=14))
        quiet = await probe.check(spec(f"127.0.0.1:{port}", warn_days=7))
    day = leaf.cert.not_valid_after_utc.date().isoformat()
    assert warned.error == f"certificate expires in 9 days ({day})"
    assert quiet.detail == "9 days left"


async def test_a_certificate_for_another_name_is_down(ca, trust_ca, tmp_path):
    leaf = make_leaf(ca, ["other.example"], in_days(90))
    async with tls_server(leaf, tmp_path) as port:
        by_address = await probe.check(spec(f"127.0.0.1:{port}"))
        by_name = await probe.check(spec(f"localhost:{port}"))
    assert by_address.error == (
        "TLS: certificate verify failed: IP address mismatch, "
        "certificate is not valid for '127.0.0.1'"
    )
    assert by_name.error == (
        "TLS: certificate verify failed: hostname mismatch, "
        "certificate is not valid for 'localhost'"
    )


async def test_a_certificate_from_an_untrusted_ca_is_down(ca, tmp_path):
    leaf = make_leaf(ca, ["127.0.0.1"], in_days(90))
    async with tls_server(leaf, tmp_path) as port:
        result = await probe.check(spec(f"127.0.0.1:{port}"))  # the system's roots only
    assert result.error == "TLS: certificate verify failed: unable to get local issuer certificate"


async def test_an_expired_certificate_is_down_as_verification_says(ca, trust_ca, tmp_path):
    leaf = make_leaf(ca, ["127.0.0.1"], in_days(-2))
    async with tls_server(leaf, tmp_path) as port:
        result = await probe.check(spec(f"127.0.0.1:{port}"))
    assert result.error == "TLS: certificate verify failed: certificate has expired"


async def test_a_server_that_does_not_speak_tls_is_down(trust_ca):
    async def plain(reader, writer):
        writer.write(b"HTTP/1.1 400 Bad Request\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(plain, "127.0.0.1", 0)
    async with server:
        result = await probe.check(spec(f"127.0.0.1:{server.sockets[0].getsockname()[1]}"))
    assert re.fullmatch(r"TLS: [a-z ]+", result.error)  # OpenSSL's words: wrong version number


async def test_no_listener_and_no_name_are_down_with_the_network_reason():
    assert (await probe.check(spec("nosuch.invalid:443"))).error == (
        "DNS lookup failed for nosuch.invalid"
    )
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))  # bound, never listening: connecting is refused
        result = await probe.check(spec(f"127.0.0.1:{unused.getsockname()[1]}"))
    assert result.error == "connection refused"


async def test_a_context_that_does_not_verify_is_down_not_up(ca, tmp_path):
    blind = ssl.create_default_context()
    blind.check_hostname = False
    blind.verify_mode = ssl.CERT_NONE
    probe.set_ssl_context(blind)
    try:
        leaf = make_leaf(ca, ["127.0.0.1"], in_days(90))
        async with tls_server(leaf, tmp_path) as port:
            result = await probe.check(spec(f"127.0.0.1:{port}"))
    finally:
        probe.set_ssl_context(None)
    assert result.error == "TLS: the certificate was not verified, so its expiry is unknown"
