"""What the owner reads of a request to another aegis (federation/requests.py): one message,
edited as the request goes from sent, to waiting for the other side's owner, to its end."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bot.chat.text import Html, clip, html, pre

if TYPE_CHECKING:
    from federation.requests import PeerRequest

OUTPUT_CHARS = 1500  # of a deploy's output or a run's result shown (the row keeps it whole)


def asked_text(peer: str, doing: str, *, unreachable: bool = False) -> Html:
    """A request sent, or to be sent, that the peer has not taken yet."""
    head = html("⏳ Asked {} to {}. Waiting for {} to take it", peer, doing, peer)
    if unreachable:
        head += html(": it cannot be reached now, and aegis keeps trying for a day")
    return head + "."


def request_text(request: PeerRequest) -> Html:
    """The request as it stands, for the message that follows it."""
    peer, doing = request.peer, request.doing
    state = request.state
    if state == "queued":
        return asked_text(peer, doing, unreachable=request.tries > 0)
    if state == "waiting":
        card = html(" on card #{} there", request.card) if request.card else Html("")
        return html(
            "⏳ {} took {} and asks its owner to approve it{}, with a code. Nothing runs "
            "until they do.",
            peer,
            doing,
            card,
        )
    reason = clip(request.reason or "no reason given", 600)
    result = request.result if isinstance(request.result, dict) else {}
    if state == "done" and "run" in result:
        agent = request.args.get("agent")
        head = html("✅ {}'s {} finished (run #{} there)", peer, agent, result["run"])
        said = str(result.get("result") or "").strip()
        return head + (html(":\n{}", clip(said, OUTPUT_CHARS)) if said else Html("."))
    if state == "done" and request.action == "message":
        return html("✅ {} passed the message to its agent {}.", peer, request.args.get("to"))
    if state == "done":
        return html("✅ {} ran {}", peer, doing) + _result(request.result)
    if state == "refused":
        return html("🚫 {} did not run {}: {}", peer, doing, reason)
    return html("❌ {} on {} failed: {}", doing, peer, reason)


def _result(result: Any) -> Html:
    if not isinstance(result, dict) or "exit_code" not in result:
        return Html(".")
    how = html(": exit {}", result["exit_code"])
    if result.get("timed_out"):
        how += " (stopped at its timeout)"
    output = str(result.get("output") or "").strip()
    if not output:
        return how + "."
    if len(output) > OUTPUT_CHARS:
        output = "…" + output[-(OUTPUT_CHARS - 1) :]  # the end of a deploy says how it went
    return how + "\n" + pre(output)
