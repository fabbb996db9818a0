"""Process watches end to end, on SQLite and Postgres with a real Redis: an agent asks aegis, over
MCP or from a script, to watch a long process; the owner approves with a tap and a code; the
run ends its turn and is parked; the real clock enqueues the looks, a real worker runs the
commands, the progress shows on the run's one message, and when the process passes or fails
the run goes on with the outcome (a coding CLI resumes its own session)."""

from __future__ import annotations

import asyncio
import json
import re
from datetime import timedelta
from pathlib import Path

import pyotp
import pytest
from sqlalchemy import select, update

from bot.agents.agent_run import RunState
from bot.config.secrets import SecretFiles
from bot.monitors.process_watch import Look, WatchStatus
from bot.store.tables import agent_runs
from tests.helpers.cli_harness import FAKES
from tests.helpers.fake_model import running_fake_model
from tests.helpers.runs import buttons, message_with, tap, tool_runs
from tests.helpers.stack import eventually, make_settings, running_clock, running_stack

CLIS = {
    "claudia": ("claude-code", "claude"),
    "cody": ("codex", "codex"),
    "opal": ("opencode", "opencode"),
}


def config_text(root: Path, model_url: str) -> str:
    agents = {
        slug: {
            "harness": harness,
            "command": str(FAKES / fake),
            "tools": ["monitors.watch_process"],
            "workdir": str(root / slug),
            "deadline": 60,
        }
        for slug, (harness, fake) in CLIS.items()
    }
    agents["builder"] = {
        "harness": "script",
        "tools": ["monitors.watch_process"],
        "deadline": 60,
        "steps": [
            {
                "call": "monitors.watch_process",
                "args": {
                    "name": "build",
                    "done": "test -f {request}/done",
                    "fail": "cat {request}/failed",
                    "every": "10s",
                    "timeout": "5s",
                    "deadline": "5m",
                },
            }
        ],
    }
    agents["scout"] = {
        "harness": "http",
        "providers": [{"url": model_url, "model": "small", "name": "fake"}],
        "tools": ["monitors.watch_process"],
        "deadline": 60,
    }
    for spec in agents.values():
        if "workdir" in spec:
            Path(spec["workdir"]).mkdir(parents=True, exist_ok=True)
    return json.dumps({"agents": agents})  # JSON is YAML


@pytest.fixture
async def model():
    async with running_fake_model() as fake:
        yield fake


@pytest.fixture
async def stack(tmp_path, database_url, redis_server_url, redis_namespace, model):
    settings = make_settings(tmp_path / "data", database_url, redis_server_url)
    settings.config_file.parent.mkdir(parents=True, exist_ok=True)
    settings.config_file.write_text(config_text(tmp_path / "work", model.url), encoding="utf-8")
    secret = pyotp.random_base32()
    SecretFiles(settings.data_dir).put("totp", secret)
    async with running_stack(settings, namespace=redis_namespace) as running:
        running.totp = pyotp.TOTP(secret)
        running.workdirs = tmp_path / "work"
        await running.ask("/start")
        yield running


async def approve_with_code(stack) -> dict:
    card = await message_with(stack, r"wants to run 'monitors\.watch_process'", timeout=20)
    assert "Approve + code" in buttons(card)
    await tap(stack, card, "Approve + code")
    await message_with(stack, "send the current 6-digit code", after=card["message_id"])
    await stack.send(stack.totp.now())
    return card


async def run_row(stack, run_id: int, *states: RunState, timeout: float = 30) -> dict:
    async def reached():
        async with stack.store.read() as conn:
            row = (await conn.execute(select(agent_runs).where(agent_runs.c.id == run_id))).one()
        return dict(row._mapping) if row.status in states else None

    return await eventually(reached, timeout=timeout)


async def parked_on_watch(stack, run_id: int) -> dict:
    async def parked():
        row = await run_row(stack, run_id, *RunState)
        return row if row["status"] == RunState.PARKED and row["watching"] else None

    return await eventually(parked, timeout=30)


