"""``piw db``: the PostgreSQL database that hosts on many machines share (``docs/cli.md``, "piw db").

``piw db status`` shows the database (its URL redacted), the schema version against this piw's window, pending
migrations, the queue's counts and the live hosts; ``piw db migrate [--contract]`` applies this piw's migrations;
``piw db dev [--stop]`` starts (or stops) a throwaway local PostgreSQL in ``PIW_HOME/pg-dev``. The database comes
from ``--database`` > ``PIW_DATABASE`` > ``config.toml [database]``. Nothing here imports psycopg before a database
is named.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from piw.cli.app import app
from piw.errors import UsageError
from piw.terminal import json_text, sanitize_terminal_text

ACTIONS = ("status", "migrate", "dev")


def _say(line: str) -> None:
    sys.stdout.write(sanitize_terminal_text(line) + "\n")


@app.command()
def db(
    action: Annotated[str, typer.Argument(help="status, migrate or dev.", show_default=False)],
    database: Annotated[
        str | None,
        typer.Option(
            "--database", help="postgresql://USER@HOST:PORT/DB (default: PIW_DATABASE, config.toml)."
        ),
    ] = None,
    contract: Annotated[
        bool, typer.Option("--contract", help="migrate: also apply contract migrations (older piws stop).")
    ] = False,
    stop: Annotated[bool, typer.Option("--stop", help="dev: stop the local server.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> int:
    """Manage the PostgreSQL database many hosts share: status, migrate, or a throwaway local server (dev).

    'piw db status' shows the schema version, the queue and the hosts; 'piw db migrate' applies this piw's
    migrations; 'piw db dev' starts a PostgreSQL on 127.0.0.1 in PIW_HOME/pg-dev and prints its URL.
    """
    if action not in ACTIONS:
        import difflib

        close = difflib.get_close_matches(action, ACTIONS, n=1)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        raise UsageError(f"Unknown 'piw db' action {action!r}; use status, migrate or dev.{hint}")
    if contract and action != "migrate":
        raise UsageError("--contract is an option of 'piw db migrate'.")
    if stop and action != "dev":
        raise UsageError("--stop is an option of 'piw db dev'.")
    if action == "dev":
        return _dev(stop, as_json)
    from piw.store.home import piw_home
    from piw.store.pg.setting import resolve_database

    home = piw_home()
    setting = resolve_database(
        database, home=home, warn=lambda text: print(f"Warning: {text}", file=sys.stderr)
    )
    if setting is None:
        raise UsageError(
            "No database is configured: pass --database postgresql://USER@HOST/DB, set PIW_DATABASE, or add "
            "[database] to config.toml ('piw db dev' starts a local one)."
        )
    from piw.store.pg.connection import PgDatabase

    pg = PgDatabase.open(setting, migrate=False)
    try:
        if action == "migrate":
            return _migrate(pg, contract, as_json)
        return _status(pg, as_json)
    finally:
        pg.close()


def _migrate(pg: Any, contract: bool, as_json: bool) -> int:
    from piw.store.pg.migrate import migrate

    result = migrate(pg, contract=contract)
    where = pg.setting.redacted()
    if as_json:
        sys.stdout.write(
            json_text({"database": where, "applied": result.applied, "version": result.version}) + "\n"
        )
    elif result.applied:
        names = ", ".join(f"{version:04d}" for version in result.applied)
        _say(f"Applied {names} to {where}: schema version {result.version}.")
    else:
        _say(f"Schema version {result.version} of {where} is current; nothing to apply.")
    return 0


def _status(pg: Any, as_json: bool) -> int:
    from piw.errors import StateSchemaMismatch
    from piw.store.pg.migrate import LIVE_HOST_MS, Window, check_window, read_state

    window = Window.of_this_piw()
    schema = pg.setting.schema
    with pg.connection() as conn:
        state = read_state(conn, schema)
        counts: dict[str, int] = {}
        hosts = {"live": 0, "total": 0}
        if not state.empty:
            for status, count in conn.execute("SELECT status, count(*) FROM run_queue GROUP BY status"):
                counts[str(status)] = int(count)
            live, total = conn.execute(
                "SELECT count(*) FILTER (WHERE seen_at > now_ms() - %s), count(*) FROM hosts", (LIVE_HOST_MS,)
            ).fetchone()
            hosts = {"live": int(live), "total": int(total)}
    problem: StateSchemaMismatch | None = None
    if not state.empty:
        try:
            check_window(state, window, pg.setting.redacted())
        except StateSchemaMismatch as exc:
            problem = exc
    pending = [m.version for m in window.migrations if m.version not in state.applied]
    report = {
        "database": pg.setting.redacted(),
        "schema": schema,
        "version": state.version,
        "window": {"min": window.minimum, "max": window.maximum},
        "applied": sorted(state.applied),
        "pending": [] if state.empty else pending,
        "compatible": problem is None,
        "counts": counts,
        "hosts": hosts,
    }
    if as_json:
        sys.stdout.write(json_text(report) + "\n")
    else:
        _say(f"database  {report['database']} (schema {schema})")
        if state.empty:
            _say(f"schema    empty: created on first use (this piw: {window.minimum}..{window.maximum})")
        else:
            extra = f"; {len(pending)} to apply with 'piw db migrate'" if pending else ""
            _say(f"schema    version {state.version} (this piw: {window.minimum}..{window.maximum}){extra}")
            shown = ", ".join(f"{name} {counts[name]}" for name in sorted(counts)) or "no runs"
            _say(f"queue     {shown}")
            _say(f"hosts     {hosts['live']} live of {hosts['total']}")
    if problem is not None:
        raise problem
    return 0


def _dev(stop: bool, as_json: bool) -> int:
    from piw.store.home import piw_home
    from piw.store.pg import dev

    home = piw_home()
    if stop:
        stopped = dev.stop(home)
        if as_json:
            sys.stdout.write(json_text({"stopped": stopped is not None}) + "\n")
        else:
            _say(
                "Stopped the dev PostgreSQL."
                if stopped
                else f"No dev PostgreSQL is running in {home / dev.DEV_DIR}."
            )
        return 0
    server, started = dev.start(home)
    if as_json:
        report = {
            "url": server.url,
            "passfile": str(server.passfile),
            "started": started,
            "port": server.port,
        }
        sys.stdout.write(json_text(report) + "\n")
        return 0
    _say(
        f"{'Started' if started else 'Already running:'} a dev PostgreSQL on 127.0.0.1:{server.port} (loopback only)."
    )
    _say(f"  export PIW_DATABASE={server.url}")
    _say(f"  export PGPASSFILE={server.passfile}")
    _say("Stop it with 'piw db dev --stop'; its data stays in PIW_HOME/pg-dev until you delete that folder.")
    return 0
