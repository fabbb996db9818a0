"""Search means the same on SQLite (FTS5) and Postgres (``tsvector``): one corpus, one expected
answer per query, and both backends must give it (the ``store`` fixture runs every test on
each). Every query word must begin some word of the row; whatever the query holds (quotes,
operators, column filters) is plain words, and never an error.

The last test checks that migration 0003 moved 0002's card notes (``agent_notes``) into the
searchable notes.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from alembic import command
from sqlalchemy import MetaData, Table, insert, select

from bot.store import migrate, search
from bot.store.database import Store
from bot.store.tables import notes
from bot.tasks.capture import Capture, Origin
from bot.tasks.notes import NoteKind, Notes, add_note
from bot.tasks.task import Closed
from bot.tasks.tasks import Tasks
from tests.helpers.interactions import ALICE, CHAT

# name -> text; each becomes one task (and one note), in this order.
CORPUS = {
    "cafe_accent": "Meet Léa at the café on Monday",
    "cafe_plain": "Cafe latte recipe",
    "cafe_nfd": "Another cafe\u0301 to try",  # é as e + a combining accent (macOS keyboards)
    "focus": "Book a deep-focus session",
    "host": "Read https://docs.example.com/start before the call",
    "underscore": "rename snake_case_var in the module",
    "digits": "Pay invoice 2031 for ACME by 15.06",
    "invoices": "Invoices from Bob",
    "upper": "CALL MOM",
    "school": "École primaire: Straße 5",
    "cyrillic": "Привет from Москва",
    "versions": "upgrade to v2 and python3",
    "disturb": "Do not disturb the cafe owner",
    "turkish": "İstanbul trip and ½ cup",
    "compat": "ｆｕｌｌ width ﬁne print",
}


def names_of(found, ids: dict[int, str]) -> list[str]:
    return sorted(ids[item.id] for item in found)


@pytest.fixture
async def corpus(store: Store) -> dict[int, str]:
    """The corpus as tasks; one of them closed (search covers closed tasks too)."""
    tasks = Tasks(store)
    ids = {}
    for n, (name, text) in enumerate(CORPUS.items(), start=1):
        captured = await tasks.capture(Capture(CHAT, n, ALICE, text, Origin("self")))
        ids[captured.task.id] = name
    await tasks.close(next(i for i, name in ids.items() if name == "upper"), Closed.DONE)
    return ids


async def found_tasks(store: Store, ids: dict[int, str], queries: dict[str, list[str]]) -> dict:
    tasks = Tasks(store)
    return {query: names_of((await tasks.find(query, size=50)).tasks, ids) for query in queries}


async def check(store, ids, expected: dict[str, list[str]]) -> None:
    expected = {query: sorted(names) for query, names in expected.items()}
    assert await found_tasks(store, ids, expected) == expected


async def test_accents_are_part_of_the_word(store, corpus):
    await check(
        store,
        corpus,
        {
            "café": ["cafe_accent", "cafe_nfd"],
            "cafe\u0301": ["cafe_accent", "cafe_nfd"],
            "cafe": ["cafe_plain", "disturb"],
            "CAFÉ": ["cafe_accent", "cafe_nfd"],
            "caf": ["cafe_accent", "cafe_nfd", "cafe_plain", "disturb"],
            "lea": [],
            "léa": ["cafe_accent"],
            "école": ["school"],
            "ecole": [],
            "strasse": ["school"],
            "straße": ["school"],
        },
    )


async def test_hyphens_dots_and_underscores_split_words(store, corpus):
    await check(
        store,
        corpus,
        {
            "deep-focus": ["focus"],
            "deep": ["focus"],
            "focus": ["focus"],
            "deepfocus": [],
            "example.com": ["host"],
            "docs.example.com": ["host"],
            "example": ["host"],
            "https": ["host"],
            "docs example": ["host"],
            "snake_case_var": ["underscore"],
            "snake_case": ["underscore"],
            "case": ["underscore"],
            "snakecase": [],
        },
    )


async def test_digits_case_other_scripts_and_compatibility_forms(store, corpus):
    await check(
        store,
        corpus,
        {
            "2031": ["digits"],
            "203": ["digits"],
            "031": [],
            "15.06": ["digits"],
            "06": ["digits"],
            "acme": ["digits"],
            "ACME": ["digits"],
            "AcMe": ["digits"],
            "call mom": ["upper"],
            "call": ["host", "upper"],
            "v2": ["versions"],
            "v": ["underscore", "versions"],
            "python3": ["versions"],
            "python": ["versions"],
            "привет": ["cyrillic"],
            "ПРИВЕТ": ["cyrillic"],
            "моск": ["cyrillic"],
            "istanbul": ["turkish"],
            "İSTANBUL": ["turkish"],
            "½": ["digits", "turkish"],
            "1": ["digits", "turkish"],
            "full": ["compat"],
            "ｆｕ": ["compat"],
            "fine": ["compat"],
            "ﬁ": ["compat"],
        },
    )


async def test_a_word_is_found_by_its_beginning_and_every_word_is_required(store, corpus):
    await check(
        store,
        corpus,
        {
            "inv": ["digits", "invoices"],
            "invoice": ["digits", "invoices"],
            "invoices": ["invoices"],
            "voice": [],
            "invoice bob": ["invoices"],
            "bob invoice": ["invoices"],
            "invoice 2031": ["digits"],
            "invoice cafe": [],
            "m": ["cafe_accent", "underscore", "upper"],
        },
    )


@pytest.mark.parametrize("query", ["", "   ", "!!!", "--", "_", "&|!:()", "*", '""', "\x00"])
async def test_a_query_without_words_finds_nothing(store, corpus, query):
    page = await Tasks(store).find(query)
    assert page.tasks == [] and page.total == 0
    assert await Notes(store).search(query) == ([], 0)


async def test_query_syntax_is_read_as_plain_words_and_never_raises(store, corpus):
    await check(
        store,
        corpus,
        {
            '"a" OR b*': [],
            '"cafe" OR latte*': [],
            "cafe OR latte": [],
            "cafe latte*": ["cafe_plain"],
            '"cafe latte"': ["cafe_plain"],
            "NOT cafe": ["disturb"],
            "not": ["disturb"],
            "cafe NOT latte": [],
            "-cafe": ["cafe_plain", "disturb"],
            "+cafe ^latte": ["cafe_plain"],
            "cafe & latte": ["cafe_plain"],
            "cafe | latte": ["cafe_plain"],
            "!latte": ["cafe_plain"],
            "latte:*": ["cafe_plain"],
            "latte:recipe": ["cafe_plain"],
            "latte:A": [],
            "(cafe)": ["cafe_plain", "disturb"],
            "NEAR(cafe latte)": [],
            "search_text:cafe": [],
            "cafe AND": [],
            "'; DROP TABLE tasks; --": [],
            "a\\b": ["digits", "focus"],
            "{cafe}": ["cafe_plain", "disturb"],
            "cafe'": ["cafe_plain", "disturb"],
            "<->latte": ["cafe_plain"],
        },
    )


async def test_an_overlong_word_is_dropped_not_refused(store, corpus):
    page = await Tasks(store).find("latte " + "x" * 5000)
    assert [corpus[task.id] for task in page.tasks] == ["cafe_plain"]


async def test_notes_search_the_same_way_newest_first(store):
    async with store.write() as conn:
        ids = {
            await add_note(conn, NoteKind.REFERENCE, text): name for name, text in CORPUS.items()
        }
    notes_ = Notes(store)
    found, total = await notes_.search("caf", limit=2)
    assert total == 4 and len(found) == 2
    assert [ids[note.id] for note in found] == ["disturb", "cafe_nfd"]
    for query, expected in {
        "café": ["cafe_accent", "cafe_nfd"],
        "cafe": ["cafe_plain", "disturb"],
        "example.com": ["host"],
        "inv": ["digits", "invoices"],
        '"a" OR b*': [],
        "NOT cafe": ["disturb"],
    }.items():
        found, total = await notes_.search(query, limit=50)
        assert (names_of(found, ids), total) == (sorted(expected), len(expected)), query


def test_the_search_text_is_folded_words_joined_by_spaces():
    assert search.search_text("Deep-Focus at example.com, snake_case!") == (
        "deep focus at example com snake case"
    )
    assert search.words("cafe\u0301") == search.words("café") == ["café"]
    assert search.words("İstanbul ½ x² ｆｕｌｌ ﬁne") == [
        "istanbul",
        "1",
        "2",
        "x2",
        "full",
        "fine",
    ]
    with pytest.raises(ValueError):
        search.matches(notes, [], sqlite=True)


# Migration 0003 moves 0002's card notes into notes


async def test_the_notes_of_0002_become_searchable_agent_notes(database_url):
    store = Store(database_url)
    try:
        async with store.write() as conn:
            await conn.run_sync(_upgrade_to, "0002")
            old = await conn.run_sync(
                lambda sync: Table("agent_notes", MetaData(), autoload_with=sync)
            )
            written = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
            await conn.execute(
                insert(old),
                [
                    {
                        "agent": "scribe",
                        "interaction_id": 7,
                        "user_id": ALICE,
                        "text": "Use the staging server first",
                        "created_at": written,
                    },
                    {
                        "agent": "ops",
                        "interaction_id": None,
                        "user_id": ALICE,
                        "text": "Never deploy on Fridays",
                        "created_at": written,
                    },
                ],
            )
        pending = await migrate.pending_revisions(store)
        assert pending[0] == "0003"  # every revision from 0003 to the head, in order
        assert await migrate.upgrade(store) == pending
        async with store.read() as conn:
            rows = (await conn.execute(select(notes).order_by(notes.c.id))).all()
        assert [(r.kind, r.agent, r.interaction_id, r.user_id) for r in rows] == [
            ("agent", "scribe", 7, ALICE),
            ("agent", "ops", None, ALICE),
        ]
        assert rows[0].created_at.replace(tzinfo=rows[0].created_at.tzinfo or UTC) == written
        notes_ = Notes(store)
        assert await notes_.for_agent("scribe") == ["Use the staging server first"]
        found, total = await notes_.search("deploy friday")
        assert total == 1 and found[0].text == "Never deploy on Fridays"
        assert found[0].kind is NoteKind.AGENT
    finally:
        await store.close()


def _upgrade_to(connection, revision: str) -> None:
    config = migrate.alembic_config()
    config.attributes["connection"] = connection
    command.upgrade(config, revision)
