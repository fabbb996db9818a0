"""``/demo``: the built-in demo agent (bot/agents/demo.py) takes its three steps through the gate.

Each step is one message: the step asks the call path to act; a gated step leaves a card and
finishes, and the card's continuation runs the same step again once it is settled, so nothing
waits on a person. Approved, the identical call now finds its grant and runs; denied or
expired, the step reports that nothing was done and the demo moves on.
"""

from __future__ import annotations

import asyncio

import dramatiq

from bot.actions.call import CallStatus, Continuation, ToolCall
from bot.agents import demo
from bot.chat.text import Html, html
from bot.interactions.interactions import InteractionOutcome
from jobs.worker.broker import require_broker
from jobs.worker.resources import resources

require_broker()


# Not retried: a step that ran after approval used its grant, and a rerun would ask again.
@dramatiq.actor(queue_name="default", max_retries=0)
async def demo_step(
    chat_id: int, run: str, step: int = 0, interaction_id: int | None = None
) -> dict:
    res = await resources()
    platform = res.platform
    plan = demo.steps(run)
    total = len(plan)
    if interaction_id is not None:
        settled = await platform.interactions.claim_continuation(interaction_id)
        if settled is None:
            return {"duplicate_continuations": 1}
        if settled.outcome != InteractionOutcome.APPROVED:
            text = (
                f"Step {step + 1}/{total}: card #{settled.id} was {settled.outcome}, "
                "so nothing was done."
            )
            await platform.outbox.send(chat_id, text, key=f"demo:{run}:{step}:settled")
            return await _next(chat_id, run, step)
    elif step == 0:
        intro = await _introduction(platform)
        await platform.outbox.send(chat_id, intro, key=f"demo:{run}:intro")
    if step >= total:
        return {"steps_done": 0}
    current = plan[step]
    continuation = Continuation("demo_step", {"chat_id": chat_id, "run": run, "step": step})
    call = ToolCall(demo.AGENT, current.tool, current.args, chat_id)
    outcome = await platform.actions.perform(call, continuation=continuation)
    label = f"Step {step + 1}/{total}, {current.what}"
    if outcome.status is CallStatus.GATED:
        await platform.outbox.send(
            chat_id,
            f"{label}:\nwaiting on card #{outcome.interaction_id}.",
            key=f"demo:{run}:{step}:gated",
        )
        return {"cards_waiting": 1}
    detail = outcome.result if outcome.ran else outcome.reason
    await platform.outbox.send(
        chat_id,
        f"{label}:\n{outcome.status.value}: {detail}",
        key=f"demo:{run}:{step}:{outcome.status}",
    )
    return {"tool_calls": int(outcome.ran), **(await _next(chat_id, run, step))}


async def _next(chat_id: int, run: str, step: int) -> dict:
    if step + 1 < len(demo.steps(run)):
        await asyncio.to_thread(demo_step.send, chat_id, run, step + 1)
        return {"steps_queued": 1}
    outbox = (await resources()).platform.outbox
    await outbox.send(
        chat_id, "The demo is over. /audit shows what the gate decided.", key=f"demo:{run}:done"
    )
    return {"steps_queued": 0}


async def _introduction(platform) -> Html:
    notes = await platform.interactions.notes_for(demo.AGENT)
    text = html(
        "The demo agent will read the clock, write a file and then delete it. The read runs "
        "at once; the write waits for your tap; the delete cannot be undone, so it waits for "
        "your tap and a code from your authenticator (set one up with "
        "<code>aegis totp init</code>)."
    )
    if notes:
        text += "\n\nWhat you told me before, by replying to my cards:\n" + "\n".join(
            f"• {note}" for note in notes[-5:]
        )
    return text
