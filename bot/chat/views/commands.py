"""The one command table: each command's name, its entry in Telegram's menu and its line in /help.

The Telegram adapter registers a handler for every name here and sends the menu from it
(handlers/application.py); /help is rendered from it, so the three cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.chat.text import Html, bold, html


@dataclass(frozen=True)
class Section:
    """A group of commands in /help, under its title."""

    title: str
    lead: str = ""  # follows the title on its first line
    after: str = ""  # a paragraph after the section's commands


@dataclass(frozen=True)
class Command:
    name: str  # without the slash
    description: str  # Telegram's menu (set_my_commands) shows this
    section: Section
    help: str  # what /help says it does
    args: str = ""  # what follows the command, as /help shows it: "12", "words"

    @property
    def usage(self) -> str:
        return f"/{self.name} {self.args}" if self.args else f"/{self.name}"

    def help_line(self) -> Html:
        """The command as Telegram makes it tappable, what follows it in italics, then what it
        does."""
        if not self.args:
            return html("/{}: {}", self.name, self.help)
        return html("/{} <i>{}</i>: {}", self.name, self.args, self.help)


INTRO = "aegis is your personal agent platform, driven from this chat."
OUTRO = (
    "Every message I send goes through a durable outbox, so an outage delays a reply, "
    "never loses it."
)
# What /start says after the hello: short enough to read on a phone without scrolling; /help
# has the rest. A paragraph is one line: the phone wraps it, never the text.
FIRST_STEPS = (
    "Forward me anything, or just write it, and it becomes a task in your inbox.",
    "Agents work for you and ask before they change anything: you approve on a card.",
    "Try /demo to see a card, /next for what you can do now, /watch to keep an eye on a "
    "site, and /help for every command.",
)

CAPTURE = Section(
    "Capture",
    lead=(
        "forward me anything (or just write it) and it becomes a task in your inbox, with "
        "buttons to triage it at once: @next, @someday, @waiting, @reference or Drop. What you "
        "leave in the inbox is triaged every 15 minutes, by your rules in aegis.yaml or by a "
        "card that asks you."
    ),
)
AGENTS = Section("Agents")
GATE = Section(
    "The gate",
    after=(
        "Every action an agent wants to take passes a gate: reads run, anything else waits for "
        "your tap on a card, and what cannot be undone also needs a code from your "
        "authenticator. Reply to a card with text to leave a note for the agent that asked."
    ),
)
WATCH = Section(
    "Monitors",
    after=(
        "A monitor that goes down sends one card (Ack, Silence, Run an agent), reminds you "
        "while it stays down, and edits the card when it recovers."
    ),
)
MACHINE = Section("The machine")
SECTIONS = (CAPTURE, AGENTS, GATE, WATCH, MACHINE)

# In the order of Telegram's menu; /help keeps this order within each section.
COMMANDS = (
    Command(
        "next", "What you can do now", CAPTURE, "what you can do now, grouped by context label"
    ),
    Command("inbox", "Captured, not triaged yet", CAPTURE, "captured, not triaged yet"),
    Command("waiting", "Waiting on someone", CAPTURE, "waiting on someone"),
    Command("someday", "Someday, maybe", CAPTURE, "someday, maybe"),
    Command("find", "Search every task", CAPTURE, "search every task", "words"),
    Command(
        "recall",
        "Search your notes",
        CAPTURE,
        "search your notes (/note) and @reference items",
        "words",
    ),
    Command("done", "Close a task as done", CAPTURE, "close task 12 as done", "12"),
    Command(
        "label",
        "Add or remove context labels",
        CAPTURE,
        "add or remove context labels",
        "12 +quick -errand",
    ),
    Command("assign", "Give a task to an agent", CAPTURE, "give task 12 to an agent", "12 agent"),
    Command("task", "Show one task", CAPTURE, "one task in full", "12"),
    Command("note", "Keep a note: /recall finds it", CAPTURE, "keep a note for /recall", "text"),
    Command(
        "aside",
        "Say something without capturing it",
        CAPTURE,
        "say something that is neither captured nor kept",
        "text",
    ),
    Command(
        "run",
        "Run an agent: /run agent what to do",
        AGENTS,
        "start a run; its message shows how it goes, the result comes as a reply (in an "
        "agent's topic, the agent's name can be left out; agent@peer runs one of a linked "
        "aegis, once its owner approves it there with a code)",
        "agent what to do",
    ),
    Command(
        "runs", "Latest runs and what they changed", AGENTS, "the latest runs and what each changed"
    ),
    Command("cancel", "Stop a run", AGENTS, "stop run 12", "12"),
    Command(
        "agents",
        "Agents, what they are doing, their last run",
        AGENTS,
        "every agent, what it is doing, its last run",
    ),
    Command(
        "remind",
        "Remind me: /remind 20m call the bank",
        MACHINE,
        "a reminder as a card with Done, Snooze 1h and Tomorrow; when is 20m, 17:00, "
        "tomorrow 9:00, fri 17:00 or 24 dec",
        "20m call the bank",
    ),
    Command(
        "every",
        "Run an agent on a schedule: /every weekdays 8:00 run …",
        AGENTS,
        "run an agent at a time of day or every so long, in your time zone",
        "weekdays 8:00 run scout what happened overnight",
    ),
    Command(
        "schedules",
        "Schedules: when each runs, on or off",
        MACHINE,
        "what runs on its own and when (and your reminders), with buttons to turn each off, "
        "run it now or delete one made in chat",
    ),
    Command("models", "When each model last succeeded", AGENTS, "when each model last answered"),
    Command(
        "here",
        "A topic per agent in this group",
        AGENTS,
        "sent in a group with topics: each agent gets a topic there, and what you write in "
        "one is for its agent; sent here: everything comes back to this chat",
    ),
    Command(
        "watch",
        "Watch a site, a port, a certificate or a command",
        WATCH,
        'watch it: a URL, tcp host:port, cert host:443 warn 14d, or cmd "a command"',
        "https://example.org every 1m",
    ),
    Command(
        "monitors",
        "What is watched and how it is doing",
        WATCH,
        "each monitor's state, last check and uptime, with buttons",
    ),
    Command("start", "What aegis is", MACHINE, "a hello, then this message"),
    Command("help", "What I can do", MACHINE, "this message"),
    Command(
        "pending",
        "Cards waiting for you",
        GATE,
        "every card still waiting for you, sent again with live buttons",
    ),
    Command(
        "audit",
        "Latest decisions of the gate",
        GATE,
        "the latest decisions of the gate, grants, uses and refusals",
    ),
    Command(
        "demo",
        "See the gate at work",
        GATE,
        "watch a demo agent ask before it writes, and ask for a code before it deletes",
    ),
    Command(
        "peers",
        "Links with other aegis instances",
        MACHINE,
        "each link with another aegis: which way it goes, its last contact, the clock skew "
        "and the requests refused; with a name, that aegis's status, asked now",
    ),
    Command(
        "deploy",
        "Run a deploy recipe of another aegis",
        MACHINE,
        "ask the aegis you call PEER to run its deploy recipe RECIPE; its owner approves it "
        "there, with a code, and this message follows it to the end",
        "RECIPE@PEER",
    ),
    Command(
        "ping",
        "Round trip through a worker",
        MACHINE,
        "a round trip through a background worker, with its time",
    ),
    Command(
        "status",
        "Processes, queues, database, latest jobs",
        MACHINE,
        "live processes, queues, database, broker and the latest jobs",
    ),
    Command(
        "pair",
        "Pair this account with a TOTP code",
        MACHINE,
        "make another Telegram account an owner with a code from your authenticator",
        "CODE",
    ),
)


def start_text() -> Html:
    """What /start says: hello, what aegis is, and where to begin."""
    return Html("\n\n").join([bold("Hello! I am aegis."), INTRO, *FIRST_STEPS])


def help_text() -> Html:
    """What /help says: the intro, each section with its commands, the outro."""
    return Html("\n\n").join([INTRO, *(_section_text(section) for section in SECTIONS), OUTRO])


def _section_text(section: Section) -> Html:
    title = html("<b>{}</b>:", section.title)
    if section.lead:
        title += " " + section.lead
    text = Html("\n").join([title, *(c.help_line() for c in COMMANDS if c.section == section)])
    return Html("\n\n").join([text, section.after]) if section.after else text
