"""The six flags every command that follows a run takes (``run``, ``resume``, ``fork``, ``answer``, ``decide``):
``--provider``, ``--model``, ``--script``, ``--verbose``, ``--json`` and ``--database`` (docs/cli.md).

They were declared five times, once per command. :func:`follow_flags` declares them once: a command takes one
``flags: FollowFlags`` parameter and the decorator shows typer the six options in its place, so ``piw run --help``
lists the same options as before and every command reads them the same way.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from piw.cli.database import DatabaseOption, command_home
from piw.run.launch import LaunchOptions

ProviderOption = Annotated[str | None, typer.Option("--provider", help="Provider for agent steps.")]
ModelOption = Annotated[str | None, typer.Option("--model", help="Model (or provider/model).")]
ScriptOption = Annotated[str | None, typer.Option("--script", help="Replies file for the scripted provider.")]
VerboseOption = Annotated[
    bool,
    typer.Option(
        "--verbose", help="Expand step cards, show submitted outputs; a failure shows its whole traceback."
    ),
]
RunJsonOption = Annotated[
    bool, typer.Option("--json", help="Print {runId,status,finalOutput,error} at the end.")
]


@dataclass(frozen=True)
class FollowFlags:
    """What the six flags said; :meth:`launch` and :meth:`home` are what commands make of them."""

    provider: str | None = None
    model: str | None = None
    script: str | None = None
    verbose: bool = False
    as_json: bool = False
    database: str | None = None

    def launch(self) -> LaunchOptions:
        """The launch options given on the command line (the command fills the rest from the run's record)."""
        return LaunchOptions.given(self.provider, self.model, self.script)

    def launch_of(self, home: Path, run_id: str) -> LaunchOptions:
        """The flags, else what the run was started with: ``resume``, ``fork`` and a continuation run as the run
        did unless told otherwise."""
        from piw.run.runner import recorded_launch

        return self.launch().or_else(recorded_launch(home, run_id))

    def home(self) -> Path:
        """Where the command's runs live: ``--database`` or the home (``piw.cli.database``)."""
        return command_home(self.database)


_FLAG_PARAMETERS = [
    inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
    for name, annotation, default in (
        ("provider", ProviderOption, None),
        ("model", ModelOption, None),
        ("script", ScriptOption, None),
        ("verbose", VerboseOption, False),
        ("as_json", RunJsonOption, False),
        ("database", DatabaseOption, None),
    )
]

_FLAG_NAMES = [parameter.name for parameter in _FLAG_PARAMETERS]


def follow_flags(command: Callable[..., int]) -> Callable[..., int]:
    """Replace the command's ``flags`` parameter with the six options, and hand them back as one
    :class:`FollowFlags`: typer reads the signature this sets, and calls the wrapper with each option by name."""
    hints = typing.get_type_hints(command, include_extras=True)
    own = [
        parameter.replace(annotation=hints.get(parameter.name, parameter.annotation))
        for parameter in inspect.signature(command).parameters.values()
        if parameter.name != "flags"
    ]

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> int:
        given = {name: kwargs.pop(name) for name in _FLAG_NAMES if name in kwargs}
        return command(*args, flags=FollowFlags(**given), **kwargs)

    wrapper.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [*own, *_FLAG_PARAMETERS], return_annotation=int
    )
    wrapper.__annotations__ = {
        **{parameter.name: parameter.annotation for parameter in own},
        **{parameter.name: parameter.annotation for parameter in _FLAG_PARAMETERS},
        "return": int,
    }
    return wrapper
