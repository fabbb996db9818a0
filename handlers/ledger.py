"""``/models``: when did each model last succeed. One line per provider and model, from the
ledger (bot/agents/ledger.py), with the providers aegis.yaml declares that were never asked."""

from __future__ import annotations

from telegram import Update
from telegram.ext import ContextTypes

from bot.agents.ledger import ModelSeen, provider_label
from bot.agents.profiles import AgentProfile
from bot.chat.text import visible
from bot.timeutil import short_time
from handlers.services import reply, services


async def models(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    svc = services(context)
    seen = await svc.platform.ledger.last_seen()
    await reply(update, context, models_view(seen, svc.platform.agents))


def models_view(seen: list[ModelSeen], agents: dict[str, AgentProfile]) -> str:
    known = {(s.provider, s.model) for s in seen}
    declared = sorted(
        {
            (provider_label(p), p.model)
            for agent in agents.values()
            for p in agent.providers
            if (provider_label(p), p.model) not in known
        }
    )
    if not seen and not declared:
        return "No model has been called, and no agent in aegis.yaml has providers."
    lines = ["Models (provider · model):"]
    lines += [_line(s) for s in seen]
    lines += [f"• {visible(p)} · {visible(m)}\n   never called" for p, m in declared]
    return "\n".join(lines)


def _line(seen: ModelSeen) -> str:
    ok = f"last ok {short_time(seen.last_ok)}" if seen.last_ok else "never succeeded"
    parts = [ok]
    if seen.last_failure is not None:
        status = visible(seen.last_failure_status or "?")
        parts.append(f"last failure {short_time(seen.last_failure)} ({status})")
    parts.append(f"{seen.calls_24h} call{'s' if seen.calls_24h != 1 else ''} in 24 h")
    return f"• {visible(seen.provider)} · {visible(seen.model)}\n   " + " · ".join(parts)
