"""``/watch`` and ``monitors:`` in words: what they accept, and each refusal naming its field."""

from __future__ import annotations

import pytest

from bot.config.file import load_config
from bot.errors import MonitorRefused, PolicyConfigError
from bot.monitors.monitor import MonitorKind
from bot.monitors.specs import from_mapping, parse_watch


def test_a_url_with_options_becomes_an_http_monitor():
    spec = parse_watch(
        'https://example.org/health every 1m contains "all good" status 200,204 latency 800ms'
    )
    assert (spec.kind, spec.target, spec.name) == (
        MonitorKind.HTTP,
        "https://example.org/health",
        "example.org/health",
    )
    assert (spec.interval_seconds, spec.expect_status, spec.max_latency_ms) == (60, (200, 204), 800)
    assert spec.body_contains == "all good"
    assert (spec.timeout_seconds, spec.fail_after, spec.recover_after) == (10, 3, 2)
    assert spec.remind_every_seconds == 4 * 3600


def test_a_default_name_keeps_a_port_apart():
    assert parse_watch("http://127.0.0.1:8080/").name == "127.0.0.1:8080"
    assert parse_watch("https://example.org/a/b/").name == "example.org/a/b"


def test_a_password_in_a_url_is_never_shown():
    spec = parse_watch("https://ops:s3cret@example.org/health")
    assert spec.target == "https://ops:s3cret@example.org/health"  # the probe needs it
    assert spec.what() == "https://ops:***@example.org/health"
    assert spec.name == "example.org/health"


def test_tcp_cert_and_cmd_read_as_their_kinds():
    assert parse_watch("tcp db.internal:5432 every 30s").target == "db.internal:5432"
    cert = parse_watch("cert example.org warn 14d")
    assert (cert.kind, cert.target, cert.warn_days) == (MonitorKind.CERT, "example.org:443", 14)
    cmd = parse_watch('cmd "systemctl is-active nginx" contains active')
    assert (cmd.kind, cmd.target, cmd.output_contains) == (
        MonitorKind.CMD,
        "systemctl is-active nginx",
        "active",
    )


@pytest.mark.parametrize(
    ("words", "field"),
    [
        ("https://example.org every 5s", "every"),
        ("https://", "url"),
        ("http://[::1", "url"),
        ("file:///etc/passwd", "url"),
        ("example.org", "url"),
        ("tcp example.org:70000", "port"),
        ("tcp example.org", "port"),
        ('https://example.org matches "(unclosed"', "body_matches"),
        ('https://example.org matches "(a+)+$"', "body_matches"),
        ("https://example.org remind 1m", "remind_every"),
        ("https://example.org timeout 2m every 1m", "timeout"),
        ("https://example.org fail 0", "fail_after"),
        ("https://example.org warn 14d", "warn"),
        ("https://example.org colour blue", "colour"),
        ("cmd", "target"),
        ('cmd "unclosed', "watch"),
    ],
)
def test_bad_input_is_refused_naming_the_field(words, field):
    with pytest.raises(MonitorRefused) as refused:
        parse_watch(words)
    assert refused.value.field == field
    assert refused.value.problem  # a sentence, not a bare flag


def test_a_file_monitor_names_its_place_in_the_file(tmp_path):
    path = tmp_path / "aegis.yaml"
    path.write_text("monitors:\n  site:\n    http: https://example.org\n    every: 3s\n")
    with pytest.raises(PolicyConfigError, match=r"monitors\.site: every: must be at least 10s"):
        load_config(path)
    path.write_text("monitors:\n  site:\n    http: https://example.org\n    every: 2m\n")
    [spec] = load_config(path).monitors
    assert (spec.name, spec.interval_seconds) == ("site", 120)


def test_a_file_monitor_watches_exactly_one_thing():
    with pytest.raises(MonitorRefused, match="exactly one of http, tcp, cert or cmd"):
        from_mapping("both", {"http": "https://a.test", "tcp": "a.test:80"})
