"""``piw providers``: the configured providers and models, never their secrets."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from piw.cli.app import app
from piw.cli.console import make_console
from piw.cli.database import DatabaseOption, command_home
from piw.store.home import piw_home
from piw.terminal import json_text, safe_text

if TYPE_CHECKING:
    from piw.config.settings import PiwConfig
    from piw.providers.check import CheckResult


@app.command()
def providers(
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array.")] = False,
    check: Annotated[
        bool,
        typer.Option(
            "--check", help="Test each provider with one request (5 s timeout); exit 1 if any fails."
        ),
    ] = False,
    database: DatabaseOption = None,
) -> int:
    """Show configured providers and models (keys appear only as $NAME references), and each shared rate limit
    with its current state."""
    from rich.table import Table  # loaded by this command only, not by piw --help

    from piw.cli.rate_limits import print_rate_limits, rate_limit_json
    from piw.config.path import config_path
    from piw.config.settings import load_config
    from piw.providers.selection import describe_providers

    home = command_home(database) if database else piw_home()
    config = load_config(home)
    summaries = describe_providers(config)
    checks = _checks(config, home) if check else {}
    failed = any(not result.ok for result in checks.values())
    if as_json:
        rows = [summary.model_dump(by_alias=True) for summary in summaries]
        for row in rows if check else ():
            row["check"] = checks[row["name"]].to_json()
        for row in rows:
            row["rateLimit"] = rate_limit_json(home, config, row["name"])
        sys.stdout.write(json_text(rows) + "\n")
        return 1 if failed else 0
    console = make_console()
    if not summaries:
        console.print(
            safe_text(f"No providers configured in {config_path(home)}; 'scripted' is always available.")
        )
        return 0
    if check:
        _print_checks(checks)
        return 1 if failed else 0
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
    print_rate_limits(console, home, config)
    console.print("'scripted' (deterministic, offline) is always available.")
    return 0


def _checks(config: PiwConfig, home: Path) -> dict[str, CheckResult]:
    from piw.providers.check import check_providers  # the HTTP client is loaded for --check only

    return check_providers(config, home)


def _print_checks(checks: dict[str, CheckResult]) -> None:
    """One line per provider: ``name  ok|failed  what was done or what failed`` (never clipped: it is the answer)."""
    out = make_console()
    width = max(len(name) for name in checks)
    for name, result in checks.items():
        mark = "ok    " if result.ok else "failed"
        line = f"{name:<{width}}  {mark}  {result.detail} ({result.elapsed_ms} ms)"
        out.print(safe_text(line, "" if result.ok else "red"), soft_wrap=True)
