"""``piw providers``: the configured providers and models, never their secrets."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from piw.cli.app import app
from piw.cli.console import make_console
from piw.store.home import piw_home
from piw.terminal import json_text, safe_text


@app.command()
def providers(as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array.")] = False) -> int:
    """Show configured providers and models (keys appear only as $NAME references)."""
    from rich.table import Table  # loaded by this command only, not by piw --help

    from piw.providers.config import config_path, load_config
    from piw.providers.selection import describe_providers

    home = piw_home()
    summaries = describe_providers(load_config(home))
    if as_json:
        rows = [summary.model_dump(by_alias=True) for summary in summaries]
        sys.stdout.write(json_text(rows) + "\n")
        return 0
    console = make_console()
    if not summaries:
        console.print(
            safe_text(f"No providers configured in {config_path(home)}; 'scripted' is always available.")
        )
        return 0
    table = Table(box=None, pad_edge=False)
    for column in ("provider", "api", "base url", "key", "models"):
        table.add_column(column, overflow="fold")
    for summary in summaries:
        name = summary.name + (" (default)" if summary.is_default else "")
        key = summary.api_key + ("" if summary.key_available else " (unset)")
        models = ", ".join(model.id for model in summary.models)
        table.add_row(
            safe_text(name), summary.api, safe_text(summary.base_url or ""), safe_text(key), safe_text(models)
        )
    console.print(table)
    console.print("'scripted' (deterministic, offline) is always available.")
    return 0
