"""Run listings: a summary row per run, newest first, from the ``runs`` index and the run queue.

The index (``piw.store.db.index``) caches each bundle's fold, so listing does not fold every bundle. Whether a
``running`` run is live comes from its queue row (``docs/detached.md``, "What the database holds"): held by a process
with an unexpired lease is live; queued, paused or parked says so; anything else has no process writing it and
is shown as interrupted. A ``waiting`` run is final, but what became of its gate is not: the decision record and
the continuation's queue row say whether it still needs an answer, was answered (by a person or by its timeout)
or was cancelled (:class:`WaitSummary`, docs/cli.md ``piw runs``). :func:`folded_summaries` is the old way (fold
every bundle) kept for the benchmark.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from piw.errors import PiwError, TraceCorrupt
from piw.store.damage import Damage, line_damage
from piw.store.db.database import now_ms
from piw.store.db.index import IndexRow, decode_row, from_ms, iter_values, to_ms, usage_cost
from piw.store.db.rows import QueueRow
from piw.store.db.run_database import RunDatabase, open_run_database
from piw.store.place import refresh_mirrors
from piw.store.run_query import RunQuery
from piw.store.script_phase import current_phase, split_place
from piw.store.storage import storage_error

WaitState = Literal["open", "answered", "cancelled"]


@dataclass(frozen=True)
class WaitSummary:
    """What became of a waiting run's gate: still ``open``, ``answered`` (a continuation exists) or ``cancelled``."""

    state: WaitState
    provenance: str | None = None
    """Who answered: ``human`` (``piw answer``/``decide``, a prompt, a top-up), ``timeout`` (the declared policy),
    ``cancel``."""
    continuation_run_id: str | None = None
    due_at: int | None = None
    """An open decision's deadline (epoch ms): its ``on_timeout`` applies once a ``piw host`` sweeps after it."""
    overdue: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "provenance": self.provenance,
            "continuationRunId": self.continuation_run_id,
            "dueAt": from_ms(self.due_at),
            "overdue": self.overdue,
        }

    @property
    def status_text(self) -> str:
        """The status column: ``answered → RUN``, ``timed out → RUN``, ``waiting (due since …)``, …"""
        if self.state == "answered":
            how = "timed out" if self.provenance == "timeout" else "answered"
            return f"{how} → {self.continuation_run_id}"
        if self.state == "cancelled":
            return "waiting (cancelled)"
        if self.overdue and self.due_at is not None:
            return (
                f"waiting (due since {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(self.due_at // 1000))})"
            )
        return "waiting"


def wait_summary(database: RunDatabase, run_id: str, now: int) -> WaitSummary:
    """The gate of the waiting run ``run_id``, from ``piw.sqlite`` (read only; nothing here sweeps)."""
    decisions = database.decisions.decisions_of(run_id)
    decision = next((row for row in decisions if row.status == "open"), decisions[-1] if decisions else None)
    continuation = database.decisions.continuation_of(run_id)
    if continuation is not None:
        by = decision.provenance if decision is not None and decision.status == "resolved" else None
        return WaitSummary("answered", by or "human", continuation.run_id)
    own = database.queue.get(run_id)
    if (own is not None and own.status == "cancelled") or (
        decision is not None and decision.status == "cancelled"
    ):
        return WaitSummary("cancelled", "cancel")
    due = decision.expires_at if decision is not None and decision.status == "open" else None
    return WaitSummary("open", due_at=due, overdue=due is not None and due <= now)


def _listed(status: str | None, run_status: str, wait: WaitSummary | None) -> bool:
    """Whether a run is listed under ``--status status`` (``None``: every run)."""
    if status is None:
        return True
    state = wait.state if wait is not None else "open"
    if run_status == "waiting":
        return {"open": "waiting", "answered": "answered", "cancelled": "cancelled"}[state] == status
    return run_status == status


