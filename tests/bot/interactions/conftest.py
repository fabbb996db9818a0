"""The fixtures of the interaction tests: ``enqueue``, a recorder (tests/helpers/interactions.py),
and ``asker``, the interactions on the test's ``store`` that enqueue to it."""

from __future__ import annotations

import pytest

from tests.helpers.interactions import RecordingEnqueue, make_interactions


@pytest.fixture
def enqueue() -> RecordingEnqueue:
    return RecordingEnqueue()


@pytest.fixture
def asker(store, enqueue):
    return make_interactions(store, enqueue)
