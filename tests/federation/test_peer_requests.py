"""A peer asks vps to deploy: vps's real web app (its own data dir, database and Redis
namespace) runs the request under its own gate, on a card in vps's owner chat that names the
peer, who asked there and the exact command, approved with a tap and a code. The asker sends
the request again and again by its id (long polls): it learns the end once, and the recipe runs
once whatever it sends. Denied, or asked by a peer vps has no agent for: nothing runs."""

from __future__ import annotations

import asyncio
import dataclasses
import sys

import aiohttp
import pyotp
import pytest
from aiohttp import web
from sqlalchemy import select, update

from bot.actions.audit import AuditEvent
from bot.actions.held_calls import HeldCalls
from bot.config.secrets import SecretFiles
from bot.errors import PeerRefused, PeerUnreachable
from bot.store.database import Store
from bot.store.tables import audit_events, interactions, peer_requests, peers
from federation.acting import Acting
from federation.links import Peers
from federation.requests import PeerRequests, RequestState, Way
from federation.server import SERVED
from jobs.worker.enqueue import make_enqueue
from tests.helpers.interactions import move_into_past
from tests.helpers.runs import message_with, tap
from tests.helpers.stack import eventually, free_port, make_settings, running_stack

CONFIG = """\
agents:
  laptop:
    name: The laptop
    peer: true
    tools: [deploy.run, runs.start]
  scout:
    name: Scout
    harness: script
    deadline: 60
    steps:
      - say: "Looked into it: {{request}}"
  ops:
    name: Ops
    tools: [deploy.run]
deploy:
  site:
    description: Deploy the site
    command: [{python}, -c, "open('deploys', 'a').write('once\\\\n')"]
    workdir: {workdir}
"""


@pytest.fixture
async def vps(tmp_path, database_url, redis_server_url, redis_namespace):
    # Calls are held on their cards for a second at a time, so a wait of a few seconds spans
    # several holds.
    settings = make_settings(
        tmp_path / "vps", database_url, redis_server_url, peer_name="vps", mcp_hold_seconds=1.0
    )
    workdir = tmp_path / "site"
    workdir.mkdir()
    settings.config_file.parent.mkdir(parents=True, exist_ok=True)
    settings.config_file.write_text(
        CONFIG.format(python=sys.executable, workdir=workdir), encoding="utf-8"
    )
    secret = pyotp.random_base32()
    SecretFiles(settings.data_dir).put("totp", secret)
    async with running_stack(settings, namespace=redis_namespace, worker=True) as stack:
        await stack.ask("/start")
        yield stack, Peers(stack.store, SecretFiles(settings.data_dir)), secret, workdir


async def linked(vps, laptop, name: str = "laptop"):
    stack, vps_peers, *_ = vps
    peers_there, client = laptop
    invitation = await vps_peers.invite(name, us="vps", url=stack.settings.web_url)
    await client.link("vps", invitation)
    return stack, client, PeerRequests(peers_there.store)


async def queued(requests: PeerRequests, recipe: str = "site", agent: str = "scout"):
    async with requests.store.write() as conn:
        row_id = await requests.queue(conn, "vps", "deploy", {"recipe": recipe}, agent=agent)
    return await requests.get(row_id)


async def test_a_deploy_asked_by_a_peer_runs_once_after_a_tap_and_a_code_there(vps, laptop):
    stack, client, requests = await linked(vps, laptop)
    _, _, secret, workdir = vps
    request = await queued(requests)
    first = await client.request(request)
    assert first["state"] == "waiting" and first["id"] == request.request_id
    card = await message_with(stack, r"laptop \(for its agent scout\) wants to run 'deploy.run'")
    assert "laptop acts for a federated peer" in card["text"]
    assert sys.executable in card["text"] and str(workdir) in card["text"]  # the exact command

    async def carded():  # asked again: the same request, waiting on its card
        answer = await client.request(request, wait=0.5)
        return answer if answer["card"] is not None else None

    waited = await eventually(carded, timeout=30)
    assert waited["state"] == "waiting"
    assert "code" in await tap(stack, card, "Approve + code")
    await message_with(stack, "send the current 6-digit code", after=card["message_id"])
    assert not (workdir / "deploys").exists()  # a tap alone is not enough
    await stack.send(pyotp.TOTP(secret).now())
    ended = await client.request(request, wait=20)
    assert ended["state"] == "done", ended
    assert ended["result"]["exit_code"] == 0 and ended["card"] == waited["card"]
    again = await client.request(request, wait=20)  # an answer lost: sent again
    assert again["state"] == "done" and again["result"] == ended["result"]
    assert (workdir / "deploys").read_text() == "once\n"
    [row] = await rows_at(stack.store)
    assert (row.peer, row.agent, row.state) == ("laptop", "scout", RequestState.DONE)


