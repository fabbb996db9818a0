"""Monitors declared in words: ``/watch`` in chat, the ``monitors:`` section of ``aegis.yaml``
and an agent's ``monitors.watch`` call all become one ``MonitorSpec`` here, checked field by
field; a refusal names the field and what would be accepted (``MonitorRefused``).

    /watch https://example.org every 1m contains "Welcome" status 200,204 latency 800ms
    /watch tcp db.internal:5432 every 30s
    /watch cert example.org:443 warn 14d
    /watch cmd "systemctl is-active nginx" contains active

    monitors:
      site:
        http: https://example.org   # or tcp: host:port, cert: host[:port], cmd: a command line
        every: 1m                   # 10s at least; 60s when left out
        timeout: 10s                # hard: the check is stopped then, and reads DOWN
        fail_after: 3               # failures in a row before it is DOWN
        recover_after: 2            # successes in a row before it is UP again
        remind_every: 4h            # while DOWN and not acknowledged; 5m at least
        status: [200, 204]          # http: the statuses that count as up (default 200-399)
        contains: Welcome           # http: the body contains this; cmd: the output does
        matches: 'v\\d+\\.\\d+'       # http: the body matches this regular expression
        latency: 800ms              # http: slower than this is DOWN
        warn: 14d                   # cert: fewer days left than this is DOWN
        exit: 0                     # cmd: the exit code that counts as up
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

from bot.errors import MonitorRefused
from bot.monitors import pattern
from bot.monitors.monitor import (
    MAX_INTERVAL,
    MAX_TIMEOUT,
    MIN_INTERVAL,
    MIN_REMIND_EVERY,
    MonitorKind,
    MonitorSpec,
)
from bot.monitors.process_watch import (
    DEFAULT_EVERY,
    MAX_DEADLINE,
    MAX_EVERY,
    MIN_DEADLINE,
    MIN_EVERY,
    ProcessWatchSpec,
)

NAME = re.compile(r"^[\w][\w.:/@-]{0,59}\Z")
DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\Z")
UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}
HOST_PORT = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+)(?::(\d{1,6}))?\Z")
MAX_TEXT = 500
KIND_WORDS = {"tcp": MonitorKind.TCP, "cert": MonitorKind.CERT, "cmd": MonitorKind.CMD}
WATCH_USAGE = (
    "Say what to watch: /watch https://example.org every 1m, /watch tcp host:5432, "
    '/watch cert example.org:443 warn 14d or /watch cmd "systemctl is-active nginx".'
)


# Chat: /watch <target> [option value]...


def parse_watch(text: str) -> MonitorSpec:
    """The spec ``/watch`` describes (its words after the command), checked."""
    try:
        words = shlex.split(text)
    except ValueError:
        raise MonitorRefused("watch", "a quote is not closed") from None
    if not words:
        raise MonitorRefused("watch", WATCH_USAGE)
    kind = KIND_WORDS.get(words[0].lower())
    if kind is not None:
        words = words[1:]
        if not words:
            raise MonitorRefused("target", f"say what {kind} should watch. {WATCH_USAGE}")
    target, options = words[0], words[1:]
    if len(options) % 2:
        raise MonitorRefused(options[-1], "needs a value after it")
    values: dict[str, Any] = dict(zip(options[::2], options[1::2], strict=True))
    return build(kind or MonitorKind.HTTP, target, _chat_options(values))


CHAT_OPTIONS = {
    "every": "every",
    "timeout": "timeout",
    "fail": "fail_after",
    "recover": "recover_after",
    "remind": "remind_every",
    "name": "name",
    "status": "status",
    "contains": "contains",
    "matches": "matches",
    "latency": "latency",
    "warn": "warn",
    "exit": "exit",
}


def _chat_options(values: dict[str, str]) -> dict[str, Any]:
    options = {}
    for word, value in values.items():
        key = CHAT_OPTIONS.get(word.lower())
        if key is None:
            known = ", ".join(CHAT_OPTIONS)
            raise MonitorRefused(word, f"is not an option of /watch (known: {known})")
        options[key] = value.split(",") if key == "status" else value
    return options


# aegis.yaml: monitors: {name: {http|tcp|cert|cmd: target, ...}}

FILE_KEYS = {
    "every",
    "timeout",
    "fail_after",
    "recover_after",
    "remind_every",
    "status",
    "contains",
    "matches",
    "latency",
    "warn",
    "exit",
}


def from_mapping(name: str, values: Any) -> MonitorSpec:
    """One entry of ``monitors:`` (or an agent's arguments), checked."""
    if not isinstance(values, dict):
        raise MonitorRefused(name, "must be a mapping with one of http, tcp, cert or cmd")
    kinds = [kind for kind in MonitorKind if kind.value in values]
    if len(kinds) != 1:
        raise MonitorRefused(name, "give exactly one of http, tcp, cert or cmd (what to watch)")
    unknown = sorted(set(map(str, values)) - FILE_KEYS - {kinds[0].value})
    if unknown:
        known = ", ".join(sorted(FILE_KEYS))
        raise MonitorRefused(unknown[0], f"is not a monitor setting (known: {known})")
    options = {key: value for key, value in values.items() if key in FILE_KEYS}
    return build(kinds[0], _text(kinds[0].value, values[kinds[0].value]), {**options, "name": name})


# Both ways end here: every field checked, in the order a person would fix them.


def build(kind: MonitorKind, target: str, options: dict[str, Any]) -> MonitorSpec:
    target = TARGETS[kind](target.strip())
    interval = _seconds("every", options.get("every", 60), MIN_INTERVAL, MAX_INTERVAL)
    timeout = _seconds("timeout", options.get("timeout", 10), 0.1, MAX_TIMEOUT, whole=False)
    if timeout > interval:
        raise MonitorRefused("timeout", f"must not be longer than the interval ({interval} s)")
    spec = MonitorSpec(
        name=_name(options.get("name"), kind, target),
        kind=kind,
        target=target,
        interval_seconds=int(interval),
        timeout_seconds=timeout,
        fail_after=_count("fail_after", options.get("fail_after", 3), 1, 20),
        recover_after=_count("recover_after", options.get("recover_after", 2), 1, 20),
        remind_every_seconds=int(
            _seconds("remind_every", options.get("remind_every", "4h"), MIN_REMIND_EVERY, None)
        ),
    )
    return _kind_options(spec, options)


def process_watch(options: dict[str, Any]) -> ProcessWatchSpec:
    """An agent's ``monitors.watch_process`` arguments, checked field by field."""
    if "done" not in options:
        raise MonitorRefused("done", "give the command that exits 0 once the process is done")
    done = _command(_text("done", options["done"]), field="done")
    commands = {
        key: _command(_text(key, options[key]), field=key)
        for key in ("fail", "progress")
        if options.get(key) is not None
    }
    every = _seconds("every", options.get("every", DEFAULT_EVERY), MIN_EVERY, MAX_EVERY)
    timeout = _seconds("timeout", options.get("timeout", 10), 0.1, MAX_TIMEOUT, whole=False)
    runs = 1 + len(commands)  # a look runs its commands one after the other
    if timeout * runs > every:
        raise MonitorRefused(
            "timeout",
            f"a look runs {runs} commands of up to {timeout:g} s each, longer than the interval "
            f"({every} s): give a shorter timeout or a longer every",
        )
    if "deadline" not in options:
        raise MonitorRefused("deadline", "say how long to watch at most, such as 30m or 2h")
    deadline = _seconds("deadline", options["deadline"], MIN_DEADLINE, MAX_DEADLINE)
    return ProcessWatchSpec(
        name=_name(options.get("name"), MonitorKind.CMD, done),
        done=done,
        fail=commands.get("fail"),
        progress=commands.get("progress"),
        every_seconds=int(every),
        timeout_seconds=timeout,
        deadline_seconds=int(deadline),
    )


def _kind_options(spec: MonitorSpec, options: dict[str, Any]) -> MonitorSpec:
    allowed = {
        MonitorKind.HTTP: {"status", "contains", "matches", "latency"},
        MonitorKind.TCP: set(),
        MonitorKind.CERT: {"warn"},
        MonitorKind.CMD: {"exit", "contains"},
    }[spec.kind]
    for key in ("status", "contains", "matches", "latency", "warn", "exit"):
        if key in options and key not in allowed:
            raise MonitorRefused(key, f"does not apply to a {spec.kind} monitor")
    changes: dict[str, Any] = {}
    if "status" in options:
        changes["expect_status"] = _statuses(options["status"])
    if "contains" in options:
        field = "body_contains" if spec.kind is MonitorKind.HTTP else "output_contains"
        changes[field] = _bounded_text("contains", options["contains"])
    if "matches" in options:
        text = _bounded_text("matches", options["matches"])
        pattern.compile_pattern(text)  # refuses what is invalid or could run away
        changes["body_matches"] = text
    if "latency" in options:
        changes["max_latency_ms"] = int(
            _seconds("latency", options["latency"], 0.001, 600, whole=False) * 1000
        )
    if "warn" in options:
        changes["warn_days"] = int(
            _seconds("warn", _days(options["warn"]), 0, 365 * 86400) // 86400
        )
    if "exit" in options:
        changes["expect_exit"] = _count("exit", options["exit"], 0, 255)
    return replace(spec, **changes)


def _http_target(text: str) -> str:
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018  (raises on a port out of range)
    except ValueError as exc:
        raise MonitorRefused("url", f"{text!r} is not a URL I can read ({exc})") from None
    if parts.scheme not in ("http", "https"):
        shown = f"{parts.scheme}://" if parts.scheme else "no scheme"
        raise MonitorRefused("url", f"only http:// and https:// URLs can be watched, not {shown}")
    if not parts.hostname:
        raise MonitorRefused("url", f"{text!r} has no host name")
    if any(ch.isspace() or ord(ch) < 32 for ch in text) or len(text) > 2000:
        raise MonitorRefused("url", "a URL has no spaces and at most 2000 characters")
    return text


def _host_port(default_port: int | None) -> Callable[[str], str]:
    def check(text: str) -> str:
        match = HOST_PORT.match(text)
        if match is None:
            raise MonitorRefused("address", f"{text!r} is not host:port")
        host, port = match.group(1), match.group(2)
        if port is None and default_port is None:
            raise MonitorRefused("port", f"say which port of {host} to connect to: {host}:PORT")
        number = int(port) if port is not None else default_port
        if not 1 <= number <= 65535:
            raise MonitorRefused("port", f"{number} is out of range (1-65535)")
        return f"{host}:{number}"

    return check


def _command(text: str, *, field: str = "command") -> str:
    try:
        words = shlex.split(text)
    except ValueError:
        raise MonitorRefused(field, "a quote is not closed") from None
    if not words or len(text) > 1000:
        raise MonitorRefused(field, "give the command line in quotes (at most 1000 characters)")
    return text


TARGETS: dict[MonitorKind, Callable[[str], str]] = {
    MonitorKind.HTTP: _http_target,
    MonitorKind.TCP: _host_port(None),
    MonitorKind.CERT: _host_port(443),
    MonitorKind.CMD: _command,
}


def _name(given: Any, kind: MonitorKind, target: str) -> str:
    if given is None:
        return default_name(kind, target)
    name = _text("name", given).strip()
    if not NAME.match(name):
        raise MonitorRefused("name", "1-60 letters, digits and . : / @ - _ , starting with one")
    return name


def default_name(kind: MonitorKind, target: str) -> str:
    """A name from what is watched: the URL's host and path, the address, the program."""
    if kind is MonitorKind.HTTP:
        parts = urlsplit(target)
        port = f":{parts.port}" if parts.port else ""
        base = (parts.hostname or "site") + port + parts.path.rstrip("/")
    elif kind is MonitorKind.CMD:
        base = shlex.split(target)[0].rsplit("/", 1)[-1]
    else:
        base = target
    base = re.sub(r"[^\w.:/@-]", "-", base).strip("-") or kind.value
    return (f"cert-{base}" if kind is MonitorKind.CERT else base)[:60]


def _seconds(field: str, value: Any, minimum: float, maximum: float | None, *, whole=True):
    if isinstance(value, bool):
        raise MonitorRefused(field, "must be a duration such as 30s, 5m, 4h or 1d")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = DURATION.match(str(value).strip().lower())
        if match is None:
            raise MonitorRefused(field, f"{value!r} is not a duration (write 30s, 5m, 4h or 1d)")
        seconds = float(match.group(1)) * UNIT_SECONDS[match.group(2)]
    if seconds < minimum:
        raise MonitorRefused(field, f"must be at least {_shown(minimum)}")
    if maximum is not None and seconds > maximum:
        raise MonitorRefused(field, f"must be at most {_shown(maximum)}")
    return int(seconds) if whole else seconds


def _shown(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def _days(value: Any) -> Any:
    """``warn 14`` means days; ``warn 14d`` too."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value * 86400
    text = str(value).strip().lower()
    return f"{text}d" if text.isdigit() else text


def _count(field: str, value: Any, low: int, high: int) -> int:
    try:
        number = int(str(value).strip()) if not isinstance(value, bool) else None
    except ValueError:
        number = None
    if number is None or not low <= number <= high:
        raise MonitorRefused(field, f"must be a whole number from {low} to {high}")
    return number


def _statuses(value: Any) -> tuple[int, ...]:
    items = value if isinstance(value, list | tuple) else [value]
    statuses = tuple(_count("status", item, 100, 599) for item in items if str(item).strip())
    if not statuses:
        raise MonitorRefused("status", "give at least one HTTP status, such as 200 or 200,204")
    return statuses


def _bounded_text(field: str, value: Any) -> str:
    text = _text(field, value)
    if not text or len(text) > MAX_TEXT:
        raise MonitorRefused(field, f"must be 1 to {MAX_TEXT} characters")
    return text


def _text(field: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise MonitorRefused(field, "must be text")
    return str(value)
