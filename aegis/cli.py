"""The ``aegis`` command."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from aegis import aegis_version, backup, peer
from bot.config.settings import Settings, load_settings
from bot.errors import AegisError, AlreadyRunning, ConfigError

DESCRIPTION = """\
aegis: your personal agent platform, driven from Telegram.

With no configuration, `aegis up` runs everything on this machine: SQLite and an embedded Redis
in ./.aegis, and, without AEGIS_TELEGRAM_TOKEN, a built-in Telegram emulator with a chat page.
Settings come from AEGIS_* environment variables or a .env file; see the README."""

COMMANDS = {
    "up": (
        "run web, worker and clock in one process (a laptop or a small VPS)",
        "Runs the whole platform in one process. Prints the chat page's address when no bot "
        "token is set. Stop it with Ctrl-C.",
    ),
    "web": (
        "run the web process: webhook or long polling, health, emulator",
        "The Procfile's `web`: receives Telegram updates (webhook when AEGIS_PUBLIC_URL is set, "
        "long polling otherwise) and serves /healthz and, with no token, the emulator.",
    ),
    "worker": (
        "run a worker for the background jobs",
        "The Procfile's `worker`: runs the Dramatiq actors (deliveries, /ping, sweeps). Run "
        "as many as you like, on as many machines as share AEGIS_REDIS_URL and the database.",
    ),
    "clock": (
        "run the clock that enqueues scheduled jobs (one works, more stand by)",
        "The Procfile's `clock`: reads the schedules table and enqueues what is due. It never "
        "runs the work itself. One clock per data dir; clocks on several machines sharing one "
        "database take turns through a lease: one works, the others stand by to take over.",
    ),
    "status": (
        "what /status shows, from the shell: processes, queues, outbox, recent work",
        "Reads the database and the broker of this data dir (starting nothing) and prints the "
        "processes alive, the queues' depths, the outbox, the recent work and schedule warnings, "
        "as /status does in chat. Exits 1 when aegis never ran here or the database is unreadable.",
    ),
    "logs": (
        "print the end of aegis up's log file (-f: follow it)",
        "Prints the last lines of the log file `aegis up` writes in the data dir (aegis.log, "
        "rotated at 5 MB, three kept). -f keeps printing new lines until Ctrl-C. The Procfile's "
        "processes log to their process manager instead (journalctl).",
    ),
    "open": (
        "print the chat page's address again (and a QR code)",
        "Prints the address of the chat page of the aegis running on this data dir, with its "
        "key, and a QR code of it when a phone can reach it. Exits 1 when aegis is not running "
        "here or talks to the real Telegram (then open your chat with the bot).",
    ),
    "doctor": (
        "check the configuration and every connection",
        "Checks settings, the data dir, the database, Redis and Telegram, and names each "
        "problem with the setting to change. Exits 1 if anything needs fixing.",
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="aegis", description=DESCRIPTION, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"aegis {aegis_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (summary, details) in COMMANDS.items():
        command = commands.add_parser(name, help=summary, description=details)
        if name == "logs":
            command.add_argument("-f", "--follow", action="store_true", help="keep printing")
            command.add_argument(
                "-n", "--lines", type=int, default=50, help="how many lines (default 50)"
            )
    _add_service(commands)
    db = commands.add_parser("db", help="database maintenance", description="Database commands.")
    db_commands = db.add_subparsers(dest="db_command", metavar="DB_COMMAND", required=True)
    db_commands.add_parser(
        "upgrade",
        help="apply pending migrations",
        description="Apply pending migrations (aegis also does this at every start).",
    )
    totp = commands.add_parser(
        "totp", help="the TOTP secret for pairing", description="Manage the TOTP secret."
    )
    totp_commands = totp.add_subparsers(dest="totp_command", metavar="TOTP_COMMAND", required=True)
    init = totp_commands.add_parser(
        "init",
        help="create the secret and show its QR code",
        description="Create the TOTP secret, print its otpauth:// URI and a QR code to scan. "
        "Then send /pair CODE to the bot from each account that should be an owner.",
    )
    init.add_argument("--rotate", action="store_true", help="replace an existing secret")
    backup.add_parser(commands)
    peer.add_parser(commands)
    agent = commands.add_parser(
        "agent", help="agents' MCP tokens", description="Commands about agents."
    )
    agent_commands = agent.add_subparsers(
        dest="agent_command", metavar="AGENT_COMMAND", required=True
    )
    token = agent_commands.add_parser(
        "token",
        help="make an agent's MCP token and print it (once)",
        description="Make the lasting bearer token with which an MCP client (Claude Code, "
        "Codex, OpenCode) reaches aegis's MCP server as the agent SLUG of aegis.yaml, and "
        "print it. aegis keeps only its hash, so it is shown once; --rotate makes a new one. "
        "The token alone goes to stdout.",
    )
    token.add_argument("slug", metavar="SLUG", help="the agent, as aegis.yaml names it")
    token.add_argument(
        "--rotate", action="store_true", help="revoke the current token and make a new one"
    )
    return parser


SERVICE_INSTALL = """\
Write systemd units that run aegis on this machine: aegis-web, aegis-clock, N workers (the
template aegis-worker@.service as aegis-worker@1..N) and aegis.target grouping them, in the slice
aegis.slice, with memory caps sized to the host. Settings and secrets (AEGIS_* of the
environment and .env) go to an EnvironmentFile of mode 0600 (/etc/aegis/aegis.env, or aegis.env
in --unit-dir); the units (0644) hold nothing secret. Run it from the clone, with the venv's
aegis: sudo .venv/bin/aegis service install --workers 2

