"""Harnesses: how an agent's run is carried out (jobs/harness.py is the interface).

``harness_for(agent)`` picks by the agent's declared harness kind, never by its name.
"""

from __future__ import annotations

from bot.agents.profiles import AgentProfile, HarnessKind
from bot.errors import HarnessFailed
from jobs.harness import Harness
from jobs.harnesses.cli import CliHarness
from jobs.harnesses.cli_specs import CLIS
from jobs.harnesses.http import WorkerHttpHarness
from jobs.harnesses.script import ScriptHarness


def harness_for(agent: AgentProfile) -> Harness:
    if agent.harness is HarnessKind.SCRIPT:
        return ScriptHarness()
    if agent.harness is HarnessKind.HTTP:
        return WorkerHttpHarness()
    if agent.harness in CLIS:
        return CliHarness(CLIS[agent.harness])
    raise HarnessFailed(
        f"{agent.slug} is declared with harness {agent.harness}, which this worker cannot run"
    )
