"""``piw gc`` and ``piw rm`` in database mode (``docs/cli.md``, "Retention"; ``docs/many-machines.md``).

In database mode the rows are the run, so the commit point is one transaction: it locks the run's queue row,
refuses a run whose claim is live, and deletes every row that names the run (its trace, conversation, artifacts,
definition, queue row, notifications, decisions, the idempotency records naming it, and the rows other features
keep by ``run_id``; schedule fires keep their record). Mirrors are caches: this host's is removed after the commit,
and every other host drops its mirror of a run the database no longer has on its next listing
(:func:`prune_mirrors`).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

KEPT = frozenset({"schedule_fires"})
"""Tables whose rows outlive the run they name (a schedule's record of its fires)."""


def run_bytes(db: Any, run_id: str) -> int:
    """The bytes the database holds for a run (trace lines, conversation, artifacts, definition)."""
    with db.connection() as conn:
        found = conn.execute(
            "SELECT coalesce((SELECT sum(octet_length(line)) FROM trace_events WHERE run_id = %s), 0) "
            "+ coalesce((SELECT sum(octet_length(line)) FROM session_entries WHERE run_id = %s), 0) "
            "+ coalesce((SELECT sum(octet_length(bytes)) FROM artifacts WHERE run_id = %s), 0) "
            "+ coalesce((SELECT octet_length(workflow_json) + octet_length(manifest_json) FROM run_bundles "
            "WHERE run_id = %s), 0)",
            (run_id, run_id, run_id, run_id),
        ).fetchone()
    return int(found[0]) if found else 0


def delete_run(db: Any, run_id: str) -> str | None:
    """Delete every row of ``run_id`` in one transaction; why not (``None`` when deleted)."""
    with db.connection() as conn:
        row = conn.execute(
            "SELECT status, claim_expires_at > now_ms() FROM run_queue WHERE run_id = %s FOR UPDATE",
            (run_id,),
        ).fetchone()
        if row is None:
            return "the database has no such run"
        status, live = row
        if status in ("starting", "running") and live:
            return "a process holds it (it is running); not removed"
        tables = [
            name
            for (name,) in conn.execute(
                "SELECT table_name FROM information_schema.columns WHERE table_schema = current_schema() "
                "AND column_name = 'run_id' AND table_name <> 'run_queue' ORDER BY table_name"
            ).fetchall()
            if name not in KEPT
        ]
        for table in tables:  # (names from the catalog of our own schema)
            conn.execute(f'DELETE FROM "{table}" WHERE run_id = %s', (run_id,))
        conn.execute("DELETE FROM idempotency WHERE receipt_json LIKE %s", (f'%"runId":"{run_id}"%',))
        conn.execute("DELETE FROM run_queue WHERE run_id = %s", (run_id,))
    return None


def prune_mirrors(db: Any, runs: Path) -> int:
    """Remove this host's mirrors of runs the database no longer has (another host removed them); how many."""
    names = [name for name in os.listdir(runs) if not name.startswith(".")] if runs.is_dir() else []
    if not names:
        return 0
    with db.connection() as conn:
        present = {
            run_id
            for (run_id,) in conn.execute(
                "SELECT run_id FROM run_queue WHERE run_id = ANY(%s)", (names,)
            ).fetchall()
        }
    gone = [name for name in names if name not in present]
    for name in gone:
        shutil.rmtree(runs / name, ignore_errors=True)
    return len(gone)
