"""/status's recent work: what a person asked for or waits on, in words, and the machine's
upkeep in one line, however many sweeps ran since."""

from __future__ import annotations

from datetime import timedelta

from bot.chat.text import plain
from bot.chat.views.status import StatusReport
from bot.timeutil import now
from bot.upkeep.job_runs import JobRun


def run(number: int, job: str, summary: dict, status: str = "completed") -> JobRun:
    at = now().replace(hour=14, minute=number, second=0, microsecond=0)
    return JobRun(number, job, status, summary, None, at - timedelta(seconds=1), at)


def report(latest: list[JobRun], upkeep: JobRun | None) -> str:
    return plain(
        StatusReport(
            processes=[],
            queue_depths={},
            outbox={},
            database="SQLite",
            broker="Redis",
            latest_jobs=latest,
            latest_upkeep=upkeep,
        ).render()
    )


def test_recent_work_is_in_words_with_only_what_it_did():
    text = report(
        [
            run(5, "run_agent", {"changes_made": 1, "reads": 0, "calls_failed": 0, "ok": True}),
            run(4, "ping", {}),
        ],
        run(6, "sweep_outbox", {"rows_requeued": 0}),
    )
    section = text.split("Recent work\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert section == [
        "  agent run completed 14:05 UTC: changes made 1",
        "  ping completed 14:04 UTC",
        "  upkeep (sweeps, checks): last 14:06 UTC, completed",
    ]
    assert "sweep_outbox" not in text and "rows_requeued" not in text


def test_with_nothing_asked_for_yet_it_says_so():
    section = report([], None).split("Recent work\n", 1)[1]
    assert section.splitlines()[0] == "  none yet"
