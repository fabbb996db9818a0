"""The shape of the house, held by tests.

- The core imports no adapter: nothing in ``bot/`` or ``policies/`` may import telegram,
  aiohttp, dramatiq, mcp or prometheus_client (nor handlers, jobs, aegis, emulator), the way
  no module of PTB's ``telegram/`` imports ``telegram.ext``; checked in the source and by
  importing every module.
- Federation's signing and checks are core too: pure functions that import no adapter, so the
  benchmark and the fuzzer run them bare and a web framework can never reach into them.
- ``jobs/`` imports nothing from ``handlers/``: the worker is not the Telegram adapter.
- No module-level import cycle anywhere in the project.
- ``bot/__init__.py`` is the map: it names every subpackage of ``bot/``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROJECT_PACKAGES = ("bot", "policies", "handlers", "jobs", "aegis", "emulator", "federation")
CORE_PACKAGES = ("bot", "policies")
CORE_MODULES = tuple(
    ROOT / "federation" / f"{name}.py" for name in ("signing", "headers", "checks", "invitations")
)
ADAPTER_PACKAGES = (
    "telegram",
    "aiohttp",
    "dramatiq",
    "mcp",
    "prometheus_client",
    "handlers",
    "jobs",
    "aegis",
    "emulator",
)


def source_files(*packages: str, root: Path = ROOT) -> list[Path]:
    return sorted(
        path
        for package in packages
        for path in (root / package).rglob("*.py")
        if "versions" not in path.relative_to(root).parts  # alembic's revision files
    )


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> set[str]:
    """Every absolute import in the file, wherever it is (functions and TYPE_CHECKING too)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def module_level_imports(path: Path, known: set[str]) -> set[str]:
    """The project modules a file imports when it is itself imported: its top level, including
    ``if``/``try`` blocks there, but not ``if TYPE_CHECKING:`` nor function bodies."""

    def walk(body):
        for node in body:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                yield from walk(node.orelse)
            elif isinstance(node, ast.If | ast.Try | ast.With):
                for block in ("body", "orelse", "finalbody"):
                    yield from walk(getattr(node, block, []))
                for handler in getattr(node, "handlers", []):
                    yield from walk(handler.body)
            elif isinstance(node, ast.Import):
                yield from (alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    submodule = f"{node.module}.{alias.name}"
                    yield submodule if submodule in known else node.module

    tree = ast.parse(path.read_text(), filename=str(path))
    return {name for name in walk(tree.body) if name in known}


def import_cycles(root: Path, packages: tuple[str, ...]) -> list[list[str]]:
    """Every strongly connected group of two or more modules in the module-level import graph."""
    files = {module_name(path, root): path for path in source_files(*packages, root=root)}
    graph = {name: module_level_imports(path, set(files)) - {name} for name, path in files.items()}
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(name: str) -> None:  # Tarjan's algorithm
        order[name] = low[name] = len(order)
        stack.append(name)
        for other in graph[name]:
            if other not in order:
                visit(other)
                low[name] = min(low[name], low[other])
            elif other in stack:
                low[name] = min(low[name], order[other])
        if low[name] == order[name]:
            group = []
            while (member := stack.pop()) != name:
                group.append(member)
            group.append(name)
            if len(group) > 1:
                cycles.append(sorted(group))

    for name in sorted(graph):
        if name not in order:
            visit(name)
    return cycles


def test_core_modules_import_no_adapter():
    offenders = []
    for path in source_files(*CORE_PACKAGES):
        for name in imported_modules(path):
            if name.split(".")[0] in ADAPTER_PACKAGES:
                offenders.append(f"{path.relative_to(ROOT)} imports {name}")
    assert offenders == []


def test_importing_the_whole_core_loads_no_adapter():
    # alembic's env.py runs only inside alembic; the source check above covers it
    modules = [
        module_name(path)
        for path in source_files(*CORE_PACKAGES)
        if "migrations" not in path.relative_to(ROOT).parts
    ]
    assert "bot.store.database" in modules and "bot.chat.views.cards" in modules  # subpackages
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {ADAPTER_PACKAGES!r}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_federation_signing_and_checks_import_no_adapter_nor_redis():
    offenders = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in CORE_MODULES
        for name in imported_modules(path)
        if name.split(".")[0] in (*ADAPTER_PACKAGES, "redis", "sqlalchemy")
    ]
    assert offenders == []
    code = (
        "import importlib, sys\n"
        f"for path in {[str(path) for path in CORE_MODULES]!r}:\n"
        "    importlib.import_module('federation.' + path.rsplit('/', 1)[1][:-3])\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {ADAPTER_PACKAGES!r}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_jobs_import_nothing_from_handlers():
    offenders = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in source_files("jobs")
        for name in imported_modules(path)
        if name.split(".")[0] == "handlers"
    ]
    assert offenders == []


def test_no_module_level_import_cycle():
    assert import_cycles(ROOT, PROJECT_PACKAGES) == []


def test_the_map_names_every_subpackage_of_the_core():
    import bot

    subpackages = sorted(
        module_name(init)
        for init in (ROOT / "bot").rglob("__init__.py")
        if init.parent != ROOT / "bot" and "migrations" not in init.parts
    )
    assert len(subpackages) >= 9
    missing = [name for name in subpackages if f"``{name}``" not in bot.__doc__]
    assert missing == []


def test_the_layering_check_would_catch_an_adapter_import(tmp_path):
    offender = tmp_path / "bad.py"
    offender.write_text("from telegram.ext import Application\nimport bot.store.database\n")
    assert "telegram.ext" in imported_modules(offender)


def test_the_cycle_check_would_catch_a_cycle_but_not_a_deferred_import(tmp_path):
    package = tmp_path / "bot"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "a.py").write_text("from bot.sub import b\n")
    (package / "sub" / "b.py").write_text("import bot.sub.c\n")
    (package / "sub" / "c.py").write_text("from bot.sub.a import thing\n")
    (package / "d.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from bot import e\n"
    )
    (package / "e.py").write_text("def later():\n    from bot import d\nimport bot.d\n")
    assert import_cycles(tmp_path, ("bot",)) == [["bot.sub.a", "bot.sub.b", "bot.sub.c"]]
