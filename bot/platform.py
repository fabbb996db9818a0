"""The core services every process builds the same way: the outbox, the interactions, the gate
and the call path, the tasks and their triage, over one store. The web process and the workers
each build one."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from bot import demo
from bot.actions import Actions
from bot.approvals import Approvals
from bot.audit import Audit
from bot.callbacks import CallbackSigner
from bot.config_file import load_config
from bot.errors import BrokerError
from bot.inbox import Inbox
from bot.interactions import Enqueue, Interactions
from bot.notes import Notes
from bot.outbox import Outbox
from bot.settings import Settings
from bot.store import Store
from bot.tasks import Tasks
from bot.triage import RuleTriager
from policies.tools import Catalog

logger = logging.getLogger(__name__)


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

    async def say(
        self,
        chat_id: int,
        text: str,
        *,
        key: str | None = None,
        reply_markup: dict[str, Any] | None = None,
        reply_to: int | None = None,
    ) -> int:
        """Queue a message in the outbox and ask a worker to deliver it; returns its row id.

        If the broker is down the row stays in the outbox and the sweep delivers it later, so
        this does not fail the caller.
        """
        outbox_id, new = await self.outbox.put(
            chat_id,
            text,
            reply_markup=reply_markup,
            reply_to_message_id=reply_to,
            idempotency_key=key,
        )
        if new:
            try:
                await self.interactions.enqueue("deliver", outbox_id)
            except BrokerError:
                logger.warning("broker down: outbox %s waits for the sweep", outbox_id)
        return outbox_id

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
