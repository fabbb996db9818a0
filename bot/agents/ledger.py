"""The model-call ledger: one ``model_calls`` row per call an agent makes to a model (provider,
model, status, latency, tokens), failures included, so "when did this model last succeed" is one
query; and the rolling token budgets read from it.

A budget rolls over 24 hours: per agent (``budget_tokens`` in aegis.yaml) and for all agents
together (``AEGIS_TOKEN_BUDGET_PER_DAY``). Once one is spent, new runs are refused with a card
saying which budget it is and when enough of its tokens are a day old for a run to start again;
a run already going is not cut off mid-thought (its deadline bounds it).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from sqlalchemy import case, func, insert, select, type_coerce

from bot.agents.profiles import AgentProfile, Provider
from bot.errors import RunRefused
from bot.interactions.interaction import OPEN, Ask, Kind, TimeoutPolicy
from bot.store.database import Store
from bot.store.tables import interactions, model_calls
from bot.store.types import UTCDateTime
from bot.timeutil import now, short_time

OK = "ok"  # the status of a call that answered; anything else is a failure, in words
WINDOW = timedelta(hours=24)
CARD_PREFIX = "Token budget spent:"


def provider_label(provider: Provider) -> str:
    """How the ledger and the owner name a provider: its ``name``, else the URL's host and port
    (never the URL's user, password, path or query, where keys sometimes hide)."""
    if provider.name:
        return provider.name
    parts = urlsplit(provider.url)
    host = parts.hostname or "?"
    return f"{host}:{parts.port}" if parts.port else host


@dataclass(frozen=True)
class ModelSeen:
    """What the ledger knows of one provider's model."""

    provider: str
    model: str
    last_ok: datetime | None
    last_failure: datetime | None
    last_failure_status: str | None
    calls_24h: int


@dataclass(frozen=True)
class Spent:
    """A budget that is used up: whose, how much of how much, and when a run fits again."""

    whose: str  # "scout" or "all agents"
    setting: str  # where the budget is set
    used: int
    budget: int
    frees_at: datetime

    def card_prompt(self, agent: str) -> str:
        return (
            f"{CARD_PREFIX} {self.whose} used {self.used:,} of {self.budget:,} tokens in the "
            f"last 24 hours ({self.setting}). New runs of {agent} are refused until about "
            f"{short_time(self.frees_at)}, when enough of those tokens are a day old. "
            "Runs already going are not stopped."
        )

    def refusal(self, agent: str) -> str:
        return (
            f"{agent} cannot start: the token budget of {self.whose} is spent "
            f"({self.used:,} of {self.budget:,} tokens in 24 hours); it frees up at about "
            f"{short_time(self.frees_at)}."
        )


class Ledger:
    def __init__(self, store: Store, *, overall_per_day: int | None = None) -> None:
        self.store = store
        self.overall_per_day = overall_per_day

    async def record(
        self,
        *,
        provider: str,
        model: str,
        status: str,
        latency_ms: int,
        agent: str,
        run_id: int | None = None,
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
    ) -> None:
        values = {
            "run_id": run_id,
            "agent": agent[:100],
            "provider": provider[:200],
            "model": model[:200],
            "status": status[:40],
            "latency_ms": max(0, int(latency_ms)),
            "prompt_tokens": max(0, int(prompt_tokens)),
            "completion_tokens": max(0, int(completion_tokens)),
            "at": now(),
        }
        async with self.store.write() as conn:
            await conn.execute(insert(model_calls).values(**values))

    async def last_seen(self) -> list[ModelSeen]:
        """Per provider and model: its last success, its last failure and why, and how many
        calls it took in the last 24 hours."""
        c = model_calls.c
        since = now() - WINDOW
        summary = select(
            c.provider,
            c.model,
            _latest(c.status == OK).label("last_ok"),
            _latest(c.status != OK).label("last_failure"),
            func.sum(case((c.at >= since, 1), else_=0)).label("recent"),
        ).group_by(c.provider, c.model)
        last_failures = select(func.max(c.id)).where(c.status != OK).group_by(c.provider, c.model)
        failures = select(c.provider, c.model, c.status).where(c.id.in_(last_failures))
        async with self.store.read() as conn:
            rows = (await conn.execute(summary)).all()
            why = {(p, m): s for p, m, s in (await conn.execute(failures)).all()}
        seen = [
            ModelSeen(
                row.provider,
                row.model,
                row.last_ok,
                row.last_failure,
                why.get((row.provider, row.model)),
                int(row.recent or 0),
            )
            for row in rows
        ]
        return sorted(seen, key=lambda s: (s.provider, s.model))

    async def tokens_spent(self, agent: str | None = None, *, since: datetime | None = None) -> int:
        """Tokens (prompt and completion) spent since ``since`` (default: 24 hours ago), by
        ``agent`` or by all agents."""
        c = model_calls.c
        query = select(func.coalesce(func.sum(c.prompt_tokens + c.completion_tokens), 0)).where(
            c.at >= (since or now() - WINDOW)
        )
        if agent is not None:
            query = query.where(c.agent == agent)
        async with self.store.read() as conn:
            return int((await conn.execute(query)).scalar_one())

    async def spent(self, agent: AgentProfile) -> Spent | None:
        """The first spent budget that stands in the way of a new run of ``agent``."""
        budgets = [
            (
                agent.slug,
                agent.slug,
                f"budget_tokens of {agent.slug} in aegis.yaml",
                agent.budget_tokens,
            ),
            (None, "all agents", "AEGIS_TOKEN_BUDGET_PER_DAY", self.overall_per_day),
        ]
        for who, whose, setting, budget in budgets:
            if budget is None:
                continue
            since = now() - WINDOW
            used = await self.tokens_spent(who, since=since)
            if used >= budget:
                frees_at = await self._frees_at(who, since, used - budget + 1)
                return Spent(whose, setting, used, budget, frees_at)
        return None

    async def _frees_at(self, agent: str | None, since: datetime, excess: int) -> datetime:
        """When at least ``excess`` of the tokens spent since ``since`` are a day old."""
        c = model_calls.c
        query = (
            select(c.at, c.prompt_tokens + c.completion_tokens)
            .where(c.at >= since, c.prompt_tokens + c.completion_tokens > 0)
            .order_by(c.at, c.id)
        )
        if agent is not None:
            query = query.where(c.agent == agent)
        freed = 0
        last = since
        async with self.store.read() as conn:
            for at, tokens in (await conn.execute(query)).all():
                freed += tokens
                last = at
                if freed >= excess:
                    break
        return last + WINDOW

    async def refuse_if_spent(self, agent: AgentProfile, chat_id: int, interactions_) -> None:
        """Raise RunRefused when a budget of ``agent`` is spent, after putting a card in the
        chat that says so (one open card per budget, however often runs are refused)."""
        spent = await self.spent(agent)
        if spent is None:
            return
        if not await self._card_open(agent.slug, spent):
            wait = spent.frees_at - now()
            await interactions_.create(
                Ask(
                    kind=Kind.ACKNOWLEDGEMENT,
                    agent=agent.slug,
                    chat_id=chat_id,
                    prompt=spent.card_prompt(agent.slug),
                    # Gone when the tokens free up: by then it no longer says anything true.
                    timeout=min(max(wait, timedelta(minutes=1)), WINDOW),
                    timeout_policy=TimeoutPolicy.ARCHIVE,
                )
            )
        raise RunRefused(spent.refusal(agent.slug))

    async def _card_open(self, agent: str, spent: Spent) -> bool:
        c = interactions.c
        query = (
            select(c.id)
            .where(
                c.agent == agent,
                c.kind == Kind.ACKNOWLEDGEMENT,
                c.status.in_(OPEN),
                c.prompt.startswith(f"{CARD_PREFIX} {spent.whose} used", autoescape=True),
            )
            .limit(1)
        )
        async with self.store.read() as conn:
            return (await conn.execute(query)).first() is not None


def _latest(condition):
    """The latest ``at`` of the rows meeting ``condition``, read back as an aware UTC time."""
    return type_coerce(func.max(case((condition, model_calls.c.at))), UTCDateTime())
