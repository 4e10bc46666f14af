"""Removing finished runs: ``piw gc`` and ``piw rm`` (``docs/cli.md``, "Retention").

A run is removed whole or not at all. The commit point is one ``rename`` of its bundle ``runs/<id>`` to
``runs/.gc-<id>``, taken under the bundle's writer lock (so no process is writing it): from then on no listing,
viewer or command sees the run. Its database rows (the runs index, the queue row, notifications, decisions, the
idempotency records that name it) are then deleted in one transaction and the folder last. A pass interrupted
anywhere (``kill -9``) leaves either the intact bundle or a ``.gc-`` folder, and the next ``piw gc`` (or ``piw
rm``) finishes what it finds before anything else. With an export folder, the run is written there as a standard
bundle (``piw export``) *before* the rename; an export already there from an interrupted pass is reused when its
trace is the run's.

Only finished runs are candidates unless a status names them (``--status waiting``); a run whose queue row holds
a live claim, or whose writer lock is taken, is skipped and said. In database mode the rows are the run: there
the commit point is one transaction deleting them (``piw.store.pg.retention``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from piw.errors import PiwError, RunHeld, UsageError
from piw.store.db.database import open_database
from piw.store.db.run_database import open_run_database
from piw.store.disk_use import tree_bytes
from piw.store.history import RunSummary
from piw.store.place import database_place

FINISHED = ("completed", "failed", "timed_out", "cancelled")
"""The statuses ``piw gc`` removes when no ``--status`` is given."""
PENDING_PREFIX = ".gc-"
_KEPT = frozenset({"schedule_fires"})
"""Tables whose rows outlive the run they name (a schedule's record of its fires)."""


@dataclass(frozen=True)
class Removed:
    run_id: str
    status: str
    bytes: int
    exported: Path | None = None


@dataclass
class GcResult:
    removed: list[Removed] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """``(run id, why)`` of the runs left alone."""
    finished: list[str] = field(default_factory=list)
    """Runs an interrupted pass had begun removing, finished now."""

    @property
    def freed(self) -> int:
        return sum(item.bytes for item in self.removed)


@dataclass(frozen=True)
class GcPlan:
    """What a gc pass removes: ``older_than_ms`` (default 30 days when no ``keep_last``), statuses, keep-last."""

    older_than_ms: int | None = None
    statuses: tuple[str, ...] = ()
    keep_last: int | None = None

    @classmethod
    def parse(cls, older_than: str | None, status: list[str] | None, keep_last: int | None) -> GcPlan:
        """From ``piw gc``'s options or ``[retention]`` (one ``UsageError`` line for a bad value)."""
        from piw.store.run_query import RUN_FILTERS

        statuses = tuple(dict.fromkeys(p.strip() for v in status or () for p in v.split(",") if p.strip()))
        for value in statuses:
            if value not in RUN_FILTERS:
                raise UsageError(f"Unknown status {value!r}; use one of: {', '.join(RUN_FILTERS)}.")
        if keep_last is not None and keep_last < 0:
            raise UsageError("--keep-last must be 0 or more.")
        if older_than is None and keep_last is None:
            older_than = DEFAULT_AGE
        return cls(parse_age(older_than) if older_than is not None else None, statuses, keep_last)


DEFAULT_AGE = "30d"


def parse_age(text: str) -> int:
    """``30d``, ``12h``, ``90m``, ``2w`` as milliseconds."""
    import re

    match = re.fullmatch(r"\s*(\d+)\s*(s|m|h|d|w)\s*", text)
    if match is None:
        raise UsageError(f"--older-than {text!r} is not an age; write it like 30d, 12h or 2w.")
    unit = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}[match.group(2)]
    return int(match.group(1)) * unit * 1000


