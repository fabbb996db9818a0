"""``/ping``: a round trip through the broker and a worker, answered from the worker."""

from __future__ import annotations

import os
import socket
import time

import dramatiq

from jobs.worker.broker import require_broker
from jobs.worker.resources import resources

require_broker()


@dramatiq.actor(queue_name="default", max_retries=3, min_backoff=200)
async def ping(chat_id: int, received_at: float, update_id: int) -> dict:
    outbox = (await resources()).platform.outbox
    elapsed_ms = (time.time() - received_at) * 1000
    text = (
        f"pong from worker {socket.gethostname()}:{os.getpid()}\n"
        f"bot → broker → worker: {elapsed_ms:.0f} ms"
    )
    outbox_id, new = await outbox.put(chat_id, text, idempotency_key=f"ping:{update_id}")
    if new:
        await outbox.ask_delivery(outbox_id)
    return {"messages_queued": int(new)}
