"""``aegis peer``: links with other aegis instances (federation/links.py), from the shell.

The instance that will be called invites (``invite``); the one that will call adds the
invitation (``add``), which claims it there and asks the other's status once. The
invitation is the only place a link's secret is ever shown: on stdout alone, the rest on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import sys
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import TextIO
from urllib.parse import urlsplit

import aiohttp

from bot.config.secrets import SecretFiles
from bot.config.settings import Settings, is_loopback
from bot.errors import FederationError
from bot.store import migrate
from bot.store.database import Store, wait_for
from federation.client import PeerClient, status_line
from federation.invitations import VALID_FOR, Invitation, read_invitation
from federation.links import DEFAULT_OVERLAP, Direction, Peer, Peers

HELP = """\
Link this aegis with another one, so that one may ask the other (today: its status).

A link goes one way. On the machine that will be called (say, the VPS):
    aegis peer invite laptop          prints an invitation, good once, for 10 minutes
On the machine that will call (the laptop):
    aegis peer add vps <invitation>   claims it at vps, stores the link, asks vps's status
For the VPS to call the laptop too, do the same the other way round.
This aegis's name in its links is AEGIS_PEER_NAME (default: this machine's host name);
an invitation names AEGIS_PEER_URL as where this aegis is reached (default: AEGIS_PUBLIC_URL,
else http://AEGIS_HOST:AEGIS_PORT). `aegis peer list` shows every link."""


def add_parser(commands) -> None:
    """``aegis peer`` and its commands, for aegis/cli.py."""
    peer = commands.add_parser(
        "peer",
        help="links with other aegis instances (invite, add, list, rotate, remove, status)",
        description=HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = peer.add_subparsers(dest="peer_command", metavar="PEER_COMMAND", required=True)
    invite = actions.add_parser(
        "invite",
        help="print a one-time invitation for NAME to call this aegis (valid 10 minutes)",
        description="Make a link on which the instance NAME may call this one and print the "
        "invitation that carries its secret, to paste into `aegis peer add` there. It is good "
        "once, for 10 minutes; inviting the same NAME again before it is used replaces it.",
    )
    invite.add_argument("name", metavar="NAME", help="the calling instance, as it will be known")
    invite.add_argument("--url", help="where NAME reaches this aegis (default AEGIS_PEER_URL)")
    add = actions.add_parser(
        "add",
        help="store an invitation from another aegis: this one may then call it",
        description="Claim an invitation at the aegis that printed it (which must be running "
        "and reachable at the address it names), store the link it makes under NAME, then ask "
        "the peer's status once. A rotation's invitation only replaces the link's secret. "
        "Nothing is stored when the claim fails.",
    )
    add.add_argument("name", metavar="NAME", help="what to call the peer here, e.g. vps")
    add.add_argument(
        "invitation", metavar="INVITATION", help="the text `aegis peer invite` printed"
    )
    actions.add_parser(
        "list",
        help="every link: direction, last contact, clock skew, refused requests",
        description="Every link, its direction, its last contact, the clock skew measured then "
        "(their clock minus ours) and the requests refused on it, by reason.",
    )
    rotate = actions.add_parser(
        "rotate",
        help="a new secret for a link on which NAME calls us; prints its invitation",
        description="Make a new secret for the link on which NAME calls this aegis and print "
        "the invitation that carries it, to `aegis peer add` on NAME. The old secret stays "
        "good for --overlap (24h by default); --now ends it at once.",
    )
    rotate.add_argument("name", metavar="NAME")
    when = rotate.add_mutually_exclusive_group()
    when.add_argument("--overlap", type=duration, default=DEFAULT_OVERLAP, help="e.g. 24h, 90m")
    when.add_argument("--now", action="store_true", help="the old secret stops at once")
    rotate.add_argument("--url", help="where NAME reaches this aegis (default AEGIS_PEER_URL)")
    remove = actions.add_parser(
        "remove",
        help="remove a link and its secret",
        description="Remove the link NAME and its secret; requests on it are refused at once "
        "(within a few seconds by a running aegis).",
    )
    remove.add_argument("name", metavar="NAME")
    remove.add_argument(
        "--way",
        choices=("out", "in"),
        help="which link, when NAME both calls us and is called: out (we call it) or in",
    )
    status = actions.add_parser(
        "status",
        help="ask a peer we call for its health, version and queues",
        description="Send a signed status request to the peer NAME and print its answer.",
    )
    status.add_argument("name", metavar="NAME")


def duration(text: str) -> timedelta:
    """``24h``, ``90m``, ``2d``, ``30s``."""
    found = re.fullmatch(r"(\d{1,6})([smhd])", text.strip())
    if found is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 24h, 90m or 2d")
    unit = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}[found[2]]
    return timedelta(**{unit: int(found[1])})


def run_peer(args: argparse.Namespace, settings: Settings, out: TextIO = sys.stdout) -> int:
    return asyncio.run(_run(args, settings, out, sys.stderr))


async def _run(args, settings: Settings, out: TextIO, err: TextIO) -> int:
    async with opened_peers(settings) as peers:
        command = args.peer_command
        if command in ("invite", "rotate"):
            invitation, note = await _invitation(peers, args, settings)
            _print_invitation(invitation, args.name, out, err)
            err.write(note)
        elif command == "add":
            return await _add(peers, args.name, args.invitation, out)
        elif command == "list":
            _list(await peers.all(), out)
        elif command == "remove":
            way = None if args.way is None else Direction(args.way)
            removed = await peers.remove(args.name, way)
            out.write(f"Removed the link {removed.name} ({removed.direction.described}).\n")
        else:
            return await _status(peers, args.name, out)
    return 0


async def _invitation(peers: Peers, args, settings: Settings) -> tuple[Invitation, str]:
    """The invitation ``invite`` or ``rotate`` makes, and a line to add about it."""
    url = args.url or settings.peer_address
    if args.peer_command == "invite":
        return await peers.invite(args.name, us=settings.peer_name, url=url), ""
    overlap = timedelta(0) if args.now else args.overlap
    invitation = await peers.rotate(args.name, url=url, overlap=overlap)
    seconds = int(overlap.total_seconds())
    kept = "has stopped" if not seconds else f"stays good for {_span(seconds)}"
    return invitation, f"The old secret {kept}.\n"


def _print_invitation(invitation: Invitation, name: str, out: TextIO, err: TextIO) -> None:
    """The invitation alone on stdout (to copy or pipe), what to do with it on stderr."""
    out.write(invitation.text() + "\n")
    what = "A new secret" if invitation.rotation else "An invitation"
    err.write(
        f"{what} for {name}, good once, for {VALID_FOR // 60} minutes: on {name}, run aegis peer "
        f"add <its name for {invitation.callee}> <the line above>. It names this aegis as "
        f"{invitation.callee} at {invitation.url}.\n"
    )
    if is_loopback(urlsplit(invitation.url).hostname or ""):
        err.write(
            f"{invitation.url} is reached from this machine only: set AEGIS_PEER_URL (or --url) "
            "to an address the other machine can reach.\n"
        )


async def _add(peers: Peers, name: str, text: str, out: TextIO) -> int:
    invitation = read_invitation(text)
    async with aiohttp.ClientSession(trust_env=False) as session:
        peer = await PeerClient(peers, session).link(name, invitation)
    out.write(f"Stored the link {name}: this aegis ({peer.us}) calls {peer.them} at {peer.url}.\n")
    try:
        await _status(peers, name, out)
    except FederationError as exc:
        out.write(f"The link is stored, but asking its status failed: {exc}\n")
        return 1
    return 0


async def _status(peers: Peers, name: str, out: TextIO) -> int:
    async with aiohttp.ClientSession(trust_env=False) as session:
        answer = await PeerClient(peers, session).status(name)
    out.write(status_line(name, answer) + "\n")
    return 0


def _span(seconds: int) -> str:
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds % size == 0:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


def _list(links: list[Peer], out: TextIO) -> None:
    if not links:
        out.write("No links. `aegis peer invite NAME` makes one; `aegis peer --help` says how.\n")
    for peer in links:
        out.write(peer.summary() + "\n")


@contextlib.asynccontextmanager
async def opened_peers(settings: Settings) -> AsyncIterator[Peers]:
    settings.ensure_data_dir()
    store = Store(settings.effective_database_url)
    try:
        await wait_for(store, attempts=5)
        await migrate.upgrade(store)
        yield Peers(store, SecretFiles(settings.data_dir))
    finally:
        await store.close()
