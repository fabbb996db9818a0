"""Where a coding CLI's own reading built-ins may read when it asks aegis (bot/tools/
cli_builtins.py): only inside the agent's workdir, and never in aegis's data dir."""

from __future__ import annotations

from bot.tools.cli_builtins import outside, touches


def test_a_read_inside_the_workdir_is_in_and_anything_else_is_out(tmp_path):
    work = tmp_path / "work"
    (work / "src").mkdir(parents=True)
    assert outside({"file_path": str(work / "src" / "a.py")}, work) is None
    assert outside({"file_path": "src/a.py"}, work) is None  # relative: the CLI's to resolve
    assert outside({"pattern": f"{work}/**/*.py"}, work) is None
    assert outside({"file_path": "/proc/1/environ"}, work) == "/proc/1/environ"
    assert outside({"path": str(work / ".." / "other")}, work) == str(work / ".." / "other")
    assert outside({"pattern": f"{tmp_path}/*/secret"}, work) == f"{tmp_path}/*/secret"
    assert outside({"file_path": str(work / "a.py")}, None) == str(work / "a.py")  # no workdir


def test_the_data_dir_is_touched_from_inside_and_from_above(tmp_path):
    data = tmp_path / "data"
    (data / "secrets").mkdir(parents=True)
    assert touches({"file_path": str(data / "secrets" / "key")}, data)
    assert touches({"path": str(tmp_path)}, data)  # a search from above goes down into it
    assert touches({"file_path": str(tmp_path / "elsewhere")}, data) is None
