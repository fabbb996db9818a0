"""The environment that points a real coding CLI at a scripted model, with a home of its own.

Each function returns a whole environment for ``subprocess.run(..., env=...)``: only PATH and
the locale come from this process, so nothing of the machine's ~/.claude, ~/.codex,
~/.config/opencode, API keys or proxies applies; HOME (and the XDG directories, and each CLI's
own config directory) are under ``home``, which the test owns (a ``tmp_path``). Add your own
variables to the dict it returns.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tests.helpers.vendor_models.server import ScriptedModel

# Model names as each CLI is given them. Claude Code and OpenCode accept any name for a custom
# endpoint or provider; Codex accepts one it does not know, with a warning (below).
CLAUDE_MODEL = "claude-sonnet-4-5"
SCRIPTED_MODEL = "scripted-model"
API_KEY = "sk-scripted-test"  # the servers take any key; the CLIs refuse to start without one


def isolated_environment(home: Path) -> dict[str, str]:
    """PATH and locale from here; HOME and the XDG directories under ``home``."""
    environment = {
        name: os.environ[name] for name in ("PATH", "LANG", "LC_ALL") if name in os.environ
    }
    directories = {
        "HOME": home,
        "XDG_CONFIG_HOME": home / ".config",
        "XDG_DATA_HOME": home / ".local" / "share",
        "XDG_STATE_HOME": home / ".local" / "state",
        "XDG_CACHE_HOME": home / ".cache",
    }
    for directory in directories.values():
        directory.mkdir(parents=True, exist_ok=True)
    return environment | {name: str(path) for name, path in directories.items()}


def claude_environment(
    model: ScriptedModel,
    home: Path,
    *,
    model_name: str = CLAUDE_MODEL,
    tool_search: bool = False,
) -> dict[str, str]:
    """Claude Code against ``model`` (Anthropic Messages API). ``ANTHROPIC_MODEL`` names the
    model, so no ``--model`` is needed; a retry would only hide a wire mistake, so there are
    none (``CLAUDE_CODE_MAX_RETRIES=0``); telemetry, the updater and the other calls home are
    off (``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC``).

    By default Claude Code defers MCP tools (and some of its own): the request's ``tools``
    hold ``ToolSearch`` and a placeholder, and the deferred names appear only in a
    system-reminder. ``tool_search=False`` (``ENABLE_TOOL_SEARCH=false``) lists every tool in
    ``tools``, so ``Seen.tool_names`` is what the model was offered (``True`` leaves the
    CLI's default); either way the model may
    call ``mcp__<server>__<tool>`` straight away."""
    # The CLI's own default (unset) where tool_search is asked for.
    search = {} if tool_search else {"ENABLE_TOOL_SEARCH": "false"}
    return (
        isolated_environment(home)
        | search
        | {
            "CLAUDE_CONFIG_DIR": str(home / ".claude"),
            "ANTHROPIC_BASE_URL": model.url,
            "ANTHROPIC_API_KEY": API_KEY,
            "ANTHROPIC_MODEL": model_name,
            "ANTHROPIC_SMALL_FAST_MODEL": model_name,
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": model_name,
            "CLAUDE_CODE_MAX_RETRIES": "0",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
        }
    )


def codex_environment(
    model: ScriptedModel, home: Path, extra_toml: str = "", *, model_name: str = SCRIPTED_MODEL
) -> dict[str, str]:
    """Codex against ``model`` (Responses API): ``$CODEX_HOME/config.toml`` (``home/.codex``)
    names a provider of our own, with ``extra_toml`` appended (``[mcp_servers.x]`` tables …).

    Codex knows no metadata for ``scripted-model``: it says so once as an ``error`` item in
    ``--json`` output ("Model metadata for `scripted-model` not found") and goes on."""
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    top = f'model = {json.dumps(model_name)}\nmodel_provider = "scripted"\n'
    provider = f"""
[model_providers.scripted]
name = "scripted"
base_url = {json.dumps(model.url + "/v1")}
wire_api = "responses"
env_key = "SCRIPTED_API_KEY"
request_max_retries = 0
stream_max_retries = 0
"""
    # Top-level keys first, the provider's table last: extra_toml may hold top-level keys
    # (they stay top-level) and tables (they end where the provider's header starts).
    text = top + "\n" + extra_toml + "\n" + provider
    (codex_home / "config.toml").write_text(text, encoding="utf-8")
    return isolated_environment(home) | {"CODEX_HOME": str(codex_home), "SCRIPTED_API_KEY": API_KEY}


def opencode_environment(
    model: ScriptedModel,
    home: Path,
    extra_config: dict[str, Any] | None = None,
    *,
    model_name: str = SCRIPTED_MODEL,
) -> dict[str, str]:
    """OpenCode against ``model`` (Chat Completions through its bundled
    ``@ai-sdk/openai-compatible``). The provider goes in the global config file
    (``$XDG_CONFIG_HOME/opencode/opencode.json``), the lowest layer, so OPENCODE_CONFIG and
    OPENCODE_CONFIG_CONTENT (where aegis puts its rules) stay free and win; ``extra_config``
    is merged into it key by key.

    Offline: no models.dev fetch (OPENCODE_DISABLE_MODELS_FETCH), no updater, no LSP download;
    and OpenCode's background ``npm install @opencode-ai/plugin`` into each config directory
    is answered from npm's cache only (``npm_config_offline``), so it fails quietly instead of
    reaching the registry."""
    provider = {
        "npm": "@ai-sdk/openai-compatible",
        "name": "Scripted",
        "options": {"baseURL": model.url + "/v1", "apiKey": API_KEY},
        "models": {model_name: {"name": model_name, "tool_call": True}},
    }
    config = {
        "$schema": "https://opencode.ai/config.json",
        "provider": {"scripted": provider},
        "model": f"scripted/{model_name}",
        "small_model": f"scripted/{model_name}",
        "autoupdate": False,
        "share": "disabled",
    }
    environment = isolated_environment(home)
    path = home / ".config" / "opencode" / "opencode.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_merged(config, extra_config or {}), indent=2), encoding="utf-8")
    return environment | {
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_DISABLE_SHARE": "1",
        "npm_config_offline": "true",
    }


def _merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merged(merged[key], value)
        else:
            merged[key] = value
    return merged
