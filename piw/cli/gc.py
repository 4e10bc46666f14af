"""``piw gc`` and ``piw rm``: remove finished runs, whole, optionally archived first (``docs/cli.md``, "Retention").

The work is in ``piw.store.retention``: each run is kept whole or removed whole, and a pass interrupted anywhere
is finished by the next one.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from piw.cli.app import app
from piw.cli.console import make_console
from piw.cli.database import DatabaseOption, command_home
from piw.errors import UsageError
from piw.terminal import json_text, safe_text

if TYPE_CHECKING:
    from piw.store.retention import GcResult


@app.command()
def gc(
    older_than: Annotated[
        str | None,
        typer.Option(
            "--older-than", help="Only runs that ended longer ago than this (30d, 12h; default 30d)."
        ),
    ] = None,
    status: Annotated[
        list[str] | None,
        typer.Option(
            "--status",
            help="Only runs with these statuses, comma-separated (default: completed, failed, timed_out, cancelled).",
        ),
    ] = None,
    keep_last: Annotated[
        int | None, typer.Option("--keep-last", help="Keep the newest N runs of each workflow.")
    ] = None,
    export: Annotated[
        Path | None,
        typer.Option("--export", metavar="DIR", help="Archive each run there first (piw export)."),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would be removed; remove nothing.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    database: DatabaseOption = None,
) -> int:
    """Remove finished runs (bundles, index and queue rows), whole; an interrupted pass is finished next time."""
    from piw.store.retention import GcPlan, run_gc

    home = command_home(database)
    plan = GcPlan.parse(older_than, status, keep_last)
    say = (lambda line: None) if as_json else _printer()
    result = run_gc(home, plan, export_dir=export, dry_run=dry_run, report=say)
    return _summary(result, dry_run, as_json)


@app.command()
def rm(
    runs: Annotated[
        list[str], typer.Argument(metavar="RUN...", help="The runs to remove (ids or unique prefixes).")
    ],
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Do not ask (needed when not on a terminal).")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    database: DatabaseOption = None,
) -> int:
    """Remove the named runs whole (a running one is refused); asks first on a terminal."""
    from piw.store.retention import named_runs, remove_runs
    from piw.store.runref import resolve_run_id

    home = command_home(database)
    rows = named_runs(home, [resolve_run_id(home, run) for run in runs])
    if not yes:
        if not sys.stdin.isatty():
            raise UsageError("piw rm removes runs for good; add --yes to confirm when not on a terminal.")
        names = ", ".join(row.run_id for row in rows)
        if not typer.confirm(f"Remove {len(rows)} run(s) for good ({names})?", default=False):
            make_console().print("Nothing removed.")
            return 0
    say = (lambda line: None) if as_json else _printer()
    return _summary(remove_runs(home, rows, report=say), False, as_json)


def _printer() -> Callable[[str], None]:
    console = make_console()
    return lambda line: console.print(safe_text(line), soft_wrap=True)


def _summary(result: GcResult, dry_run: bool, as_json: bool) -> int:
    from piw.store.disk_use import human_bytes

    if as_json:
        payload = {
            "dryRun": dry_run,
            "removed": [
                {
                    "runId": item.run_id,
                    "status": item.status,
                    "bytes": item.bytes,
                    "exported": str(item.exported) if item.exported else None,
                }
                for item in result.removed
            ],
            "skipped": [{"runId": run_id, "reason": why} for run_id, why in result.skipped],
            "finished": result.finished,
            "freedBytes": result.freed,
        }
        sys.stdout.write(json_text(payload) + "\n")
        return 0
    console = make_console()
    for run_id, why in result.skipped:
        console.print(safe_text(f"Skipped {run_id}: {why}."), soft_wrap=True)
    if dry_run:
        for item in result.removed:
            console.print(f"Would remove {item.run_id} ({item.status}, {human_bytes(item.bytes)}).")
        console.print(f"Would remove {len(result.removed)} runs, freeing {human_bytes(result.freed)}.")
        return 0
    console.print(f"Removed {len(result.removed)} runs, freed {human_bytes(result.freed)}.")
    return 0
