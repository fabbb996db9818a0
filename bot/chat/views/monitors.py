"""How monitors and incidents read in chat: the incident card (``inc:<id>:<choice>``), the
"still down" reminder, ``/monitors`` with its buttons (``mon:<id>:<choice>``) and the answers
to ``/watch``. Each text fits a phone: the first line says what happened, the rest why."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from bot.chat.callbacks import CallbackSigner
from bot.chat.text import Html, bold, clip, visible
from bot.monitors.incident import Incident, IncidentKind, Tap
from bot.monitors.monitor import Monitor, MonitorState
from bot.monitors.process_watch import ProcessWatch
from bot.timeutil import short_time

INCIDENT_KIND = "inc"
MONITOR_KIND = "mon"
RUN_PREFIX = "r"
MONITORS_PER_PAGE = 10  # a page of /monitors, each with its buttons: well within one message
PAGE = "page"  # the id of a page button's callback (mon:page:<n>); a monitor's id is a number
ERROR_CHARS = 300
STATE_MARKS = {
    MonitorState.UP: "🟢 up",
    MonitorState.DOWN: "🔴 down",
    MonitorState.PENDING: "⚪ new",
}


@dataclass(frozen=True)
class Uptime:
    """The share of checks that were up over a day and over a week (None: no checks)."""

    day: float | None
    week: float | None


# The incident card


def incident_card(
    incident: Incident, signer: CallbackSigner, moment: datetime
) -> tuple[str, dict[str, Any] | None]:
    lines = [bold(_headline(incident)), *_body(incident, moment)]
    return Html("\n").join(lines), _incident_buttons(incident, signer, moment)


def _headline(incident: Incident) -> str:
    title = visible(incident.title)
    if incident.closed_at is not None:
        if incident.kind is IncidentKind.WATCHDOG:
            return f"✅ {title}: {incident.close_note}"
        name = title.removesuffix(" is down").removesuffix(" is flapping")
        separator = " " if incident.kind is IncidentKind.DOWN else ": "
        return f"🟢 {name}{separator}{incident.close_note}"
    mark = {IncidentKind.DOWN: "🔴", IncidentKind.FLAPPING: "🟠", IncidentKind.WATCHDOG: "⚠️"}
    return f"{mark[incident.kind]} {title}"


def _body(incident: Incident, moment: datetime) -> list[str]:
    end = incident.closed_at or moment
    span = f"since {short_time(incident.opened_at)}"
    if incident.closed_at is not None:
        span = f"{short_time(incident.opened_at)} to {short_time(end)}"
    lines = [span]
    if incident.detail:
        label = "Last error" if incident.kind is IncidentKind.DOWN else "Found"
        lines.append(f"{label}: {clip(visible(incident.detail), ERROR_CHARS)}")
    if incident.closed_at is None:
        lines.append(_quiet_line(incident, moment))
    return [line for line in lines if line]


def _quiet_line(incident: Incident, moment: datetime) -> str:
    if incident.acked_at is not None:
        who = incident.acked_by_name or "the owner"
        return f"Acknowledged by {who} at {short_time(incident.acked_at)}: no reminders."
    if incident.silenced(moment):
        return f"Silenced until {short_time(incident.silenced_until)}."
    if incident.kind is IncidentKind.FLAPPING:
        return "One card until it is stable for 30 minutes."
    if incident.next_remind_at is not None:
        return f"Next reminder {short_time(incident.next_remind_at)} unless acknowledged."
    return ""


def _incident_buttons(incident: Incident, signer: CallbackSigner, moment: datetime):
    if incident.closed_at is not None:
        return None

    def button(text: str, choice: str) -> dict[str, str]:
        return {"text": text, "callback_data": signer.sign(INCIDENT_KIND, str(incident.id), choice)}

    rows = []
    if incident.acked_at is None:
        rows.append([button("Ack", Tap.ACK)])
        if incident.kind is not IncidentKind.FLAPPING:
            rows[0] += [
                button("Silence 1h", Tap.SILENCE_HOUR),
                button("Silence 1d", Tap.SILENCE_DAY),
            ]
    rows += [[button(f"Run {slug}", f"{RUN_PREFIX}{i}")] for i, slug in enumerate(incident.agents)]
    return {"inline_keyboard": rows} if rows else None


def still_down(incident: Incident, moment: datetime, *, after_restart: bool) -> str:
    lasting = _duration(moment - incident.opened_at)
    head = f"🔴 Still down: {visible(incident.title.removesuffix(' is down'))}, for {lasting}"
    if after_restart:
        head += " (aegis restarted meanwhile)"
    lines = [head]
    if incident.detail:
        lines.append(f"Last error: {clip(visible(incident.detail), ERROR_CHARS)}")
    return "\n".join(lines)


def recovered_note(opened_at: datetime, moment: datetime) -> str:
    return f"recovered after {_duration(moment - opened_at)}"


def _duration(span: timedelta) -> str:
    minutes = max(1, int(span.total_seconds() // 60))
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    return f"{hours // 24} days"


# /monitors


def monitors_view(
    monitors: list[Monitor],
    uptimes: dict[int, Uptime],
    signer: CallbackSigner,
    moment: datetime,
    processes: Sequence[ProcessWatch] = (),
    page: int = 0,
) -> tuple[str, dict[str, Any] | None]:
    """Page ``page`` (from 0) of the monitors, each with its buttons, and the pages around it;
    the processes watched for runs come under the first page."""
    if not monitors and not processes:
        return (
            "Nothing is watched yet. Try /watch https://example.org every 1m, or declare "
            "monitors: in aegis.yaml.",
            None,
        )
    pages = max(1, -(-len(monitors) // MONITORS_PER_PAGE))
    page = min(max(page, 0), pages - 1)
    shown = monitors[page * MONITORS_PER_PAGE : (page + 1) * MONITORS_PER_PAGE]
    lines = [bold(f"Monitors ({len(monitors)}):")] if monitors else []
    rows = []
    for monitor in shown:
        lines += monitor_lines(monitor, uptimes.get(monitor.id), moment)
        rows.append(_monitor_buttons(monitor, signer))
    if pages > 1:
        lines.append(f"\nPage {page + 1} of {pages}.")
        rows += _pager(signer, page, pages)
    if processes and page == 0:
        lines.append(f"\nProcesses watched for runs ({len(processes)}):")
        for watch in processes:
            lines += process_lines(watch)
    return Html("\n").join(lines), {"inline_keyboard": rows} if rows else None


def _pager(signer: CallbackSigner, page: int, pages: int) -> list[list[dict[str, str]]]:
    def button(text: str, to: int) -> dict[str, str]:
        return {"text": text, "callback_data": signer.sign(MONITOR_KIND, PAGE, str(to))}

    row = [button("‹ Previous", page - 1)] if page > 0 else []
    row += [button("Next ›", page + 1)] if page + 1 < pages else []
    return [row]


def process_lines(watch: ProcessWatch) -> list[str]:
    """A process an agent's run waits on: whose, until when, what it last showed."""
    head = f"{visible(watch.name)} · run #{watch.run_id} ({visible(watch.agent)})"
    facts = [
        f"every {_duration_short(watch.spec.every_seconds)}",
        f"until {short_time(watch.deadline_at)}",
        f"{watch.checks} looks",
    ]
    lines = [head, "   " + " · ".join(facts)]
    if watch.progress:
        lines.append(f"   last: {clip(visible(watch.progress), 120)}")
    lines.append(f"   /cancel {watch.run_id} stops the run and the watch.")
    return lines


