"""The core imports no adapter: nothing in ``bot/`` or ``policies/`` may import telegram,
aiohttp, dramatiq or mcp, the way no module of PTB's ``telegram/`` imports ``telegram.ext``."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORE_PACKAGES = ("bot", "policies")
ADAPTER_PACKAGES = (
    "telegram",
    "aiohttp",
    "dramatiq",
    "mcp",
    "handlers",
    "jobs",
    "aegis",
    "emulator",
)


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_core_modules_import_no_adapter():
    offenders = []
    core_files = sorted(
        path for package in CORE_PACKAGES for path in (ROOT / package).rglob("*.py")
    )
    for path in core_files:
        for name in imported_modules(path):
            if name.split(".")[0] in ADAPTER_PACKAGES:
                offenders.append(f"{path.relative_to(ROOT)} imports {name}")
    assert offenders == []


def test_importing_the_whole_core_loads_no_adapter():
    modules = sorted(
        ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for package in CORE_PACKAGES
        for path in (ROOT / package).glob("*.py")
    )
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {ADAPTER_PACKAGES!r}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_the_layering_check_would_catch_an_adapter_import(tmp_path):
    offender = tmp_path / "bad.py"
    offender.write_text("from telegram.ext import Application\nimport bot.store.database\n")
    assert "telegram.ext" in imported_modules(offender)
