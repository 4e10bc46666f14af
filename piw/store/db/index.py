"""The runs index: one summary row per run in the ``runs`` table of ``piw.sqlite`` (``docs/detached.md``).

It is a cache of what each bundle's fold says, so ``piw runs`` lists a thousand runs without folding a thousand
traces. The run writer upserts a run's row (write order step 5: a failure is logged, never fails the run);
:func:`rebuild_run_index` folds every bundle, and runs when the table is empty or the database was just created.
:func:`indexed_summaries` also reconciles the table with the ``runs/`` directory on every listing — a bundle
with no row (written while the database was unusable, or copied in) is folded and indexed, a row whose bundle is
gone is dropped, a row whose trace changed since (its size and mtime, one ``stat`` per bundle) is refolded — so
the index never hides, invents or misreports a run. The one exception is a running run whose writer holds a live
claim: that writer upserts its own row every second, so its row is listed as it stands (refolding a long running
run on every listing cost seconds and hundreds of MB). It is never used for recovery decisions.

A table that cannot be read (dropped, a malformed page, a row that does not decode) is rebuilt from the bundles and
the listing says so in one line (:mod:`piw.store.db.notices`); when it cannot even be rebuilt in place, the runs are
listed from their bundles all the same (``docs/guarantees.md``, "Database faults").
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
from collections.abc import Container, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from piw.errors import PiwError
from piw.store.db.database import Database, now_ms, open_database
from piw.store.db.ddl import create_table_sql
from piw.store.db.notices import notice
from piw.store.db.schema import INDEXES, TABLES
from piw.store.home import RUN_ID_PATTERN
from piw.store.place import runs_home
from piw.store.script_phase import place_of
from piw.wire import parse_time

if TYPE_CHECKING:  # the bundle and the fold are imported only to refold a row: a current index needs neither
    from piw.store.bundle import Bundle
    from piw.store.damage import Damage
    from piw.store.fold import RunState

log = logging.getLogger(__name__)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def to_ms(text: str | None) -> int | None:
    """A persisted timestamp as integer epoch milliseconds (exact: timestamps carry milliseconds)."""
    if not text:
        return None
    delta = parse_time(text) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def from_ms(value: int | None) -> str | None:
    """Epoch milliseconds back in the persisted timestamp format (``2026-12-01T10:35:34.123Z``).

    Put together from pieces formatted once: the date part per day, ``HH:MM:`` per minute of the day, the seconds
    and the milliseconds from tables (listing 10,000 runs formats 40,000 times; ``strftime`` was a third of it,
    then the formatting of each number was most of the listing's decode)."""
    if value is None:
        return None
    day, rest = divmod(value, 86_400_000)
    date = _DAYS.get(day)
    if date is None:
        date = time.strftime("%Y-%m-%dT", time.gmtime(day * 86_400))
        if len(_DAYS) < 100_000:
            _DAYS[day] = date
    seconds, millis = divmod(rest, 1000)
    minute, second = divmod(seconds, 60)
    clock = _MINUTES.get(minute)
    if clock is None:
        clock = _MINUTES[minute] = f"{minute // 60:02d}:{minute % 60:02d}:"
    return date + clock + _SECONDS[second] + _MILLIS[millis]


_DAYS: dict[int, str] = {}
_MINUTES: dict[int, str] = {}
"""``HH:MM:`` of each minute of the day met so far (at most 1,440)."""
_SECONDS = [f"{second:02d}." for second in range(60)]
_MILLIS = [f"{millis:03d}Z" for millis in range(1000)]


@dataclass(frozen=True)
class IndexRow:
    """One ``runs`` row, with times back in the persisted timestamp format."""

    run_id: str
    workflow_name: str
    run_title: str | None
    status: str
    paused: bool
    parent_run_id: str | None
    started_at: str | None
    updated_at: str | None
    finished_at: str | None
    trace_seq: int
    current_node: str | None
    notice: str | None = None
    cost: float | None = None
    damage_line: int | None = None
    """The first damaged line of the trace (the row shows its readable prefix), else ``None``."""
    usage: dict[str, Any] | None = None
    """The run's ``usage``, or its ``spent`` when it has a budget (``piw runs --json``)."""
    schedule_name: str | None = None
    """The schedule whose fire started the run (``docs/schedules.md``), else ``None``."""
    fire_at: str | None = None
    """That fire's time."""


COLUMN_NAMES = (
    "run_id",
    "workflow_name",
    "run_title",
    "status",
    "paused",
    "parent_run_id",
    "started_at",
    "updated_at",
    "finished_at",
    "trace_seq",
    "current_node",
    "notice",
    "cost",
    "damage_line",
    "usage_json",
    "trace_stamp",
    "search_text",
    "schedule_name",
    "fire_at",
)
"""The ``runs`` columns in the order of a raw row (:func:`indexed_values`); filters read them by position."""
POSITION = {name: index for index, name in enumerate(COLUMN_NAMES)}


class At:
    """Where a column stands in a raw row of :data:`COLUMN_NAMES`: the readers that test or encode rows without
    decoding them (``piw.store.run_query.RunQuery.keeps``, ``piw.store.history.listing_json``) index by these."""

    RUN_ID = POSITION["run_id"]
    WORKFLOW = POSITION["workflow_name"]
    TITLE = POSITION["run_title"]
    STATUS = POSITION["status"]
    PARENT = POSITION["parent_run_id"]
    STARTED = POSITION["started_at"]
    FINISHED = POSITION["finished_at"]
    PLACE = POSITION["current_node"]
    DAMAGE = POSITION["damage_line"]
    USAGE = POSITION["usage_json"]
    SEARCH = POSITION["search_text"]
    SCHEDULE = POSITION["schedule_name"]
    FIRE_AT = POSITION["fire_at"]


_COLUMNS = ", ".join(COLUMN_NAMES)
_MARKS = ", ".join("?" * len(COLUMN_NAMES))
_STAMP = POSITION["trace_stamp"]
"""Position of ``trace_stamp`` in a row: the trace's size and mtime when the row was computed."""
SEARCH_CHARS = 4000
"""How much of a run's title and input ``piw runs --search`` looks through (the input's JSON text, cut here)."""


def search_text(title: str | None, input_value: Any) -> str:
    """What ``--search`` matches: the title, then the input as JSON text (its first :data:`SEARCH_CHARS`)."""
    try:
        text = json.dumps(input_value, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError):
        text = ""
    return f"{title or ''}\n{text}"[:SEARCH_CHARS]


CONTAINS_FOLDED = "piw_contains_folded"
"""The SQL function a ``--search`` filter calls (:func:`contains_folded`): SQLite's own ``lower`` and ``LIKE`` fold
ASCII letters only, and ``Zürich`` must match ``zürich``."""


def contains_folded(text: str | None, needle: str) -> bool:
    """Whether ``text`` holds ``needle`` (already case-folded), case-folding ``text`` as ``str.casefold`` does."""
    return text is not None and needle in text.casefold()


def trace_stamp(trace: Path) -> str | None:
    """``size:mtime_ns`` of a trace file: a row whose stamp differs from the file's is refolded."""
    try:
        info = trace.stat()
    except OSError:
        return None
    return f"{info.st_size}:{info.st_mtime_ns}"


def usage_cost(usage: dict[str, Any] | None) -> float | None:
    """The run's summed USD cost, when every part of it is known."""
    cost = (usage or {}).get("cost")
    return float(cost) if isinstance(cost, int | float) and not isinstance(cost, bool) else None


def row_of_state(state: RunState, damage: Damage | None = None, stamp: str | None = None) -> tuple[Any, ...]:
    return (
        state.run_id,
        state.workflow_name,
        state.run_title,
        state.status,
        1 if state.paused else 0,
        state.parent_run_id,
        to_ms(state.started_at),
        to_ms(state.updated_at),
        to_ms(state.finished_at),
        state.trace_seq,
        place_of(state),  # the node, and a script's phase (piw.store.script_phase)
        damage.notice if damage else None,
        usage_cost(state.usage),
        damage.line if damage else None,
        _usage_json(state),
        stamp,
        search_text(state.run_title, state.input),
        (state.schedule or {}).get("name"),
        to_ms((state.schedule or {}).get("fireAt")),
    )


def _usage_json(state: RunState) -> str | None:
    usage = state.spent if state.budget else state.usage
    return json.dumps(usage, sort_keys=True, separators=(",", ":")) if usage else None


def _fold_row(bundle: Bundle) -> tuple[Any, ...] | None:
    """A bundle's row from its fold; a damaged trace gives its readable prefix with the damage.

    A current ``state.json`` is the fold already; otherwise the trace is folded by the checkpoint reader
    (:func:`piw.store.foldcache.replay`, the one ``inspect`` uses): streamed in small batches from the newest
    valid fold checkpoint, so listing a million-event run never holds its events (reading the whole trace
    into a list took about 2 GB for one such run, in ``piw runs`` and in the viewer's runs list). Read-only:
    no checkpoint or ``verified.json`` is written, so a reader of the index (``piw view``) writes no bundle.
    """
    from piw.store import foldcache
    from piw.store.bundle import current_state

    stamp = trace_stamp(
        bundle.trace_path
    )  # before reading: a line appended meanwhile makes it differ next time
    damage: Damage | None = None
    try:
        state = current_state(bundle, lazy_steps=True)  # a row shows no step: their records are never built
        if state is None:
            found = foldcache.replay(bundle.path, bundle.run_id, write=False)
            state, damage = found.state, found.damage
    except PiwError:
        return None
    if not state.run_id:
        return None  # incomplete: run_started never committed
    return row_of_state(state, damage, stamp)


def _decode(values: tuple[Any, ...]) -> IndexRow:
    (
        run_id,
        name,
        title,
        status,
        paused,
        parent,
        started,
        updated,
        finished,
        seq,
        node,
        notice,
        cost,
        line,
        usage,
        _stamp,
        _search,
        schedule_name,
        fire_at,
    ) = values
    return IndexRow(
        run_id=run_id,
        workflow_name=name,
        run_title=title,
        status=status,
        paused=bool(paused),
        parent_run_id=parent,
        started_at=from_ms(started),
        updated_at=from_ms(updated),
        finished_at=from_ms(finished),
        trace_seq=int(seq or 0),
        current_node=node,
        notice=notice,
        cost=cost,
        damage_line=line,
        usage=json.loads(usage) if usage else None,
        schedule_name=schedule_name,
        fire_at=from_ms(fire_at),
    )


def _upsert(db: Database, rows: Iterable[tuple[Any, ...]]) -> None:
    with db.transaction() as conn:
        conn.executemany(f"INSERT OR REPLACE INTO runs ({_COLUMNS}) VALUES ({_MARKS})", list(rows))


class RunIndex:
    """Upserts rows for the runs one writer records (``RunWriter.index``)."""

    def __init__(self, home: Path) -> None:
        self.home = home

    def __call__(self, state: RunState) -> None:
        if state.run_id:
            home = runs_home(self.home)  # (database mode: the mirrors' own index)
            stamp = trace_stamp(home / "runs" / state.run_id / "trace.ndjson")
            _upsert(open_database(home), [row_of_state(state, stamp=stamp)])


def rebuild_run_index(home: Path) -> int:
    """Fold every bundle and replace the ``runs`` table with what they say; returns the rows written."""
    from piw.store.bundle import list_bundles

    home = runs_home(home)
    db = open_database(home)
    rows = [row for row in (_fold_row(bundle) for bundle in list_bundles(home)) if row is not None]
    with db.transaction() as conn:
        conn.execute("DELETE FROM runs")
        conn.executemany(f"INSERT OR REPLACE INTO runs ({_COLUMNS}) VALUES ({_MARKS})", rows)
    return len(rows)


def _scan(home: Path, known: Container[str] = ()) -> dict[str, str | None]:
    """Run id → trace stamp of every bundle with a trace: one ``scandir`` and one ``stat`` per bundle.

    The same bundles as :func:`~piw.store.bundle.list_bundles` (a valid run id holding ``trace.ndjson``), read
    with plain string paths: with a thousand runs, ``pathlib`` objects and a second ``stat`` per bundle cost more
    than the listing itself. A name in ``known`` (the ids the table holds, each one a run id already) is not
    matched against the run id pattern again.
    """
    root = os.path.join(home, "runs")
    found: dict[str, str | None] = {}
    try:
        names = os.listdir(root)  # (names only: no DirEntry objects)
    except OSError:
        return found
    prefix = root + os.sep
    valid = RUN_ID_PATTERN.fullmatch
    stat = os.stat
    for name in names:
        if name[0] == "." or (name not in known and valid(name) is None):
            continue
        try:  # (string concatenation: os.path.join cost a quarter of a 10,000-run listing)
            info = stat(prefix + name + "/trace.ndjson")
        except OSError:
            continue
        found[name] = f"{info.st_size}:{info.st_mtime_ns}"
    return found


def _live_writers(conn: Any, run_ids: list[str]) -> set[str]:
    """The runs among ``run_ids`` whose queue row holds an unexpired claim of a holder not known to be dead."""
    if not run_ids:
        return set()
    from piw.store.db.rows import claim_is_live

    marks = ", ".join("?" * len(run_ids))
    try:
        found = conn.execute(
            f"SELECT run_id, status, claim_expires_at, runner_id FROM run_queue WHERE run_id IN ({marks})",
            run_ids,
        ).fetchall()
    except Exception:  # no queue table (an index-only database): every row is refolded, as before
        return set()
    now = now_ms()
    return {
        run_id for run_id, status, expires, holder in found if claim_is_live(status, expires, holder, now)
    }


def indexed_rows(home: Path) -> list[IndexRow]:
    """Every run's row, newest first, with the table reconciled against the bundles on disk (see the module).

    A read-only database (``Database.read_only``) is reconciled in memory: its rows are listed as the bundles say,
    and nothing is written. A damaged table is rebuilt from the bundles (:func:`_rebuild_damaged`)."""
    values = indexed_values(home)
    try:
        return [decode_row(row) for row in values]
    except (ValueError, TypeError) as exc:  # a row that does not decode: the table is damaged
        home = runs_home(home)
        return [decode_row(row) for row in _rebuild_damaged(open_database(home), home, exc)]


def indexed_values(home: Path) -> list[tuple[Any, ...]]:
    """:func:`indexed_rows` as raw rows (columns in :data:`COLUMN_NAMES` order), newest first: a filter reads a
    few columns of every row and decodes only the rows it keeps (``piw.store.run_query``)."""
    home = runs_home(home)
    db = open_database(home)
    try:
        return _reconciled_rows(db, home)
    except (sqlite3.DatabaseError, ValueError, TypeError) as exc:
        if isinstance(exc, sqlite3.OperationalError) and _is_busy(exc):
            raise  # busy, not damaged
        return _rebuild_damaged(db, home, exc)


RowFilter = tuple[str, tuple[Any, ...]]
"""A ``WHERE`` clause over the ``runs`` columns and its parameters (``piw.store.run_query.RunQuery.row_filter``)."""


def iter_values(
    home: Path, where: RowFilter | None = None, unread: Container[str] = ()
) -> Iterator[tuple[Any, ...]]:
    """:func:`indexed_values`, read lazily (a listing that stops early reads no further); a table found damaged
    before the first row is rebuilt from the bundles, as there.

    ``where`` lets SQLite skip rows a filter would drop, so they are neither fetched nor built as tuples. It only
    narrows: rows merged in memory or rebuilt from the bundles come unfiltered, and the caller applies its filter
    to every row it gets (``RunQuery.keeps``). The columns named in ``unread`` come as ``None`` from the table (each
    column of 10,000 rows fetched costs about 2 ms; ``trace_stamp`` and ``search_text`` are long); merged or rebuilt
    rows may still hold them."""
    home = runs_home(home)
    db = open_database(home)
    rows = _current_rows(db, home, where, unread)
    try:
        first = next(rows, None)
    except (sqlite3.DatabaseError, ValueError, TypeError) as exc:
        if isinstance(exc, sqlite3.OperationalError) and _is_busy(exc):
            raise  # busy, not damaged
        yield from _rebuild_damaged(db, home, exc)
        return
    if first is not None:
        yield first
        yield from rows


def decode_row(values: tuple[Any, ...]) -> IndexRow:
    """One raw row (:func:`indexed_values`) as an :class:`IndexRow`."""
    return _decode(values)


def _is_busy(exc: sqlite3.Error) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def _rebuild_damaged(db: Database, home: Path, exc: BaseException) -> list[tuple[Any, ...]]:
    """Fold every bundle and put the table back from them (say so); list them even if it cannot be put back."""
    from piw.store.bundle import list_bundles

    rows = [row for row in (_fold_row(bundle) for bundle in list_bundles(home)) if row is not None]
    reason = f"{type(exc).__name__}: {exc}" if isinstance(exc, ValueError | TypeError) else str(exc)
    try:
        _replace_table(db, rows)
    except Exception as failed:
        notice(
            f"the runs index in {db.path} is damaged ({reason}) and could not be rebuilt ({failed}); listing the "
            f"{len(rows)} runs from their bundles, which are intact."
        )
    else:
        notice(
            f"the runs index in {db.path} was damaged ({reason}); rebuilt it from the {len(rows)} run bundles."
        )
    return sorted(rows, key=lambda row: row[0], reverse=True)


def _replace_table(db: Database, rows: list[tuple[Any, ...]]) -> None:
    """Drop the ``runs`` table and create it anew (same definition), filled with ``rows``."""
    spec = TABLES["runs"]
    with db.transaction() as conn:
        conn.execute("DROP TABLE IF EXISTS runs")
        conn.execute(create_table_sql("runs", spec))
        for statement in INDEXES:
            if " ON runs(" in statement:
                conn.execute(statement)
        conn.executemany(f"INSERT OR REPLACE INTO runs ({_COLUMNS}) VALUES ({_MARKS})", rows)


def _reconciled_rows(db: Database, home: Path) -> list[tuple[Any, ...]]:
    return list(_current_rows(db, home))


def _current_rows(
    db: Database, home: Path, where: RowFilter | None = None, unread: Container[str] = ()
) -> Iterator[tuple[Any, ...]]:
    """The table reconciled with the bundles (:func:`_reconcile`), then its rows newest first, read lazily: the
    reconciliation reads three columns of each row, and a listing that stops early (``--limit``) decodes and
    fetches no more than it shows. A table that cannot be written is listed as reconciled in memory."""
    conn = db.connection()
    if not db.read_only and (
        getattr(db, "created", False) or conn.execute("SELECT 1 FROM runs LIMIT 1").fetchone() is None
    ):
        rebuild_run_index(home)
        db.created = False
    heads = {run_id: (status, stamp) for run_id, status, stamp in conn.execute(_HEADS).fetchall()}
    stamps = _scan(home, heads)
    fresh, gone = _reconcile(home, conn, heads, stamps)
    written = not (fresh or gone)
    if not written and not db.read_only:
        try:
            with db.transaction() as write:
                write.executemany("DELETE FROM runs WHERE run_id = ?", [(run_id,) for run_id in gone])
                write.executemany(f"INSERT OR REPLACE INTO runs ({_COLUMNS}) VALUES ({_MARKS})", fresh)
            written = True
        except Exception as exc:  # a cache: list what we know even if it cannot be written
            log.warning("runs index not reconciled: %s", exc)
    if not written:  # merged in memory
        rows = {values[0]: values for values in conn.execute(f"SELECT {_COLUMNS} FROM runs").fetchall()}
        for run_id in gone:
            rows.pop(run_id, None)
        rows.update((row[0], row) for row in fresh)
        yield from (rows[run_id] for run_id in sorted(rows, reverse=True))
        return
    columns = ", ".join("NULL" if name in unread else name for name in COLUMN_NAMES) if unread else _COLUMNS
    if where is None:
        cursor = conn.execute(f"SELECT {columns} FROM runs ORDER BY run_id DESC")
    else:
        conn.create_function(CONTAINS_FOLDED, 2, contains_folded, deterministic=True)
        cursor = conn.execute(f"SELECT {columns} FROM runs WHERE {where[0]} ORDER BY run_id DESC", where[1])
    while batch := cursor.fetchmany(_BATCH):
        yield from batch


_HEADS = "SELECT run_id, status, trace_stamp FROM runs"
_BATCH = 200


def _reconcile(
    home: Path, conn: Any, rows: dict[str, tuple[Any, Any]], stamps: dict[str, str | None]
) -> tuple[list[tuple[Any, ...]], list[str]]:
    """The rows to write (bundles without a row, rows whose trace changed) and the rows whose bundle is gone;
    ``rows`` maps each run id in the table to its ``(status, trace_stamp)``."""
    missing_ids = stamps.keys() - rows.keys()
    gone = [run_id for run_id in rows.keys() - stamps.keys()]
    # A row is refolded when its trace changed since it was computed (one stat per bundle): a running run's
    # row lags its trace by up to a second (the writer coalesces upserts), a crashed writer never caught up,
    # and a trace damaged or repaired behind the index's back must not be listed from the old row.
    changed_ids = [
        run_id for run_id, values in rows.items() if run_id in stamps and values[1] != stamps[run_id]
    ]
    # ... except a running run whose writer is alive: it upserts its own row every second (writer.py
    # INDEX_INTERVAL_S), and refolding a long run's row on every listing cost ~1.5 s and ~300 MB each time.
    maintained = _live_writers(conn, [run_id for run_id in changed_ids if rows[run_id][0] == "running"])
    refold = [*missing_ids, *(run_id for run_id in changed_ids if run_id not in maintained)]
    fresh: list[tuple[Any, ...]] = []
    if refold:
        from piw.store.bundle import Bundle  # the fold comes with it: imported only when a row is refolded

        root = home / "runs"
        fresh = [
            row for row in (_fold_row(Bundle(run_id, root / run_id)) for run_id in refold) if row is not None
        ]
    return fresh, gone
