"""The ``agents:`` run settings and the ``schedules:`` section of ``aegis.yaml`` (the formats are
in bot/agents/profiles.py), checked with every problem named at its place in the file.

    schedules:
      morning-news:
        every: 1d                  # 90s, 15m, 2h, 1d, or a number of seconds
        agent: scout               # or capability: research (whichever agent holds the tag)
        request: What happened overnight?
        enabled: true              # the first time it is seen; /schedules switches it later
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from bot.agents.profiles import (
    DEFAULT_DEADLINE_SECONDS,
    AgentProfile,
    HarnessKind,
    Provider,
    ScheduleSpec,
    ScriptStep,
    TaskHandler,
)
from bot.errors import PolicyConfigError
from bot.upkeep.timing import at_cron, cron_of

AGENT_KEYS = {
    "name",
    "tools",
    "peer",
    "tags",
    "harness",
    "model",
    "providers",
    "instructions",
    "instructions_file",
    "deadline",
    "workdir",
    "command",
    "expensive",
    "budget_tokens",
    "steps",
    "tasks",
}
SLUG = re.compile(r"^[a-z0-9][a-z0-9_-]{0,39}\Z")
DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|d)?\Z")
UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}
MIN_INTERVAL_SECONDS = 10
MAX_DEADLINE_SECONDS = 12 * 3600  # a run longer than this is a mistake in the file


def agent_profile(path: Path, slug: str, spec: dict, tools: frozenset[str], name: str):
    """The run settings of ``agents.<slug>`` (its gate settings are read by config_file)."""
    place = f"{path}: agents.{slug}"
    if not SLUG.match(slug):
        raise PolicyConfigError(
            f"{place}: a slug is 1-40 lowercase letters, digits, - and _, starting with a "
            "letter or digit (it is typed in /run and used in keys)"
        )
    harness = None
    if spec.get("harness") is not None:
        try:
            harness = HarnessKind(spec["harness"])
        except ValueError:
            kinds = ", ".join(kind.value for kind in HarnessKind)
            raise PolicyConfigError(f"{place}.harness: must be one of {kinds}") from None
    instructions = _text(f"{place}.instructions", spec.get("instructions"))
    if spec.get("instructions_file") is not None:
        if instructions:
            raise PolicyConfigError(f"{place}: give instructions or instructions_file, not both")
        instructions = _instructions_file(place, path, spec["instructions_file"])
    providers = _providers(f"{place}.providers", spec.get("providers"))
    if harness is HarnessKind.HTTP and not providers:
        raise PolicyConfigError(f"{place}.providers: an http agent needs at least one provider")
    steps = _steps(f"{place}.steps", spec.get("steps"))
    if harness is HarnessKind.SCRIPT and not steps:
        raise PolicyConfigError(f"{place}.steps: a script agent needs at least one step")
    workdir = spec.get("workdir")
    if workdir is not None:
        workdir = Path(_text(f"{place}.workdir", workdir)).expanduser()
    budget = spec.get("budget_tokens")
    if budget is not None and (not _is_int(budget) or budget <= 0):
        raise PolicyConfigError(f"{place}.budget_tokens: must be a whole number above 0")
    return AgentProfile(
        slug=slug,
        name=name,
        harness=harness,
        tags=frozenset(_texts(f"{place}.tags", spec.get("tags"))),
        model=_text(f"{place}.model", spec.get("model")),
        providers=providers,
        instructions=instructions,
        tools=tools,
        deadline_seconds=(
            duration(f"{place}.deadline", spec["deadline"], minimum=1, maximum=MAX_DEADLINE_SECONDS)
            if spec.get("deadline") is not None
            else DEFAULT_DEADLINE_SECONDS
        ),
        workdir=workdir,
        command=_text(f"{place}.command", spec.get("command")) or None,
        expensive=_flag(f"{place}.expensive", spec.get("expensive", False)),
        budget_tokens=budget,
        steps=steps,
        task_handlers=_task_handlers(f"{place}.tasks", spec.get("tasks")),
    )


SCHEDULE_KEYS = {"every", "at", "days", "cron", "agent", "capability", "request", "enabled"}


def schedule_specs(path: Path, section: Any, agents: dict[str, AgentProfile]) -> list[ScheduleSpec]:
    if section is None:
        return []
    if not isinstance(section, dict):
        raise PolicyConfigError(f"{path}: schedules: must be a mapping of names to schedules")
    specs = []
    for name, spec in section.items():
        place = f"{path}: schedules.{name}"
        if not isinstance(name, str) or not SLUG.match(name):
            raise PolicyConfigError(
                f"{place}: a schedule's name is 1-40 lowercase letters, digits, - and _"
            )
        if not isinstance(spec, dict):
            raise PolicyConfigError(
                f"{place}: must be a mapping with every (or at, or cron), agent and request"
            )
        _known(
            place,
            spec,
            {"every", "at", "days", "cron", "agent", "capability", "request", "enabled"},
        )
        interval, cron = _schedule_timing(place, spec)
        agent, capability = spec.get("agent"), spec.get("capability")
        if (agent is None) == (capability is None):
            raise PolicyConfigError(f"{place}: name exactly one of agent or capability")
        if agent is not None and (agent not in agents or not agents[agent].runnable):
            raise PolicyConfigError(
                f"{place}.agent: {agent!r} is not an agent with a harness under agents:"
            )
        if capability is not None:
            capability = _text(f"{place}.capability", capability)
        request = _text(f"{place}.request", spec.get("request")).strip()
        if not request:
            raise PolicyConfigError(f"{place}.request: what the agent is asked to do is required")
        enabled = _flag(f"{place}.enabled", spec.get("enabled", True))
        specs.append(ScheduleSpec(name, interval, request, agent, capability, enabled, cron))
    return specs


def _schedule_timing(place: str, spec: dict) -> tuple[int, str | None]:
    """``every: 1h``, or ``at: "08:00"`` (with ``days: mon-fri``), or ``cron: "30 7 * * 1-5"``:
    exactly one of the three, as (interval seconds, cron)."""
    given = [key for key in ("every", "at", "cron") if key in spec]
    if len(given) != 1:
        raise PolicyConfigError(
            f'{place}: say when it runs with one of every (e.g. 1h), at (e.g. "08:00", with '
            'days: mon-fri if not every day) or cron (e.g. "30 7 * * 1-5")'
        )
    if "days" in spec and "at" not in spec:
        raise PolicyConfigError(f'{place}.days: goes with at (e.g. at: "08:00")')
    if "every" in spec:
        return duration(f"{place}.every", spec["every"], minimum=MIN_INTERVAL_SECONDS), None
    if "at" in spec:
        return 0, at_cron(f"{place}.at", spec["at"], spec.get("days"))
    return 0, cron_of(f"{place}.cron", spec["cron"])


def duration(place: str, value: Any, *, minimum: int, maximum: int | None = None) -> int:
    """Seconds from ``90``, ``"90s"``, ``"15m"``, ``"2h"`` or ``"1d"``."""
    if _is_int(value):
        seconds = value
    else:
        match = DURATION.match(str(value).strip()) if isinstance(value, str) else None
        if match is None:
            raise PolicyConfigError(
                f"{place}: {value!r} is not a duration (write 90s, 15m, 2h, 1d or seconds)"
            )
        seconds = int(float(match.group(1)) * UNIT_SECONDS[match.group(2)])
    if seconds < minimum:
        raise PolicyConfigError(f"{place}: must be at least {minimum} seconds")
    if maximum is not None and seconds > maximum:
        raise PolicyConfigError(f"{place}: must be at most {maximum // 3600} hours")
    return seconds


def _instructions_file(place: str, path: Path, value: Any) -> str:
    name = Path(_text(f"{place}.instructions_file", value)).expanduser()
    full = name if name.is_absolute() else path.parent / name
    try:
        return full.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyConfigError(
            f"{place}.instructions_file: {full} cannot be read ({type(exc).__name__})"
        ) from None


def _providers(place: str, value: Any) -> tuple[Provider, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise PolicyConfigError(f"{place}: must be a list of {{url, model, key_env}}")
    providers = []
    for index, spec in enumerate(value):
        here = f"{place}[{index}]"
        if not isinstance(spec, dict):
            raise PolicyConfigError(f"{here}: must be a mapping with url and model")
        _known(here, spec, {"url", "model", "key_env", "name"})
        url = _text(f"{here}.url", spec.get("url"))
        if not url.startswith(("http://", "https://")):
            raise PolicyConfigError(f"{here}.url: must be an http:// or https:// URL")
        model = _text(f"{here}.model", spec.get("model"))
        if not model:
            raise PolicyConfigError(f"{here}.model: which model to ask is required")
        key_env = _text(f"{here}.key_env", spec.get("key_env")) or None
        providers.append(
            Provider(url.rstrip("/"), model, key_env, _text(f"{here}.name", spec.get("name")))
        )
    return tuple(providers)


def _steps(place: str, value: Any) -> tuple[ScriptStep, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise PolicyConfigError(f"{place}: must be a list of steps (say, call or sleep)")
    steps = []
    for index, spec in enumerate(value):
        here = f"{place}[{index}]"
        if not isinstance(spec, dict):
            raise PolicyConfigError(f"{here}: must be a mapping: say, call (with args) or sleep")
        _known(here, spec, {"say", "call", "args", "sleep"})
        kinds = [key for key in ("say", "call", "sleep") if key in spec]
        if len(kinds) != 1:
            raise PolicyConfigError(f"{here}: give exactly one of say, call or sleep")
        if "args" in spec and "call" not in spec:
            raise PolicyConfigError(f"{here}.args: only a call step has arguments")
        if "say" in spec:
            text = _text(f"{here}.say", spec["say"])
            if not text.strip():
                raise PolicyConfigError(f"{here}.say: needs some text")
            steps.append(ScriptStep(say=text))
        elif "call" in spec:
            args = spec.get("args") or {}
            if not isinstance(args, dict):
                raise PolicyConfigError(f"{here}.args: must be a mapping")
            steps.append(ScriptStep(call=_text(f"{here}.call", spec["call"]), args=args))
        else:
            seconds = spec["sleep"]
            if not isinstance(seconds, int | float) or isinstance(seconds, bool) or seconds < 0:
                raise PolicyConfigError(f"{here}.sleep: must be a number of seconds")
            steps.append(ScriptStep(sleep=float(seconds)))
    return tuple(steps)


def _task_handlers(place: str, value: Any) -> tuple[TaskHandler, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise PolicyConfigError(f"{place}: must be a list of {{when, do}}")
    handlers = []
    for index, spec in enumerate(value):
        here = f"{place}[{index}]"
        if not isinstance(spec, dict):
            raise PolicyConfigError(f"{here}: must be a mapping with when and do")
        _known(here, spec, {"when", "do"})
        when = spec.get("when") or {}
        if not isinstance(when, dict):
            raise PolicyConfigError(f"{here}.when: must be a mapping (origin, labels)")
        _known(f"{here}.when", when, {"origin", "labels"})
        request = _text(f"{here}.do", spec.get("do")).strip()
        if not request:
            raise PolicyConfigError(f"{here}.do: what to ask the agent is required")
        handlers.append(
            TaskHandler(
                tuple(_texts(f"{here}.when.origin", when.get("origin"))),
                tuple(_texts(f"{here}.when.labels", when.get("labels"))),
                request,
            )
        )
    return tuple(handlers)


def _text(place: str, value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise PolicyConfigError(f"{place}: must be text")
    return value


def _texts(place: str, value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        value = [value]
    if not all(isinstance(v, str) and v.strip() for v in value):
        raise PolicyConfigError(f"{place}: must be text or a list of texts")
    return [v.strip() for v in value]


def _flag(place: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise PolicyConfigError(f"{place}: must be true or false")
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _known(place: str, spec: dict, known: set[str]) -> None:
    unknown = sorted(set(map(str, spec)) - known)
    if unknown:
        raise PolicyConfigError(
            f"{place}: unknown key {unknown[0]!r} (known: {', '.join(sorted(known))})"
        )
