"""Nonces of peers' requests, kept in Redis for twice the clock window.

``SET key 1 NX EX ttl`` stores a nonce and tells whether it was new in one atomic step, so two
copies of one request racing on two web processes cannot both pass. A nonce outlives every
timestamp that could still carry it; after that the clock check refuses the request first.

The claims made while one round trip is under way go together in the next one, sent by the
claim that found nothing under way, as one call
of a Lua script that runs SET NX EX for each: redis-py spends about 130 µs of CPU on a command
sent alone (bench/federation.py), more than ten times what every other check costs, and a
batch of 64 costs about 9 µs a claim (a pipeline of 64 SETs, about 50). Redis runs a script
whole, and the script each SET in order, so a nonce sent twice in one batch is new once. A
claim alone is sent as a plain SET, which costs less than a script's call.
"""

from __future__ import annotations

import asyncio

import redis.asyncio

from bot.errors import FederationError

CLAIM_MANY = """
local stored = {}
for i, key in ipairs(KEYS) do
  stored[i] = redis.call('SET', key, '1', 'NX', 'EX', ARGV[1]) and 1 or 0
end
return stored
"""


class RedisNonces:
    def __init__(self, client: redis.asyncio.Redis, namespace: str) -> None:
        self.client = client
        self.prefix = f"{namespace}:federation:nonce:"
        self._claim_many = client.register_script(CLAIM_MANY)
        self._waiting: list[tuple[str, int, asyncio.Future[bool]]] = []
        self._sending = False

    async def claim(self, peer: str, nonce: str, ttl: int) -> bool:
        future = asyncio.get_running_loop().create_future()
        self._waiting.append((f"{self.prefix}{peer}:{nonce}", ttl, future))
        if not self._sending:  # the first claim sends, its own and what arrives meanwhile
            await self._send()
        return await future

    async def _send(self) -> None:
        self._sending = True
        try:
            while self._waiting:
                batch, self._waiting = self._waiting, []
                await self._send_batch(batch)
        finally:
            self._sending = False
            for *_, future in self._waiting:  # only if the sender was cancelled
                _settle(future, error=FederationError("the nonce store was closed"))
            self._waiting = []

    async def _send_batch(self, batch: list[tuple[str, int, asyncio.Future[bool]]]) -> None:
        try:
            stored = await self._store(batch)
        except redis.RedisError as exc:
            error = FederationError(f"the nonce store is unavailable ({type(exc).__name__})")
            for *_, future in batch:
                _settle(future, error=error)
            return
        except BaseException:
            for *_, future in batch:
                _settle(future, error=FederationError("the nonce store was closed"))
            raise
        for (*_, future), new in zip(batch, stored, strict=True):
            _settle(future, bool(new))

    async def _store(self, batch: list[tuple[str, int, asyncio.Future[bool]]]) -> list:
        """What SET NX answered for each claim of ``batch``, in its order."""
        if len(batch) == 1:
            key, ttl, _ = batch[0]
            return [await self.client.set(key, b"1", nx=True, ex=ttl)]
        stored: list = [None] * len(batch)
        for ttl in {ttl for _, ttl, _ in batch}:  # one in practice: NONCE_TTL
            places = [i for i, (_, each, _) in enumerate(batch) if each == ttl]
            answers = await self._claim_many(keys=[batch[i][0] for i in places], args=[ttl])
            for place, answer in zip(places, answers, strict=True):
                stored[place] = answer
        return stored


def _settle(future: asyncio.Future, value: bool = False, *, error: Exception | None = None):
    """A claim whose request has gone (its client hung up) is cancelled: nothing to tell it."""
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)
