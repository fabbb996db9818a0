"""The ``stack`` of the delegation tests (test_delegation_tasks.py, test_delegation_quotas.py):
aegis with their script agents (tests/helpers/delegation.py). Every other module here defines a
``stack`` of its own, which overrides this one."""

from __future__ import annotations

import pytest

from tests.helpers.delegation import aegis


@pytest.fixture
async def stack(tmp_path, database_url, redis_server_url, redis_namespace):
    async with aegis(tmp_path, database_url, redis_server_url, redis_namespace) as running:
        yield running
