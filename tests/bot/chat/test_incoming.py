"""What an update must look like to be recorded (bot/chat/incoming.py), without a stack."""

from __future__ import annotations

import pytest

from bot.chat.incoming import MAX_DEPTH, checked_update
from bot.errors import TransportError

USER = {"id": 7, "is_bot": False, "first_name": "Ann"}


def message(**fields) -> dict:
    body = {"message_id": 1, "date": 2, "chat": {"id": 7, "type": "private"}, "from": USER}
    return {"update_id": 1, "message": {**body, "text": "hi", **fields}}


def nested(depth: int):
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


def test_a_plain_message_is_kept_as_it_came():
    assert checked_update(message()) == message()


def test_nul_and_lone_surrogates_become_replacement_characters_in_keys_and_strings():
    update = message(text="a\x00b\ud800c")
    update["message"]["odd\x00key"] = "\udfff"
    cleaned = checked_update(update)["message"]
    assert cleaned["text"] == "a\ufffdb\ufffdc"
    assert cleaned["odd\ufffdkey"] == "\ufffd"


def test_an_unknown_kind_is_still_an_update():
    assert checked_update({"update_id": 3, "something_new": {"x": 1}})["something_new"] == {"x": 1}


@pytest.mark.parametrize(
    "update",
    [
        [],
        {"update_id": -1},
        {"update_id": 2**63},
        {"update_id": True},
        {"update_id": 1.0},
        {"update_id": 1, "x": 2**63},
        {"update_id": 1, "x": -(2**63) - 1},
        {"update_id": 1, "x": float("nan")},
        {"update_id": 1, "x": float("inf")},
        {"update_id": 1, "x": nested(MAX_DEPTH + 1)},
        message(chat=None),
        message(chat={"id": "7", "type": "private"}),
        message(**{"from": "Ann"}),
        message(**{"from": {"id": 7}}),
        message(text=5),
        message(entities=[{"type": "bold", "offset": "0", "length": 1}]),
        message(reply_to_message={"message_id": 1}),
        {"update_id": 1, "callback_query": {"id": "q", "from": USER}},
    ],
)
def test_what_telegram_never_sends_is_refused(update):
    with pytest.raises(TransportError):
        checked_update(update)


def test_the_edges_of_64_bits_and_of_the_depth_limit_are_kept():
    assert checked_update({"update_id": 2**63 - 1, "x": -(2**63)})["x"] == -(2**63)
    assert checked_update({"update_id": 1, "x": nested(MAX_DEPTH - 1)})
