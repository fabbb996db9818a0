"""The core services every process builds the same way: the outbox, the interactions, the gate
and the call path, the tasks and their triage, agent runs and job runs, over one store. The web
process and the workers each build one ``Platform``, and their own contexts (handlers/services.py,
jobs/worker/resources.py) hold only what the adapter adds to it."""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass

from bot.actions.actions import Actions
from bot.actions.audit import Audit
from bot.actions.grants import Approvals
from bot.agents import demo
from bot.agents.agent_run import AgentRun, RunOrigin
from bot.agents.agent_runs import AgentRuns
from bot.agents.ledger import Ledger
from bot.agents.profiles import AgentProfile
from bot.agents.tokens import AgentTokens
from bot.chat.callbacks import CallbackSigner
from bot.chat.outbox import Outbox
from bot.chat.topics import Topics
from bot.chat.views.runs import progress_text
from bot.config.live import LiveConfig
from bot.config.settings import Settings
from bot.errors import BrokerError, RunRefused
from bot.interactions.interactions import Enqueue, Interactions
from bot.monitors.incidents import Incidents
from bot.monitors.monitors import Monitors
from bot.reminders.reminders import Reminders
from bot.store.database import Store
from bot.tasks.inbox import Inbox
from bot.tasks.notes import Notes
from bot.tasks.task import Task
from bot.tasks.tasks import Tasks
from bot.tasks.triage import RuleTriager, Triage
from bot.timeutil import show_times_in
from bot.tools.toolbox import platform_explainers, platform_functions, platform_vetters
from bot.upkeep.heartbeats import Heartbeats
from bot.upkeep.job_runs import JobRuns
from bot.upkeep.schedules import Schedules
from policies.tools import Catalog

logger = logging.getLogger(__name__)
MONITOR_TAG = "monitors"  # an agent with this tag is offered on incident cards


@dataclass
class FileRules:
    """The triage rules of aegis.yaml as the file says now."""

    config: LiveConfig

    async def suggest(self, task: Task) -> Triage | None:
        return await RuleTriager(self.config.current().triage_rules).suggest(task)


@dataclass
class Platform:
    """The one holder of this process's core services, built once by ``build``."""

    settings: Settings
    store: Store
    outbox: Outbox  # the one way to send
    interactions: Interactions
    approvals: Approvals
    audit: Audit
    config: LiveConfig  # aegis.yaml as it is in force
    actions: Actions  # the call path
    tasks: Tasks
    inbox: Inbox
    notes: Notes
    runs: AgentRuns  # agent runs; the jobs' own runs are ``job_runs``
    ledger: Ledger  # model calls and token budgets
    tokens: AgentTokens  # the agents' MCP tokens
    job_runs: JobRuns  # a ``runs`` row for every job a worker ran
    heartbeats: Heartbeats
    schedules: Schedules
    monitors: Monitors  # what aegis watches, and the incidents they open
    reminders: Reminders  # one-shot reminders made in chat
    topics: Topics  # the forum group and each agent's topic there

    @property
    def catalog(self) -> Catalog:
        return self.config.current().catalog

    @property
    def agents(self) -> dict[str, AgentProfile]:
        return self.config.current().agents

    @property
    def monitor_agents(self) -> tuple[str, ...]:
        """The agents an incident card offers to run: runnable, tagged ``monitors``."""
        return tuple(
            slug
            for slug, agent in sorted(self.agents.items())
            if MONITOR_TAG in agent.tags and agent.runnable
        )

    async def start_run(
        self,
        agent: str,
        request: str,
        chat_id: int,
        *,
        origin: RunOrigin = RunOrigin.COMMAND,
        task_id: int | None = None,
        schedule: str | None = None,
        key: str | None = None,
    ) -> AgentRun:
        """Queue a run of ``agent`` and its progress message; a worker takes it from there.
        Raises RunRefused, with the reason in words, when the agent cannot run."""
        profile = self.agents.get(agent)
        if profile is None:
            known = ", ".join(sorted(s for s, a in self.agents.items() if a.runnable)) or "none"
            raise RunRefused(f"No agent is called {agent!r}. Agents that run: {known}.")
        if not profile.runnable:
            raise RunRefused(f"{agent} has no harness in aegis.yaml, so it cannot run.")
        if not request.strip():
            raise RunRefused(f"Say what {agent} should do: /run {agent} what to do")
        await self.ledger.refuse_if_spent(profile, chat_id, self.interactions)  # with a card
        run, new = await self.runs.create(
            agent,
            request,
            chat_id,
            origin=origin,
            deadline_seconds=profile.deadline_seconds,
            task_id=task_id,
            schedule=schedule,
            key=key,
        )
        if new and await self.outbox.ask_delivery(run.progress_outbox_id):
            try:
                await self.interactions.enqueue("run_agent", run.id)
            except BrokerError:
                logger.warning("broker down: run %s waits for the run sweep", run.id)
        return run

    async def cancel_run(self, run_id: int) -> AgentRun | None:
        """Stop a run (bot/agents/agent_runs.py ``cancel``); one that ended at once stops the
        process watches it was waiting on, too."""
        after = await self.runs.cancel(run_id)
        if after is not None and after.status.is_over:
            await self.monitors.processes.abandon_for_run(run_id)
        return after

    async def show_run(self, run: AgentRun) -> None:
        """Edit the run's progress message to what the run is now."""
        if run.progress_outbox_id is not None:
            await self.outbox.send_edit(
                run.chat_id, progress_text(run), edit_of=run.progress_outbox_id
            )

    @classmethod
    def build(
        cls, settings: Settings, store: Store, signer: CallbackSigner, enqueue: Enqueue
    ) -> Platform:
        show_times_in(settings.zone)  # every time in chat, in the owner's zone
        outbox = Outbox(
            store,
            file_over_chars=settings.outbox_file_over_chars,
            deliver=functools.partial(enqueue, "deliver"),
        )
        approvals = Approvals(store)
        topics = Topics(store)
        interactions = Interactions(store, outbox, signer, enqueue, topics)
        config = LiveConfig(settings.config_file)
        # The platform's own tools work on the platform, which is built last (below).
        toolbox = demo.toolbox(settings.data_dir)
        actions = Actions(lambda: config.current().catalog, toolbox, interactions, approvals)
        tasks = Tasks(store)
        # The triage chain: the file's rules; a model-based triager goes after them.
        triagers = [FileRules(config)]
        platform = cls(
            settings=settings,
            store=store,
            outbox=outbox,
            interactions=interactions,
            approvals=approvals,
            audit=Audit(store),
            config=config,
            actions=actions,
            tasks=tasks,
            inbox=Inbox(store, tasks, interactions, triagers),
            notes=Notes(store),
            runs=AgentRuns(store, outbox, progress_text, topics),
            ledger=Ledger(store, overall_per_day=settings.token_budget_per_day),
            tokens=AgentTokens(store),
            job_runs=JobRuns(store),
            heartbeats=Heartbeats(store),
            schedules=Schedules(store, settings.zone),
            monitors=Monitors(store, Incidents(store, outbox, signer)),
            reminders=Reminders(store),
            topics=topics,
        )
        toolbox.update(platform_functions(platform))
        actions.explainers = platform_explainers(platform)
        actions.vetters = platform_vetters(platform)
        return platform
