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
from bot.chat.text import CAPTION_LIMIT, Html, bold, clip, escape, html, plain, pre, visible
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


def card_text(interaction: Interaction) -> Html:
    return _paragraphs(_heading(interaction), *_body(interaction), _footer(interaction))


def card_caption(interaction: Interaction) -> str:
    """A card whose arguments are too long for a message: the file holds it all."""
    lines = [
        plain(_heading(interaction)),
        "",
        clip(interaction.prompt, 400),
        "",
        f"Tool: {interaction.tool}" if interaction.tool else "",
        "The complete arguments are in the attached file: read them before you approve.",
        *plain(_footer(interaction)).split("\n"),
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


def settled_text(interaction: Interaction) -> Html:
    """What the card becomes once it is settled: who decided what and when, first (a caption
    is cut to its start), then the question, without the footer that asked."""
    return _paragraphs(
        bold(_verdict(interaction)), _settled_heading(interaction), *_body(interaction)
    )


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


def _heading(interaction: Interaction) -> Html:
    return html(
        "<b>{}</b> · card #{} · from {}",
        TITLES[interaction.kind],
        interaction.id,
        interaction.agent,
    )


def _settled_heading(interaction: Interaction) -> Html:
    return html("Card #{} · from {}", interaction.id, interaction.agent)


def _body(interaction: Interaction) -> list[Html]:
    """What is asked: the prompt, and the tool with its complete arguments."""
    body = [escape(interaction.prompt)]
    if interaction.tool:
        tool = visible(interaction.tool.replace("\n", " "))
        body.append(
            html("Tool: <code>{}</code>\nArguments:\n", tool)
            + pre(pretty_arguments(interaction.args))
        )
    return body


def _paragraphs(*paragraphs: Html) -> Html:
    return Html("\n\n").join(paragraphs)


def _footer(interaction: Interaction) -> Html:
    lines = []
    if interaction.step_up:
        lines.append(
            html("<b>This cannot be undone</b>: Approve asks for a code from your authenticator.")
        )
    if interaction.kind == "question":
        lines.append("Reply to this message with your answer.")
    if interaction.expires_at is None:
        lines.append("It waits until you answer.")
    else:
        lines.append(
            f"Expires at {short_time(interaction.expires_at)} if unanswered "
            "(a timeout is never a yes)."
        )
    return Html("\n").join(lines)