def run_gc(
    home: Path,
    plan: GcPlan,
    *,
    export_dir: Path | None = None,
    dry_run: bool = False,
    report: Callable[[str], None] = lambda line: None,
) -> GcResult:
    """One gc pass: finish an interrupted one, select by ``plan``, remove (``piw gc``, the host's retention)."""
    from piw.store.db.database import now_ms
    from piw.store.history import find_runs
    from piw.store.run_query import RunQuery

    if not dry_run:
        finished = finish_pending(home, report)
    rows = select_runs(
        find_runs(home, RunQuery()),
        now_ms=now_ms(),
        older_than_ms=plan.older_than_ms,
        statuses=plan.statuses,
        keep_last=plan.keep_last,
    )
    result = remove_runs(home, rows, export_dir=export_dir, dry_run=dry_run, report=report)
    if not dry_run:
        result.finished = finished + result.finished
    return result


def select_runs(
    rows: list[RunSummary],
    *,
    now_ms: int,
    older_than_ms: int | None,
    statuses: tuple[str, ...],
    keep_last: int | None,
) -> list[RunSummary]:
    """The runs a gc pass removes, newest first: a status it takes, ended (or started) before the age limit, and
    not among the ``keep_last`` newest runs of its workflow."""
    from piw.store.db.index import to_ms

    wanted = statuses or FINISHED
    kept_per_workflow: dict[str, int] = {}
    chosen = []
    for row in rows:  # newest first
        seen = kept_per_workflow.get(row.workflow_name, 0)
        kept_per_workflow[row.workflow_name] = seen + 1
        if keep_last is not None and seen < keep_last:
            continue
        if row.status not in wanted:
            continue  # (a running one named by --status is skipped and said by remove_runs unless interrupted)
        ended = to_ms(row.finished_at) or to_ms(row.started_at)
        if older_than_ms is not None and (ended is None or ended > now_ms - older_than_ms):
            continue
        chosen.append(row)
    return chosen


def finish_pending(home: Path, report: Callable[[str], None] = lambda line: None) -> list[str]:
    """Finish every removal an interrupted pass began (its ``.gc-<id>`` folders); the run ids. (Database mode has
    none: its removal is one transaction.)"""
    if database_place(home) is not None:
        return []
    root = home / "runs"
    done = []
    with contextlib.suppress(FileNotFoundError):
        for entry in sorted(os.scandir(root), key=lambda item: item.name):
            if entry.name.startswith(PENDING_PREFIX) and entry.is_dir(follow_symlinks=False):
                run_id = entry.name[len(PENDING_PREFIX) :]
                _forget_rows(home, [run_id])
                shutil.rmtree(entry.path, ignore_errors=True)
                report(f"Finished removing {run_id} (an earlier pass was interrupted).")
                done.append(run_id)
    return done


def remove_runs(
    home: Path,
    rows: list[RunSummary],
    *,
    export_dir: Path | None = None,
    dry_run: bool = False,
    report: Callable[[str], None] = lambda line: None,
) -> GcResult:
    """Remove ``rows``' runs, each whole (see the module); exported first into ``export_dir`` when given."""
    result = GcResult()
    if not dry_run:
        result.finished = finish_pending(home, report)
    queue = open_run_database(home).queue
    from piw.store.db.database import now_ms

    place = database_place(home)
    for row in rows:
        run_id = row.run_id
        queued = queue.get(run_id)
        if queued is not None and queued.has_live_claim(now_ms()):
            result.skipped.append((run_id, "a process holds it (it is running); not removed"))
            continue
        if row.status == "running" and not row.interrupted:
            result.skipped.append((run_id, f"it is {row.display_status}, not finished; not removed"))
            continue
        if place is not None:
            _remove_from_database(home, place, row, export_dir, dry_run, result, report)
            continue
        bundle = home / "runs" / run_id
        size = tree_bytes(bundle)
        if dry_run:
            result.removed.append(Removed(run_id, row.status, size))
            continue
        try:
            with _writer_lock(bundle):
                exported = _export(home, run_id, export_dir) if export_dir is not None else None
                os.rename(bundle, bundle.parent / f"{PENDING_PREFIX}{run_id}")  # the commit point
        except _Busy:
            result.skipped.append((run_id, "its writer lock is held (a process is writing it); not removed"))
            continue
        except FileNotFoundError:
            result.skipped.append((run_id, "its bundle is gone already"))
            continue
        _forget_rows(home, [run_id])
        shutil.rmtree(bundle.parent / f"{PENDING_PREFIX}{run_id}", ignore_errors=True)
        removed = Removed(run_id, row.status, size, exported)
        result.removed.append(removed)
        report(_removed_line(removed))
    return result


