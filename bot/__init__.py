"""The core of aegis: settings, the store, owners and pairing, updates, the outbox and runs.

Nothing in this package imports ``telegram``, ``aiohttp``, ``dramatiq`` or ``mcp``; the adapters
around it (``handlers``, ``jobs``, ``aegis``, ``emulator``) call in, never the other way round.
``tests/test_layering.py`` holds that line.
"""