async def test_a_deploy_denied_there_ends_refused_and_runs_nothing(vps, laptop):
    stack, client, requests = await linked(vps, laptop)
    _, _, _, workdir = vps
    request = await queued(requests, agent="owner")
    await client.request(request)
    card = await message_with(stack, r"laptop \(for its owner\) wants to run 'deploy.run'")
    await tap(stack, card, "Deny")
    ended = await client.request(request, wait=20)
    assert ended["state"] == "refused" and "denied" in ended["reason"]
    assert not (workdir / "deploys").exists()


async def test_the_same_id_with_other_arguments_is_refused_and_changes_nothing(vps, laptop):
    stack, client, requests = await linked(vps, laptop)
    request = await queued(requests)
    await client.request(request)
    other = dataclasses.replace(request, args={"recipe": "other"})
    with pytest.raises(PeerRefused, match="asked before with other arguments") as refused:
        await client.request(other)
    assert refused.value.signed
    [row] = await rows_at(stack.store)
    assert row.args == {"recipe": "site"}


async def test_a_peer_with_no_agent_of_its_own_there_is_refused_and_nothing_runs(vps, laptop):
    stack, client, requests = await linked(vps, laptop, name="ops")  # a local agent's name
    _, _, _, workdir = vps
    ended = await client.request(await queued(requests), wait=10)
    assert ended["state"] == "refused"
    assert "a local agent of the same name may not act for it" in ended["reason"]
    assert not (workdir / "deploys").exists()
    assert all("wants to run" not in (m["text"] or "") for m in await stack.bot_messages())


async def test_an_action_outside_the_allow_list_is_refused(vps, laptop):
    stack, client, requests = await linked(vps, laptop)
    request = await queued(requests)
    with pytest.raises(PeerRefused, match="action: one of deploy") as refused:
        await client.request(dataclasses.replace(request, action="shell"))
    assert refused.value.signed  # vps's own word on our request: nothing ran there
    assert await rows_at(stack.store) == []


async def rows_at(store: Store) -> list:
    async with store.read() as conn:
        return list(
            await conn.execute(select(peer_requests).where(peer_requests.c.direction == Way.IN))
        )


async def test_requests_sent_together_by_id_are_one_request(vps, laptop):
    stack, client, requests = await linked(vps, laptop)
    request = await queued(requests)
    answers = await asyncio.gather(*(client.request(request) for _ in range(5)))
    assert {a["state"] for a in answers} == {"waiting"}
    assert len(await rows_at(stack.store)) == 1
    await eventually(lambda: message_with(stack, "wants to run 'deploy.run'"))


async def restarted(stack) -> Acting:
    """vps's web process as it is after a restart: the old one's requests let go (their tasks
    cancelled, as a stop does), a new ``Acting`` that takes up what was under way."""
    federation = stack.app[SERVED].federation
    old = federation.acting
    await old.close()
    fresh = Acting(old.requests, HeldCalls(old.held.actions, hold=2.0), old.owner_chat)
    federation.acting = fresh
    await fresh.resume()
    return fresh


async def test_a_request_waiting_on_its_card_is_taken_up_after_a_restart(vps, laptop):
    stack, client, requests = await linked(vps, laptop)
    _, _, secret, workdir = vps
    request = await queued(requests)
    await client.request(request)
    card = await message_with(stack, r"wants to run 'deploy.run'")
    acting = await restarted(stack)
    try:
        await tap(stack, card, "Approve + code")
        await message_with(stack, "send the current 6-digit code", after=card["message_id"])
        await stack.send(pyotp.TOTP(secret).now())
        ended = await client.request(request, wait=20)
        assert ended["state"] == "done" and (workdir / "deploys").read_text() == "once\n"
    finally:
        await acting.close()


async def test_a_request_that_had_run_when_vps_stopped_is_not_run_again(vps, laptop):
    stack, client, requests = await linked(vps, laptop)
    _, _, secret, workdir = vps
    request = await queued(requests)
    await client.request(request)
    card = await message_with(stack, r"wants to run 'deploy.run'")
    await tap(stack, card, "Approve + code")
    await message_with(stack, "send the current 6-digit code", after=card["message_id"])
    await stack.send(pyotp.TOTP(secret).now())
    assert (await client.request(request, wait=20))["state"] == "done"
    # The process stopped between running it and writing its end: the row still says waiting.
    async with stack.store.write() as conn:
        await conn.execute(
            update(peer_requests)
            .where(peer_requests.c.direction == Way.IN)
            .values(state=RequestState.WAITING, finished_at=None, result=None)
        )
    acting = await restarted(stack)
    try:
        ended = await client.request(request, wait=20)
        assert ended["state"] == "failed" and "how it ended is not known" in ended["reason"]
        assert (workdir / "deploys").read_text() == "once\n"
    finally:
        await acting.close()