def _remove_from_database(
    home: Path,
    place: Any,
    row: RunSummary,
    export_dir: Path | None,
    dry_run: bool,
    result: GcResult,
    report: Callable[[str], None],
) -> None:
    """Database mode: export from the rows, delete them in one transaction, then drop this host's mirror."""
    from piw.store.pg.retention import delete_run, run_bytes
    from piw.store.place import runs_home

    run_id = row.run_id
    size = run_bytes(place.db, run_id)
    if dry_run:
        result.removed.append(Removed(run_id, row.status, size))
        return
    exported = _export(home, run_id, export_dir) if export_dir is not None else None
    refused = delete_run(place.db, run_id)  # the commit point
    if refused is not None:
        result.skipped.append((run_id, refused))
        return
    shutil.rmtree(runs_home(home) / "runs" / run_id, ignore_errors=True)
    removed = Removed(run_id, row.status, size, exported)
    result.removed.append(removed)
    report(_removed_line(removed))


def _removed_line(item: Removed) -> str:
    from piw.store.disk_use import human_bytes

    where = f", exported to {item.exported}" if item.exported is not None else ""
    return f"Removed {item.run_id} ({item.status}, {human_bytes(item.bytes)}{where})."


class _Busy(Exception):
    pass


@contextlib.contextmanager
def _writer_lock(bundle: Path) -> Iterator[None]:
    """The bundle's writer lock (``flock`` on its folder), taken without waiting: ``_Busy`` when held."""
    fd = os.open(bundle, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise _Busy() from None
            raise
        yield
    finally:
        os.close(fd)


def _export(home: Path, run_id: str, target: Path) -> Path:
    """The run as a standard bundle in ``target`` (``piw export``); one left there by an interrupted pass is
    reused when it holds the same trace, anything else there is refused."""
    from piw.store.pg.export import export_run

    existing = target / run_id
    if existing.exists():
        from piw.store.place import runs_home, sync_mirror

        sync_mirror(home, run_id)
        if (existing / "trace.ndjson").read_bytes() == (
            runs_home(home) / "runs" / run_id / "trace.ndjson"
        ).read_bytes():
            return existing
        raise UsageError(f"{existing} exists and holds another trace; export into another folder.")
    return export_run(home, run_id, target)


def _forget_rows(home: Path, run_ids: list[str]) -> None:
    """Delete what the database keeps about these runs, in one transaction (the bundles are already gone)."""
    db = open_database(home)
    with db.transaction() as conn:
        tables = [
            name
            for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            if name not in _KEPT
            and any(column[1] == "run_id" for column in conn.execute(f'PRAGMA table_info("{name}")'))
        ]  # every table that keeps rows by run id (other features' too), but the records meant to outlive it
        for run_id in run_ids:
            for table in tables:
                conn.execute(f'DELETE FROM "{table}" WHERE run_id = ?', (run_id,))  # (names from our catalog)
            conn.execute("DELETE FROM idempotency WHERE receipt_json LIKE ?", (f'%"runId":"{run_id}"%',))


def named_runs(home: Path, run_ids: list[str]) -> list[RunSummary]:
    """``piw rm RUN…``: the named runs (any status but live: ``RunHeld`` names a live one, before anything)."""
    from piw.store.history import find_runs
    from piw.store.run_query import RunQuery

    by_id = {row.run_id: row for row in find_runs(home, RunQuery())}
    chosen = []
    for run_id in run_ids:
        row = by_id.get(run_id)
        if row is None:
            raise UsageError(f"No run {run_id!r}; list runs with 'piw runs'.")
        if row.status == "running" and not row.interrupted:
            raise RunHeld(
                f"Run {run_id} is running ({row.display_status}); stop it with 'piw cancel {run_id}' first."
            )
        chosen.append(row)
    return chosen


__all__ = ["FINISHED", "GcResult", "PiwError", "Removed", "finish_pending", "remove_runs", "select_runs"]