class RunHead(Protocol):
    """What every source of a run's row knows of it: an index row, a fold's state, ``state.json``'s head."""

    @property
    def run_id(self) -> str: ...
    @property
    def workflow_name(self) -> str: ...
    @property
    def run_title(self) -> str | None: ...
    @property
    def status(self) -> str: ...
    @property
    def started_at(self) -> str | None: ...
    @property
    def finished_at(self) -> str | None: ...


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    workflow_name: str
    run_title: str | None
    status: str
    started_at: str | None
    finished_at: str | None
    current_node: str | None
    notice: str | None = None
    """Set when the bundle is damaged; the row then shows what the readable prefix of its trace says."""
    damage: Damage | None = None
    interrupted: bool = False
    """``running`` with no process writing it: it crashed or was interrupted, and ``piw resume`` continues it."""
    detail: str | None = None
    """What a ``running`` run is doing in queue terms: ``queued``, ``paused``, ``parked: <reason>``, ``interrupted``."""
    cost: float | None = None
    """USD summed over the run's model requests, when every part of it is known (``RunState.usage.cost``)."""
    usage: dict[str, Any] | None = None
    """The run's ``usage`` (``{requests, input, output, cacheRead, cacheWrite, cost?}``), or its ``spent`` when it
    has a budget."""
    wait: WaitSummary | None = None
    """A waiting run's gate (``None`` for any other run, or when ``piw.sqlite`` cannot be read)."""
    parent_run_id: str | None = None
    """The run whose checkpoint answer this run continues (``piw runs --parent``)."""
    schedule: dict[str, Any] | None = None
    """``{name, fireAt}`` of the schedule fire that started it (``piw runs --schedule``, docs/schedules.md)."""
    size_bytes: int | None = None
    """Disk use of its bundle, when asked for (``piw runs --size``)."""
    current_phase: str | None = None
    """The phase a running script node works in (``docs/dynamic-workflows.md``)."""

    @classmethod
    def of(cls, head: RunHead, current_node: str | None, **rest: Any) -> RunSummary:
        """The summary of a run's head (its id, workflow, title, status and times) at ``current_node``."""
        return cls(
            head.run_id,
            head.workflow_name,
            head.run_title,
            head.status,
            head.started_at,
            head.finished_at,
            current_node,
            **rest,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "runId": self.run_id,
            "workflowName": self.workflow_name,
            "runTitle": self.run_title,
            "status": self.status,
            "startedAt": self.started_at,
            "finishedAt": self.finished_at,
            "currentNode": self.current_node,
            "currentPhase": self.current_phase,
            "damage": self.damage.to_json() if self.damage else None,
            "usage": self.usage,
            "wait": self.wait.to_json() if self.wait else None,
            "parentRunId": self.parent_run_id,
            "schedule": self.schedule,
            "sizeBytes": self.size_bytes,
        }

    @property
    def display_status(self) -> str:
        if self.wait is not None:
            return self.wait.status_text
        return f"{self.status} ({self.detail})" if self.detail else self.status


def queue_detail(row: QueueRow | None, paused: bool, now: int) -> tuple[str | None, bool]:
    """``(detail, interrupted)`` of a ``running`` run from its queue row (``None`` when it has none)."""
    if row is None:
        return ("paused" if paused else "interrupted"), not paused
    if row.has_live_claim(now):
        return ("pausing" if row.pause_requested else "cancelling" if row.cancel_requested else None), False
    if row.pause_requested or paused:
        return "paused", False
    if row.status == "queued":
        return "queued", False
    if row.status == "parked" and row.park_reason and row.park_reason != "interrupted":
        return f"parked: {row.park_reason.replace('_', ' ')}", False
    if row.status == "parked" and row.park_reason is None:  # a stopped host's run: the next claimer takes it
        return "queued", False
    return "interrupted", True


def run_summaries(home: Path, status: str | None = None, limit: int | None = None) -> Iterator[RunSummary]:
    """Summaries of every run (with ``status``, at most ``limit``), newest first: :func:`find_runs`."""
    yield from find_runs(home, RunQuery(statuses=(status,) if status else (), limit=limit))


