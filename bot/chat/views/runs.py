"""How runs and agents read in chat: a run's own message (edited in place as it goes),
``/runs``, ``/agents``."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from bot.agents.agent_run import AgentRun, RunState
from bot.agents.profiles import AgentProfile
from bot.chat.text import Html, bold, clip, html, visible
from bot.timeutil import now, short_time


def runs_view(runs: list[AgentRun]) -> str:
    if not runs:
        return "No runs yet. Start one: /run demo hello"
    lines = [bold("Latest runs (newest first):")]
    for run in runs:
        lines.append(run_line(run))
    lines.append("\n/cancel N stops a run.")
    return Html("\n").join(lines)


def run_line(run: AgentRun) -> str:
    status = run.status.value.replace("_", " ")
    where = ""
    if run.task_id is not None:
        where = f" (task {run.task_id})"
    elif run.schedule:
        where = f" (schedule {run.schedule})"
    line = f"#{run.id} {run.agent}{where} · {status} · {short_time(run.created_at)}"
    line += f"\n   {visible(clip(' '.join(run.request.split()), 80))}"
    if run.status.is_over or run.status is RunState.PARKED:
        line += f"\n   changed: {run.effects_text()}"
    if run.status is RunState.PARKED:
        line += f"; waiting for {run.waits_for()}"
    return line


def agents_view(agents: dict[str, AgentProfile], activity: dict[str, dict[str, Any]]) -> str:
    lines = ["Agents:"]
    for slug in sorted(agents):
        agent = agents[slug]
        seen = activity.get(slug, {})
        harness = agent.harness.value if agent.harness else "no harness (gate identity only)"
        head = f"• {slug} — {visible(agent.name)} · {harness}"
        if agent.model:
            head += f" · {visible(agent.model)}"
        if agent.tags:
            head += f" · tags: {', '.join(sorted(agent.tags))}"
        lines.append(head)
        busy = [
            f"{seen[state]} {state.value}"
            for state in (RunState.RUNNING, RunState.QUEUED, RunState.PARKED)
            if seen.get(state)
        ]
        lines.append("   now: " + (", ".join(busy) if busy else "idle"))
        last: AgentRun | None = seen.get("last")
        if last is not None:
            status = last.status.value.replace("_", " ")
            lines.append(f"   last run: #{last.id} {status} at {short_time(last.created_at)}")
    if len(lines) == 1:
        lines.append("none declared")
    return "\n".join(lines)


def progress_text(run: AgentRun, moment: datetime | None = None) -> Html:
    """The run's one message, edited in place as it goes."""
    moment = moment or now()
    head = html("<b>Run #{}</b> · {} · {}", run.id, run.agent, run.status.value.replace("_", " "))
    lines = [head, f"Asked: {_clip(run.request, 300)}"]
    if run.started_at is not None:
        lines.append(f"Elapsed: {_duration(run.elapsed(moment))}")
    if run.step and run.step != run.status.value:
        lines.append(f"Step: {run.step}")
    if run.status.is_over:
        lines.append(f"Changed: {run.effects_text()}")
        if run.error:
            lines.append(f"Why: {_clip(run.error, 500)}")
    elif run.status is RunState.PARKED:
        lines.append(f"Waiting for {run.waits_for()}.")
    elif run.status is not RunState.QUEUED:
        lines.append("/cancel " + str(run.id) + " stops it.")
    return Html("\n").join(lines)


def _duration(elapsed: timedelta) -> str:
    seconds = int(elapsed.total_seconds())
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"


def _clip(text: str, limit: int) -> str:
    return clip(" ".join(text.split()), limit)
