"""The typer application every command module registers on (``piw.cli.main`` imports them all).

Two small classes make the help read like the docs: :class:`PiwCommand` names arguments ``WORKFLOW`` and
``[RUN_ID]`` in usage lines and errors (typer writes ``{workflow}``), and :class:`PiwGroup` lists each command with
its whole first sentence, wrapped, instead of cutting it at a fixed width ("…or is...").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup
from typer.models import CommandFunctionType

from piw.cli.coercion import install_plain_conversion

HELP = """Run durable LLM-agent workflows and read their runs.

Every run is recorded under PIW_HOME (default: ~/.local/share/piw), so it can be inspected, watched and resumed
after a crash. Start with 'piw run hello', then 'piw runs' and 'piw inspect -1'.
"""

EPILOG = (
    "Environment: PIW_HOME (where runs and config.toml live), PIW_PROVIDER and PIW_MODEL (the provider and model "
    "of agent steps when --provider/--model are not given; 'scripted' needs no network), PIW_DURABILITY (effects, "
    "always or flush), NO_COLOR (no colour). 'piw COMMAND --help' describes a command's options."
)


def first_sentence(text: str) -> str:
    """The first sentence of a command's help, whole (the help's first paragraph when it has no full stop)."""
    paragraph = " ".join(text.strip().split("\n\n", 1)[0].split())
    end = paragraph.find(". ")
    return paragraph if end < 0 else paragraph[: end + 1]


def _plainly_converted(option: Any) -> Any:
    """``--help`` (built by click on first use) converted without pydantic too: see :mod:`piw.cli.coercion`."""
    if option is not None:
        install_plain_conversion(option)
    return option


class PiwCommand(TyperCommand):
    """A command whose usage line names its arguments in capitals: ``piw run [OPTIONS] WORKFLOW``, and whose
    repeatable options read ``--text <str>  … (repeatable)`` rather than typer's ``<list[str]>``, which looks
    like an option that takes a list literal."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            install_plain_conversion(param)
            if param.param_type_name == "argument" and param.metavar is None and param.name:
                param.metavar = param.name.upper()
            option: Any = param  # typer's TyperOption: type_descriptor, bare_type(), help
            descriptor = getattr(option, "type_descriptor", None)
            if (
                param.param_type_name == "option"
                and param.metavar is None
                and getattr(descriptor, "is_list", False)
            ):
                element = option.bare_type().removeprefix("list[").removesuffix("]")
                param.metavar = f"<{element}>"
                option.help = f"{option.help or ''} (repeatable)".strip()

    def get_help_option(self, ctx: Any) -> Any:
        return _plainly_converted(super().get_help_option(ctx))

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name != "argument":
                pieces.extend(param.get_usage_pieces(ctx))
                continue
            name = param.metavar or (param.name or "ARG").upper()
            name = name if param.required else f"[{name}]"
            pieces.append(name + ("..." if param.nargs != 1 else ""))
        return pieces


class PiwGroup(TyperGroup):
    """The ``piw`` group: the command list shows each command's complete first sentence.

    ``summaries`` (set by ``piw.cli.main`` for ``piw --help``) are those rows read from the registered commands
    without building them: the command list is all that the group's own help needs of them.
    """

    summaries: list[tuple[str, str]] | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:  # --version
            install_plain_conversion(param)

    def get_help_option(self, ctx: Any) -> Any:
        return _plainly_converted(super().get_help_option(ctx))

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        rows = [] if self.summaries is None else list(self.summaries)
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is None or command.hidden:
                continue
            rows.append((name, command.short_help or first_sentence(command.help or "")))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


class PiwTyper(typer.Typer):
    """``app.command()`` makes a :class:`PiwCommand` unless a module asks for another class."""

    def command(
        self, *args: Any, cls: type[TyperCommand] | None = None, **kwargs: Any
    ) -> Callable[[CommandFunctionType], CommandFunctionType]:
        return super().command(*args, cls=cls or PiwCommand, **kwargs)


def piw_version() -> str:
    from importlib.metadata import PackageNotFoundError, version  # 30 ms: only for --version

    try:
        return version("piw")
    except PackageNotFoundError:  # pragma: no cover - a source tree that was never installed
        return "unknown"


app = PiwTyper(
    name="piw",
    help=HELP,
    epilog=EPILOG,
    cls=PiwGroup,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"piw {piw_version()}")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", is_eager=True, callback=_print_version, help="Print piw's version and exit."
        ),
    ] = False,
) -> None:
    """Options that come before the command."""