It then prints the commands that need root (useradd, the data dir, systemctl) rather than
running them; --yes runs them. `aegis doctor` compares installed units with what this would
write now."""


def _add_service(commands) -> None:
    service = commands.add_parser(
        "service",
        help="run aegis under systemd (service install)",
        description="Run aegis as systemd units.",
    )
    service_commands = service.add_subparsers(
        dest="service_command", metavar="SERVICE_COMMAND", required=True
    )
    install = service_commands.add_parser(
        "install",
        help="write the systemd units and print the commands to start them",
        description=SERVICE_INSTALL,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    install.add_argument("--dry-run", action="store_true", help="write nothing; print the units")
    install.add_argument("--yes", action="store_true", help="also run the root commands")
    install.add_argument("--workers", type=int, default=1, help="worker units (default 1)")
    install.add_argument("--user", default="aegis", help="the service user (default aegis)")
    install.add_argument(
        "--unit-dir",
        type=Path,
        help="where to write the units (default AEGIS_UNIT_DIR, /etc/systemd/system)",
    )
    install.add_argument(
        "--memory", help="the host's memory to size the caps by, e.g. 2G (default: /proc/meminfo)"
    )


def main(argv: list[str] | None = None) -> int:
    # PTB 22 warns on every RetryAfter that ``retry_after`` becomes a timedelta in its next
    # major version, from inside its own constructor; aegis reads either form, so opt in.
    os.environ.setdefault("PTB_TIMEDELTA", "1")
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # plain `aegis`: what it can do, not an error
        parser.print_help()
        return 0
    try:
        settings = load_settings()
        return dispatch(args, settings)
    except AlreadyRunning as exc:
        print(f"aegis: {exc}", file=sys.stderr)
        return 2
    except ConfigError as exc:
        print(f"aegis: configuration problem: {exc}", file=sys.stderr)
        return 2
    except AegisError as exc:
        print(f"aegis: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"aegis: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def dispatch(args: argparse.Namespace, settings: Settings) -> int:
    from aegis import processes
    from aegis.runtime import setup_logging

    setup_logging(settings, to_file=args.command == "up")
    if args.command in ("up", "web"):
        settings.check_bind()
    if args.command in ("up", "web", "worker"):
        from bot.config.file import load_catalog

        load_catalog(settings.config_file)  # a bad aegis.yaml stops here, with its place named
    if args.command == "up":
        return processes.run_async_process("up", settings, processes.serve_up)
    if args.command == "web":
        return processes.run_async_process("web", settings, processes.serve_web)
    if args.command == "clock":
        return processes.run_async_process("clock", settings, processes.serve_clock)
    if args.command == "worker":
        return processes.run_worker_process(settings)
    if args.command == "doctor":
        return run_doctor(settings)
    if args.command == "status":
        from aegis.status import run_status

        return run_status(settings, sys.stdout)
    if args.command == "logs":
        from aegis.logs import print_logs

        return print_logs(settings, sys.stdout, lines=args.lines, follow=args.follow)
    if args.command == "open":
        return run_open(settings, sys.stdout)
    if args.command == "db":
        return run_db_upgrade(settings)
    if args.command == "service":
        from aegis.service.install import Request, run_install

        request = Request(
            args.workers, args.user, args.memory, args.unit_dir, args.dry_run, args.yes
        )
        return run_install(request, settings, sys.stdout)
    if args.command == "backup":
        return backup.run_backup(args, settings)
    if args.command == "peer":
        return peer.run_peer(args, settings)
    if args.command == "agent":
        from aegis.agent_token import print_agent_token

        return print_agent_token(settings, args.slug, rotate=args.rotate)
    from aegis.totp import init_totp

    return init_totp(settings, rotate=args.rotate, out=sys.stdout)


def run_open(settings: Settings, out) -> int:
    from aegis import instance
    from aegis.totp import qr_text
    from bot.config.settings import is_loopback

    if not settings.uses_emulator:
        out.write(
            "aegis talks to Telegram with AEGIS_TELEGRAM_TOKEN: open your chat with the bot in "
            "Telegram. There is no chat page.\n"
        )
        return 1
    page = instance.chat_page(settings)
    if page is None:
        out.write(
            f"aegis is not running on the data dir {settings.data_dir.resolve()}: start it with "
            "`aegis up`, which prints the chat page's address.\n"
        )
        return 1
    out.write(f"The chat page: {page}\n")
    if is_loopback(settings.host):
        out.write("It listens on this machine only (AEGIS_HOST); open it in a browser here.\n")
    else:
        out.write("\n" + qr_text(page))
    return 0


def run_doctor(settings: Settings) -> int:
    from aegis.doctor import diagnose

    findings = asyncio.run(diagnose(settings))
    for finding in findings:
        label = "FIX " if not finding.ok else "warn" if finding.warn else "ok  "
        print(f"{label} {finding.text}")
    problems = sum(not finding.ok for finding in findings)
    print(f"\n{problems} problem(s) found." if problems else "\nAll good.")
    return 1 if problems else 0


def run_db_upgrade(settings: Settings) -> int:
    from bot.store import migrate
    from bot.store.database import Store, wait_for

    async def upgrade() -> list[str]:
        settings.ensure_data_dir()
        store = Store(settings.effective_database_url)
        try:
            await wait_for(store, attempts=5)
            return await migrate.upgrade(store)
        finally:
            await store.close()

    applied = asyncio.run(upgrade())
    print(f"Applied {', '.join(applied)}." if applied else "The schema is up to date.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
