"""Full-text search with the same results on SQLite (FTS5) and Postgres (``tsvector``).

Both databases index a text normalised here, ``search_text``: the lower-cased words of letters
and digits, joined by single spaces. With nothing left for their tokenizers to disagree about
(Postgres reads ``example.com`` or ``deep-focus`` as one token, FTS5 as two; FTS5 strips accents
by default, Postgres's ``simple`` configuration does not), a query means the same on both: every
query word must begin some word of the row.

SQLite keeps an FTS5 table per searched table, filled by triggers; Postgres a GIN index on the
expression ``to_tsvector('simple', search_text)``. Both are made by the migrations.
"""

from __future__ import annotations

import re
import unicodedata

from sqlalchemy import Table, func, literal_column, select, text
from sqlalchemy.sql.elements import ColumnElement

WORD = re.compile(r"[^\W_]+")
# Postgres refuses lexemes over 2047 bytes; nobody searches for one.
LONGEST_WORD = 200
# Searched table -> its FTS5 table on SQLite (and the GIN index on Postgres is ix_<table>_search).
SEARCHED = {"tasks": "tasks_fts", "notes": "notes_fts"}


def words(text_: str) -> list[str]:
    """The folded words of ``text_``, as both databases index them."""
    found = WORD.findall(_separate_other_numbers(unicodedata.normalize("NFKC", text_)))
    folded = (_fold(word) for word in found)
    return [word for word in folded if len(word) <= LONGEST_WORD]


def _fold(word: str) -> str:
    # Folding can decompose a letter (İ becomes i and a combining dot, which would end a word
    # for FTS5 and Postgres alike): compose again, and read the dotted I as i.
    return unicodedata.normalize("NFKC", word.casefold()).replace("i\u0307", "i")


def _separate_other_numbers(text_: str) -> str:
    # Python counts "other numbers" (fractions, some superscripts NFKC leaves alone) as word
    # characters and FTS5 does too, but Postgres's parser skips them: "½" would be found on
    # one and not the other. NFKC has turned most of them into digits already.
    if text_.isascii():
        return text_
    return "".join(" " if unicodedata.category(c) == "No" else c for c in text_)


def search_text(text_: str) -> str:
    return " ".join(words(text_))


def matches(table: Table, query_words: list[str], *, sqlite: bool) -> ColumnElement[bool]:
    """A WHERE clause: rows of ``table`` holding every word of ``query_words`` as a prefix.

    ``query_words`` come from :func:`words`, so they hold only letters and digits and need no
    quoting in either query language.
    """
    if not query_words:
        raise ValueError("a search needs at least one word")
    if sqlite:
        fts = SEARCHED[table.name]
        query = " ".join(f'"{word}"*' for word in query_words)
        rowids = (
            select(literal_column("rowid"))
            .select_from(text(fts))
            .where(literal_column(fts).op("MATCH")(query))
        )
        return table.c.id.in_(rowids)
    tsquery = " & ".join(f"{word}:*" for word in query_words)
    vector = func.to_tsvector(literal_column("'simple'"), table.c.search_text)
    return vector.op("@@")(func.to_tsquery(literal_column("'simple'"), tsquery))


def sqlite_index_sql(table: str) -> list[str]:
    """The FTS5 table for ``table`` and the triggers that keep it in step."""
    fts = SEARCHED[table]  # the names are ours, from SEARCHED; no outside text reaches the SQL
    return [
        f"CREATE VIRTUAL TABLE {fts} USING fts5(search_text, content='{table}', "
        "content_rowid='id', tokenize='unicode61 remove_diacritics 0')",
        f"CREATE TRIGGER {fts}_insert AFTER INSERT ON {table} BEGIN "
        f"INSERT INTO {fts}(rowid, search_text) VALUES (new.id, new.search_text); END",
        f"CREATE TRIGGER {fts}_delete AFTER DELETE ON {table} BEGIN "
        f"INSERT INTO {fts}({fts}, rowid, search_text) "
        "VALUES ('delete', old.id, old.search_text); END",
        f"CREATE TRIGGER {fts}_update AFTER UPDATE OF search_text ON {table} BEGIN "
        f"INSERT INTO {fts}({fts}, rowid, search_text) "
        "VALUES ('delete', old.id, old.search_text); "
        f"INSERT INTO {fts}(rowid, search_text) VALUES (new.id, new.search_text); END",
    ]


def postgres_index_sql(table: str) -> list[str]:
    return [
        f"CREATE INDEX ix_{table}_search ON {table} USING gin (to_tsvector('simple', search_text))"
    ]


def index_names() -> set[str]:
    """Every name the search indexes add to a database, for tools that compare schemas."""
    names = set()
    for table, fts in SEARCHED.items():
        names |= {fts, f"ix_{table}_search"}
        names |= {f"{fts}_{suffix}" for suffix in ("data", "idx", "docsize", "config", "content")}
    return names