def find_runs(home: Path, query: RunQuery) -> list[RunSummary]:
    """The runs ``query`` selects, newest first, from the index (reconciled with the bundles on disk): what
    ``piw runs`` and ``GET /api/runs`` list (``docs/cli.md``, "Finding runs").

    A home whose index cannot be opened or created (a read-only ``PIW_HOME``) is listed by folding its bundles,
    so ``piw runs`` works wherever the bundles can be read.
    """
    now = now_ms()
    limit = query.limit
    try:
        refresh_mirrors(home, limit)
        database: RunDatabase | None = None
        rows: list[tuple[IndexRow, WaitSummary | None]] = []
        for values in iter_values(home):
            if limit is not None and len(rows) >= limit:
                break
            if not query.keeps(values):
                continue
            row = decode_row(values)
            wait = None
            if row.status == "waiting":
                database = database or open_run_database(home)
                wait = wait_summary(database, row.run_id, now)
            if not query.statuses or any(_listed(status, row.status, wait) for status in query.statuses):
                rows.append((row, wait))
        running = [row.run_id for row, _ in rows if row.status == "running" and row.damage_line is None]
        queue_rows = (database or open_run_database(home)).queue.rows(running) if running else {}
        unserved = _unserved(
            home, [run_id for run_id, q in queue_rows.items() if q.status in ("queued", "parked")]
        )
    except Exception as exc:
        if storage_error(exc, home) is None:
            raise
        folded = [row for row in folded_summaries(home) if _folded_match(query, row)]
        return folded[:limit] if limit is not None else folded
    found = []
    for row, wait in rows:
        detail, interrupted = (None, False)
        if row.run_id in running:
            detail, interrupted = queue_detail(queue_rows.get(row.run_id), row.paused, now)
            if detail == "queued" and row.run_id in unserved:
                detail = UNSERVED
        found.append(_summary(row, detail, interrupted, wait))
    return found


def _folded_match(query: RunQuery, row: RunSummary) -> bool:
    """The filters a summary folded from its bundle can answer (a home without a usable index)."""
    if query.statuses and not any(_listed(status, row.status, None) for status in query.statuses):
        return False
    if query.workflow is not None and row.workflow_name != query.workflow:
        return False
    started = to_ms(row.started_at)
    if query.since_ms is not None and (started is None or started < query.since_ms):
        return False
    if query.until_ms is not None and (started is None or started >= query.until_ms):
        return False
    if query.search and query.search.casefold() not in (row.run_title or "").casefold():
        return False
    return query.parent is None and query.schedule is None


UNSERVED = "queued: no live host serves this workflow version"
"""A queued run in database mode whose serve key no live host has (``docs/many-machines.md``, "Routing")."""


def _unserved(home: Path, run_ids: list[str]) -> set[str]:
    """Of these queued runs, those no live host serves (database mode only: SQLite mode has one machine)."""
    from piw.store.place import database_place

    place = database_place(home)
    if place is None or not run_ids:
        return set()
    from piw.store.pg.hosts import unserved

    try:
        return unserved(place.db, run_ids)
    except PiwError:  # the hosts list is display only: without it the runs are just "queued"
        return set()


def _summary(row: IndexRow, detail: str | None, interrupted: bool, wait: WaitSummary | None) -> RunSummary:
    node, phase = split_place(row.current_node)
    return RunSummary.of(
        row,
        node,
        current_phase=phase,
        notice=row.notice,
        damage=line_damage("trace.ndjson", row.damage_line) if row.damage_line is not None else None,
        interrupted=interrupted,
        detail=detail,
        cost=row.cost,
        usage=row.usage,
        wait=wait,
        parent_run_id=row.parent_run_id,
        schedule={"name": row.schedule_name, "fireAt": row.fire_at} if row.schedule_name else None,
    )


def folded_summaries(home: Path) -> list[RunSummary]:
    """Every run folded from its bundle (the listing before the index existed; the benchmark's baseline)."""
    # The fold, imported here: a listing by index needs none of it.
    from piw.store.bundle import list_bundles, load_state, run_is_live
    from piw.store.fold import fold
    from piw.store.trace import read_trace_prefix

    out: list[RunSummary] = []
    for bundle in list_bundles(home):
        damage: Damage | None = None
        try:
            state = load_state(bundle)
        except TraceCorrupt:
            read, corrupt = read_trace_prefix(bundle.trace_path)
            state = fold(read.events)
            if corrupt is not None:
                damage = line_damage(bundle.trace_path.name, corrupt.line)
        except PiwError:
            continue
        if not state.run_id:
            continue
        out.append(
            RunSummary.of(
                state,
                state.current.node_id if state.current else None,
                current_phase=current_phase(state),
                notice=damage.notice if damage else None,
                damage=damage,
                interrupted=damage is None and state.status == "running" and not run_is_live(bundle),
                cost=usage_cost(state.usage),
                usage=state.spent if state.budget else state.usage,
                parent_run_id=state.parent_run_id,
                schedule=state.schedule,
            )
        )
    return out
