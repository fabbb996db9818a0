"""The aegis command and its processes (web, worker, clock, up): the shell that wires the
core (``bot``) to its adapters (``handlers``, ``jobs``, ``emulator``)."""
