"""Which module defines each ``piw`` command, so that a command line imports and builds only its own command.

Importing every command module and letting typer build all seventeen commands cost ~90 ms before any command
ran. ``piw inspect RUN`` now imports ``piw.cli.views`` and builds ``inspect`` alone; ``piw --help`` imports every
module (their docstrings are the command list) but builds none of the commands. ``tests/cli/test_startup.py``
checks this table against what the modules register, so a new command cannot be missing from it.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import inspect
from collections.abc import Sequence
from typing import Any

import typer

from piw.cli.app import PiwGroup, app, first_sentence

COMMAND_MODULES: dict[str, str] = {
    "run": "piw.cli.runs",
    "resume": "piw.cli.runs",
    "runs": "piw.cli.runs",
    "list": "piw.cli.runs",
    "validate": "piw.cli.runs",
    "answer": "piw.cli.answers",
    "decide": "piw.cli.answers",
    "fork": "piw.cli.fork",
    "pause": "piw.cli.lifecycle",
    "cancel": "piw.cli.lifecycle",
    "host": "piw.cli.lifecycle",
    "hosts": "piw.cli.hosts",
    "show": "piw.cli.show",
    "view": "piw.cli.viewer",
    "inspect": "piw.cli.views",
    "watch": "piw.cli.views",
    "graph": "piw.cli.views",
    "providers": "piw.cli.providers",
    "export": "piw.cli.portable",
    "import": "piw.cli.portable",
    "db": "piw.cli.db",
    "serve": "piw.cli.serve",
    "tokens": "piw.cli.tokens",
    "waiting": "piw.cli.waits",
    "resolve": "piw.cli.resolve",
    "mcp": "piw.cli.mcp",
    "test": "piw.cli.testing",
    "schedule": "piw.cli.schedule",
    "gc": "piw.cli.gc",
    "rm": "piw.cli.gc",
    "new": "piw.cli.new",
}


def register_all() -> None:
    """Import every command module (each registers its commands on :data:`piw.cli.app.app` when imported)."""
    for module in dict.fromkeys(COMMAND_MODULES.values()):
        with contextlib.suppress(ImportError):  # the provider commands are optional until configured
            importlib.import_module(module)


def command_name(info: Any) -> str:
    """The name typer gives a registered command: its own, or its function's with dashes."""
    return str(info.name or info.callback.__name__.lower().replace("_", "-"))


def _summary(info: Any) -> str:
    return info.short_help or first_sentence(info.help or inspect.getdoc(info.callback) or "")


def command_group(args: Sequence[str]) -> Any:
    """The click group for this command line: the named command alone, or (no command named) the group with
    its command list read from docstrings, or (an unknown name) every command, for click's error and its
    suggestions."""
    name = next((arg for arg in args if not arg.startswith("-")), None)
    module = COMMAND_MODULES.get(name) if name is not None else None
    if module is not None:
        importlib.import_module(module)
    else:
        register_all()
    selected = copy.copy(app)
    if module is not None:
        selected.registered_commands = [
            info for info in app.registered_commands if command_name(info) == name
        ]
    elif name is None:
        selected.registered_commands = []
    group = typer.main.get_command(selected)
    if name is None and isinstance(group, PiwGroup):
        order = list(COMMAND_MODULES)  # the order of the table, whatever order the modules were imported in
        infos = sorted(app.registered_commands, key=lambda info: order.index(command_name(info)))
        group.summaries = [(command_name(info), _summary(info)) for info in infos if not info.hidden]
    return group
