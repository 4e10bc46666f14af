"""``piw schedule``: workflows that run by themselves, fired by ``piw host`` (``docs/schedules.md``).

``piw schedule add NAME WORKFLOW (--cron EXPR [--tz ZONE] | --every 15m) [--input JSON] [--missed skip|latest|all]
[--max-backlog N] [--overlap skip|queue|allow] [--budget …]``, and ``list``, ``show NAME``, ``pause NAME``,
``resume NAME``, ``rm NAME``, ``next NAME [--count 5]``. Everything given to ``add`` is checked before anything is
stored: the timing, the zone, the workflow and its input; a bad value is one line and exit 2.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from piw.cli.app import app
from piw.cli.console import make_console
from piw.cli.database import DatabaseOption, command_home
from piw.errors import UsageError
from piw.terminal import json_text, safe_text, single_line

if TYPE_CHECKING:
    from pathlib import Path

    from piw.store.db.schedules import FireRow, ScheduleRow

ACTIONS = ("add", "list", "show", "pause", "resume", "rm", "next")
NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"


@app.command()
def schedule(
    action: Annotated[
        str, typer.Argument(help="add, list, show, pause, resume, rm or next.", show_default=False)
    ],
    name: Annotated[str | None, typer.Argument(help="The schedule's name.", show_default=False)] = None,
    workflow: Annotated[
        str | None, typer.Argument(help="add: the workflow (a file path or a name).", show_default=False)
    ] = None,
    cron: Annotated[
        str | None, typer.Option("--cron", help="add: a cron expression, e.g. '0 9 * * 1-5'.")
    ] = None,
    tz: Annotated[str | None, typer.Option("--tz", help="add: the zone of --cron (default UTC).")] = None,
    every: Annotated[str | None, typer.Option("--every", help="add: a fixed interval, e.g. 15m, 2h.")] = None,
    input: Annotated[
        str | None, typer.Option("--input", help="add: the run input, a JSON object or @FILE.")
    ] = None,
    title: Annotated[str | None, typer.Option("--title", help="add: a title for its runs.")] = None,
    missed: Annotated[
        str, typer.Option("--missed", help="add: missed fires: skip, latest (run the newest) or all.")
    ] = "latest",
    max_backlog: Annotated[
        int, typer.Option("--max-backlog", help="add, with --missed all: run at most this many missed fires.")
    ] = 5,
    overlap: Annotated[
        str, typer.Option("--overlap", help="add: while the previous run is active: skip, queue or allow.")
    ] = "skip",
    budget: Annotated[
        str | None, typer.Option("--budget", help="add: each run's budget, e.g. cost=0.50,tokens=200k.")
    ] = None,
    count: Annotated[int, typer.Option("--count", help="next: how many fire times.")] = 5,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    database: DatabaseOption = None,
) -> int:
    """Run workflows on a schedule: add, list, show, pause, resume, rm, next (docs/schedules.md).

    'piw host' fires them; each fire starts one run even with several hosts, missed fires follow --missed and
    runs of one schedule never overlap unless --overlap allow.
    """
    if action not in ACTIONS:
        raise UsageError(f"Unknown 'piw schedule' action {action!r}; use one of: {', '.join(ACTIONS)}.")
    home = command_home(database)
    if action == "list":
        return _list(home, as_json)
    if name is None:
        raise UsageError(f"'piw schedule {action}' needs a schedule name.")
    if action == "add":
        if workflow is None:
            raise UsageError("'piw schedule add NAME WORKFLOW' needs a workflow.")
        row = _new_schedule(
            home, name, workflow, cron, tz, every, input, title, missed, max_backlog, overlap, budget
        )
        from piw.schedule.book import open_schedules

        open_schedules(home).add(row)
        return _say_added(row, as_json)
    from piw.schedule.book import open_schedules
    from piw.store.db.database import now_ms

    store = open_schedules(home)
    if action == "show":
        return _show(store.require(name), store.fires(name, 20), as_json)
    if action == "next":
        if count < 1:
            raise UsageError("--count must be at least 1.")
        return _next(store.require(name), count, as_json)
    if action == "rm":
        store.remove(name)
        make_console().print(f"Removed schedule {name}; its runs are kept.")
        return 0
    changed = store.set_paused(name, action == "pause", now_ms())
    make_console().print(
        f"Paused schedule {name}." if changed.paused else f"Resumed schedule {name}; it fires from now on."
    )
    return 0


def _new_schedule(
    home: Path,
    name: str,
    workflow: str,
    cron: str | None,
    tz: str | None,
    every: str | None,
    input: str | None,
    title: str | None,
    missed: str,
    max_backlog: int,
    overlap: str,
    budget: str | None,
) -> ScheduleRow:
    """The schedule ``add`` describes, every part checked (one ``UsageError`` line for the first bad one)."""
    import re

    from piw.schedule.policy import MISSED_POLICIES, OVERLAP_POLICIES
    from piw.schedule.times import Timing, check_cron, parse_interval, zone
    from piw.store.db.database import now_ms
    from piw.store.db.schedules import ScheduleRow

    if re.fullmatch(NAME_PATTERN, name) is None:
        raise UsageError(f"Schedule name {name!r} must be letters, digits, '.', '_' or '-' (at most 64).")
    if (cron is None) == (every is None):
        raise UsageError("Give exactly one of --cron EXPR or --every INTERVAL.")
    if tz is not None and cron is None:
        raise UsageError("--tz applies to --cron; an --every interval is counted in real time.")
    if missed not in MISSED_POLICIES:
        raise UsageError(f"--missed {missed!r}: use one of {', '.join(MISSED_POLICIES)}.")
    if overlap not in OVERLAP_POLICIES:
        raise UsageError(f"--overlap {overlap!r}: use one of {', '.join(OVERLAP_POLICIES)}.")
    if max_backlog < 0:
        raise UsageError("--max-backlog must be 0 or more.")
    now = now_ms()
    if cron is not None:
        zone(tz or "UTC")
        timing = Timing(cron=check_cron(cron), tz=tz or "UTC")
    else:
        timing = Timing(every_ms=parse_interval(every or ""), anchor_ms=now)
    if budget is not None:
        from piw.workflow.budget import parse_budget

        parse_budget(budget)
    reference, value = _checked_workflow(home, workflow, input)
    return ScheduleRow(
        name=name,
        workflow_ref=reference,
        input=value,
        timing=timing.to_json(),
        missed=missed,
        max_backlog=max_backlog,
        overlap=overlap,
        budget=budget,
        title=title,
        paused=False,
        held=None,
        cursor_at=now,
        created_at=now,
        updated_at=now,
    )


def _checked_workflow(home: Path, workflow: str, input: str | None) -> tuple[str, Any]:
    """The workflow reference to store (a file as its absolute path) and the input, validated against it."""
    from pathlib import Path as _Path

    from piw.run.runner import tools_known
    from piw.workflow.loader import load_workflow, parse_input_option, prepare_input

    raw = parse_input_option(input)
    loaded = load_workflow(workflow, home, tools_known())
    prepare_input(loaded.definition, raw)
    given = _Path(workflow).expanduser()
    reference = str(given.resolve()) if given.is_file() else workflow
    return reference, raw


def _say_added(row: ScheduleRow, as_json: bool) -> int:
    if as_json:
        sys.stdout.write(json_text(_schedule_json(row)) + "\n")
        return 0
    from piw.schedule.times import Timing

    timing = Timing.from_json(row.timing)
    upcoming = timing.next(row.cursor_at, 1)
    when = _when(upcoming[0], timing) if upcoming else "never"
    make_console().print(
        f"Added schedule {row.name}: {safe_text(row.workflow_ref)} {timing.describe()}; next fire {when}. "
        "'piw host' fires it.",
        soft_wrap=True,
    )
    return 0


def _when(instant: int, timing: Any) -> str:
    from piw.schedule.times import local_text
    from piw.store.db.index import from_ms

    utc = from_ms(instant) or ""
    return local_text(instant, timing.tz) if timing.cron is not None else utc


def _state(row: ScheduleRow) -> str:
    return "held" if row.held else "paused" if row.paused else "active"


def _schedule_json(row: ScheduleRow) -> dict[str, Any]:
    from piw.schedule.times import Timing
    from piw.store.db.database import now_ms
    from piw.store.db.index import from_ms

    timing = Timing.from_json(row.timing)
    upcoming = [] if row.paused else timing.next(max(row.cursor_at, now_ms()), 1)
    return {
        "name": row.name,
        "workflow": row.workflow_ref,
        "cron": timing.cron,
        "tz": timing.tz if timing.cron is not None else None,
        "everyMs": timing.every_ms,
        "input": row.input,
        "title": row.title,
        "missed": row.missed,
        "maxBacklog": row.max_backlog,
        "overlap": row.overlap,
        "budget": row.budget,
        "state": _state(row),
        "held": row.held,
        "nextFireAt": from_ms(upcoming[0]) if upcoming else None,
        "createdAt": from_ms(row.created_at),
    }


def _fire_json(fire: FireRow) -> dict[str, Any]:
    from piw.store.db.index import from_ms

    return {"fireAt": from_ms(fire.fire_at), "state": fire.state, "runId": fire.run_id, "note": fire.note}


def _list(home: Path, as_json: bool) -> int:
    from piw.schedule.book import open_schedules

    rows = open_schedules(home).all()
    if as_json:
        sys.stdout.write(json_text([_schedule_json(row) for row in rows]) + "\n")
        return 0
    console = make_console()
    if not rows:
        console.print("No schedules. Add one with 'piw schedule add NAME WORKFLOW --every 15m'.")
        return 0
    from piw.schedule.times import Timing

    lines = []
    for row in rows:
        data = _schedule_json(row)
        timing = Timing.from_json(row.timing)
        lines.append((row.name, _state(row), timing.describe(), data["nextFireAt"] or "-", row.workflow_ref))
    header = ("name", "state", "when", "next fire", "workflow")
    widths = [max(len(header[i]), *(len(line[i]) for line in lines)) for i in range(4)]
    console.print("  ".join(header[i].ljust(widths[i]) for i in range(4)) + "  workflow", soft_wrap=True)
    for line in lines:
        text = "  ".join(line[i].ljust(widths[i]) for i in range(4)) + "  " + line[4]
        console.print(safe_text(single_line(text)), soft_wrap=True)
    _warn(console, rows)
    return 0


def _warn(console: Any, rows: list[ScheduleRow]) -> None:
    from piw.schedule.warnings import held_line

    for row in rows:
        if row.held:
            console.print(f"⚠ {safe_text(held_line(row))}", soft_wrap=True)


def _show(row: ScheduleRow, fires: list[FireRow], as_json: bool) -> int:
    if as_json:
        sys.stdout.write(json_text({**_schedule_json(row), "fires": [_fire_json(f) for f in fires]}) + "\n")
        return 0
    from piw.schedule.times import Timing

    console = make_console()
    data = _schedule_json(row)
    _warn(console, [row])  # first: before anyone spends on the backlog
    timing = Timing.from_json(row.timing)
    for label, value in (
        ("schedule", row.name),
        ("workflow", row.workflow_ref),
        ("when", timing.describe()),
        ("state", data["state"]),
        ("next fire", data["nextFireAt"] or "-"),
        ("missed", row.missed + (f" (max backlog {row.max_backlog})" if row.missed == "all" else "")),
        ("overlap", row.overlap),
        ("budget", row.budget or "-"),
        ("input", json_text(row.input)),
    ):
        console.print(safe_text(single_line(f"{label:<10} {value}")), soft_wrap=True)
    if not fires:
        console.print("No fires yet.")
        return 0
    console.print("last fires:")
    for fire in fires:
        item = _fire_json(fire)
        text = f"  {item['fireAt']}  {fire.state:<8}  {fire.run_id or '-'}  {fire.note or ''}".rstrip()
        console.print(safe_text(single_line(text)), soft_wrap=True)
    return 0


def _next(row: ScheduleRow, count: int, as_json: bool) -> int:
    from piw.schedule.times import Timing
    from piw.store.db.database import now_ms
    from piw.store.db.index import from_ms

    timing = Timing.from_json(row.timing)
    instants = timing.next(max(row.cursor_at, now_ms()), count)
    if as_json:
        sys.stdout.write(json_text([from_ms(instant) for instant in instants]) + "\n")
        return 0
    console = make_console()
    if row.paused:
        console.print(f"Schedule {row.name} is {_state(row)}; these are the times it fires once resumed:")
    for instant in instants:
        local = _when(instant, timing)
        utc = from_ms(instant) or ""
        console.print(local if local == utc else f"{local}  ({utc})")
    return 0