async def test_a_run_asked_by_a_peer_ends_with_the_runs_result(vps, laptop):
    stack, client, requests = await linked(vps, laptop)
    _, _, secret, _ = vps
    async with requests.store.write() as conn:
        row_id = await requests.queue(
            conn, "vps", "run", {"agent": "scout", "request": "the disk"}, agent="owner"
        )
    request = await requests.get(row_id)
    await client.request(request)
    card = await message_with(stack, r"laptop \(for its owner\) wants to run 'runs.start'")
    assert '"request": "the disk"' in card["text"]
    await tap(stack, card, "Approve + code")
    await message_with(stack, "send the current 6-digit code", after=card["message_id"])
    await stack.send(pyotp.TOTP(secret).now())
    ended = await client.request(request, wait=30)
    assert ended["state"] == "done", ended
    assert ended["result"]["state"] == "completed"
    assert ended["result"]["result"] == "Done: every step ran."  # the script's own result
    await message_with(stack, r"Looked into it: the disk")  # the run spoke in vps's chat


async def test_past_the_cap_of_unfinished_requests_a_peer_is_refused_and_nothing_is_stored(
    vps, laptop, monkeypatch
):
    from federation import requests as requests_module

    monkeypatch.setattr(requests_module, "MOST_UNFINISHED", 2)
    stack, client, requests = await linked(vps, laptop)
    for recipe in ("site", "docs"):
        await client.request(await queued(requests, recipe=recipe))
    with pytest.raises(PeerRefused, match="2 requests of yours are under way here already"):
        await client.request(await queued(requests, recipe="third"))
    assert len(await rows_at(stack.store)) == 2
    first = (await requests.unfinished_out())[0]
    assert (await client.request(first))["state"] == "waiting"  # a known one is still answered


async def test_an_answer_changed_on_the_way_is_not_believed_nor_a_refusal_made_up_there(
    vps, laptop
):
    """A man in the middle of a plain-http link: what he changes in vps's answer no longer
    verifies, and a refusal he makes up is not vps's signed word."""
    stack, client, requests = await linked(vps, laptop)
    request = await queued(requests)
    mode = {"now": "change"}

    async def forward(incoming: web.Request) -> web.Response:
        body = await incoming.read()
        async with aiohttp.ClientSession() as session:
            url = stack.settings.web_url + incoming.path_qs
            async with session.post(url, data=body, headers=incoming.headers) as answer:
                said, headers = await answer.read(), dict(answer.headers)
        if mode["now"] == "change":
            said = said.replace(b'"waiting"', b'"done"')
            return web.Response(status=answer.status, body=said, headers=_kept(headers))
        refusal = {"refused": "id_reused", "error": "made up"}
        return web.json_response(refusal, status=409)

    app = web.Application()
    app.router.add_post("/{path:.*}", forward)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        async with laptop[0].store.write() as conn:
            await conn.execute(
                update(peers).where(peers.c.name == "vps").values(url=f"http://127.0.0.1:{port}")
            )
        with pytest.raises(PeerUnreachable, match="not signed for our request"):
            await client.request(request)
        mode["now"] = "refuse"
        with pytest.raises(PeerRefused, match="made up") as refused:
            await client.request(request)
        assert not refused.value.signed
    finally:
        await runner.cleanup()


def _kept(headers: dict) -> dict:
    """The answer's headers a proxy passes on (its signature among them)."""
    dropped = {"content-length", "date", "server", "content-type"}
    return {k: v for k, v in headers.items() if k.lower() not in dropped}


async def test_a_card_left_unanswered_there_expires_and_the_request_ends_refused(vps, laptop):
    stack, client, requests = await linked(vps, laptop)
    _, _, _, workdir = vps
    request = await queued(requests)
    await client.request(request)

    async def carded():
        return (await client.request(request))["card"]

    card = await eventually(carded, timeout=30)
    await move_into_past(stack.store, interactions, card)
    await make_enqueue(stack.broker)("sweep_interactions")  # the clock's sweep, at once
    ended = await client.request(request, wait=20)
    assert ended["state"] == "refused" and "did not answer in time" in ended["reason"]
    assert "nothing was done" in ended["reason"] and not (workdir / "deploys").exists()


async def test_a_long_wait_on_the_card_makes_no_pass_through_the_gate_until_it_is_answered(
    vps, laptop
):
    stack, client, requests = await linked(vps, laptop)
    _, _, secret, workdir = vps
    request = await queued(requests)
    await client.request(request)
    card = await message_with(stack, r"wants to run 'deploy.run'")
    await asyncio.sleep(5)  # five holds' worth
    async with stack.store.read() as conn:
        rounds = (
            await conn.execute(
                select(audit_events).where(
                    audit_events.c.agent == "laptop", audit_events.c.event == AuditEvent.WAITING
                )
            )
        ).all()
    assert rounds == []  # it waits on the card, not by asking the gate again and again
    await tap(stack, card, "Approve + code")
    await message_with(stack, "send the current 6-digit code", after=card["message_id"])
    await stack.send(pyotp.TOTP(secret).now())
    assert (await client.request(request, wait=20))["state"] == "done"
    assert (workdir / "deploys").read_text() == "once\n"
