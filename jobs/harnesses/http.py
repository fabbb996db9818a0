"""The http harness: an OpenAI-compatible chat-completions client with tool calling.

The agent's own instructions are the system message and the run's request the first user
message; the tools offered are those the agent is granted, with their schemas from the catalog.
Every tool call the model asks for goes through the gate (``ctx.call``). The conversation is the
harness's state, saved after every model turn and every tool result, so a run parked on a card
continues by making the pending call again, identically, and going on from there.

Each turn asks the agent's providers in order: one that fails (an error status, a timeout, a
refused connection, a body that is not a chat completion, a missing key) is recorded in the
ledger like every call, and the next is asked. Every call has its own ceiling (60 seconds, less
when the run's deadline is nearer), and a run takes at most ``max_turns`` model turns.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from bot.agents.ledger import OK, Ledger, provider_label
from bot.agents.profiles import AgentProfile, Provider
from bot.errors import HarnessFailed, NameClash, ProviderFailed
from bot.tools.offer import offered, tool_text
from jobs.harness import RESUME, RunContext
from jobs.worker.resources import resources
from policies.tools import AgentSpec, Catalog

MAX_TURNS = 12
CALL_CEILING = 60.0  # seconds; design rule 6: every model call has its own hard ceiling


@dataclass(frozen=True)
class Offer:
    """The tools offered to the model, and which tool each offered name stands for."""

    tools: list[dict[str, Any]]
    by_wire: dict[str, str]

    @classmethod
    def of(cls, agent: AgentProfile, catalog: Catalog) -> Offer:
        granted = AgentSpec(agent.slug, agent.tools).granted_in(catalog)
        try:
            tools = offered(granted, catalog)
        except NameClash as exc:  # fail closed: never guess which one
            raise HarnessFailed(str(exc)) from None
        functions = [
            {
                "type": "function",
                "function": {"name": t.wire, "description": t.description, "parameters": t.schema},
            }
            for t in tools
        ]
        return cls(functions, {t.wire: t.name for t in tools})


@dataclass
class ProviderReply:
    """What one provider answered: the assistant message as kept in the conversation."""

    message: dict[str, Any]
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass
class HttpHarness:
    catalog: Callable[[], Catalog]  # the catalog in force now (aegis.yaml may change)
    ledger: Ledger
    max_turns: int = MAX_TURNS
    ceiling: float = CALL_CEILING
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)

    async def run(self, ctx: RunContext) -> str:
        offer = Offer.of(ctx.agent, self.catalog())
        messages = ctx.state.setdefault("messages", [])
        if not messages:
            if ctx.agent.instructions.strip():
                messages.append({"role": "system", "content": ctx.agent.instructions})
            messages.append({"role": "user", "content": ctx.request})
        async with aiohttp.ClientSession() as session:
            while True:
                last = messages[-1]
                if _is_assistant(last) and not last.get("tool_calls"):
                    if not ctx.resumed_with:
                        return (last.get("content") or "").strip() or "The model answered no text."
                    # Back from a process it asked aegis to watch: it hears how it ended once
                    # its turn is over (never between a call and its result).
                    messages.append({"role": "user", "content": ctx.state.pop(RESUME)})
                    await ctx.checkpoint()
                    continue
                turns = int(ctx.state.get("turns", 0))
                if turns >= self.max_turns:  # its last calls are not made: it never sees them
                    return _bounded(self.max_turns, offer, last)
                # A parked (or taken over) run makes its pending call first, identically.
                await self._answer_calls(ctx, messages, offer)
                turn = await self._ask(ctx, session, messages, offer)
                messages.append(turn.message)
                ctx.state["turns"] = turns + 1
                await ctx.checkpoint()

    async def _ask(self, ctx, session, messages, offer: Offer) -> ProviderReply:
        """One model turn, from the first provider that answers."""
        if not ctx.agent.providers:
            raise HarnessFailed(f"{ctx.agent.slug} has no providers to ask")
        failures = []
        for provider in ctx.agent.providers:
            await _progress(ctx, f"asking {provider.model}")
            body: dict[str, Any] = {"model": provider.model, "messages": messages}
            if offer.tools:
                body["tools"] = offer.tools
            turn, status, latency_ms = await self._call(ctx, session, provider, body)
            await self.ledger.record(
                provider=provider_label(provider),
                model=provider.model,
                status=status,
                latency_ms=latency_ms,
                agent=ctx.agent.slug,
                run_id=ctx.run.id,
                prompt_tokens=turn.prompt_tokens if turn else 0,
                completion_tokens=turn.completion_tokens if turn else 0,
            )
            if turn is not None:
                return turn
            failures.append(f"{provider_label(provider)} ({provider.model}): {status}")
        raise HarnessFailed("Every model provider failed: " + "; ".join(failures) + ".")

    async def _call(
        self, ctx, session, provider: Provider, body
    ) -> tuple[ProviderReply | None, str, int]:
        """Ask one provider once: its turn (or None), its status for the ledger, the latency."""
        headers = {"Content-Type": "application/json"}
        if provider.key_env:
            key = self.environ.get(provider.key_env, "")
            if not key:  # no request goes out unauthenticated where a key was asked for
                return None, f"no key ({provider.key_env} is not set)", 0
            headers["Authorization"] = f"Bearer {key}"
        timeout = aiohttp.ClientTimeout(total=max(0.1, min(self.ceiling, ctx.remaining())))
        clock = _Clock()
        try:
            async with session.post(
                f"{provider.url}/chat/completions", json=body, headers=headers, timeout=timeout
            ) as response:
                raw = await response.read()
                if response.status >= 400:
                    raise ProviderFailed(f"http {response.status}")
            turn = parse_completion(raw, first_id=len(body["messages"]))
        except ProviderFailed as failed:
            return None, str(failed), clock.ms()
        except TimeoutError:
            return None, "timeout", clock.ms()
        except aiohttp.ClientError:
            return None, "connection error", clock.ms()
        return turn, OK, clock.ms()

    async def _answer_calls(self, ctx: RunContext, messages: list, offer: Offer) -> None:
        """Answer each tool call of the last assistant message that has no result yet."""
        last = next(
            (i for i in range(len(messages) - 1, -1, -1) if _is_assistant(messages[i])), None
        )
        if last is None:
            return
        answered = {m.get("tool_call_id") for m in messages[last + 1 :] if m.get("role") == "tool"}
        for call in messages[last].get("tool_calls") or []:
            if call["id"] in answered:
                continue
            content = await self._tool_result(ctx, call, offer)
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
            await ctx.checkpoint()

    async def _tool_result(self, ctx: RunContext, call: dict, offer: Offer) -> str:
        """What the model is told a call did; a call it got wrong is answered, never run."""
        wire, raw = call["function"]["name"], call["function"]["arguments"]
        tool = offer.by_wire.get(wire)
        if tool is None:
            ctx.effects["calls_malformed"] += 1
            return f"Error: no tool called {wire!r} is offered to you. Nothing was done."
        try:
            args = json.loads(raw)
        except ValueError as exc:
            ctx.effects["calls_malformed"] += 1
            return (
                f"Error: the arguments are not valid JSON ({exc}). Nothing was done; "
                "call again with a JSON object."
            )
        if not isinstance(args, dict):
            ctx.effects["calls_malformed"] += 1
            return "Error: the arguments must be a JSON object. Nothing was done."
        await _progress(ctx, f"running {tool}")
        return tool_text(await ctx.call(tool, args))  # Parked goes up: the runner parks


def parse_completion(raw: bytes, *, first_id: int = 0) -> ProviderReply:
    """The assistant message of a chat completion; ProviderFailed("bad body") for anything
    that is not one. Tool calls keep their arguments as the text the model wrote."""
    try:
        data = json.loads(raw)
        message = data["choices"][0]["message"]
        content = message.get("content")
        if isinstance(content, list):  # content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if content is not None and not isinstance(content, str):
            raise TypeError("content")
        calls = [
            _call(call, f"call-{first_id}-{i}")
            for i, call in enumerate(message.get("tool_calls") or [])
        ]
        # A result finds its call by id: one repeated within a turn gets an id of its own.
        for i, call in enumerate(calls):
            if any(other["id"] == call["id"] for other in calls[:i]):
                call["id"] = f"call-{first_id}-{i}"
        usage = data.get("usage") or {}
        prompt, completion = _count(usage, "prompt_tokens"), _count(usage, "completion_tokens")
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        raise ProviderFailed("bad body") from None
    kept: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        kept["tool_calls"] = calls
    return ProviderReply(kept, prompt, completion)


def _call(call: dict, fallback_id: str) -> dict[str, Any]:
    function = call["function"]
    name = function["name"]
    if not isinstance(name, str):
        raise TypeError("name")
    arguments = function.get("arguments", "")
    if not isinstance(arguments, str):  # some servers send the object itself
        arguments = json.dumps(arguments)
    call_id = call.get("id") if isinstance(call.get("id"), str) and call.get("id") else fallback_id
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def _count(usage: dict, name: str) -> int:
    value = usage.get(name) or 0
    return value if isinstance(value, int) and value > 0 else 0


def _is_assistant(message: dict) -> bool:
    return message.get("role") == "assistant"


def _bounded(max_turns: int, offer: Offer, last: dict) -> str:
    asked = sorted(
        {
            offer.by_wire.get(c["function"]["name"], c["function"]["name"])
            for c in last.get("tool_calls") or []
        }
    )
    text = f"Stopped after {max_turns} model turns, the most a run may take"
    if asked:
        text += f"; the model still asked for {', '.join(asked)}, which was not done"
    said = (last.get("content") or "").strip() if _is_assistant(last) else ""
    return f"{text}. Its last words: {said}" if said else f"{text}."


async def _progress(ctx: RunContext, what: str) -> None:
    await ctx.checkpoint(what)
    await ctx.step(what)


class _Clock:
    def __init__(self) -> None:
        self._start = time.monotonic()

    def ms(self) -> int:
        return int((time.monotonic() - self._start) * 1000)


@dataclass
class WorkerHttpHarness:
    """The http harness as a worker runs it: the catalog and ledger of this worker's platform,
    looked up when the run starts (``harness_for`` is called before anything is awaited)."""

    async def run(self, ctx: RunContext) -> str:
        platform = (await resources()).platform
        harness = HttpHarness(
            lambda: platform.catalog, platform.ledger, max_turns=MAX_TURNS, ceiling=CALL_CEILING
        )
        return await harness.run(ctx)
