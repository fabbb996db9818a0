"""The core services every process builds the same way: the outbox, the interactions, the gate
and the call path, the tasks and their triage, over one store. The web process and the workers
each build one."""

from __future__ import annotations

from dataclasses import dataclass

from bot import demo
from bot.actions import Actions
from bot.approvals import Approvals
from bot.audit import Audit
from bot.callbacks import CallbackSigner
from bot.config_file import load_config
from bot.inbox import Inbox
from bot.interactions import Enqueue, Interactions
from bot.notes import Notes
from bot.outbox import Outbox
from bot.settings import Settings
from bot.store import Store
from bot.tasks import Tasks
from bot.triage import RuleTriager
from policies.tools import Catalog


@dataclass
class Platform:
    outbox: Outbox
    audit: Audit
    approvals: Approvals
    interactions: Interactions
    catalog: Catalog
    actions: Actions
    tasks: Tasks
    notes: Notes
    inbox: Inbox

    @classmethod
    def build(
        cls, settings: Settings, store: Store, signer: CallbackSigner, enqueue: Enqueue
    ) -> Platform:
        outbox = Outbox(store, file_over_chars=settings.outbox_file_over_chars)
        approvals = Approvals(store)
        interactions = Interactions(store, outbox, signer, enqueue)
        config = load_config(settings.config_file)
        toolbox = demo.toolbox(settings.data_dir)
        actions = Actions(config.catalog, toolbox, interactions, approvals)
        tasks = Tasks(store)
        # The triage chain: the file's rules; a model-based triager goes after them.
        triagers = [RuleTriager(config.triage_rules)]
        inbox = Inbox(store, tasks, interactions, triagers)
        return cls(
            outbox,
            Audit(store),
            approvals,
            interactions,
            config.catalog,
            actions,
            tasks,
            Notes(store),
            inbox,
        )
