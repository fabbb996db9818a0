"""The script harness: a deterministic agent that follows its listed steps.

Each step is done once: the step reached is saved before a call and after each step, so a run
continued after a card makes the identical call (and now finds its approval), and a run taken
over from a dead worker goes on from the last step it finished. ``{request}`` and ``{run}`` in
a step's text or arguments are replaced by the run's request and number.
"""

from __future__ import annotations

import asyncio
from typing import Any

from bot.agents.profiles import ScriptStep
from jobs.harness import RESUME, RunContext


class ScriptHarness:
    async def run(self, ctx: RunContext) -> str:
        steps = ctx.agent.steps
        said: list[str] = []
        start = int(ctx.state.get("step", 0))
        for index in range(start, len(steps)):
            step = steps[index]
            ctx.state["step"] = index
            await ctx.checkpoint(f"step {index + 1}/{len(steps)}: {step.what}")
            await ctx.step(f"step {index + 1}/{len(steps)}: {step.what}")
            line = await _do(ctx, index, step)
            if line:
                said.append(line)
                ctx.state.setdefault("log", []).append(line)
            ctx.state["step"] = index + 1
            await ctx.checkpoint()
        if ctx.resumed_with:  # back from a process it asked aegis to watch: its outcome
            ctx.state.setdefault("log", list(said)).append(ctx.state.pop(RESUME))
            await ctx.checkpoint()
        log = ctx.state.get("log", said)
        return "\n".join(log) or "Done: every step ran."


async def _do(ctx: RunContext, index: int, step: ScriptStep) -> str | None:
    if step.say is not None:
        text = _fill(step.say, ctx)
        await ctx.say(text, key=f"step:{index}")
        return None
    if step.sleep is not None:
        await asyncio.sleep(step.sleep)
        return None
    outcome = await ctx.call(step.call, _fill(step.args, ctx))
    detail = outcome.result if outcome.ran else outcome.reason
    return f"{step.call}: {outcome.status.value}: {detail}"


def _fill(value: Any, ctx: RunContext) -> Any:
    if isinstance(value, str):
        return value.replace("{request}", ctx.request).replace("{run}", str(ctx.run.id))
    if isinstance(value, dict):
        return {key: _fill(item, ctx) for key, item in value.items()}
    if isinstance(value, list):
        return [_fill(item, ctx) for item in value]
    return value
