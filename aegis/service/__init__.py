"""aegis as systemd units: ``aegis service install`` and what ``aegis doctor`` checks of them.

- units.py: the units as text, a pure function of a Plan (and the memory formula)
- plan.py: what the units depend on, found on this host and in the settings
- install.py: writing the units and the EnvironmentFile, the commands that need root
- check.py: installed units compared with what install would write now
"""
