"""aegis's MCP server, driven by the real ``mcp`` client over HTTP as a coding agent drives it.

The stack is the real one: the web process (bot, emulator, MCP server on its loopback port), a
Dramatiq worker on Redis, and SQLite or Postgres. The owner taps cards in the emulated chat. A
scripted agent follows the retry protocol the server teaches: call, and on "retry this
identical call now" call again at once, up to a budget of calls.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time

import httpx2
import pyotp
import pytest
from sqlalchemy import func, select

from bot.agents.tokens import AgentTokens
from bot.config.secrets import SecretFiles
from bot.store.tables import audit_events, interactions
from tests.helpers.mcp import mcp_client, mcp_url
from tests.helpers.runs import message_with, tap, tool_runs
from tests.helpers.stack import eventually, make_settings, running_stack

HOLD = 1.5  # seconds a gated call is held here (25 in production)
CONFIG = """\
agents:
  coder:
    tools: ["tasks.*", "notes.*", "cli.*", demo.read_clock, demo.write_file, demo.delete_file]
  other:
    tools: [demo.read_clock, runs.list]
  runner:
    harness: claude-code
    tools: [demo.read_clock]
  coded:
    harness: codex
    tools: [demo.read_clock]
"""
RETRY = "Retry this identical call now"


@pytest.fixture
async def stack(tmp_path, database_url, redis_server_url, redis_namespace):
    settings = make_settings(
        tmp_path / "data", database_url, redis_server_url, mcp_hold_seconds=HOLD
    )
    settings.config_file.parent.mkdir(parents=True, exist_ok=True)
    settings.config_file.write_text(CONFIG, encoding="utf-8")
    async with running_stack(settings, namespace=redis_namespace) as running:
        await running.ask("/start")  # the owner has opened the chat, as on Telegram
        yield running


async def token_of(stack, agent: str) -> str:
    return await AgentTokens(stack.store).mint(agent)


def text_of(result) -> str:
    return "\n".join(part.text for part in result.content)


async def agent_loop(
    client, tool: str, args: dict, *, budget: int, log: list, progress=None
) -> tuple[str, str]:
    """A coding agent under the protocol: retry the identical call while told to, at most
    ``budget`` calls; then say honestly that nothing was executed."""
    for _ in range(budget):
        result = await client.call_tool(tool, args, progress_callback=progress)
        text = text_of(result)
        log.append((time.monotonic(), "error" if result.is_error else "result", text))
        if not result.is_error:
            return "ran", text
        if RETRY not in text:
            return "refused", text
    return "gave up", "nothing was executed: no approval came"


def written(stack, name: str) -> bool:
    return (stack.settings.data_dir / "demo" / name).exists()


async def cards_for(stack, tool: str) -> int:
    query = select(func.count()).where(interactions.c.tool == tool)
    async with stack.store.read() as conn:
        return (await conn.execute(query)).scalar_one()


# The approval timeline


async def test_gated_then_card_then_tap_then_the_call_runs_exactly_once(stack):
    args = {"name": "notes.txt", "text": "from an agent\n"}
    log: list = []
    async with mcp_client(stack.settings, await token_of(stack, "coder")) as client:
        loop = asyncio.create_task(agent_loop(client, "demo-write_file", args, budget=20, log=log))
        card = await message_with(stack, r"Approval needed")
        assert "demo.write_file" in card["text"] and '"name": "notes.txt"' in card["text"]
        # The agent has been told to retry at least once before the owner taps.
        await eventually(lambda: any(kind == "error" for _, kind, _ in log), timeout=10)
        assert not written(stack, "notes.txt")
        tapped_at = time.monotonic()
        assert "Approved" in await tap(stack, card, "Approve")
        how, text = await asyncio.wait_for(loop, timeout=20)

        assert how == "ran" and "wrote 14 characters to notes.txt" in text
        [(ran_at, kind, _)] = [entry for entry in log if entry[1] == "result"]
        assert ran_at > tapped_at
        assert all(RETRY in text for _, kind, text in log if kind == "error")
        assert written(stack, "notes.txt") and await tool_runs(stack, "demo.write_file") == 1
        assert await cards_for(stack, "demo.write_file") == 1

        # The grant was used: the identical call is gated again, on a new card.
        again = await client.call_tool("demo-write_file", args)
        assert again.is_error and RETRY in text_of(again)
        assert await cards_for(stack, "demo.write_file") == 2
        # One character changed is another call, with a card of its own.
        other = await client.call_tool("demo-write_file", {**args, "text": "from an agent!\n"})
        assert other.is_error and await cards_for(stack, "demo.write_file") == 3
    assert await tool_runs(stack, "demo.write_file") == 1


async def test_an_owner_who_never_taps_leaves_nothing_done(stack):
    args = {"name": "ignored.txt", "text": "x"}
    log: list = []
    notes: list = []

    async def progress(done, total, message):
        notes.append(message)

    async with mcp_client(stack.settings, await token_of(stack, "coder")) as client:
        how, text = await agent_loop(
            client, "demo-write_file", args, budget=3, log=log, progress=progress
        )
    assert (how, text) == ("gave up", "nothing was executed: no approval came")
    assert len(log) == 3 and all(kind == "error" and RETRY in t for _, kind, t in log)
    assert len(notes) >= 3  # each retry was held (and said so), not bounced
    assert not written(stack, "ignored.txt") and await tool_runs(stack, "demo.write_file") == 0
    assert await cards_for(stack, "demo.write_file") == 1  # every retry waited on one card


async def test_a_denied_call_is_refused_at_once_and_not_asked_again(stack):
    args = {"name": "no.txt", "text": "x"}
    log: list = []
    async with mcp_client(stack.settings, await token_of(stack, "coder")) as client:
        loop = asyncio.create_task(agent_loop(client, "demo-write_file", args, budget=20, log=log))
        card = await message_with(stack, r"Approval needed")
        await tap(stack, card, "Deny")
        how, text = await asyncio.wait_for(loop, timeout=20)
        assert how == "refused" and "denied it on card" in text and "nothing was done" in text
        again = await client.call_tool("demo-write_file", args)
        assert again.is_error and "denied it on card" in text_of(again)
    assert await cards_for(stack, "demo.write_file") == 1
    assert not written(stack, "no.txt") and await tool_runs(stack, "demo.write_file") == 0


async def test_a_held_call_reports_progress_while_it_waits(stack):
    notes: list = []

    async def progress(done, total, message):
        notes.append((done, total, message))

    async with mcp_client(stack.settings, await token_of(stack, "coder")) as client:
        result = await client.call_tool(
            "demo-write_file", {"name": "p.txt", "text": "x"}, progress_callback=progress
        )
    assert result.is_error and RETRY in text_of(result)
    assert notes and notes[0][1] == HOLD
    assert "waiting for the owner's answer on card #" in notes[0][2]


async def test_an_irreversible_call_runs_after_the_tap_and_the_code(stack):
    secret = pyotp.random_base32()
    SecretFiles(stack.settings.data_dir).put("totp", secret)
    (stack.settings.data_dir / "demo").mkdir(parents=True, exist_ok=True)
    (stack.settings.data_dir / "demo" / "old.txt").write_text("old")
    log: list = []
    async with mcp_client(stack.settings, await token_of(stack, "coder")) as client:
        loop = asyncio.create_task(
            agent_loop(client, "demo-delete_file", {"name": "old.txt"}, budget=30, log=log)
        )
        card = await message_with(stack, r"demo\.delete_file")
        await tap(stack, card, "Approve + code")
        await message_with(stack, "send the current 6-digit code", after=card["message_id"])
        assert written(stack, "old.txt")  # a tap alone does not do it
        await stack.send(pyotp.TOTP(secret).now())
        how, text = await asyncio.wait_for(loop, timeout=30)
    assert how == "ran" and text == "deleted old.txt" and not written(stack, "old.txt")


# Reads, identity and refusals


async def test_a_read_answers_at_once_and_the_list_shows_only_granted_tools(stack):
    async with mcp_client(stack.settings, await token_of(stack, "other")) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert names == {"demo-read_clock", "runs-list"}  # no cli.*: no permission prompt
        result = await client.call_tool("demo-read_clock", {})
    assert not result.is_error and text_of(result).startswith("the server clock says")


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer not-a-token"}, {"Authorization": "Basic abc"}],
    ids=["missing", "wrong", "not bearer"],
)
async def test_a_request_without_a_valid_token_gets_401(stack, headers):
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    async with httpx2.AsyncClient() as http:
        response = await http.post(
            mcp_url(stack.settings),
            json=body,
            headers={**headers, "Accept": "application/json, text/event-stream"},
        )
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert "not-a-token" not in response.text


async def test_a_revoked_run_token_is_refused(stack):
    tokens = AgentTokens(stack.store)
    from datetime import timedelta

    token = await tokens.mint_for_run("coder", 4242, timedelta(minutes=5))
    async with mcp_client(stack.settings, token) as client:
        assert (await client.call_tool("demo-read_clock", {})).is_error is False
    await tokens.revoke_run(4242)
    async with httpx2.AsyncClient() as http:
        response = await http.post(
            mcp_url(stack.settings),
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
            headers={
                "Authorization": f"Bearer {token}",
                "Accept": "application/json, text/event-stream",
            },
        )
    assert response.status_code == 401


async def test_one_agents_token_cannot_use_another_agents_tools(stack):
    async with mcp_client(stack.settings, await token_of(stack, "other")) as client:
        result = await client.call_tool("demo-write_file", {"name": "x.txt", "text": "x"})
        create = await client.call_tool("tasks-create", {"title": "sneaky"})
    assert result.is_error
    assert "no tool called 'demo-write_file' is offered to other" in text_of(result)
    assert create.is_error and "is offered to other" in text_of(create)
    assert not written(stack, "x.txt") and await cards_for(stack, "demo.write_file") == 0


async def test_malformed_arguments_are_refused_and_nothing_runs(stack):
    async with mcp_client(stack.settings, await token_of(stack, "coder")) as client:
        bad_name = await client.call_tool("demo-write_file", {"name": "../../x", "text": "x"})
        extra = await client.call_tool("tasks-get", {"id": 1, "as": "owner"})
        wrong_type = await client.call_tool("tasks-get", {"id": "one"})
    for result in (bad_name, extra, wrong_type):
        assert result.is_error and "Nothing was done" in text_of(result)
    assert await cards_for(stack, "demo.write_file") == 0


async def test_an_unknown_tool_is_never_executed(stack):
    async with mcp_client(stack.settings, await token_of(stack, "coder")) as client:
        result = await client.call_tool("shell-rm_everything", {"path": "/"})
        prompt_name = await client.call_tool("demo.write_file", {"name": "a", "text": "b"})
    assert result.is_error and "Nothing was done" in text_of(result)
    # The catalog's own name is not an offered name: refused, no card made.
    assert prompt_name.is_error and "is offered to coder" in text_of(prompt_name)
    assert await cards_for(stack, "demo.write_file") == 0
    async with stack.store.read() as conn:
        events = (
            await conn.execute(
                select(audit_events.c.event, audit_events.c.tool).where(
                    audit_events.c.agent == "coder"
                )
            )
        ).all()
    assert ("denied", "shell-rm_everything") in events and ("denied", "demo.write_file") in events
    assert not any(event in ("allowed", "used") for event, _ in events)


async def test_records_round_trip_through_the_gate(stack):
    async with mcp_client(stack.settings, await token_of(stack, "coder")) as client:
        listing = await client.call_tool("tasks-list", {"state": "inbox"})
        assert json.loads(text_of(listing))["tasks"] == []
        log: list = []
        loop = asyncio.create_task(
            agent_loop(
                client,
                "tasks-create",
                {"title": "Renew the certificate", "state": "@next"},
                budget=20,
                log=log,
            )
        )
        card = await message_with(stack, r"tasks\.create")
        await tap(stack, card, "Approve")
        how, text = await asyncio.wait_for(loop, timeout=20)
        assert how == "ran"
        task = json.loads(text)
        assert task["title"] == "Renew the certificate" and task["state"] == "@next"
        got = json.loads(text_of(await client.call_tool("tasks-get", {"id": task["id"]})))
        assert got["origin"]["kind"] == "agent" and got["origin"]["name"] == "coder"


async def test_a_long_result_keeps_its_payload_and_says_what_was_cut(stack):
    task = await running_platform(stack).tasks.create("big", "x" * 40_000, by_agent="coder")
    async with mcp_client(stack.settings, await token_of(stack, "coder")) as client:
        text = text_of(await client.call_tool("tasks-get", {"id": task.id}))
    assert text.startswith('{"id": ') and '"body": "xxxx' in text
    assert text.endswith("more characters cut]") and len(text) < 17_000


# Claude Code's permission prompt


async def test_the_permission_prompt_allows_reading_and_holds_everything_else(stack):
    async with mcp_client(stack.settings, await token_of(stack, "coder")) as client:
        read = await client.call_tool(
            "permission_prompt", {"tool_name": "Read", "input": {"file_path": "notes.txt"}}
        )
        away = await client.call_tool(
            "permission_prompt", {"tool_name": "Read", "input": {"file_path": "/proc/1/environ"}}
        )
        bash = await client.call_tool(
            "permission_prompt", {"tool_name": "Bash", "input": {"command": "rm -rf /"}}
        )
    assert json.loads(text_of(read)) == {
        "behavior": "allow",
        "updatedInput": {"file_path": "notes.txt"},
    }
    # Reading outside its workdir (coder has none: anywhere) is refused, never asked.
    refused = json.loads(text_of(away))
    assert refused["behavior"] == "deny"
    assert "/proc/1/environ is outside coder's workdir" in refused["message"]
    verdict = json.loads(text_of(bash))
    assert verdict["behavior"] == "deny" and RETRY in verdict["message"]
    card = await message_with(stack, r"cli\.Bash")
    assert "rm -rf /" in card["text"] and "Approve + code" in str(card["reply_markup"])


async def test_a_cli_agent_is_offered_no_cli_tools_and_cannot_call_them(stack):
    async with mcp_client(stack.settings, await token_of(stack, "runner")) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        direct = await client.call_tool("cli-Read", {"file_path": "/etc/hostname"})
    assert names == {"demo-read_clock", "permission_prompt"}
    assert direct.is_error and "is offered to runner" in text_of(direct)


async def test_the_permission_prompt_keeps_every_agent_out_of_aegis_data_dir(stack):
    secret = stack.settings.data_dir.resolve() / "secrets" / "webhook-secret"
    asks = [
        {"tool_name": "Read", "input": {"file_path": str(secret)}},
        {"tool_name": "Grep", "input": {"pattern": "x", "path": str(secret.parent.parent)}},
        {"tool_name": "Glob", "input": {"pattern": f"{secret.parent}/*"}},
        {"tool_name": "LS", "input": {"path": "/"}},
    ]
    async with mcp_client(stack.settings, await token_of(stack, "runner")) as client:
        verdicts = [
            json.loads(text_of(await client.call_tool("permission_prompt", ask))) for ask in asks
        ]
    for verdict in verdicts:
        assert verdict["behavior"] == "deny"
        assert "inside aegis's own data dir, which no agent may read" in verdict["message"]


async def test_a_permission_prompt_approved_with_its_code_allows_the_input(stack):
    secret = pyotp.random_base32()
    SecretFiles(stack.settings.data_dir).put("totp", secret)
    ask = {"tool_name": "WebFetch", "input": {"url": "https://example.com", "prompt": "x"}}
    async with mcp_client(stack.settings, await token_of(stack, "runner")) as client:
        waiting = asyncio.create_task(client.call_tool("permission_prompt", ask))
        card = await message_with(stack, r"cli\.WebFetch")
        await tap(stack, card, "Approve + code")
        await message_with(stack, "send the current 6-digit code", after=card["message_id"])
        await stack.send(pyotp.TOTP(secret).now())
        first = json.loads(text_of(await asyncio.wait_for(waiting, timeout=20)))
        if first["behavior"] == "deny":  # the hold ended before the code came: retry, once
            assert RETRY in first["message"]
            first = json.loads(text_of(await client.call_tool("permission_prompt", ask)))
    assert first == {"behavior": "allow", "updatedInput": ask["input"]}


async def test_a_cli_agent_may_ask_about_its_built_ins_and_no_other_agent_may(stack):
    read = {"tool_name": "Grep", "input": {"pattern": "TODO"}}
    async with mcp_client(stack.settings, await token_of(stack, "runner")) as client:
        allowed = json.loads(text_of(await client.call_tool("permission_prompt", read)))
        todo = {"tool_name": "TodoWrite", "input": {"todos": []}}
        held = json.loads(text_of(await client.call_tool("permission_prompt", todo)))
    async with mcp_client(stack.settings, await token_of(stack, "other")) as client:
        refused = await client.call_tool("permission_prompt", read)
    assert allowed["behavior"] == "allow"
    # A built-in nobody declared has no known effect: a card that needs a code.
    assert held["behavior"] == "deny" and RETRY in held["message"]
    card = await message_with(stack, r"cli\.TodoWrite")
    assert "Approve + code" in str(card["reply_markup"])
    # An agent not granted cli.* is not offered the prompt, and cannot call it either.
    assert refused.is_error
    assert "no tool called 'permission_prompt' is offered to other" in text_of(refused)


async def test_only_claude_code_agents_and_cli_grants_are_offered_the_permission_prompt(stack):
    offered = {}
    for agent in ("runner", "coder", "coded", "other"):
        async with mcp_client(stack.settings, await token_of(stack, agent)) as client:
            offered[agent] = {tool.name for tool in (await client.list_tools()).tools}
    asking = {agent for agent, names in offered.items() if "permission_prompt" in names}
    assert asking == {"runner", "coder"}  # a claude-code harness, and a cli.* grant


async def test_the_permission_prompt_about_aegis_own_tools_leaves_them_to_the_gate(stack):
    """Claude Code, configured by hand, asks the prompt about aegis's own tools too: one offered
    is allowed (the call itself comes to the gate next), one not offered is refused."""
    ask = {"tool_name": "mcp__aegis__demo-write_file", "input": {"path": "a", "content": "b"}}
    other = {"tool_name": "mcp__aegis__tasks-create", "input": {"title": "x"}}
    async with mcp_client(stack.settings, await token_of(stack, "coder")) as client:
        allowed = json.loads(text_of(await client.call_tool("permission_prompt", ask)))
        read = {"tool_name": "mcp__aegis__demo-read_clock", "input": {}}
        also = json.loads(text_of(await client.call_tool("permission_prompt", read)))
    async with mcp_client(stack.settings, await token_of(stack, "runner")) as client:
        refused = json.loads(text_of(await client.call_tool("permission_prompt", other)))
    assert allowed == {"behavior": "allow", "updatedInput": ask["input"]}
    assert also["behavior"] == "allow"
    assert refused["behavior"] == "deny" and "is offered to runner" in refused["message"]
    async with stack.store.read() as conn:
        cards = (await conn.execute(select(interactions))).all()
    assert cards == []  # nothing asked of the owner: the calls themselves are gated


def running_platform(stack):
    return stack.services.platform


def test_a_port_in_use_is_named_with_the_setting_to_change():
    from aegis.mcp.listener import bind_loopback

    held = bind_loopback(0)
    port = held.getsockname()[1]
    # asyncio turns Nagle off only on sockets that say TCP; with it on, each streamed reply
    # waited 40 ms for the client's delayed ACK.
    assert held.proto == socket.IPPROTO_TCP
    try:
        with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{port}.*AEGIS_MCP_PORT"):
            bind_loopback(port)
    finally:
        held.close()


async def test_a_server_that_cannot_start_refuses_agents_and_says_so(caplog):
    from aegis.mcp.listener import listening
    from tests.helpers.stack import free_port

    port = free_port()
    async with listening(port, {"not": "the tools"}) as listener:
        assert listener.live  # the port is held; nothing is loaded until an agent calls
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        await eventually(lambda: not listener.live)
        writer.close()
        with pytest.raises(ConnectionRefusedError):  # refused, not left hanging
            await asyncio.open_connection("127.0.0.1", port)
    assert "the MCP server could not start" in caplog.text


async def test_a_grant_added_to_aegis_yaml_is_offered_without_a_restart(stack):
    async with mcp_client(stack.settings, await token_of(stack, "other")) as client:
        before = {tool.name for tool in (await client.list_tools()).tools}
        changed = CONFIG.replace("tools: [demo.read_clock, runs.list]", "tools: [runs.*]")
        stack.settings.config_file.write_text(changed, encoding="utf-8")
        await asyncio.sleep(1.1)  # each process looks at the file at most once a second
        after = {tool.name for tool in (await client.list_tools()).tools}
        refused = await client.call_tool("demo-read_clock", {})
    assert "demo-read_clock" in before and "runs-status" not in before
    assert after == {"runs-list", "runs-status", "runs-start"}
    assert refused.is_error and "is offered to other" in text_of(refused)
