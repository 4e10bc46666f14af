"""A host whose ``piw.sqlite`` was deleted (or replaced) under it: recreate it and put back what it knew.

Before, the first process to open the database again created an empty one; the host's runs then found no row,
said "another process now owns this run" when none did, and every queued run waited for a manual resume. Now the
host notices the file changed (its device and inode, on every pass and on every open in the process;
:meth:`~piw.store.db.database.Database.recover`), opens it afresh and, before any of its threads reads it:

- puts back the row of every run it holds, with its claim as it stands, so those runs go on untouched;
- re-queues every other unfinished bundle (a trace that ends neither terminal nor waiting), paused ones paused, so
  this host (or another) resumes it from its trace;
- says so in one line, naming the runs.

What only the database knew is lost with it: a queued run's provider options, open decision records, undelivered
notifications (``docs/guarantees.md``, "Database faults"; ``docs/detached.md``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path

from piw.errors import PiwError
from piw.run.runner import row_of_bundle
from piw.store.db.lease import Lease
from piw.store.db.queue import SqliteQueue
from piw.store.fold import RunState

log = logging.getLogger(__name__)


def _unfinished(home: Path, skip: Iterable[str]) -> list[RunState]:
    from piw.store.bundle import list_bundles, load_state

    skipped = set(skip)
    found = []
    for bundle in list_bundles(home):
        if bundle.run_id in skipped:
            continue
        try:
            state = load_state(bundle)
        except PiwError:
            continue  # a damaged bundle is listed by 'piw runs'; 'piw resume' says what is wrong with it
        if state.run_id and state.status == "running":
            found.append(state)
    return found


def restore(home: Path, queue: SqliteQueue, leases: dict[str, Lease]) -> str:
    """Put the held claims and the unfinished bundles back into a recreated database; the line that says so."""
    from piw.store.bundle import load_state, open_bundle

    kept = []
    for run_id, lease in leases.items():
        try:
            queue.restore_claim(row_of_bundle(load_state(open_bundle(home, run_id)), home), lease.claim)
            kept.append(run_id)
        except PiwError as exc:
            log.warning("run %s: its claim could not be put back: %s", run_id, exc)
    requeued = []
    for state in _unfinished(home, leases):
        queue.ensure(row_of_bundle(state, home))
        if state.paused:
            queue.request_pause(state.run_id)
        requeued.append(state.run_id)
    plural = "" if len(requeued) == 1 else "s"
    listed = f": {', '.join(requeued)}" if requeued else ""
    return (
        f"{queue.db.path.name} was deleted or replaced under this host; recreated it, kept the claim on "
        f"{len(kept)} run{'' if len(kept) == 1 else 's'} it holds and re-queued {len(requeued)} unfinished "
        f"run{plural}{listed}."
    )


def watch_database(
    queue: object, home: Path, leases: Callable[[], dict[str, Lease]], report: Callable[[str], None]
) -> Callable[[], None]:
    """Register the restore on ``queue``'s database (SQLite only); returns the check a host runs every pass."""
    if not isinstance(queue, SqliteQueue):
        return lambda: None
    db = queue.db
    db.on_replaced.append(lambda _db: report(restore(home, queue, leases())))

    def check() -> None:
        db.recover()

    return check
