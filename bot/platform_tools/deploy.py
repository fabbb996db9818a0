"""The deploy recipes of aegis.yaml: list them (``deploy.recipes``) and run one
(``deploy.run``).

A recipe is a program and its arguments (never a shell string) run in a directory the file
names, within the recipe's own timeout and never past the deadline of the run that asks.
An agent names a recipe and nothing else: what runs is what the owner wrote in aegis.yaml,
and running it waits for a tap and a TOTP code.

    deploy:
      site:
        description: Deploy the site
        command: [./deploy.sh, --prod]
        workdir: /srv/site
        timeout_seconds: 600          # 1..3600
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bot.errors import ToolRefused
from bot.platform_tools.workdir import caller_run, ceiling
from bot.processes import run_bounded
from policies.tools import Effect, ToolSpec, object_schema

if TYPE_CHECKING:
    from bot.actions import Caller, Explainer, ToolFunction
    from bot.platform import Platform

DEFAULT_TIMEOUT_SECONDS = 600
MAX_TIMEOUT_SECONDS = 3600


@dataclass(frozen=True)
class DeployRecipe:
    name: str
    command: tuple[str, ...]  # argv: the program, then its arguments
    workdir: Path
    description: str = ""
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS

    def shown(self) -> str:
        """What its approval card says it runs; the approval holds only for that."""
        return f"It runs {shlex.join(self.command)} in {self.workdir}."

    def describe(self) -> dict:
        return {
            "name": self.name,
            "description": self.description,
            "command": list(self.command),
            "workdir": str(self.workdir),
            "timeout_seconds": self.timeout_seconds,
        }


TOOLS = (
    ToolSpec(
        "deploy.recipes",
        Effect.READ,
        object_schema(),
        "The deploy recipes aegis.yaml declares: what each runs, and where.",
    ),
    ToolSpec(
        "deploy.run",
        Effect.IRREVERSIBLE,
        object_schema({"recipe": {"type": "string", "minLength": 1, "maxLength": 100}}, "recipe"),
        "Run a deploy recipe of aegis.yaml by name. Returns its exit code and output "
        "(past 12 KB the middle is cut, and cut_bytes says how much).",
    ),
)


def explainers(platform: Platform) -> dict[str, Explainer]:
    """The card for deploy.run shows what the recipe runs, not only its name."""

    def what_runs(args: dict) -> str | None:
        recipe = platform.config.current().recipes.get(args.get("recipe"))
        return recipe.shown() if recipe is not None else None

    return {"deploy.run": what_runs}


def toolbox(platform: Platform) -> dict[str, ToolFunction]:
    async def list_recipes(args: dict, caller: Caller) -> dict:
        recipes = platform.config.current().recipes
        return {"recipes": [recipes[name].describe() for name in sorted(recipes)]}

    async def run_recipe(args: dict, caller: Caller) -> dict:
        recipes = platform.config.current().recipes
        recipe = recipes.get(args["recipe"])
        if recipe is None:
            declared = ", ".join(sorted(recipes)) or "none"
            raise ToolRefused(
                f"no deploy recipe is called {args['recipe']!r}; declared in aegis.yaml: {declared}"
            )
        if not recipe.workdir.is_dir():
            raise ToolRefused(
                f"the workdir of deploy.{recipe.name}, {recipe.workdir}, is not a directory"
            )
        if caller.card is not None:
            # The grant is bound to the recipe's name; what the owner approved is the command
            # the card showed. If aegis.yaml changed it since, this approval is not for it.
            card = await platform.interactions.get(caller.card)
            if card is None or not card.prompt.endswith(recipe.shown()):
                raise ToolRefused(
                    f"deploy.{recipe.name} changed in aegis.yaml after card #{caller.card} "
                    "showed it; nothing was run. Ask again to approve what it runs now"
                )
        timeout = ceiling(await caller_run(platform, caller), recipe.timeout_seconds)
        finished = await run_bounded(list(recipe.command), recipe.workdir, seconds=timeout)
        return {"recipe": recipe.name, **finished.as_dict()}

    return {"deploy.recipes": list_recipes, "deploy.run": run_recipe}
