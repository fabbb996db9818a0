"""The core of aegis: every concept of ../shared/design.md as a subpackage, with no adapter in it.

- ``bot.store``: the database and nothing else (engines, the write lock, tables, search,
  migrations, raw-SQL fast paths).
- ``bot.config``: settings from the environment, ``aegis.yaml`` as data, the data dir's secrets.
- ``bot.chat``: talking with the owner (updates, the outbox, callbacks, owners, codes, the
  briefing); ``bot.chat.views``: how every concept reads in chat, and the command table.
- ``bot.tasks``: tasks, capture, triage of the inbox, notes.
- ``bot.interactions``: every human handoff as one row, and how an answer settles it.
- ``bot.actions``: a tool call from decision to result (the call path, grants, held calls,
  the audit trail).
- ``bot.agents``: agent profiles, runs and how they end, the model-call ledger, MCP tokens,
  delegation, the demo agent.
- ``bot.tools``: the platform's own tools, their declarations apart from their functions.
- ``bot.upkeep``: job runs, heartbeats, schedules, leases, retention, gauges.
- ``bot.monitors``: monitors, their checks' verdicts, incidents and their cards.
- ``bot.reminders``: one-shot reminders made in chat, and the time as people write it.

Beside them: ``bot/core.py`` builds the core services once per process, ``bot/errors.py`` holds
every error aegis raises on purpose, ``bot/timeutil.py`` is the one clock.

In a concept's folder, the module named for the concept holds its service (``bot/tasks/tasks.py``
has ``Tasks``, which owns the ``tasks`` table) and a singular name is the concept as data
(``bot/tasks/task.py``). Nothing here imports ``telegram``, ``aiohttp``, ``dramatiq`` or ``mcp``;
the adapters (``handlers``, ``jobs``, ``aegis``, ``emulator``) call in, never the other way round,
and use the same names (``handlers/tasks.py``, ``jobs/triage.py``). ``tests/test_layering.py``
holds these lines.
"""
