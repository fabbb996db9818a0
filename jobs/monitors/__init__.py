"""Monitors on the worker: ``checks`` (the clock's slots checked and recorded), ``watches`` (a
command monitor's approved card), and the probes that check once (``probe`` is the interface,
``probes/`` one module per kind)."""
