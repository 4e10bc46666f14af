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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from piw.errors import PiwError, TraceCorrupt
from piw.store.damage import Damage, line_damage
from piw.store.db.database import now_ms
from piw.store.db.index import At, IndexRow, decode_row, from_ms, iter_values, to_ms, usage_cost
from piw.store.place import refresh_mirrors
from piw.store.run_query import RunQuery
from piw.store.script_phase import current_phase, split_place
from piw.store.storage import storage_error

if TYPE_CHECKING:  # the queue and decision stores: opened only when a listed run is waiting or running
    from piw.store.db.rows import QueueRow
    from piw.store.db.run_database import RunDatabase

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
    picked = _pick(home, query, _UNSHOWN)
    if isinstance(picked, list):
        return picked
    found = []
    for values, wait in picked.rows:
        row = decode_row(values)
        detail, interrupted = (None, False)
        if row.run_id in picked.running:
            detail, interrupted = queue_detail(picked.queue_rows.get(row.run_id), row.paused, picked.now)
            if detail == "queued" and row.run_id in picked.unserved:
                detail = UNSERVED
        found.append(_summary(row, detail, interrupted, wait))
    return found


@dataclass(frozen=True)
class _Picked:
    """The raw index rows a query keeps (each with a waiting run's gate), and the queue rows of its running runs."""

    rows: list[tuple[tuple[Any, ...], WaitSummary | None]]
    running: list[str]
    queue_rows: dict[str, QueueRow]
    unserved: set[str]
    now: int


def _pick(home: Path, query: RunQuery, unread: frozenset[str]) -> _Picked | list[RunSummary]:
    """:func:`find_runs` up to the rows it keeps, undecoded (the ``unread`` columns left ``None``); a home without a
    usable index gives its folded summaries (a list) instead. ``search_text`` is read whenever the query searches:
    its own check needs it."""
    if query.search is not None:
        unread = unread - {"search_text"}
    now = now_ms()
    limit = query.limit
    try:
        refresh_mirrors(home, limit)
        database: RunDatabase | None = None
        rows: list[tuple[tuple[Any, ...], WaitSummary | None]] = []
        for values in iter_values(home, query.row_filter(), unread):
            if limit is not None and len(rows) >= limit:
                break
            if not query.keeps(values):
                continue
            status = values[At.STATUS]
            wait = None
            if status == "waiting":
                database = database or _run_database(home)
                wait = wait_summary(database, values[At.RUN_ID], now)
            if not query.statuses or any(_listed(wanted, status, wait) for wanted in query.statuses):
                rows.append((values, wait))
        running = [
            values[At.RUN_ID]
            for values, _ in rows
            if values[At.STATUS] == "running" and values[At.DAMAGE] is None
        ]
        queue_rows = (database or _run_database(home)).queue.rows(running) if running else {}
        unserved = _unserved(
            home, [run_id for run_id, q in queue_rows.items() if q.status in ("queued", "parked")]
        )
    except Exception as exc:
        if storage_error(exc, home) is None:
            raise
        folded = [row for row in folded_summaries(home) if _folded_match(query, row)]
        return folded[:limit] if limit is not None else folded
    return _Picked(rows, running, queue_rows, unserved, now)


_UNSHOWN = frozenset({"updated_at", "trace_seq", "trace_stamp", "search_text"})
"""The index columns no summary shows: not fetched (``search_text`` is, for a ``--search`` query's own check:
:func:`_pick`)."""
_UNSHOWN_IN_JSON = _UNSHOWN | {"paused", "notice", "cost"}
"""... nor these, which ``--json`` leaves out (``paused`` only tells a running run's ``detail``)."""


