"""``/run``, ``/runs``, ``/cancel`` and ``/agents``. Thin: each parses the command and asks
the platform, which decides (bot/core.py, bot/agents/agent_runs.py). ``/run scout@vps …`` asks
the linked aegis vps to run its agent scout (handlers/peers.py)."""

from __future__ import annotations

from telegram import Update
from telegram.ext import ContextTypes

from bot.agents.agent_run import RunState
from bot.agents.endings import settle_task
from bot.chat.views.runs import agents_view, runs_view
from bot.errors import RunRefused
from handlers import peers
from handlers.services import Services, place_of, reply, services

RUN_USAGE = "Send /run, an agent and what to do: /run demo write me a haiku. /agents lists them."
RUNS_SHOWN = 10


async def run(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    svc = services(context)
    parsed = await _agent_and_request(svc, update)
    if parsed is None:
        await reply(update, context, RUN_USAGE)
        return
    agent, request = parsed
    on_peer = peers.ON_PEER.fullmatch(agent)
    if on_peer is not None:  # /run scout@vps …: a run of vps's scout, asked of vps
        slug, peer = on_peer.groups()
        if not request:
            await reply(update, context, f"Say what {agent} should do: /run {agent} what to do")
            return
        await peers.ask_peer(update, context, peer, "run", {"agent": slug, "request": request})
        return
    try:
        # The message's own id is the key: the same update handled twice starts one run.
        await svc.platform.start_run(
            agent,
            request,
            update.effective_chat.id,
            key=f"command:{update.effective_chat.id}:{update.message.message_id}",
        )
    except RunRefused as exc:
        await reply(update, context, f"{exc} Nothing was started.")
    # Otherwise the run's own message, edited as it goes, is the answer.


async def _agent_and_request(svc: Services, update: Update) -> tuple[str, str] | None:
    """``/run agent what to do``; in an agent's forum topic, ``/run what to do`` is for that
    agent (a first word naming another agent still picks that one)."""
    words = (update.message.text or "").split(maxsplit=1)
    rest = words[1].strip() if len(words) > 1 else ""
    first = rest.split(maxsplit=1)[0] if rest else ""
    place = place_of(update)
    own = await svc.platform.topics.agent_of(place.chat_id, place.thread_id)
    if own is not None and first not in svc.platform.agents and not peers.ON_PEER.fullmatch(first):
        return own, rest
    if not first:
        return None
    return first, rest[len(first) :].strip()


async def runs(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    svc = services(context)
    await reply(update, context, runs_view(await svc.platform.runs.recent(limit=RUNS_SHOWN)))


async def cancel(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    svc = services(context)
    number = (context.args[0] if context.args else "").lstrip("#")
    if len(context.args) != 1 or not number.isdigit() or len(number) > 12:
        await reply(
            update, context, "Send /cancel and a run's number: /cancel 12. /runs lists them."
        )
        return
    before = await svc.platform.runs.get(int(number))
    if before is None:
        await reply(update, context, f"There is no run #{number}.")
        return
    if before.status.is_over:
        status = before.status.value.replace("_", " ")
        await reply(update, context, f"Run #{before.id} is already over ({status}).")
        return
    after = await svc.platform.cancel_run(before.id)
    if after is not None and after.status is RunState.CANCELLED:
        await svc.platform.show_run(after)
        await settle_task(svc.platform.tasks, after)
        await reply(update, context, f"Run #{after.id} is cancelled; it had not run on.")
    else:
        await reply(
            update, context, f"Stopping run #{before.id}; its message shows when it has stopped."
        )


async def agents(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    svc = services(context)
    activity = await svc.platform.runs.by_agent()
    await reply(update, context, agents_view(svc.platform.agents, activity))
