"""``aegis agent token SLUG``: the lasting MCP token an agent outside aegis's runs uses.

A coding CLI you start yourself (not a run aegis starts, which gets a token of its own) needs a
token to reach aegis's MCP server as one of your agents. The token is kept in the data dir's
secrets (0600) and only its hash in the database, so this command can print it again; with
``--rotate`` the old one stops working at once and a new one is made.
"""

from __future__ import annotations

import asyncio
import hashlib
import sys

from aegis.mcp_server import MCP_PATH
from bot.agent_tokens import AgentTokens
from bot.config_file import load_config
from bot.errors import AegisError
from bot.secrets import SecretFiles
from bot.settings import Settings
from bot.store import Store, wait_for


def secret_name(agent: str) -> str:
    # A slug is any text aegis.yaml allows; the file name must not be able to leave the folder.
    return f"agent-token-{hashlib.sha256(agent.encode()).hexdigest()[:20]}"


async def agent_token(settings: Settings, agent: str, *, rotate: bool) -> tuple[str, bool]:
    """The agent's lasting token, and whether it was made just now."""
    catalog = load_config(settings.config_file).catalog
    if catalog.agent(agent) is None:
        known = ", ".join(sorted(catalog.agents)) or "none"
        raise AegisError(f"no agent is called {agent!r} in aegis.yaml (agents: {known})")
    from bot import migrate

    settings.ensure_data_dir()
    files = SecretFiles(settings.data_dir)
    store = Store(settings.effective_database_url)
    try:
        await wait_for(store, attempts=5)
        await migrate.upgrade(store)
        tokens = AgentTokens(store)
        kept = files.get(secret_name(agent))
        if not rotate and kept is not None:
            holder = await tokens.identify(kept)
            if holder is not None and holder.agent == agent and holder.run_id is None:
                return kept, False
        # Rotating, or the kept one no longer works (revoked, or a new database): a new one.
        await tokens.revoke_lasting(agent)
        token = await tokens.mint(agent)
        files.put(secret_name(agent), token)
        return token, True
    finally:
        await store.close()


def print_agent_token(settings: Settings, agent: str, *, rotate: bool) -> int:
    token, new = asyncio.run(agent_token(settings, agent, rotate=rotate))
    print(token)
    url = f"http://127.0.0.1:{settings.mcp_port}{MCP_PATH}"
    what = "A new token" if new else "The token"
    print(
        f"{what} for {agent}: send it as 'Authorization: Bearer <token>' to {url} "
        "(the README shows each CLI's configuration).",
        file=sys.stderr,
    )
    return 0
