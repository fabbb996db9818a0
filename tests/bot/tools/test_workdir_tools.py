"""shell.run and files.send, on a platform built as the processes build it: a command runs in
the agent's workdir with nothing of aegis's environment, within its ceiling, and nothing it
started outlives it; a file leaves only from inside the workdir, as a copy taken at the call,
and arrives in the owner's chat as a document under its own name.

The tool functions are called as the gate calls them once a call may run; the last tests show
the gate in front of them (a tap, and a code for the irreversible ones).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select, update

from bot.actions.call import Caller, CallStatus, ToolCall
from bot.agents.agent_run import RunOrigin
from bot.chat.outgoing import OUTGOING, OutboxKind, outgoing_path
from bot.config.settings import Settings
from bot.core import Platform
from bot.errors import ToolRefused
from bot.store import migrate
from bot.store.database import Store
from bot.store.tables import agent_runs, outbox
from bot.timeutil import now
from bot.tools.processes import KEEP_BYTES
from bot.tools.workdir import MAX_FILE_BYTES
from tests.helpers.interactions import CHAT, SIGNER, RecordingEnqueue
from tests.helpers.outbox import delivery_stack, settled_row
from tests.helpers.stack import OWNER_CHAT

CONFIG = """
agents:
  builder:
    workdir: {workdir}
    tools: [shell.run, files.send, deploy.*]
  homeless:
    tools: [shell.run, files.send]
  gone:
    workdir: {workdir}/not-there
    tools: [shell.run]
deploy:
  site:
    command: [./deploy.sh]
    workdir: {workdir}
"""


@pytest.fixture
async def store(tmp_path):
    """SQLite only: these tests are about processes and files; the database holds a run and
    outbox rows, and the delivery test below runs on Postgres too."""
    sqlite = Store(f"sqlite+aiosqlite:///{tmp_path / 'aegis.sqlite3'}")
    await migrate.upgrade(sqlite)
    try:
        yield sqlite
    finally:
        await sqlite.close()


@pytest.fixture
def workdir(tmp_path) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    return folder


@pytest.fixture
def enqueue() -> RecordingEnqueue:
    return RecordingEnqueue()


@pytest.fixture
def platform(tmp_path, store, workdir, enqueue) -> Platform:
    (tmp_path / "aegis.yaml").write_text(CONFIG.format(workdir=workdir))
    settings = Settings(
        data_dir=tmp_path / "data", config_file=tmp_path / "aegis.yaml", _env_file=None
    )
    return Platform.build(settings, store, SIGNER, enqueue)


async def call(platform: Platform, tool: str, args: dict, *, agent="builder", run_id=None):
    return await platform.actions.toolbox[tool](args, Caller(agent, CHAT, run_id))


async def shell(platform: Platform, command: str, **args) -> dict:
    return await call(platform, "shell.run", {"command": command, **args})


def alive(pid: int) -> bool:
    """Running, not merely a zombie waiting for init (which here may never reap it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] != b"Z"


# shell.run


async def test_a_command_runs_in_the_agents_workdir(platform, workdir):
    result = await shell(platform, "pwd; pwd -P")
    assert result == {
        "exit_code": 0,
        "output": f"{workdir}\n{workdir.resolve()}\n",
        "timed_out": False,
        "cut_bytes": 0,
    }


async def test_the_exit_code_and_both_streams_come_back(platform):
    result = await shell(platform, "echo to-stdout; echo to-stderr >&2; exit 3")
    assert result["exit_code"] == 3 and not result["timed_out"]
    assert result["output"].splitlines() == ["to-stdout", "to-stderr"]


async def test_stdin_is_empty_so_a_reader_does_not_wait_for_it(platform):
    result = await shell(platform, "cat; echo read-nothing", timeout_seconds=20)
    assert result["output"] == "read-nothing\n" and not result["timed_out"]


async def test_a_timeout_kills_the_whole_group_even_what_ignores_sigterm(platform):
    # The ignored SIGTERM is inherited by the sleep: only the SIGKILL after the grace stops them.
    result = await shell(platform, "trap '' TERM; sleep 300 & echo $!; wait", timeout_seconds=1)
    assert result["timed_out"] is True and result["exit_code"] == -9
    child = int(result["output"].split()[0])
    assert not alive(child)


async def test_what_a_command_leaves_running_is_stopped_when_it_exits(platform):
    result = await shell(platform, "sleep 300 >/dev/null 2>&1 & echo $!")
    assert result["exit_code"] == 0 and not result["timed_out"]
    assert not alive(int(result["output"]))