def monitor_lines(monitor: Monitor, uptime: Uptime | None, moment: datetime) -> list[str]:
    spec = monitor.spec
    state = "⏸ paused" if monitor.paused else STATE_MARKS[monitor.state]
    if monitor.is_stale(moment):
        state += " · ⚠️ stale"
    head = f"#{monitor.id} {visible(monitor.name)} · {state}"
    facts = [f"every {_duration_short(spec.interval_seconds)}"]
    if monitor.last_check_at is not None:
        facts.append(f"checked {short_time(monitor.last_check_at)}")
        if monitor.last_latency_ms is not None:
            facts.append(f"{monitor.last_latency_ms:.0f} ms")
    else:
        facts.append("not checked yet")
    if uptime is not None:
        facts.append(f"24h {_percent(uptime.day)} · 7d {_percent(uptime.week)}")
    lines = [head, f"   {clip(visible(spec.what()), 80)}", "   " + " · ".join(facts)]
    if monitor.last_ok is False and monitor.last_error:
        lines.append(f"   last error: {clip(visible(monitor.last_error), 120)}")
    return lines


def _monitor_buttons(monitor: Monitor, signer: CallbackSigner) -> list[dict[str, str]]:
    def button(text: str, choice: str) -> dict[str, str]:
        return {"text": text, "callback_data": signer.sign(MONITOR_KIND, str(monitor.id), choice)}

    pause = (
        button(f"Resume #{monitor.id}", "resume")
        if monitor.paused
        else button(f"Pause #{monitor.id}", "pause")
    )
    return [
        button(f"Check #{monitor.id}", "check"),
        pause,
        button(f"Remove #{monitor.id}", "remove"),
    ]


def _percent(share: float | None) -> str:
    if share is None:
        return "–"
    return "100%" if share >= 1 else f"{share * 100:.2f}%"


def _duration_short(seconds: int) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def watching(monitor: Monitor) -> str:
    """The answer to a /watch that added a monitor."""
    spec = monitor.spec
    return (
        f"Watching {visible(spec.what())} as #{monitor.id} {visible(spec.name)}: every "
        f"{_duration_short(spec.interval_seconds)}, down after {spec.fail_after} failed checks, "
        f"up again after {spec.recover_after}. /monitors lists what is watched."
    )


def already_watched(monitor: Monitor) -> str:
    return (
        f"Already watched as #{monitor.id} {visible(monitor.name)} "
        f"({visible(monitor.spec.what())}). /monitors shows how it is doing."
    )
