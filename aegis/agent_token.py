"""``aegis agent token SLUG``: the lasting MCP token an agent outside aegis's runs uses.

A coding CLI you start yourself (not a run aegis starts, which gets a token of its own) needs a
token to reach aegis's MCP server as one of your agents. aegis keeps only the token's hash, so
the token is printed once, when it is made; ``--rotate`` revokes it and makes a new one. (A
copy on disk would be a copy any agent able to read files could take, and speak as this agent.)
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from datetime import datetime

from aegis.mcp.listener import MCP_PATH
from bot.agents.tokens import AgentTokens
from bot.config.file import load_config
from bot.config.settings import Settings
from bot.errors import AegisError
from bot.store import migrate
from bot.store.database import Store, wait_for


@dataclass(frozen=True)
class Minted:
    token: str | None  # None: one exists already and was left alone
    since: datetime | None = None


async def agent_token(settings: Settings, agent: str, *, rotate: bool) -> Minted:
    catalog = load_config(settings.config_file).catalog
    if catalog.agent(agent) is None:
        known = ", ".join(sorted(catalog.agents)) or "none"
        raise AegisError(f"no agent is called {agent!r} in aegis.yaml (agents: {known})")
    if catalog.agent(agent).peer:
        raise AegisError(
            f"{agent} acts for a federated peer (peer: true): only that peer's signed requests "
            "speak as it, so it gets no MCP token. Nothing was made"
        )
    settings.ensure_data_dir()
    store = Store(settings.effective_database_url)
    try:
        await wait_for(store, attempts=5)
        await migrate.upgrade(store)
        tokens = AgentTokens(store)
        since = await tokens.lasting_since(agent)
        if since is not None and not rotate:
            return Minted(None, since)
        await tokens.revoke_lasting(agent)
        return Minted(await tokens.mint(agent))
    finally:
        await store.close()


def print_agent_token(settings: Settings, agent: str, *, rotate: bool) -> int:
    minted = asyncio.run(agent_token(settings, agent, rotate=rotate))
    if minted.token is None:
        made = minted.since.strftime("%Y-%m-%d %H:%M UTC") if minted.since else "earlier"
        print(
            f"{agent} already has a token (made {made}). aegis keeps only its hash, so it "
            f"cannot show it again: `aegis agent token {agent} --rotate` makes a new one and "
            "the old one stops working at once.",
            file=sys.stderr,
        )
        return 1
    print(minted.token)
    url = f"http://127.0.0.1:{settings.mcp_port}{MCP_PATH}"
    print(
        f"A new token for {agent}, shown this once: send it as 'Authorization: Bearer <token>' "
        f"to {url} (the README shows each CLI's configuration).",
        file=sys.stderr,
    )
    return 0
