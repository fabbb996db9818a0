"""How schedules read in chat: ``/schedules`` with a button per schedule to turn it on or off
(``sched:<name>:on|off``, signed, bot/chat/callbacks.py), the owner's first and the built-in
ones after (the sweeps that stay on have no switch), and the lines /status adds about them.

A schedule that routes by capability is shown with the agent it resolves to now; when no agent
holds the capability it is flagged, here and in /status, because the clock still enqueues it
and ``scheduled_run`` skips it with a warning (jobs/schedules.py).
"""

from __future__ import annotations

from datetime import tzinfo
from typing import Any

from bot.agents.profiles import AgentProfile, with_tag
from bot.chat.callbacks import MAX_CALLBACK_BYTES, CallbackSigner
from bot.chat.text import Html, html, visible
from bot.timeutil import local_time, short_time
from bot.upkeep.schedules import BUILTIN, CHAT, ScheduleRow

SCHEDULE_KIND = "sched"


def schedules_view(
    signer: CallbackSigner,
    rows: list[ScheduleRow],
    agents: dict[str, AgentProfile],
    zone: tzinfo | None = None,
) -> tuple[str, dict[str, Any] | None]:
    if not rows:
        return "No schedules yet: the clock adds them when it starts.", None
    # The owner's first, then aegis's own, marked as built in (rows come in that order too).
    yours = [row for row in rows if row.source != BUILTIN]
    builtin = [row for row in rows if row.source == BUILTIN]
    lines = (
        [html("<b>Schedules</b>:")]
        if yours
        else [html("<b>Schedules</b>: none of yours yet (/every makes one).")]
    )
    buttons = []
    for group in (yours, builtin):
        if group is builtin and builtin:
            lines += ["", html("<b>Built in</b>:")]
        for row in group:
            lines += schedule_lines(row, agents, zone)
            if _fits(row.name) and not row.always_on:  # no switch for what stays on
                buttons.append(_buttons(signer, row))
    lines.append("\nA change takes effect at the clock's next tick.")
    return Html("\n").join(lines), {"inline_keyboard": buttons} if buttons else None


def _buttons(signer: CallbackSigner, row: ScheduleRow) -> list[dict[str, str]]:
    """Off (or on), run now, and, for a schedule made in chat, delete."""
    choice, verb = ("off", "Turn off") if row.enabled else ("on", "Turn on")
    choices = [(choice, f"{verb} {row.name}"), ("now", "Run now")]
    if row.source == CHAT:
        choices.append(("delete", "Delete"))
    return [
        {"text": label, "callback_data": signer.sign(SCHEDULE_KIND, row.name, choice)}
        for choice, label in choices
    ]


def schedule_lines(
    row: ScheduleRow, agents: dict[str, AgentProfile], zone: tzinfo | None = None
) -> list[str]:
    state = "always on" if row.always_on else "on" if row.enabled else "off"
    head = f"• {row.name} · {row.timing.describe(zone)} · {who_runs(row, agents)} · {state}"
    facts = [f"next {local_time(row.next_run_at, zone)}" if row.enabled else "next: off"]
    facts.append(
        f"last {local_time(row.last_enqueued_at, zone)}" if row.last_enqueued_at else "not run yet"
    )
    if row.skipped:
        facts.append(
            f"skipped {row.skipped} while busy (last {local_time(row.last_skipped_at, zone)})"
        )
    if row.missed:
        facts.append(
            f"missed {row.missed} while aegis was not running, then ran once late (last "
            f"{local_time(row.last_missed_at, zone)})"
        )
    return [head, "   " + " · ".join(facts)]


def who_runs(row: ScheduleRow, agents: dict[str, AgentProfile]) -> str:
    if not row.runs_agent:
        return f"aegis ({row.actor})"
    if row.agent is not None:
        return row.agent
    holder = with_tag(agents, row.capability or "")
    resolved = holder.slug if holder else "nobody holds it: skipped"
    return f"capability {visible(row.capability or '')} → {resolved}"


def status_lines(rows: list[ScheduleRow], agents: dict[str, AgentProfile]) -> list[str]:
    """For /status: capabilities nobody holds (their schedules are skipped) and skip counts."""
    lines = []
    for row in rows:
        if row.enabled and row.capability and with_tag(agents, row.capability) is None:
            lines.append(
                f"warning: {row.name} needs capability {visible(row.capability)} and no agent "
                "holds it, so it is skipped"
            )
    for row in rows:
        if row.skipped:
            lines.append(
                f"{row.name}: skipped {row.skipped} times while its previous run was still "
                f"going (last at {short_time(row.last_skipped_at)})"
            )
    return lines


def _fits(name: str) -> bool:
    # kind, name, the longer choice, the mac and the separators
    return len(f"{SCHEDULE_KIND}:{name}:delete:0123456789".encode()) <= MAX_CALLBACK_BYTES
