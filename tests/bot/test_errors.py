"""Every exception aegis raises on purpose lives in bot/errors.py, under an area base of the one
root, and says when it is raised."""

from __future__ import annotations

import ast
import builtins
import inspect
from pathlib import Path

from bot import errors

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("bot", "policies", "handlers", "jobs", "aegis", "federation")  # emulator: its own
BUILTIN_EXCEPTIONS = {
    name
    for name, value in vars(builtins).items()
    if inspect.isclass(value) and issubclass(value, BaseException)
}


def aegis_errors() -> list[type[errors.AegisError]]:
    return [
        value
        for value in vars(errors).values()
        if inspect.isclass(value) and issubclass(value, errors.AegisError)
    ]


def exception_classes_outside_errors(root: Path = ROOT) -> list[str]:
    known = BUILTIN_EXCEPTIONS | {cls.__name__ for cls in aegis_errors()}
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if path == root / "bot" / "errors.py":
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef) and any(
                    ast.unparse(base).split(".")[-1] in known for base in node.bases
                ):
                    found.append(f"{path.relative_to(root)}: {node.name}")
    return found


def test_no_exception_is_declared_outside_errors_py():
    assert exception_classes_outside_errors() == []


def test_every_error_has_an_area_base_under_the_root():
    areas = {cls for cls in aegis_errors() if cls.__bases__ == (errors.AegisError,)}
    assert {errors.ConfigError, errors.MonitorError, errors.FederationError} <= areas
    for cls in aegis_errors():
        if cls is not errors.AegisError and cls not in areas:
            assert set(cls.__mro__) & areas, f"{cls.__name__} has no area base"


def test_every_error_says_when_it_is_raised():
    for cls in aegis_errors():
        if cls is not errors.AegisError:
            assert (cls.__doc__ or "").startswith("Raised when"), cls.__name__


def test_the_check_would_find_an_exception_declared_elsewhere(tmp_path):
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "stray.py").write_text(
        "from bot.errors import ToolError\n\n\nclass Oops(ToolError):\n    pass\n\n\n"
        "class Fine:\n    pass\n\n\nclass Bad(ValueError):\n    pass\n"
    )
    assert exception_classes_outside_errors(tmp_path) == [
        "jobs/stray.py: Oops",
        "jobs/stray.py: Bad",
    ]
