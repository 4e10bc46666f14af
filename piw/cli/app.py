"""The typer application every command module registers on (``piw.cli.main`` imports them all)."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="piw",
    help="Run durable LLM-agent workflows and read their runs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
