"""Scripted model servers for the real coding CLIs, and the environments that point each CLI
at one. A test lists the steps (``say``, ``call`` or a function of the request), serves them,
runs the CLI as a subprocess, then reads what the model was sent::

    with scripted_model_in_thread([call("Read", {"file_path": "notes.txt"}), say("ok")]) as model:
        env = claude_environment(model, tmp_path / "home")
        subprocess.run([claude_cli, "-p", "hi"], env=env, cwd=workdir, timeout=60)
    assert "the secret" in model.tool_result_texts[0]

One server answers all three wire formats (anthropic.py, responses.py, chat.py); script.py
holds the steps and what was asked, server.py the serving, environments.py the CLIs' side.
"""

from tests.helpers.vendor_models.environments import (
    claude_environment,
    codex_environment,
    isolated_environment,
    opencode_environment,
)
from tests.helpers.vendor_models.script import RAN_OUT_TEXT, Call, Say, Seen, ToolResult, call, say
from tests.helpers.vendor_models.server import (
    ScriptedModel,
    scripted_model,
    scripted_model_in_thread,
)

__all__ = [
    "RAN_OUT_TEXT",
    "Call",
    "Say",
    "ScriptedModel",
    "Seen",
    "ToolResult",
    "call",
    "claude_environment",
    "codex_environment",
    "isolated_environment",
    "opencode_environment",
    "say",
    "scripted_model",
    "scripted_model_in_thread",
]
