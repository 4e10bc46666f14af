"""``piw hosts``: who serves the runs of a database, and what each holds now (``docs/many-machines.md``, "Hosts")."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from piw.cli.app import app
from piw.cli.console import make_console
from piw.cli.database import DatabaseOption, command_home, where_runs_live
from piw.terminal import json_text, safe_text


def _span(ms: int) -> str:
    seconds = max(ms, 0) // 1000
    if seconds < 120:
        return f"{seconds}s"
    return f"{seconds // 60}m" if seconds < 7200 else f"{seconds // 3600}h"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _line(row: dict[str, Any]) -> str:
    """``host-a  host-a:…:4242:…  piw 0.1.0  serves 3 workflow versions  seen 1s ago  2 runs held``."""
    parts = [str(row["hostId"]), str(row["runnerId"])]
    seen = row.get("seenMsAgo")
    if seen is not None:  # database mode: the hosts table
        parts.append(f"piw {row.get('piwVersion') or '?'}")
        parts.append("serves " + _plural(len(row.get("serveKeys") or []), "workflow version"))
        parts.append(
            f"seen {_span(int(seen))} ago" if row.get("live") else f"not seen for {_span(int(seen))}"
        )
    parts.append(_plural(int(row["runsHeld"]), "run") + " held")
    return "  ".join(parts)


@app.command()
def hosts(
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help="Print a list of {hostId,runnerId,machine,piwVersion,serveKeys,seenMsAgo,…}."
        ),
    ] = False,
    database: DatabaseOption = None,
) -> int:
    """List the hosts serving runs: host id, runner, piw version, workflow versions served, last seen, runs held."""
    from piw.store.place import database_place

    home = command_home(database)
    place = database_place(home)
    rows: list[dict[str, Any]]
    if place is None:
        rows = _local_holders(home)
    else:
        from piw.store.pg.hosts import list_hosts

        rows = [row.to_json() for row in list_hosts(place.db)]
    if as_json:
        sys.stdout.write(json_text(rows) + "\n")
        return 0
    console = make_console()
    if not rows:
        console.print(safe_text(f"No hosts in {where_runs_live(home)}."), soft_wrap=True)
        return 0
    for row in rows:
        console.print(safe_text(_line(row)), soft_wrap=True)
    return 0


def _local_holders(home: Any) -> list[dict[str, Any]]:
    """SQLite mode has no hosts table (one machine): the processes holding live claims, from the run queue."""
    from piw.store.db.database import now_ms
    from piw.store.db.holders import holder_host
    from piw.store.db.run_database import open_run_database

    now = now_ms()
    held: dict[str, int] = {}
    for row in open_run_database(home).queue.rows().values():
        if row.runner_id and row.has_live_claim(now):
            held[row.runner_id] = held.get(row.runner_id, 0) + 1
    return [
        {"hostId": holder_host(runner) or runner, "runnerId": runner, "runsHeld": count}
        for runner, count in sorted(held.items())
    ]
