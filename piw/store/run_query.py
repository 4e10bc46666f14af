"""What ``piw runs`` (and ``GET /api/runs``) select: one :class:`RunQuery` of filter values (``docs/cli.md``,
"Finding runs").

The filters read a few columns of every raw ``runs`` index row (``piw.store.db.index.indexed_values``) and only
the rows they keep are decoded, so a home of ten thousand runs answers in a few tens of milliseconds. The status
filter needs the queue and decision records of waiting runs, so it is applied by :func:`piw.store.history.find_runs`
on the rows the rest of the query kept.
"""

from __future__ import annotations

import contextlib
import functools
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from piw.errors import UsageError
from piw.store.db.index import CONTAINS_FOLDED, At, RowFilter

RUN_FILTERS = ("running", "waiting", "answered", "completed", "failed", "timed_out", "cancelled", "unknown")
"""What ``piw runs --status`` takes: the run statuses, with ``waiting`` narrowed to gates that still need an answer
and ``answered`` for the waiting runs that were answered (and ``cancelled`` taking the cancelled waiting runs)."""

_AGO = re.compile(r"^(\d+)\s*(s|m|h|d|w)$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


@dataclass(frozen=True)
class RunQuery:
    """The filter values of a run listing; every one left ``None`` (or empty) selects every run."""

    workflow: str | None = None
    """Runs of this workflow name."""
    since_ms: int | None = None
    """Runs started at or after this instant (epoch ms)."""
    until_ms: int | None = None
    """Runs started before this instant (epoch ms)."""
    statuses: tuple[str, ...] = ()
    """Runs with any of these statuses (:data:`RUN_FILTERS`)."""
    search: str | None = None
    """Runs whose title or input contains this text (case-insensitive)."""
    parent: str | None = None
    """Continuations of this run (their ``parentRunId``)."""
    schedule: str | None = None
    """Runs started by this schedule's fires (``docs/schedules.md``)."""
    limit: int | None = None
    """At most this many runs (the newest)."""

    @functools.cached_property
    def _run_statuses(self) -> frozenset[str]:
        """The run statuses (the index's column) the status filter can keep: a waiting run may be listed as
        ``waiting``, ``answered`` or ``cancelled`` (decided from its gate, later), a cancelled run as ``cancelled``."""
        found = set(self.statuses)
        if found & {"waiting", "answered", "cancelled"}:
            found.add("waiting")
        return frozenset(found)

    def row_filter(self) -> RowFilter | None:
        """The filters as a ``WHERE`` clause of the ``runs`` table, the same tests as :meth:`keeps` (which still
        checks every row): SQLite then fetches only the rows they keep (``None``: no filter)."""
        clauses: list[str] = []
        values: list[Any] = []
        if self.statuses:
            statuses = sorted(self._run_statuses)
            clauses.append(f"status IN ({', '.join('?' * len(statuses))})")
            values += statuses
        for column, value in (
            ("workflow_name", self.workflow),
            ("parent_run_id", self.parent),
            ("schedule_name", self.schedule),
        ):
            if value is not None:
                clauses.append(f"{column} = ?")
                values.append(value)
        if self.since_ms is not None:
            clauses.append("started_at >= ?")
            values.append(self.since_ms)
        if self.until_ms is not None:
            clauses.append("started_at < ?")
            values.append(self.until_ms)
        if self.search:
            clauses.append(f"{CONTAINS_FOLDED}(coalesce(search_text, run_title, ''), ?)")
            values.append(self.search.casefold())
        return (" AND ".join(clauses), tuple(values)) if clauses else None

    def keeps(self, values: tuple[Any, ...]) -> bool:
        """Whether a raw index row passes every filter (the status one as far as the row's own status tells)."""
        if self.statuses and values[At.STATUS] not in self._run_statuses:
            return False
        if self.workflow is not None and values[At.WORKFLOW] != self.workflow:
            return False
        if self.parent is not None and values[At.PARENT] != self.parent:
            return False
        if self.schedule is not None and values[At.SCHEDULE] != self.schedule:
            return False
        started = values[At.STARTED]
        if self.since_ms is not None and (started is None or started < self.since_ms):
            return False
        if self.until_ms is not None and (started is None or started >= self.until_ms):
            return False
        if self.search:
            text = values[At.SEARCH] if values[At.SEARCH] is not None else (values[At.TITLE] or "")
            if self.search.casefold() not in text.casefold():
                return False
        return True


def parse_instant(text: str, option: str, now: datetime, *, end_of_day: bool = False) -> int:
    """``--since``/``--until`` as epoch ms: an age (``2d``, ``3h``, ``30m``, ``90s``, ``1w``: that long before now),
    a date (``2026-12-01``, UTC midnight; with ``end_of_day`` the midnight after it, so ``--until`` a date includes
    that day) or an ISO 8601 instant (UTC when it names no offset)."""
    value = text.strip()
    ago = _AGO.match(value)
    if ago:
        instant = now - timedelta(seconds=int(ago.group(1)) * _UNIT_S[ago.group(2)])
        return int(instant.timestamp() * 1000)
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(
            f"{option} {text!r} is not a date (2026-12-01), an instant (2026-12-01T09:00) or an age (2d, 3h, 30m)."
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    if end_of_day and _DATE.match(value):
        parsed += timedelta(days=1)
    return int(parsed.timestamp() * 1000)


def query_of(
    home: Path,
    status: list[str] | None,
    workflow: str | None,
    since: str | None,
    until: str | None,
    search: str | None,
    parent: str | None,
    schedule: str | None,
    limit: int | None,
) -> RunQuery:
    """The filter values of ``piw runs`` and ``GET /api/runs`` (``docs/serve.md``), checked: one line, exit 2 (HTTP
    400), for a bad one."""
    from piw.errors import PiwError
    from piw.store.runref import resolve_run_id

    statuses = tuple(
        dict.fromkeys(part.strip() for value in status or () for part in value.split(",") if part.strip())
    )
    for value in statuses:
        if value not in RUN_FILTERS:
            raise UsageError(f"Unknown status {value!r}; use one of: {', '.join(RUN_FILTERS)}.")
    if limit is not None and limit < 1:
        raise UsageError("--limit must be at least 1.")
    now = datetime.now(UTC)
    since_ms = parse_instant(since, "--since", now) if since is not None else None
    until_ms = parse_instant(until, "--until", now, end_of_day=True) if until is not None else None
    if parent is not None:
        with contextlib.suppress(PiwError):  # a parent already removed: its continuations keep its id
            parent = resolve_run_id(home, parent)
    return RunQuery(
        workflow=workflow,
        since_ms=since_ms,
        until_ms=until_ms,
        statuses=statuses,
        search=search or None,
        parent=parent,
        schedule=schedule,
        limit=limit,
    )