async def started(stack, text: str) -> tuple[int, dict]:
    sent = await stack.send(text)
    progress = await message_with(stack, r"^Run #\d+ · ", after=sent["message_id"])
    return int(re.match(r"Run #(\d+)", progress["text"]).group(1)), progress


def recorded(stack, slug: str) -> list[dict]:
    path = stack.workdirs / slug / f"fake-{CLIS[slug][1]}.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    return [json.loads(line) for line in lines]


@pytest.mark.parametrize("slug", sorted(CLIS))
async def test_a_coding_cli_ends_its_turn_and_its_session_goes_on_when_the_process_passes(
    stack, slug
):
    work = stack.workdirs / slug  # the commands run where the agent works
    (work / "progress").write_text("compiling 3/10\n", encoding="utf-8")
    args = {
        "name": "build",
        "done": "cat done",
        "progress": "./status.sh",
        "every": "10s",
        "timeout": "5s",
        "deadline": "5m",
    }
    (work / "status.sh").write_text("#!/bin/sh\ncat progress\n", encoding="utf-8")
    (work / "status.sh").chmod(0o755)
    async with running_clock(stack):
        run_id, progress = await started(
            stack, f"/run {slug} call aegis monitors-watch_process {json.dumps(args)}"
        )
        card = await approve_with_code(stack)
        assert f"Its commands run in {work}." in card["text"]
        parked = await parked_on_watch(stack, run_id)
        assert parked["waiting_on"] is None
        [first] = recorded(stack, slug)
        assert first["resumed"] is None
        # Its one progress message shows what the progress command printed.
        shown = r"waiting for build \(process watch #\d+\): compiling 3/10"
        await eventually(lambda: _edited_to(stack, progress, shown), timeout=20)
        (work / "done").write_text("linked app.bin\n", encoding="utf-8")
        ended = await run_row(stack, run_id, RunState.COMPLETED, RunState.FAILED, timeout=30)
    assert ended["status"] == RunState.COMPLETED, ended["error"]
    first, second = recorded(stack, slug)
    assert second["resumed"] is not None  # its own session, resumed: not a new one
    assert "it passed after" in second["request"] and '"linked app.bin"' in second["request"]
    assert ended["result"].startswith("Done: aegis's watch #")
    watch = await stack.services.platform.monitors.processes.get(parked["watching"])
    assert watch.status is WatchStatus.PASSED
    assert await tool_runs(stack, "monitors.watch_process") == 1


async def _edited_to(stack, message: dict, pattern: str) -> bool:
    """Whether ``message`` (edited in place, never sent again) now reads ``pattern``."""
    for current in await stack.bot_messages():
        if current["message_id"] == message["message_id"]:
            return bool(re.search(pattern, current["text"] or ""))
    return False


async def test_a_script_run_goes_on_with_the_failure_its_process_reported(stack, tmp_path):
    (tmp_path / "failed").write_text("error: 3 tests failed\n", encoding="utf-8")
    async with running_clock(stack):
        run_id, progress = await started(stack, f"/run builder {tmp_path}")
        await approve_with_code(stack)
        ended = await run_row(stack, run_id, RunState.COMPLETED, RunState.FAILED, timeout=30)
    assert ended["status"] == RunState.COMPLETED, ended["error"]
    assert "it failed after" in ended["result"]
    assert 'Its last line of output (quoted): "error: 3 tests failed"' in ended["result"]
    final = await message_with(stack, r"it failed after")
    assert final["reply_to_message_id"] == progress["message_id"]  # its last word


