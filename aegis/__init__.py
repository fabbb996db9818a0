"""The aegis command and its processes (web, worker, clock, up): the shell that wires the
core (``bot``) to its adapters (``handlers``, ``jobs``, ``emulator``)."""

from importlib import metadata


def aegis_version() -> str:
    """The installed version, as ``aegis --version`` and a peer's ``status`` say it."""
    try:
        return metadata.version("aegis")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "(not installed)"