async def test_long_output_keeps_its_head_and_tail_and_counts_what_was_cut(platform):
    result = await shell(
        platform, r"printf START; head -c 200000 /dev/zero | tr '\0' x; printf END"
    )
    output = result["output"]
    assert result["cut_bytes"] == 200_008 - 2 * KEEP_BYTES
    assert output.startswith("START" + "x" * 100) and output.endswith("x" * 100 + "END")
    assert f"[{result['cut_bytes']:,} bytes cut here]" in output
    assert len(output) < 2 * KEEP_BYTES + 100


async def test_no_aegis_variable_reaches_the_command(platform, monkeypatch):
    monkeypatch.setenv("AEGIS_TELEGRAM_TOKEN", "123:very-secret")
    monkeypatch.setenv("SOMETHING_ELSE", "kept")
    output = (await shell(platform, "env"))["output"]
    assert "SOMETHING_ELSE=kept" in output
    assert "AEGIS_" not in output and "very-secret" not in output


@pytest.mark.parametrize(
    ("agent", "reason"),
    [
        ("homeless", "set agents.homeless.workdir in aegis.yaml"),
        ("gone", "is not a directory (agents.gone.workdir in aegis.yaml)"),
    ],
)
async def test_an_agent_without_a_usable_workdir_is_refused(platform, agent, reason):
    with pytest.raises(ToolRefused, match=reason.replace("(", r"\(").replace(")", r"\)")):
        await call(platform, "shell.run", {"command": "true"}, agent=agent)


async def run_with_deadline(platform: Platform, seconds: float) -> int:
    run, _ = await platform.runs.create(
        "builder", "build it", CHAT, origin=RunOrigin.COMMAND, deadline_seconds=600
    )
    async with platform.runs.store.write() as conn:
        deadline = now() + timedelta(seconds=seconds)
        await conn.execute(
            update(agent_runs).where(agent_runs.c.id == run.id).values(deadline_at=deadline)
        )
    return run.id


async def test_a_command_never_outlives_its_runs_deadline(platform, workdir):
    run_id = await run_with_deadline(platform, 1)
    args = {"command": "sleep 30; touch finished", "timeout_seconds": 300}
    result = await call(platform, "shell.run", args, run_id=run_id)
    assert result["timed_out"] is True and not (workdir / "finished").exists()


async def test_a_run_past_its_deadline_starts_nothing(platform, workdir):
    run_id = await run_with_deadline(platform, -1)
    with pytest.raises(ToolRefused, match="past its deadline"):
        await call(platform, "shell.run", {"command": "touch started"}, run_id=run_id)
    assert not (workdir / "started").exists()


# files.send


@pytest.fixture
def outside(tmp_path) -> Path:
    secret = tmp_path / "secret.txt"
    secret.write_text("not for the chat")
    return secret


@pytest.mark.parametrize(
    "path",
    ["../secret.txt", "sub/../../secret.txt", "ABSOLUTE", "link-out", "sub/link-out-dir/x"],
)
async def test_a_path_leading_out_of_the_workdir_is_refused(
    platform, workdir, outside, enqueue, path
):
    (workdir / "sub").mkdir()
    (workdir / "link-out").symlink_to(outside)
    (workdir / "sub" / "link-out-dir").symlink_to(outside.parent)
    path = str(outside) if path == "ABSOLUTE" else path
    with pytest.raises(ToolRefused, match="relative to the working directory|leads outside"):
        await call(platform, "files.send", {"path": path})
    assert await platform.outbox.counts() == {} and enqueue.calls == []
    assert not (platform.settings.data_dir / OUTGOING).exists()


async def test_a_missing_file_outside_says_the_same_as_an_existing_one(platform, outside):
    with pytest.raises(ToolRefused, match="leads outside"):
        await call(platform, "files.send", {"path": "../no-such-file"})


@pytest.mark.parametrize("kind", ["directory", "fifo"])
async def test_only_a_regular_file_can_be_sent(platform, workdir, kind):
    target = workdir / "thing"
    target.mkdir() if kind == "directory" else os.mkfifo(target)
    with pytest.raises(ToolRefused, match="not a regular file"):
        await call(platform, "files.send", {"path": "thing"})
    assert await platform.outbox.counts() == {}


async def test_a_file_past_telegrams_upload_cap_is_refused(platform, workdir):
    with open(workdir / "huge.bin", "wb") as huge:
        huge.truncate(MAX_FILE_BYTES + 1)  # sparse: no 50 MB written
    with pytest.raises(ToolRefused, match="a bot can send at most"):
        await call(platform, "files.send", {"path": "huge.bin"})
    assert await platform.outbox.counts() == {}


