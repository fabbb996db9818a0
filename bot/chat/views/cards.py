"""How an interaction looks in chat: the card with its buttons, and what it becomes once settled.

The card shows the complete arguments, pretty-printed; approving what you cannot see is not
approval. When they do not fit one message the whole card goes as a file under a short caption
(bot/interactions/interactions.py decides). Callback data is signed (bot/chat/callbacks.py) with
kind ``ix``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from bot.chat.callbacks import CallbackSigner
from bot.chat.text import CAPTION_LIMIT, MESSAGE_LIMIT, clip, visible
from bot.timeutil import short_time

if TYPE_CHECKING:
    from bot.interactions.interaction import Interaction

CALLBACK_KIND = "ix"
TITLES = {
    "approval": "Approval needed",
    "choice": "Your choice, please",
    "acknowledgement": "For your attention",
    "question": "A question for you",
}
SETTLED = {
    "approved": "✅ Approved",
    "denied": "❌ Denied",
    "chosen": "☑️ Chosen",
    "acknowledged": "👍 Acknowledged",
    "answered": "💬 Answered",
    "skipped": "⏭ Skipped",
}


def card_text(interaction: Interaction) -> str:
    lines = [_heading(interaction), "", interaction.prompt]
    if interaction.tool:
        tool = visible(interaction.tool.replace("\n", " "))
        lines += ["", f"Tool: {tool}", "Arguments:", pretty_arguments(interaction.args)]
    lines += ["", *_footer(interaction)]
    return "\n".join(lines)


def card_caption(interaction: Interaction) -> str:
    """A card whose arguments are too long for a message: the file holds it all."""
    lines = [
        _heading(interaction),
        "",
        clip(interaction.prompt, 400),
        "",
        f"Tool: {interaction.tool}" if interaction.tool else "",
        "The complete arguments are in the attached file: read them before you approve.",
        *_footer(interaction),
    ]
    return clip("\n".join(line for line in lines if line is not None), CAPTION_LIMIT)


def card_markup(interaction: Interaction, signer: CallbackSigner) -> dict[str, Any]:
    def button(text: str, choice: str) -> dict[str, str]:
        data = signer.sign(CALLBACK_KIND, str(interaction.id), choice)
        return {"text": text, "callback_data": data}

    kind = interaction.kind
    if kind == "approval":
        approve = "Approve + code" if interaction.step_up else "Approve"
        rows = [[button(approve, "approve"), button("Deny", "deny")]]
    elif kind == "choice":
        rows = [[button(clip(option, 60), str(i))] for i, option in enumerate(interaction.options)]
    elif kind == "acknowledgement":
        rows = [[button("Got it", "ack")]]
    else:
        rows = [[button("Skip", "skip")]]
    return {"inline_keyboard": rows}


def settled_text(interaction: Interaction) -> str:
    """What the card becomes once it is settled: the question and who decided what, when."""
    body = card_text(interaction).split("\n\n")
    # Everything but the footer with its deadline, under a heading that no longer asks.
    kept = "\n\n".join([_settled_heading(interaction), *body[1:-1]])
    return clip(f"{_verdict(interaction)}\n\n{kept}", MESSAGE_LIMIT)  # verdict first: captions clip


def settled_answer(interaction: Interaction) -> str:
    """The honest answer to a tap on a card that is no longer open (at most 200 characters)."""
    return clip(f"Already settled: {_verdict(interaction)}", 200)


def tap_receipt(interaction: Interaction) -> str:
    return clip(_verdict(interaction), 200)


def pretty_arguments(args: Any) -> str:
    return visible(json.dumps(args, indent=2, sort_keys=True, ensure_ascii=False))


# Characters that change how text reads without showing themselves (right-to-left overrides,
# zero-width marks, line separators, controls): on a card they could hide or fake arguments.


def _verdict(interaction: Interaction) -> str:
    when = short_time(interaction.resolved_at) if interaction.resolved_at else "?"
    if interaction.outcome == "expired":
        return f"⌛ Expired at {when}, unanswered: nothing was done."
    label = SETTLED.get(interaction.outcome or "", interaction.outcome or "settled")
    who = interaction.resolved_by_name or "an owner"
    detail = ""
    if interaction.outcome == "chosen":
        detail = f": {interaction.answer}"
    elif interaction.outcome == "answered":
        detail = f": {clip(interaction.answer or '', 300)}"
    return f"{label}{detail} by {who} at {when}."


def _heading(interaction: Interaction) -> str:
    return f"{TITLES[interaction.kind]} · card #{interaction.id} · from {interaction.agent}"


def _settled_heading(interaction: Interaction) -> str:
    return f"Card #{interaction.id} · from {interaction.agent}"


def _footer(interaction: Interaction) -> list[str]:
    lines = []
    if interaction.step_up:
        lines.append("This cannot be undone: Approve asks for a code from your authenticator.")
    if interaction.kind == "question":
        lines.append("Reply to this message with your answer.")
    if interaction.expires_at is None:
        lines.append("It waits until you answer.")
    else:
        lines.append(
            f"Expires at {short_time(interaction.expires_at)} if unanswered "
            "(a timeout is never a yes)."
        )
    return lines
