"""``aegis doctor``: checks the configuration and every connection, and names each problem in a
sentence with the setting to change."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from telegram.error import InvalidToken, NetworkError, TelegramError

from aegis import instance
from aegis.botapi.endpoint import make_bot
from aegis.doctor_peers import peer_findings
from aegis.embedded_redis import EmbeddedRedis, describe_redis_url
from aegis.service.check import installed_units
from bot.agents.profiles import AgentProfile
from bot.config.file import load_config
from bot.config.secrets import SecretFiles
from bot.config.settings import Settings, is_loopback
from bot.errors import PolicyConfigError, StoreError
from bot.store import migrate
from bot.store.database import Store
from jobs.harnesses.cli import executable_of
from jobs.harnesses.cli_specs import CLIS

VERSION = re.compile(r"\d+\.\d+\.\d+")


@dataclass(frozen=True)
class Finding:
    ok: bool
    text: str
    warn: bool = False  # worth knowing, not a problem to fix (a CLI version the tests skip)


async def diagnose(settings: Settings) -> list[Finding]:
    findings = [_data_dir(settings), _bind(settings), _ports(settings)]
    findings += _telegram_settings(settings)
    findings.append(database := await _database(settings))
    findings.append(_redis(settings))
    if settings.telegram_token is not None:
        findings.append(await _telegram(settings))
    findings.append(_totp(settings))
    findings.extend(_config_file(settings))
    findings += [Finding(ok, text) for ok, text in installed_units(settings)]
    if database.ok and "to apply" not in database.text:
        findings += await peer_findings(settings, Finding)
    return findings


def _data_dir(settings: Settings) -> Finding:
    try:
        directory = settings.ensure_data_dir()
    except OSError as exc:
        return Finding(False, f"Cannot create the data dir: {exc}. Set AEGIS_DATA_DIR.")
    if not os.access(directory, os.W_OK):
        return Finding(False, f"The data dir {directory} is not writable. Set AEGIS_DATA_DIR.")
    return Finding(True, f"Data dir {directory.resolve()} is writable.")


def _ports(settings: Settings) -> Finding:
    running = instance.holder(settings, "web")
    if running is not None:
        return Finding(True, f"aegis is running here ({running}); its ports are its own.")
    taken = instance.ports_taken(settings)
    if taken:
        return Finding(False, " ".join(sentence + "." for sentence in taken))
    return Finding(True, f"Ports {settings.port} (web) and {settings.mcp_port} (MCP) are free.")


def _bind(settings: Settings) -> Finding:
    if is_loopback(settings.host):
        return Finding(True, f"Web server will listen on {settings.web_url} (loopback only).")
    if settings.allow_public_bind:
        return Finding(True, f"Web server will listen on {settings.web_url}, beyond loopback.")
    return Finding(
        False,
        f"AEGIS_HOST={settings.host} is not loopback; set AEGIS_ALLOW_PUBLIC_BIND=true to "
        "allow it, or put a reverse proxy in front and keep AEGIS_HOST=127.0.0.1.",
    )


def _telegram_settings(settings: Settings) -> list[Finding]:
    if settings.telegram_token is None:
        return [Finding(True, "No AEGIS_TELEGRAM_TOKEN: the built-in emulator and chat page.")]
    findings = []
    if not settings.owner_ids:
        findings.append(
            Finding(
                False,
                "AEGIS_OWNER_IDS is empty: nobody can use the bot until an account pairs. Set it "
                "to your Telegram user id, or run `aegis totp init` and send /pair CODE.",
            )
        )
    if settings.public_url and not settings.public_url.startswith("https://"):
        findings.append(
            Finding(False, "AEGIS_PUBLIC_URL must start with https:// (Telegram requires it).")
        )
    return findings


async def _database(settings: Settings) -> Finding:
    store = Store(settings.effective_database_url)
    try:
        pending = await migrate.pending_revisions(store)
    except StoreError as exc:
        return Finding(False, f"{exc}. Check AEGIS_DATABASE_URL.")
    except ModuleNotFoundError as exc:
        return Finding(
            False, f"The database driver {exc.name} is missing: pip install 'aegis[postgres]'."
        )
    finally:
        await store.close()
    if pending:
        return Finding(
            True, f"{store.describe()}: {len(pending)} migration(s) to apply at start-up."
        )
    return Finding(True, f"{store.describe()}: reachable, schema up to date.")


def _redis(settings: Settings) -> Finding:
    if settings.redis_url is None:
        embedded = EmbeddedRedis(settings.data_dir)
        state = "running" if embedded.is_running() else "starts with aegis"
        return Finding(True, f"Embedded Redis ({state}); set AEGIS_REDIS_URL for a server.")
    try:
        client = redis.Redis.from_url(
            settings.redis_url, socket_connect_timeout=3, retry=Retry(NoBackoff(), 0)
        )
        client.ping()
    except (redis.RedisError, ValueError) as exc:
        return Finding(
            False,
            f"Cannot reach Redis at {describe_redis_url(settings.redis_url)} "
            f"({type(exc).__name__}). Check AEGIS_REDIS_URL.",
        )
    return _persistence(client, describe_redis_url(settings.redis_url))


def _persistence(client: redis.Redis, where: str) -> Finding:
    """A Redis server that does not write an append-only file loses, when it restarts, the jobs
    it held: the sweeps bring back what the database knows of (README, "What survives a
    restart"), but a /ping or a transcription asked for just then is gone."""
    try:
        enabled = client.info("persistence").get("aof_enabled")
    except redis.RedisError as exc:
        return Finding(
            False,
            f"{where} answers, but will not say whether it persists ({type(exc).__name__}): "
            "make sure it runs with `appendonly yes`.",
        )
    if enabled != 1:
        return Finding(
            False,
            f"{where} answers but does not persist: a restart loses the jobs it holds. Set "
            "`appendonly yes` in its redis.conf (or run `redis-cli CONFIG SET appendonly yes` "
            "then `redis-cli CONFIG REWRITE`).",
        )
    return Finding(True, f"{where} answers and persists (appendonly yes).")


async def _telegram(settings: Settings) -> Finding:
    bot = make_bot(settings)
    try:
        me = await asyncio.wait_for(bot.get_me(), timeout=15)
    except InvalidToken:
        return Finding(False, "Telegram refused the token. Check AEGIS_TELEGRAM_TOKEN.")
    except (NetworkError, TimeoutError) as exc:
        return Finding(
            False,
            f"Cannot reach the Bot API ({type(exc).__name__}). Check the network or "
            "AEGIS_TELEGRAM_API_URL.",
        )
    except TelegramError as exc:
        return Finding(False, f"The Bot API answered with an error: {exc.message}.")
    finally:
        await bot.shutdown()
        await bot.request.shutdown()  # get_me alone never initialized the Bot for shutdown()
    return Finding(True, f"Telegram knows the bot as @{me.username}.")


def _totp(settings: Settings) -> Finding:
    if SecretFiles(settings.data_dir).get("totp") is None:
        return Finding(
            True,
            "No TOTP secret yet: run `aegis totp init` to pair other accounts and to approve "
            "irreversible actions (until then they cannot be approved).",
        )
    return Finding(True, "TOTP secret present: /pair CODE and step-up approvals work.")


def _config_file(settings: Settings) -> list[Finding]:
    path = settings.config_file
    try:
        config = load_config(path)
    except PolicyConfigError as exc:
        return [Finding(False, f"{exc}. Fix the file or point AEGIS_CONFIG_FILE elsewhere.")]
    if not path.exists():
        return [Finding(True, f"No {path}: only the built-in tools and the demo agent.")]
    catalog, rules = config.catalog, config.triage_rules
    running = sum(agent.runnable for agent in config.agents.values())
    findings = [
        Finding(
            True,
            f"{path}: {len(catalog.tools)} tools, {len(catalog.agents)} agents ({running} with "
            f"a harness), {len(rules)} triage rules and {len(config.schedules)} schedules.",
        )
    ]
    private = settings.private_paths
    for agent in config.agents.values():
        problems = _agent_problems(agent, private)
        findings += [Finding(False, f"{path}: {problem}") for problem in problems]
        findings += _cli_version(agent)
    return findings


def _agent_problems(agent: AgentProfile, private: tuple[Path, ...]) -> list[str]:
    """What would stop an agent's run on this machine: a missing CLI, working directory or
    API key, or a workdir that holds aegis's data dir (``private``). The file itself is valid;
    these are the machine's side."""
    place = f"agents.{agent.slug}"
    problems = []
    if agent.harness is not None and agent.harness.is_cli:
        command, found = executable_of(agent, CLIS[agent.harness])
        if found is None:
            problems.append(
                f"{place}.command: {command} is not an executable on PATH; install the "
                f"{agent.harness} CLI or give its full path as command:"
            )
    if agent.workdir is not None and not agent.workdir.is_dir():
        problems.append(f"{place}.workdir: {agent.workdir} is not a directory")
    elif agent.workdir is not None:
        # A coding CLI reads its workdir unasked (Codex's read-only shell, Claude Code or
        # OpenCode as a user configured them): aegis's secrets would reach the model.
        for path in private:
            if path.is_relative_to(agent.workdir.resolve()):
                what = "settings file" if path.is_file() else "data dir"
                problems.append(
                    f"{place}.workdir: aegis's {what} {path} lies inside {agent.workdir}, "
                    "where the agent's own tools read without asking; move it out"
                )
    for index, provider in enumerate(agent.providers):
        if provider.key_env and not os.environ.get(provider.key_env):
            problems.append(
                f"{place}.providers[{index}].key_env: the environment variable "
                f"{provider.key_env} is not set, so {provider.url} cannot be asked"
            )
    return problems


def _cli_version(agent: AgentProfile) -> list[Finding]:
    """The installed version of an agent's coding CLI, beside the one aegis's tests run."""
    spec = CLIS.get(agent.harness) if agent.harness is not None else None
    command = executable_of(agent, spec)[1] if spec is not None else None
    if spec is None or command is None:
        return []  # not a CLI agent, or its missing command is already a problem above
    place = f"agents.{agent.slug}"
    # As a run starts it: none of aegis's own variables (they may hold its secrets).
    env = {name: value for name, value in os.environ.items() if not name.startswith("AEGIS_")}
    try:
        asked = [command, "--version"]  # the agent's own command, from the owner's aegis.yaml
        shown = subprocess.run(  # noqa: S603
            asked, capture_output=True, text=True, timeout=20, check=False, env=env
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return [Finding(True, f"{place}: {command} --version did not answer ({exc})", warn=True)]
    found = VERSION.search(shown or "")
    if found is None:
        return [Finding(True, f"{place}: {command} --version printed no version", warn=True)]
    version = found.group(0)
    if version == spec.tested:
        return [Finding(True, f"{place}: {spec.name} {version}, the version aegis's tests run.")]
    return [
        Finding(
            True,
            f"{place}: {spec.name} {version} is installed; aegis's tests run {spec.tested} "
            f"(npm install -g {spec.package}@{spec.tested}). Its own tools stay off either way; "
            "its flags and output are what may differ.",
            warn=True,
        )
    ]
