"""The tcp probe against real listeners on the loopback addresses, and the words shared by the
probes for what went wrong on the network."""

from __future__ import annotations

import errno
import re
import socket

import pytest

from bot.monitors.monitor import MonitorKind, MonitorSpec
from jobs.monitors import probe
from jobs.monitors.probes import reason, split_host_port


def spec(target: str, **fields) -> MonitorSpec:
    return MonitorSpec(name="port", kind=MonitorKind.TCP, target=target, **fields)


def listener(family: int = socket.AF_INET, host: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket(family)
    sock.bind((host, 0))
    sock.listen()
    return sock


def has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


async def test_a_listening_port_is_up_with_the_connect_time():
    with listener() as sock:
        result = await probe.check(spec(f"127.0.0.1:{sock.getsockname()[1]}"))
    assert result.ok
    assert re.fullmatch(r"connected in \d+ ms", result.detail)


@pytest.mark.skipif(not has_ipv6_loopback(), reason="no IPv6 loopback address here")
async def test_an_ipv6_address_is_written_in_brackets():
    with listener(socket.AF_INET6, "::1") as sock:
        result = await probe.check(spec(f"[::1]:{sock.getsockname()[1]}"))
    assert result.ok


async def test_a_closed_port_is_down_as_connection_refused():
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))  # bound, never listening: connecting is refused
        result = await probe.check(spec(f"127.0.0.1:{unused.getsockname()[1]}"))
    assert result.error == "connection refused"
    assert result.latency_ms is not None


async def test_a_name_under_invalid_is_down_as_a_failed_dns_lookup():
    result = await probe.check(spec("db.nosuch.invalid:5432"))
    assert result.error == "DNS lookup failed for db.nosuch.invalid"


async def test_a_target_that_is_not_host_and_port_is_down_saying_so():
    for target in ("localhost", "localhost:http", "localhost:99999", "::1:80", "a:1/path"):
        result = await probe.check(spec(target))
        assert result.error == f"{target!r} is not host:port, as in example.com:443"


def test_host_and_port_are_read_from_the_target():
    assert split_host_port("Example.COM:443") == ("example.com", 443)
    assert split_host_port("[::1]:8080") == ("::1", 8080)
    assert split_host_port("example.com", default_port=443) == ("example.com", 443)


def test_the_network_errors_read_as_a_few_words():
    host = "db.example"
    assert reason(socket.gaierror(socket.EAI_NONAME, "Name unknown"), host) == (
        "DNS lookup failed for db.example"
    )
    assert reason(ConnectionRefusedError(errno.ECONNREFUSED, "refused"), host) == (
        "connection refused"
    )
    assert reason(ConnectionResetError(errno.ECONNRESET, "reset"), host) == "connection reset"
    assert reason(OSError(errno.EHOSTUNREACH, "No route to host"), host) == "host unreachable"
    assert reason(OSError(errno.EACCES, "Permission denied"), host) == "permission denied"
    # asyncio's error when every address of a name failed, each in its own way
    both = OSError(
        "Multiple exceptions: [Errno 111] Connect call failed ('::1', 1, 0, 0), "
        "[Errno 111] Connect call failed ('127.0.0.1', 1)"
    )
    assert reason(both, host) == "connection refused"


async def test_a_probe_that_fails_itself_reads_down_and_logs_why(monkeypatch, caplog):
    async def broken(spec):
        raise KeyError("a bug of ours, not the target's fault")

    monkeypatch.setitem(probe.PROBES, MonitorKind.TCP, broken)
    result = await probe.check(spec("127.0.0.1:1"))
    assert result.error == "the check itself failed (the log has why)"
    assert "KeyError" in caplog.text