async def test_a_file_is_copied_at_the_call_and_queued_as_one_outbox_row(
    platform, workdir, enqueue
):
    content = b"id,total\n1,42\n"
    (workdir / "sub").mkdir()
    (workdir / "sub" / "report.csv").write_bytes(content)
    result = await call(platform, "files.send", {"path": "sub/report.csv", "caption": "numbers"})
    (workdir / "sub" / "report.csv").write_bytes(b"changed afterwards")

    assert result == {"sent": "report.csv", "bytes": len(content)}
    [(actor, (outbox_id,), _)] = enqueue.calls
    row = await platform.outbox.get(outbox_id)
    stored = f"{hashlib.sha256(content).hexdigest()}/report.csv"
    assert actor == "deliver" and row["chat_id"] == CHAT
    assert (row["kind"], row["parts"], row["caption"]) == (OutboxKind.FILE, [stored], "numbers")
    assert outgoing_path(platform.settings.data_dir, stored).read_bytes() == content


async def test_a_sent_file_arrives_as_a_document_with_its_name_and_bytes(
    tmp_path, database_url, redis_server_url, redis_namespace
):
    workdir, data = tmp_path / "work", tmp_path / "data"
    workdir.mkdir()
    data.mkdir()
    (data / "aegis.yaml").write_text(CONFIG.format(workdir=workdir))
    content = bytes(range(256)) * 40  # not text: the bytes arrive as they are
    (workdir / "build.tar").write_bytes(content)
    async with delivery_stack(data, database_url, redis_server_url, redis_namespace) as stack:
        tool = stack.services.platform.actions.toolbox["files.send"]
        args = {"path": "build.tar", "caption": "today's build"}
        await tool(args, Caller("builder", OWNER_CHAT))
        (workdir / "build.tar").write_bytes(b"replaced")

        async with stack.store.read() as conn:
            query = select(outbox.c.id).where(outbox.c.kind == OutboxKind.FILE)
            [outbox_id] = (await conn.execute(query)).scalars()
        assert (await settled_row(stack, outbox_id))["status"] == "sent"
        [message] = await stack.bot_messages()
        assert message["document"]["filename"] == "build.tar"
        assert message["caption"] == "today's build"
        assert await stack.emulator.file_content(message["document"]["file_id"]) == content


# the gate in front of them


@pytest.mark.parametrize(
    ("tool", "args", "code"),
    [
        ("shell.run", {"command": "touch ran"}, True),
        ("deploy.run", {"recipe": "site"}, True),
        ("files.send", {"path": "ran"}, False),
    ],
)
async def test_what_changes_the_machine_waits_for_a_tap_and_a_code(
    platform, workdir, tool, args, code
):
    (workdir / "deploy.sh").write_text("#!/bin/sh\ntouch ran\n")
    (workdir / "deploy.sh").chmod(0o755)
    outcome = await platform.actions.perform(ToolCall("builder", tool, args, CHAT))

    assert outcome.status is CallStatus.GATED
    assert ("TOTP code" in outcome.reason) is code
    card = await platform.interactions.get(outcome.interaction_id)
    assert card.step_up is code and card.tool == tool
    assert not (workdir / "ran").exists()
    assert await platform.outbox.counts() == {"pending": 1}  # the card, and nothing else
    if tool == "deploy.run":  # the card shows what the recipe's name stands for
        assert card.prompt.endswith(f"It runs ./deploy.sh in {workdir}.")


async def test_listing_the_recipes_runs_at_once(platform, workdir):
    outcome = await platform.actions.perform(ToolCall("builder", "deploy.recipes", {}, CHAT))
    assert outcome.status is CallStatus.RAN
    assert [recipe["name"] for recipe in outcome.result["recipes"]] == ["site"]


async def test_an_approved_deploy_runs_only_what_its_card_showed(tmp_path, platform, workdir):
    (workdir / "deploy.sh").write_text("#!/bin/sh\necho deployed\n")
    (workdir / "deploy.sh").chmod(0o755)
    (workdir / "other.sh").write_text("#!/bin/sh\ntouch other-ran\n")
    (workdir / "other.sh").chmod(0o755)
    gated = await platform.actions.perform(
        ToolCall("builder", "deploy.run", {"recipe": "site"}, CHAT)
    )
    card = gated.interaction_id
    run = platform.actions.toolbox["deploy.run"]
    shown = await run({"recipe": "site"}, Caller("builder", CHAT, card=card))
    assert shown["exit_code"] == 0 and "deployed" in shown["output"]

    # The owner approved ./deploy.sh; aegis.yaml now says something else under that name.
    changed = CONFIG.format(workdir=workdir).replace("[./deploy.sh]", "[./other.sh]")
    (tmp_path / "aegis.yaml").write_text(changed)
    await asyncio.sleep(1.1)  # the file is looked at once a second
    assert platform.config.current().recipes["site"].command == ("./other.sh",)
    with pytest.raises(ToolRefused, match=f"changed in aegis.yaml after card #{card}"):
        await run({"recipe": "site"}, Caller("builder", CHAT, card=card))
    assert not (workdir / "other-ran").exists()
