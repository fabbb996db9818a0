"""Deploy recipes: declared under ``deploy:`` in aegis.yaml, every mistake refused with its place
in the file, and run by name as an argv (never through a shell) in the recipe's workdir."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.actions.call import Caller
from bot.config.file import load_config
from bot.config.settings import Settings
from bot.core import Platform
from bot.errors import PolicyConfigError, ToolRefused
from bot.store import migrate
from bot.store.database import Store
from bot.tools.declarations import DeployRecipe
from tests.helpers.interactions import CHAT, SIGNER, RecordingEnqueue

RECIPES = """\
agents:
  ops: {{tools: [deploy.*]}}
deploy:
  site:
    description: Deploy the site
    command: [./deploy.sh, --prod]
    workdir: {workdir}
    timeout_seconds: 120
  echo:
    command: [/bin/echo, "a; touch injected", "$HOME"]
    workdir: {workdir}
  slow:
    command: [sleep, "30"]
    workdir: {workdir}
    timeout_seconds: 1
  missing:
    command: [./no-such-program]
    workdir: {workdir}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "aegis.yaml"
    path.write_text(text, encoding="utf-8")
    return path


# Declaring them


def test_recipes_are_read_with_their_defaults(tmp_path):
    recipes = load_config(write(tmp_path, RECIPES.format(workdir="/srv/site"))).recipes
    assert recipes["site"] == DeployRecipe(
        "site", ("./deploy.sh", "--prod"), Path("/srv/site"), "Deploy the site", 120
    )
    assert recipes["echo"].timeout_seconds == 600 and recipes["echo"].description == ""
    assert list(recipes) == ["site", "echo", "slow", "missing"]


def test_a_home_relative_workdir_is_expanded(tmp_path):
    text = "deploy:\n  site: {command: [make], workdir: ~/site}\n"
    assert load_config(write(tmp_path, text)).recipes["site"].workdir == Path.home() / "site"


def test_no_deploy_section_or_an_empty_one_declares_none(tmp_path):
    assert load_config(write(tmp_path, "agents: {}\n")).recipes == {}
    assert load_config(write(tmp_path, "deploy:\n")).recipes == {}


@pytest.mark.parametrize(
    ("section", "problem"),
    [
        ("deploy: [site]", "deploy: must be a mapping of names to declarations"),
        ("deploy:\n  1: {command: [make], workdir: /srv}", "deploy.1: a name must be text"),
        ("deploy:\n  site: make", "deploy.site: must be a mapping with at least command"),
        (
            "deploy:\n  site: {command: [make], workdir: /srv, shell: true}",
            "deploy.site: unknown key 'shell' (known: command, description, timeout_seconds, "
            "workdir)",
        ),
        ("deploy:\n  site: {workdir: /srv}", "deploy.site.command: must be a list of words"),
        ("deploy:\n  site: {command: make --prod, workdir: /srv}", "deploy.site.command: must"),
        ("deploy:\n  site: {command: [], workdir: /srv}", "deploy.site.command: must"),
        ("deploy:\n  site: {command: [make, 3], workdir: /srv}", "deploy.site.command: must"),
        ("deploy:\n  site: {command: [''], workdir: /srv}", "deploy.site.command: must"),
        ("deploy:\n  site: {command: [make]}", "deploy.site.workdir: must be an absolute path"),
        ("deploy:\n  site: {command: [make], workdir: srv}", "deploy.site.workdir: must be an"),
        ("deploy:\n  site: {command: [make], workdir: [/srv]}", "deploy.site.workdir: must be"),
        (
            "deploy:\n  site: {command: [make], workdir: /srv, timeout_seconds: 0}",
            "deploy.site.timeout_seconds: must be whole seconds, 1 to 3600",
        ),
        ("deploy:\n  site: {command: [m], workdir: /s, timeout_seconds: 3601}", "timeout_seconds"),
        ("deploy:\n  site: {command: [m], workdir: /s, timeout_seconds: '60'}", "timeout_seconds"),
        ("deploy:\n  site: {command: [m], workdir: /s, timeout_seconds: true}", "timeout_seconds"),
        ("deploy:\n  site: {command: [m], workdir: /s, timeout_seconds: 1.5}", "timeout_seconds"),
        (
            "deploy:\n  site: {command: [m], workdir: /s, description: [x]}",
            "deploy.site.description: must be text",
        ),
    ],
)
def test_every_mistake_is_refused_at_its_place(tmp_path, section, problem):
    path = write(tmp_path, section + "\n")
    with pytest.raises(PolicyConfigError) as caught:
        load_config(path)
    assert str(caught.value).startswith(f"{path}: ") and problem in str(caught.value)


def test_deploy_is_a_known_top_level_key_and_a_typo_is_not(tmp_path):
    with pytest.raises(PolicyConfigError, match="unknown key 'deploys'"):
        load_config(write(tmp_path, "deploys:\n  site: {command: [make], workdir: /srv}\n"))


# Running them


@pytest.fixture
async def platform(tmp_path):
    workdir = tmp_path / "site"
    workdir.mkdir()
    script = workdir / "deploy.sh"
    script.write_text('#!/bin/sh\necho "deployed $*"\npwd -P\nexit 4\n')
    script.chmod(0o755)
    config = write(tmp_path, RECIPES.format(workdir=workdir))
    store = Store(f"sqlite+aiosqlite:///{tmp_path / 'aegis.sqlite3'}")
    await migrate.upgrade(store)
    settings = Settings(data_dir=tmp_path / "data", config_file=config, _env_file=None)
    try:
        yield Platform.build(settings, store, SIGNER, RecordingEnqueue())
    finally:
        await store.close()


async def deploy(platform: Platform, recipe: str) -> dict:
    return await platform.actions.toolbox["deploy.run"]({"recipe": recipe}, Caller("ops", CHAT))


async def test_a_recipe_runs_its_argv_in_its_workdir(platform, tmp_path):
    result = await deploy(platform, "site")
    assert result == {
        "recipe": "site",
        "exit_code": 4,
        "output": f"deployed --prod\n{(tmp_path / 'site').resolve()}\n",
        "timed_out": False,
        "cut_bytes": 0,
    }


async def test_the_arguments_reach_the_program_as_they_are_written(platform, tmp_path):
    result = await deploy(platform, "echo")
    assert result["output"] == "a; touch injected $HOME\n"  # no shell read them
    assert not (tmp_path / "site" / "injected").exists()


async def test_a_recipe_is_stopped_at_its_own_timeout(platform):
    result = await deploy(platform, "slow")
    assert result["timed_out"] is True and result["exit_code"] < 0


async def test_a_program_that_is_not_there_is_refused(platform):
    with pytest.raises(ToolRefused, match="'./no-such-program' could not be started"):
        await deploy(platform, "missing")


async def test_an_unknown_recipe_is_refused_with_the_declared_ones(platform):
    with pytest.raises(ToolRefused, match="declared in aegis.yaml: echo, missing, site, slow$"):
        await deploy(platform, "prod")


async def test_the_recipes_are_listed_with_what_they_run(platform, tmp_path):
    listed = await platform.actions.toolbox["deploy.recipes"]({}, Caller("ops", CHAT))
    site = next(recipe for recipe in listed["recipes"] if recipe["name"] == "site")
    assert site == {
        "name": "site",
        "description": "Deploy the site",
        "command": ["./deploy.sh", "--prod"],
        "workdir": str(tmp_path / "site"),
        "timeout_seconds": 120,
    }
    assert [recipe["name"] for recipe in listed["recipes"]] == ["echo", "missing", "site", "slow"]
