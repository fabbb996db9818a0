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

from typing import TYPE_CHECKING

from bot.errors import ToolRefused
from bot.tools.processes import run_bounded
from bot.tools.workdir import caller_run, ceiling

if TYPE_CHECKING:
    from bot.actions.call import Caller, Explainer, ToolFunction
    from bot.core import Platform


def explainers(platform: Platform) -> dict[str, Explainer]:
    """The card for deploy.run shows what the recipe runs, not only its name."""

    def what_runs(args: dict, caller: Caller) -> str | None:
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