async def test_a_parked_run_cancelled_abandons_its_watch_and_is_never_woken(stack, tmp_path):
    async with running_clock(stack):
        run_id, _ = await started(stack, f"/run builder {tmp_path}")
        await approve_with_code(stack)
        parked = await parked_on_watch(stack, run_id)
        sent = await stack.send("/monitors")
        listed = await message_with(
            stack, r"Processes watched for runs \(1\)", after=sent["message_id"]
        )
        assert f"build · run #{run_id} (builder)" in listed["text"]
        assert f"/cancel {run_id} stops the run and the watch." in listed["text"]
        await stack.ask(f"/cancel {run_id}")
        await run_row(stack, run_id, RunState.CANCELLED)
        # Stopped at once, not at its next look.
        watch = await stack.services.platform.monitors.processes.get(parked["watching"])
        assert watch.status is WatchStatus.ABANDONED
        (tmp_path / "done").write_text("", encoding="utf-8")
        await asyncio.sleep(1)
    assert (await run_row(stack, run_id, RunState.CANCELLED))["result"] is None


async def test_a_worker_lost_right_after_the_wake_up_leaves_a_run_that_still_hears_it(
    stack, tmp_path
):
    """The wake-up's claim commits and its worker dies before the run's next checkpoint: the
    run sweep takes the run up again, and it goes on with the outcome all the same."""
    platform = stack.services.platform
    args = {"done": f"test -f {tmp_path}/done", "every": "10s", "deadline": "5m"}
    run_id, _ = await started(
        stack, f"/run claudia call aegis monitors-watch_process {json.dumps(args)}"
    )
    await approve_with_code(stack)
    parked = await parked_on_watch(stack, run_id)
    looked = await platform.monitors.processes.record(
        parked["watching"], Look(WatchStatus.PASSED, detail="all built")
    )
    assert looked.ended_it
    # What the dying worker got done: the claim (no clock runs here, so no look wakes it).
    held = await platform.runs.claim(
        run_id, stale_after=timedelta(seconds=30), watched=parked["watching"]
    )
    assert held is not None and "resume" not in held.state
    async with stack.store.write() as conn:
        await conn.execute(
            update(agent_runs)
            .where(agent_runs.c.id == run_id)
            .values(heartbeat_at=held.heartbeat_at - timedelta(days=1))
        )
    await platform.interactions.enqueue("sweep_runs")
    ended = await run_row(stack, run_id, RunState.COMPLETED, RunState.FAILED, timeout=30)
    assert ended["status"] == RunState.COMPLETED, ended["error"]
    # Its session resumed with the outcome: not the whole task started over.
    first, second = recorded(stack, "claudia")
    assert second["resumed"] is not None
    assert second["request"].startswith("aegis's watch #")
    assert 'Its last line of output (quoted): "all built"' in second["request"]
    assert ended["state"]["watched"] == parked["watching"]


async def test_a_model_run_hears_how_its_process_ended_as_the_next_message(stack, model, tmp_path):
    (tmp_path / "done").write_text("3 files deployed\n", encoding="utf-8")
    args = {"done": f"cat {tmp_path}/done", "every": "10s", "deadline": "10m", "name": "deploy"}
    model.call("monitors-watch_process", args)
    model.answer("Watching the deploy; I will report when it ends.")
    model.answer("The deploy finished: 3 files.")
    async with running_clock(stack):
        run_id, _ = await started(stack, "/run scout deploy and tell me")
        await approve_with_code(stack)
        ended = await run_row(stack, run_id, RunState.COMPLETED, RunState.FAILED, timeout=30)
    assert ended["status"] == RunState.COMPLETED, ended["error"]
    assert ended["result"] == "The deploy finished: 3 files."
    *_, last = model.requests
    told = last.messages[-1]
    assert told["role"] == "user" and "it passed after" in told["content"]
    assert 'Its last line of output (quoted): "3 files deployed"' in told["content"]
    # The run was given its watch's outcome once, and owes nothing more.
    processes = stack.services.platform.monitors.processes
    given = await processes.get(ended["state"]["watched"])
    assert given.run_id == run_id and given.status is WatchStatus.PASSED
    assert await processes.owed(run_id, after=given.id) == []
    assert ended["watching"] is None and "resume" not in ended["state"]
