"""A bounded fuzz of the webhook (issue 21): generated and mutated updates POSTed to the real web
app in webhook mode, on SQLite and on Postgres. It fails on any 5xx, on an error in the log, on
an update that ends ``failed``, and on a row written for a request that was refused.

Hypothesis runs in a thread of its own and posts with a blocking client, while the web app
serves on the test's loop. No worker runs: what the handlers queue stays queued, which is all
this test needs (it is about what the webhook and the handlers do with the input).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import urllib.error
import urllib.request

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from aegis.web import SECRET_HEADER, WEB, WEBHOOK_PATH
from bot.store.tables import updates
from emulator import DEFAULT_USER
from tests.helpers.stack import eventually, running_stack
from tests.helpers.transport import webhook_registered, webhook_settings

EXAMPLES = int(os.environ.get("AEGIS_FUZZ_EXAMPLES", "1500"))  # per database
STRANGER = {"id": 777_001, "is_bot": False, "first_name": "Stranger"}

# Any JSON value, and the strings and numbers that break things: NUL, lone surrogates, integers
# past 64 bits, NaN and the infinities.
nasty_text = st.one_of(
    st.text(max_size=30),
    st.sampled_from(["\x00", "a\x00b", "\ud800", "x\udfffy", "/start", "/help", "/pending"]),
)
nasty_int = st.one_of(
    st.integers(-(2**31), 2**31), st.integers(-(2**70), 2**70), st.sampled_from([2**63, -1])
)
scalars = st.one_of(st.none(), st.booleans(), nasty_int, st.floats(allow_nan=True), nasty_text)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(nasty_text, inner, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def messages(draw) -> dict:
    sender = draw(st.sampled_from([DEFAULT_USER, STRANGER]))
    return {
        "message_id": draw(st.integers(1, 10**6)),
        "date": 1_700_000_000,
        "chat": {"id": sender["id"], "type": "private", "first_name": sender["first_name"]},
        "from": {"is_bot": False, **sender},
        "text": draw(nasty_text),
    }


@st.composite
def updates_(draw) -> dict:
    kind = draw(
        st.sampled_from(["message", "edited_message", "channel_post", "callback_query", "novel"])
    )
    body: dict = draw(messages())
    if kind == "callback_query":
        sender, data = body["from"], draw(nasty_text)
        body = {"id": "q1", "from": sender, "message": body, "chat_instance": "1", "data": data}
    return {"update_id": draw(st.integers(1, 2**31)), kind: body}


@st.composite
def mutated(draw) -> dict:
    """A valid update with one field, anywhere in it, replaced by any JSON value (or removed)."""
    update = draw(updates_())
    paths = list(_paths(update))
    path = draw(st.sampled_from(paths))
    *parents, last = path
    target = update
    for key in parents:
        target = target[key]
    if draw(st.booleans()):
        target[last] = draw(json_values)
    else:
        del target[last]
    return update


def _paths(value, prefix=()):
    for key, item in value.items():
        yield (*prefix, key)
        if isinstance(item, dict):
            yield from _paths(item, (*prefix, key))


@st.composite
def deep(draw) -> str:
    """JSON nested up to 5,000 deep, written out (json.dumps itself would hit the recursion
    limit past about a thousand)."""
    depth = draw(st.integers(10, 5_000))
    update_id = draw(st.integers(1, 2**31))
    return f'{{"update_id": {update_id}, "x": ' + "[" * depth + "]" * depth + "}"


bodies = st.one_of(
    updates_().map(json.dumps),
    mutated().map(json.dumps),
    json_values.map(json.dumps),
    deep(),
    st.binary(max_size=40).map(lambda raw: raw.decode("latin-1")),
)


def _post(url: str, secret: str, body: str) -> int:
    request = urllib.request.Request(
        url,
        data=body.encode("utf-8", "surrogatepass"),
        headers={"Content-Type": "application/json", SECRET_HEADER: secret},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as refused:
        return refused.code


def _fuzz(url: str, secret: str) -> dict[str, set]:
    seen: dict[str, set] = {"accepted": set(), "server_errors": set()}

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(bodies)
    def post(body: str) -> None:
        status = _post(url, secret, body)
        if status >= 500:
            seen["server_errors"].add(body[:200])
        assert status < 500, f"{status} for {body[:200]!r}"
        if status == 200:
            seen["accepted"].add(json.loads(body)["update_id"])  # not nested past the limit
        else:
            assert 400 <= status < 500

    post()
    return seen


@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning")
async def test_the_webhook_answers_any_input_without_a_5xx_a_crash_or_a_stray_row(
    tmp_path, database_url, redis_server_url, redis_namespace, caplog
):
    caplog.set_level(logging.WARNING)
    config = webhook_settings(tmp_path / "data", database_url, redis_server_url)
    async with running_stack(config, namespace=redis_namespace, worker=False) as stack:
        await webhook_registered(stack)
        url, secret = stack.settings.web_url + WEBHOOK_PATH, stack.app[WEB].webhook_secret
        seen = await asyncio.to_thread(_fuzz, url, secret)
        await eventually(lambda: _all_settled(stack), timeout=60)
        async with stack.store.read() as conn:
            columns = (updates.c.update_id, updates.c.status, updates.c.error, updates.c.payload)
            rows = (await conn.execute(select(*columns))).all()
    assert seen["server_errors"] == set()
    assert {row.update_id for row in rows} == seen["accepted"]  # none for a refusal
    assert [row for row in rows if row.status == "failed"] == []
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert errors == [], [r.getMessage() for r in errors[:5]]
    print(f"\n{EXAMPLES} bodies: {len(seen['accepted'])} accepted, the rest refused with a 4xx")


async def _all_settled(stack) -> bool:
    """Every accepted update handled (or failed): none in the intake's hands, none pending."""
    if stack.intake.in_flight:
        return False
    async with stack.store.read() as conn:
        pending = select(updates.c.update_id).where(updates.c.status == "pending").limit(1)
        return (await conn.execute(pending)).first() is None


@pytest.fixture(autouse=True)
def _quiet_hypothesis(monkeypatch):
    """Hypothesis's own statistics and notes stay out of the log this test reads."""
    logging.getLogger("hypothesis").setLevel(logging.ERROR)
