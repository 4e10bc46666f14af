"""Schedules and their fires in the run database (``docs/schedules.md``).

Two tables, written through the shared dialect so PostgreSQL (``piw.store.pg.schedules``, every host of a database
sees the same schedules) runs the same statements:

- ``schedules``: one row per schedule; ``cursor_at`` is the newest fire instant already handled, so a fire is
  decided once even when several hosts look at the schedule at the same moment;
- ``schedule_fires``: one row per ``(schedule, fire instant)`` that was decided — run (``claimed`` → ``started``),
  ``missed``, ``skipped`` (overlap), ``queued`` (overlap: waiting for the previous run), ``held`` (a backlog beyond
  ``--max-backlog``: nothing spent) or ``failed``. The primary key is the claim: the host whose insert (or takeover
  of an expired claim) succeeds starts the fire, and the run it queues carries the idempotency key
  ``schedule:<name>:<fire ms>``, so a host restarted mid-fire adopts the run it had queued instead of starting
  a second one.

:meth:`SqliteSchedules.advance` decides a schedule's due fires inside one transaction that holds the schedule row
(``BEGIN IMMEDIATE`` here, ``SELECT … FOR UPDATE`` in PostgreSQL).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from piw.errors import ScheduleExists, ScheduleNotFound
from piw.store.db.database import Database
from piw.store.db.dialect import SQLITE, Connection, Dialect, dumps, loads

CLAIM_MS = 60_000
"""How long a host's claim on a fire lasts before another host may take it over (a dead holder on the same
machine is taken over at once)."""

FIRE_STATES = ("claimed", "started", "missed", "skipped", "queued", "held", "failed")

_SCHEDULE_COLUMNS = (
    "name",
    "workflow_ref",
    "input_json",
    "timing_json",
    "missed",
    "max_backlog",
    "overlap",
    "budget",
    "title",
    "paused",
    "held_json",
    "cursor_at",
    "created_at",
    "updated_at",
)
_FIRE_COLUMNS = (
    "schedule_name",
    "fire_at",
    "state",
    "run_id",
    "claimer",
    "claim_expires_at",
    "note",
    "created_at",
    "updated_at",
)


@dataclass(frozen=True)
class ScheduleRow:
    """One schedule as stored."""

    name: str
    workflow_ref: str
    input: Any
    timing: dict[str, Any]
    missed: str
    max_backlog: int
    overlap: str
    budget: str | None
    title: str | None
    paused: bool
    held: dict[str, Any] | None
    """Set when a backlog beyond ``--max-backlog`` holds the schedule: ``{count, firstAt, lastAt}``."""
    cursor_at: int
    created_at: int
    updated_at: int

    @classmethod
    def of(cls, values: Any) -> ScheduleRow:
        row = dict(zip(_SCHEDULE_COLUMNS, values, strict=True))
        return cls(
            name=row["name"],
            workflow_ref=row["workflow_ref"],
            input=loads(row["input_json"]),
            timing=loads(row["timing_json"]),
            missed=row["missed"],
            max_backlog=int(row["max_backlog"]),
            overlap=row["overlap"],
            budget=row["budget"],
            title=row["title"],
            paused=bool(row["paused"]),
            held=loads(row["held_json"]),
            cursor_at=int(row["cursor_at"]),
            created_at=int(row["created_at"]),
            updated_at=int(row["updated_at"]),
        )


@dataclass(frozen=True)
class FireRow:
    """One decided fire of a schedule."""

    schedule_name: str
    fire_at: int
    state: str
    run_id: str | None
    claimer: str | None
    claim_expires_at: int | None
    note: str | None
    created_at: int
    updated_at: int

    @classmethod
    def of(cls, values: Any) -> FireRow:
        return cls(*values)


@dataclass(frozen=True)
class Decision:
    """What one look at a schedule decided: fires to record (instant → state, note) and the new cursor."""

    fires: dict[int, tuple[str, str | None]] = field(default_factory=dict)
    cursor_at: int | None = None
    held: dict[str, Any] | None = None
    """Hold the schedule (paused) for a backlog beyond ``--max-backlog``."""


class SqliteSchedules:
    """The schedules of a home's ``piw.sqlite``."""

    dialect: ClassVar[Dialect] = SQLITE
    lock_suffix: ClassVar[str] = ""
    """What makes a ``SELECT`` hold the row until the transaction ends (PostgreSQL: ``FOR UPDATE``; SQLite's
    ``BEGIN IMMEDIATE`` already holds the whole database)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def _sql(self, statement: str) -> str:
        return self.dialect.sql(statement)

    @contextlib.contextmanager
    def _reading(self) -> Iterator[Connection]:
        """A connection for reads: SQLite's own (no ``BEGIN IMMEDIATE``: a listing never waits for the write lock,
        and a read-only home is read); PostgreSQL overrides it with a transaction."""
        yield self.db.connection()

    # ---- the schedules ----------------------------------------------------------------------------------

    def add(self, row: ScheduleRow) -> None:
        """Store a new schedule (``ScheduleExists`` when the name is taken; nothing is changed then)."""
        values = (
            row.name,
            row.workflow_ref,
            dumps(row.input),
            dumps(row.timing),
            row.missed,
            row.max_backlog,
            row.overlap,
            row.budget,
            row.title,
            1 if row.paused else 0,
            None,
            row.cursor_at,
            row.created_at,
            row.updated_at,
        )
        with self.db.transaction() as conn:
            inserted = conn.execute(self.dialect.insert("schedules", _SCHEDULE_COLUMNS, ignore=True), values)
            if inserted.rowcount != 1:
                raise ScheduleExists(
                    f"A schedule named {row.name!r} exists; pick another name or remove it with "
                    f"'piw schedule rm {row.name}'."
                )

    def get(self, name: str) -> ScheduleRow | None:
        with self._reading() as conn:
            return self._get(conn, name)

    def _get(self, conn: Connection, name: str, lock: bool = False) -> ScheduleRow | None:
        found = conn.execute(
            self._sql(f"SELECT {', '.join(_SCHEDULE_COLUMNS)} FROM schedules WHERE name = ?")
            + (self.lock_suffix if lock else ""),
            (name,),
        ).fetchone()
        return None if found is None else ScheduleRow.of(found)

    def require(self, name: str) -> ScheduleRow:
        found = self.get(name)
        if found is None:
            raise ScheduleNotFound(f"No schedule named {name!r}; list them with 'piw schedule list'.")
        return found

    def all(self) -> list[ScheduleRow]:
        with self._reading() as conn:
            rows = conn.execute(
                f"SELECT {', '.join(_SCHEDULE_COLUMNS)} FROM schedules ORDER BY name"
            ).fetchall()
        return [ScheduleRow.of(values) for values in rows]

    def set_paused(self, name: str, paused: bool, now: int) -> ScheduleRow:
        """Pause or resume; resuming continues from ``now`` (fires while paused are not due) and lifts a hold
        (its held fires stay recorded)."""
        with self.db.transaction() as conn:
            if self._get(conn, name, lock=True) is None:
                raise ScheduleNotFound(f"No schedule named {name!r}; list them with 'piw schedule list'.")
            if paused:
                conn.execute(
                    self._sql("UPDATE schedules SET paused = 1, updated_at = ? WHERE name = ?"), (now, name)
                )
            else:
                conn.execute(
                    self._sql(
                        "UPDATE schedules SET paused = 0, held_json = NULL, "
                        "cursor_at = CASE WHEN cursor_at > ? THEN cursor_at ELSE ? END, updated_at = ? "
                        "WHERE name = ?"
                    ),
                    (now, now, now, name),
                )
            found = self._get(conn, name)
        assert found is not None
        return found

    def remove(self, name: str) -> None:
        with self.db.transaction() as conn:
            gone = conn.execute(self._sql("DELETE FROM schedules WHERE name = ?"), (name,))
            if gone.rowcount != 1:
                raise ScheduleNotFound(f"No schedule named {name!r}; list them with 'piw schedule list'.")
            conn.execute(self._sql("DELETE FROM schedule_fires WHERE schedule_name = ?"), (name,))

    # ---- deciding fires ---------------------------------------------------------------------------------

    def advance(
        self, name: str, claimer: str, now: int, decide: Callable[[ScheduleRow], Decision]
    ) -> list[FireRow]:
        """Decide ``name``'s due fires while holding its row: ``decide`` (pure) says what to record; fires it
        marks ``claimed`` are claimed by ``claimer`` (the ones another host recorded first are left alone).
        Returns the fires this call claimed, oldest first."""
        claimed: list[FireRow] = []
        with self.db.transaction() as conn:
            row = self._get(conn, name, lock=True)
            if row is None or row.paused:
                return []
            decision = decide(row)
            for fire_at, (state, note) in sorted(decision.fires.items()):
                holder = claimer if state == "claimed" else None
                expires = now + CLAIM_MS if state == "claimed" else None
                values = (name, fire_at, state, None, holder, expires, note, now, now)
                inserted = conn.execute(
                    self.dialect.insert("schedule_fires", _FIRE_COLUMNS, ignore=True), values
                )
                if inserted.rowcount == 1 and state == "claimed":
                    claimed.append(FireRow.of(values))
            if decision.cursor_at is not None and decision.cursor_at > row.cursor_at:
                conn.execute(
                    self._sql("UPDATE schedules SET cursor_at = ?, updated_at = ? WHERE name = ?"),
                    (decision.cursor_at, now, name),
                )
            if decision.held is not None:
                conn.execute(
                    self._sql(
                        "UPDATE schedules SET paused = 1, held_json = ?, updated_at = ? WHERE name = ?"
                    ),
                    (dumps(decision.held), now, name),
                )
        return claimed

    def retry_candidates(self, now: int) -> list[FireRow]:
        """Fires to look at again: ``queued`` ones (waiting on an overlap) and claims that expired."""
        with self._reading() as conn:
            rows = conn.execute(
                self._sql(
                    f"SELECT {', '.join(_FIRE_COLUMNS)} FROM schedule_fires WHERE state = 'queued' "
                    "OR state = 'claimed' ORDER BY schedule_name, fire_at"
                )
            ).fetchall()
        return [FireRow.of(values) for values in rows]

    def take(self, fire: FireRow, claimer: str, now: int) -> FireRow | None:
        """Take ``fire`` as it was read (compare and swap on its state and holder); ``None`` if it changed."""
        swapped = self._swap(
            "UPDATE schedule_fires SET state = 'claimed', claimer = ?, claim_expires_at = ?, updated_at = ? "
            "WHERE schedule_name = ? AND fire_at = ? AND state = ? AND "
            "COALESCE(claimer, '') = ? AND COALESCE(claim_expires_at, 0) = ?",
            (
                claimer,
                now + CLAIM_MS,
                now,
                fire.schedule_name,
                fire.fire_at,
                fire.state,
                fire.claimer or "",
                fire.claim_expires_at or 0,
            ),
        )
        if not swapped:
            return None
        return FireRow(
            fire.schedule_name,
            fire.fire_at,
            "claimed",
            fire.run_id,
            claimer,
            now + CLAIM_MS,
            fire.note,
            fire.created_at,
            now,
        )

    def settle(
        self,
        fire: FireRow,
        claimer: str,
        state: str,
        now: int,
        run_id: str | None = None,
        note: str | None = None,
    ) -> bool:
        """Record what became of a fire this claimer holds (``started`` with its run, ``skipped``, ``queued``,
        ``failed``); whether the claim was still ours."""
        return self._swap(
            "UPDATE schedule_fires SET state = ?, run_id = COALESCE(?, run_id), note = ?, "
            "claimer = CASE WHEN ? = 'started' THEN claimer ELSE NULL END, claim_expires_at = NULL, "
            "updated_at = ? WHERE schedule_name = ? AND fire_at = ? AND state = 'claimed' AND claimer = ?",
            (state, run_id, note, state, now, fire.schedule_name, fire.fire_at, claimer),
        )

    def _swap(self, sql: str, params: tuple[Any, ...]) -> bool:
        """One compare-and-swap update of a fire, in its own transaction: whether it changed the row."""
        with self.db.transaction() as conn:
            return conn.execute(self._sql(sql), params).rowcount == 1

    def fires(self, name: str, limit: int = 20) -> list[FireRow]:
        """The newest ``limit`` fires of ``name``, newest first."""
        return self._newest(name, "", (), limit)

    def last_started(self, name: str, before: int) -> FireRow | None:
        """The newest fire of ``name`` before ``before`` that started a run (the overlap check)."""
        found = self._newest(name, " AND fire_at < ? AND run_id IS NOT NULL", (before,), 1)
        return found[0] if found else None

    def _newest(self, name: str, where: str, params: tuple[Any, ...], limit: int) -> list[FireRow]:
        """Up to ``limit`` fires of ``name`` that also match ``where`` (`` AND …``), newest first."""
        with self._reading() as conn:
            rows = conn.execute(
                self._sql(
                    f"SELECT {', '.join(_FIRE_COLUMNS)} FROM schedule_fires WHERE schedule_name = ?{where} "
                    "ORDER BY fire_at DESC LIMIT ?"
                ),
                (name, *params, limit),
            ).fetchall()
        return [FireRow.of(values) for values in rows]
