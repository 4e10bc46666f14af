"""A second detached start of a run that is still live (``docs/dynamic-workflows.md``, ``docs/cli.md``).

An agent that launched ``piw run FILE --detach`` and lost track of it (a session boundary, a crash) tends to
launch it again; two orchestrators then run side by side and pay twice. ``piw run --detach`` therefore looks in
the run queue first: a run of the same workflow file with the same input whose queue row is not final (queued,
starting, running or parked) and that is not interrupted (running with no process writing it, as ``piw runs``
shows it: ``piw resume`` continues it) is named and nothing is started, unless ``--allow-duplicate`` says a second is
meant. The check reads the queue (SQLite or PostgreSQL alike) before the new row is written, so two starts at the
very same moment can still both pass: it catches the forgotten run, it is not a lock.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from piw.errors import DuplicateRun
from piw.store.db.database import now_ms
from piw.store.db.rows import QueueRow
from piw.store.db.run_database import open_run_database
from piw.store.history import queue_detail


def _same(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def live_duplicate(home: Path, source: dict[str, Any], input_value: Any) -> QueueRow | None:
    """The newest live run of the workflow file ``source`` with this (validated) input, if there is one."""
    if source.get("kind") != "file":
        return None
    wanted = _same(input_value)
    found: QueueRow | None = None
    now = now_ms()
    for row in open_run_database(home).queue.rows().values():
        theirs = row.workflow_source or {}
        if row.is_final or theirs.get("kind") != "file" or theirs.get("path") != source.get("path"):
            continue
        if queue_detail(row, False, now)[1]:
            continue  # interrupted: nothing runs it until 'piw resume' or a host takes it
        if _same(row.input) == wanted and (found is None or (row.created_at or 0) > (found.created_at or 0)):
            found = row
    return found


def refuse_duplicate(home: Path, source: dict[str, Any], input_value: Any) -> None:
    """Raise :class:`DuplicateRun` naming the live run of the same file and input."""
    row = live_duplicate(home, source, input_value)
    if row is None:
        return
    name = Path(str(source.get("path", ""))).name
    raise DuplicateRun(
        f"Run {row.run_id} of {name} with the same input is still live ({row.status}); follow it with "
        f"'piw watch {row.run_id}', or pass --allow-duplicate to start a second."
    )