def listing_json(home: Path, query: RunQuery) -> bytes:
    """``json.dumps([row.to_json() for row in find_runs(home, query)], ensure_ascii=False)`` as UTF-8, byte for
    byte, built straight from the raw index rows without an :class:`IndexRow` or :class:`RunSummary` per run
    (``piw runs --json``, docs/cli.md "Finding runs": on 10,000 runs those objects were about half the listing).

    The JSON shows no ``detail`` of a running run, so none is worked out; its queue rows are read all the same (a
    store that cannot be read lists the folded bundles, as :func:`find_runs` does). From :data:`MSGSPEC_FROM` rows
    on, the list is encoded by msgspec (its import, about 6 ms, then pays for itself): the same text for every
    string, integer and nesting (``tests/store/test_listing_json.py``), and a row's ``usage`` passed through as its
    stored JSON text re-spaced (``msgspec.Raw``: the index writes it with ``json.dumps``, whose floats msgspec would
    spell otherwise, ``1e-05`` as ``0.00001``); a text with an escape in it is read and written back by ``json``.
    A usage holding ``NaN`` or ``Infinity`` (which ``json`` writes and msgspec refuses), or a text that is not JSON,
    sends the whole list to ``json``, as fewer rows go: the text :func:`find_runs` gives, or the error it raises."""
    import json

    picked = _pick(home, query, _UNSHOWN_IN_JSON)
    if isinstance(picked, list):
        return json.dumps([row.to_json() for row in picked], ensure_ascii=False).encode()
    if len(picked.rows) >= MSGSPEC_FROM:
        import msgspec

        try:
            listed = [_json_of(values, wait, _raw_usage) for values, wait in picked.rows]
            return msgspec.json.format(msgspec.json.encode(listed), indent=0)
        except (_NotForMsgspec, msgspec.DecodeError):
            pass
    loads = json.loads
    return json.dumps(
        [_json_of(values, wait, loads) for values, wait in picked.rows], ensure_ascii=False
    ).encode()


MSGSPEC_FROM = 2000
"""How many rows :func:`listing_json` encodes with msgspec instead of ``json`` (measured on 10,000 runs: ``json``
took about 2.5 µs a row, msgspec about 1 µs after its import)."""


def _json_of(
    values: tuple[Any, ...], wait: WaitSummary | None, usage_of: Callable[[str], Any]
) -> dict[str, Any]:
    """``RunSummary.to_json()`` of a raw row, as :func:`find_runs` would build it (``sizeBytes``: never asked)."""
    node, phase = split_place(values[At.PLACE])
    line = values[At.DAMAGE]
    usage = values[At.USAGE]
    schedule = values[At.SCHEDULE]
    return {
        "runId": values[At.RUN_ID],
        "workflowName": values[At.WORKFLOW],
        "runTitle": values[At.TITLE],
        "status": values[At.STATUS],
        "startedAt": from_ms(values[At.STARTED]),
        "finishedAt": from_ms(values[At.FINISHED]),
        "currentNode": node,
        "currentPhase": phase,
        "damage": line_damage("trace.ndjson", line).to_json() if line is not None else None,
        "usage": usage_of(usage) if usage else None,
        "wait": wait.to_json() if wait is not None else None,
        "parentRunId": values[At.PARENT],
        "schedule": {"name": schedule, "fireAt": from_ms(values[At.FIRE_AT])} if schedule else None,
        "sizeBytes": None,
    }


class _NotForMsgspec(Exception):
    """A usage text msgspec cannot pass through (``NaN``, ``Infinity``): the listing is encoded by ``json``."""


def _raw_usage(text: str) -> Any:
    """A stored usage text as msgspec is to write it back (see :func:`listing_json`)."""
    import msgspec

    if "NaN" in text or "Infinity" in text:
        raise _NotForMsgspec
    if "\\" in text:  # (json's escapes: \u00fc would stay escaped, where json.dumps writes ü)
        import json

        return msgspec.Raw(json.dumps(json.loads(text), ensure_ascii=False).encode())
    return msgspec.Raw(text.encode())


def _run_database(home: Path) -> RunDatabase:
    """The queue and decision records, for the waiting and running rows of a listing only: a list of finished runs
    does not import them (``piw runs`` start-up, ``bench/bench_runs_filters.py``)."""
    from piw.store.db.run_database import open_run_database

    return open_run_database(home)


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
