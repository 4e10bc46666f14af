"""The run queue protocol: claims, leases, fencing, park and release (``docs/detached.md``, "What the database holds").

One small interface, :class:`RunQueue`, with :class:`SqliteQueue` (``piw.sqlite``) as its first implementation;
a PostgreSQL one for many machines can come later and must pass the same suite (``tests/store/db/test_queue.py`` is
parametrised by implementation).

The rules every implementation keeps:

- A *claim* is ``(token, generation)`` on one row. ``claim_next``/``claim_run`` take a row whose claim is not live
  (queued, parked, or a ``starting``/``running`` row whose lease expired or whose holder on this host is dead) and
  give it a fresh token and ``generation + 1``: recovery always takes a new generation.
- A lease lasts :data:`~piw.store.db.rows.LEASE_MS` and the holder renews it every :data:`RENEW_MS`; an expired
  claim never renews.
- :meth:`RunQueue.fence` checks a claim against the row: same token and generation, status ``starting``/
  ``running``, lease not expired; else ``ClaimLost(reason)``.
- Only the holder of a live claim changes its row's token, generation or status; everyone else only sets the
  ``pause_requested``/``cancel_requested`` flags, which the holder polls. (``piw.store.db.lease`` relies on this to
  fence cheaply.)
- A final row (``done``, ``failed``, ``cancelled``) is never claimed again and its ``input_json`` is cleared.

The notification outbox and human decisions live beside the queue in the same database, each behind its own
protocol (``piw.store.db.outbox``, ``piw.store.db.decisions``); ``piw.store.db.run_database`` opens all three.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from piw.errors import ClaimLost, RunFinished, RunLocked, RunNotFound, StoreBusy
from piw.store.db.database import Clock, Database, now_ms, read_only_connection
from piw.store.db.dialect import dumps
from piw.store.db.idempotency import Adopted, guard_start
from piw.store.db.rows import (
    COLUMNS,
    HELD_STATUSES,
    LEASE_MS,
    Claim,
    FinalStatus,
    NewRun,
    ParkReason,
    QueueRow,
    QueueStatus,
    claim_is_live,
    decode_row,
    get_row,
    insert_run,
    lost_reason,
    take_claim,
)

RENEW_MS = LEASE_MS // 3
"""How often a holder renews its lease (a third of :data:`~piw.store.db.rows.LEASE_MS`: 10 s)."""
POLL_MS = 200
"""How often a holder reads its row's pause/cancel flags (at most every second, ``docs/detached.md``)."""


# ---- the protocol -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClaimCheck:
    """What a fence read returns to the holder: the row's status and the flags others may have set."""

    status: str
    pause_requested: bool
    cancel_requested: bool


def claimable(run_id: str, row: QueueRow | None, now: int) -> QueueRow:
    """The row ``claim_run`` may take, or the refusal every implementation gives: ``RunNotFound`` without a row,
    ``RunFinished`` for a final one, ``RunLocked`` while another holder's claim is live."""
    if row is None:
        raise RunNotFound(f"Run {run_id} is not in the run queue.")
    if row.is_final:
        raise RunFinished(f"Run {run_id} already ended ({row.status} in the run queue).")
    if row.has_live_claim(now):
        raise RunLocked(
            f"Run {run_id} is being run by another piw process ({row.runner_id}); wait for it, or stop "
            f"it with 'piw cancel {run_id}'."
        )
    return row


def fenced(claim: Claim, found: tuple[Any, ...] | None, now: int) -> ClaimCheck:
    """The fence's verdict on what it read of the row (``claim_token, claim_generation, status,
    claim_expires_at, pause_requested, cancel_requested``; ``None`` without a row): the row's flags while the
    claim holds, else ``ClaimLost(reason)``."""
    if found is None:
        raise ClaimLost("missing")
    token, generation, status, expires, pause, cancel = found
    if generation != claim.generation:
        raise ClaimLost("generation_changed")
    if token != claim.token:
        raise ClaimLost("token_changed")
    if status not in HELD_STATUSES:
        raise ClaimLost("status_changed")
    if expires is None or expires <= now:
        raise ClaimLost("expired")
    return ClaimCheck(status, bool(pause), bool(cancel))


class RunQueue(Protocol):
    """Claims, leases and fencing of runs."""

    clock: Clock

    def enqueue(self, run: NewRun, *, claim_for: str | None = None) -> Claim | Adopted | None:
        """Insert a row: ``queued``, or already claimed (``starting``) by ``claim_for`` (a foreground run).

        With ``run.start_key`` the key is recorded in the same transaction: a repeat with the same request returns
        :class:`~piw.store.db.idempotency.Adopted` (the original run), a different one raises
        ``IdempotencyConflict``; neither inserts a row.
        """
        ...

    def ensure(self, run: NewRun, status: QueueStatus = "parked") -> None:
        """Insert a row for a run that has none (e.g. started before the database existed); no-op otherwise."""
        ...

    def get(self, run_id: str) -> QueueRow | None: ...

    def rows(self, run_ids: Iterable[str] | None = None) -> dict[str, QueueRow]: ...

    def claim_next(self, runner: str) -> Claim | None:
        """Claim the first available row: affinity to ``runner`` first, then the oldest."""
        ...

    def claim_run(self, run_id: str, runner: str) -> Claim:
        """Claim one named row (resume, cancel); clears ``park_reason``. Raises ``RunLocked`` while another
        holder's claim is live, ``RunFinished`` for a final row, ``RunNotFound`` without a row."""
        ...

    def renew(self, claim: Claim) -> Claim:
        """Extend a live lease by ``LEASE_MS``; ``ClaimLost`` when it expired or changed (never renews),
        ``StoreBusy`` when the row cannot be written just now."""
        ...

    def fence(self, claim: Claim) -> ClaimCheck:
        """Check a claim against its row (``ClaimLost(reason)`` otherwise); returns the row's flags. ``StoreBusy``
        when the row cannot be read just now (the holder tries again)."""
        ...

    def mark_running(self, claim: Claim) -> None: ...

    def park(
        self, claim: Claim, reason: ParkReason | None = None, *, delay_ms: int = 0, error: str | None = None
    ) -> None:
        """Clear the claim and leave the row ``parked`` (claimable after ``delay_ms`` unless ``reason``)."""
        ...

    def requeue(self, claim: Claim) -> None:
        """Clear the claim and leave the row ``queued`` for a host (``piw run --detach`` after ``run_started``)."""
        ...

    def release(self, claim: Claim, status: FinalStatus, error: str | None = None) -> None:
        """Clear the claim with a final status; ``input_json`` is cleared."""
        ...

    def finalize(self, run_id: str, status: FinalStatus, error: str | None = None) -> QueueRow | None:
        """Set an unclaimed (or dead-held) row final without claiming it."""
        ...

    def reopen(self, run_id: str) -> None:
        """A final row whose trace has no terminal event after all (its last line was torn, e.g. by power loss):
        the trace is the truth, so the row goes back to ``parked`` for ``piw resume`` to claim."""
        ...

    def request_pause(self, run_id: str) -> QueueRow: ...

    def clear_pause(self, run_id: str) -> None: ...

    def request_cancel(self, run_id: str) -> QueueRow: ...

    def set_options(self, run_id: str, options: dict[str, Any]) -> None: ...


# ---- SQLite -------------------------------------------------------------------------------------------


_CANDIDATE_COLUMNS = (
    "run_id, status, claim_generation, claim_expires_at, runner_id, "
    "CASE WHEN affinity_runner_id = ? THEN 0 ELSE 1 END, created_at"
)
_CLAIM_ORDER = "ORDER BY 6, created_at, run_id"
"""Claim order: rows with affinity to the claiming runner first, then the oldest (``created_at``, then ``run_id``)."""


def _claim_order_key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """:data:`_CLAIM_ORDER` in Python, SQLite's way: a NULL ``created_at`` sorts first."""
    return (row[5], row[6] is not None, row[6] or 0, row[0])


def _live(row: tuple[Any, ...], runner: str, now: int) -> bool:
    """A held row's claim is live; the claimer's own unexpired claims without a look at ``/proc`` (it runs)."""
    _run_id, status, _generation, expires, holder, *_ = row
    if holder == runner and isinstance(expires, int) and expires > now and status in HELD_STATUSES:
        return True
    return claim_is_live(status, expires, holder, now)


class SqliteQueue:
    """:class:`RunQueue` over ``piw.sqlite``: every mutation one ``BEGIN IMMEDIATE`` transaction."""

    def __init__(self, db: Database, clock: Clock = now_ms) -> None:
        self.db = db
        self.clock = clock

    # ---- rows ---------------------------------------------------------------------------------------

    def get(self, run_id: str) -> QueueRow | None:
        return get_row(self.db.connection(), run_id)

    def rows(self, run_ids: Iterable[str] | None = None) -> dict[str, QueueRow]:
        conn = self.db.connection()
        if run_ids is None:
            found = conn.execute(f"SELECT {COLUMNS} FROM run_queue").fetchall()
        else:
            wanted = list(run_ids)
            found = []
            for start in range(0, len(wanted), 500):
                chunk = wanted[start : start + 500]
                marks = ",".join("?" * len(chunk))
                found += conn.execute(
                    f"SELECT {COLUMNS} FROM run_queue WHERE run_id IN ({marks})", chunk
                ).fetchall()
        return {values[0]: decode_row(values) for values in found}

    def enqueue(self, run: NewRun, *, claim_for: str | None = None) -> Claim | Adopted | None:
        now = self.clock()
        with self.db.transaction() as conn:
            if run.start_key is not None:
                adopted = guard_start(conn, run.start_key, run.run_id, now)
                if adopted is not None:
                    return adopted  # (the transaction wrote nothing)
            insert_run(conn, run, "queued", now, ignore=False)
            if claim_for is None:
                return None
            return take_claim(conn, run.run_id, claim_for, 0, now)

    def ensure(self, run: NewRun, status: QueueStatus = "parked") -> None:
        now = self.clock()
        with self.db.transaction() as conn:
            insert_run(conn, run, status, now, ignore=True)

    def restore_claim(self, run: NewRun, claim: Claim) -> None:
        """Put back the row of a run this process holds, with its claim as it stands, into a database that lost it
        (deleted under a running host): the holder's lease and fence go on as if nothing happened. SQLite only."""
        now = self.clock()
        with self.db.transaction() as conn:
            insert_run(conn, run, "running", now, ignore=True)
            conn.execute(
                "UPDATE run_queue SET status = 'running', claim_token = ?, claim_generation = ?, "
                "claim_expires_at = ?, runner_id = ?, park_reason = NULL, updated_at = ? WHERE run_id = ?",
                (claim.token, claim.generation, claim.expires_at, claim.runner_id, now, claim.run_id),
            )

    def set_options(self, run_id: str, options: dict[str, Any]) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE run_queue SET options_json = ?, updated_at = ? WHERE run_id = ?",
                (dumps(options), self.clock(), run_id),
            )

    # ---- claims -------------------------------------------------------------------------------------

    def claim_next(self, runner: str) -> Claim | None:
        # Two small reads instead of every candidate row: the first waiting row in claim order (SQLite sorts, one
        # row comes back), and the held rows (a few per host), of which only expired or dead-held ones compete.
        # The winner is the first of those in the same order, as one ordered scan of both kinds would find.
        now = self.clock()
        with self.db.transaction() as conn:
            waiting = conn.execute(
                f"SELECT {_CANDIDATE_COLUMNS} FROM run_queue WHERE status IN ('queued', 'parked') "
                "AND available_at <= ? AND pause_requested = 0 AND cancel_requested = 0 "
                f"AND (park_reason IS NULL OR park_reason = 'disk_full') {_CLAIM_ORDER} LIMIT 1",
                (runner, now),
            ).fetchall()
            held = conn.execute(
                f"SELECT {_CANDIDATE_COLUMNS} FROM run_queue WHERE status IN ('starting', 'running') "
                "AND pause_requested = 0 AND cancel_requested = 0",
                (runner,),
            ).fetchall()
            free = [row for row in held if not _live(row, runner, now)]
            candidates = waiting + free
            if not candidates:
                return None
            run_id, _status, generation, _expires, holder, *_ = min(candidates, key=_claim_order_key)
            return take_claim(conn, run_id, runner, int(generation or 0), now, holder)

    def claim_run(self, run_id: str, runner: str) -> Claim:
        now = self.clock()
        with self.db.transaction() as conn:
            row = claimable(run_id, get_row(conn, run_id), now)
            return take_claim(conn, run_id, runner, row.claim_generation, now, row.runner_id)

    def renew(self, claim: Claim) -> Claim:
        now = self.clock()
        expires = now + LEASE_MS
        try:
            with self.db.transaction() as conn:
                cursor = conn.execute(
                    "UPDATE run_queue SET claim_expires_at = ?, updated_at = ? WHERE run_id = ? AND claim_token = ? "
                    "AND claim_generation = ? AND status IN ('starting', 'running') AND claim_expires_at > ?",
                    (expires, now, claim.run_id, claim.token, claim.generation, now),
                )
                if cursor.rowcount != 1:
                    raise ClaimLost(lost_reason(get_row(conn, claim.run_id), claim, now))
        except sqlite3.Error as exc:
            raise StoreBusy(f"The run queue could not renew run {claim.run_id}'s lease: {exc}") from exc
        return Claim(claim.run_id, claim.token, claim.generation, claim.runner_id, expires, claim.taken_from)

    def fence(self, claim: Claim) -> ClaimCheck:
        now = self.clock()
        try:
            found = (
                self.db.connection()
                .execute(
                    "SELECT claim_token, claim_generation, status, claim_expires_at, pause_requested, "
                    "cancel_requested FROM run_queue WHERE run_id = ?",
                    (claim.run_id,),
                )
                .fetchone()
            )
        except sqlite3.Error as exc:
            raise StoreBusy(f"The run queue could not check run {claim.run_id}'s claim: {exc}") from exc
        return fenced(claim, found, now)

    def _held(self, conn: sqlite3.Connection, claim: Claim, sql: str, params: tuple[Any, ...]) -> None:
        """Run an update of the holder's own row, guarded by its token and generation."""
        cursor = conn.execute(
            sql + " WHERE run_id = ? AND claim_token = ? AND claim_generation = ?",
            (*params, claim.run_id, claim.token, claim.generation),
        )
        if cursor.rowcount != 1:
            raise ClaimLost(lost_reason(get_row(conn, claim.run_id), claim, self.clock()) or "token_changed")

    def mark_running(self, claim: Claim) -> None:
        with self.db.transaction() as conn:
            self._held(
                conn, claim, "UPDATE run_queue SET status = 'running', updated_at = ?", (self.clock(),)
            )

    def park(
        self, claim: Claim, reason: ParkReason | None = None, *, delay_ms: int = 0, error: str | None = None
    ) -> None:
        now = self.clock()
        with self.db.transaction() as conn:
            self._held(
                conn,
                claim,
                "UPDATE run_queue SET status = 'parked', claim_token = NULL, claim_expires_at = NULL, "
                "runner_id = NULL, park_reason = ?, available_at = ?, error_message = ?, updated_at = ?",
                (reason, now + delay_ms, error, now),
            )

    def requeue(self, claim: Claim) -> None:
        now = self.clock()
        with self.db.transaction() as conn:
            self._held(
                conn,
                claim,
                "UPDATE run_queue SET status = 'queued', claim_token = NULL, claim_expires_at = NULL, "
                "runner_id = NULL, park_reason = NULL, available_at = ?, updated_at = ?",
                (now, now),
            )

    def release(self, claim: Claim, status: FinalStatus, error: str | None = None) -> None:
        now = self.clock()
        with self.db.transaction() as conn:
            self._held(conn, claim, _FINAL_UPDATE, (status, error, now))

    def finalize(self, run_id: str, status: FinalStatus, error: str | None = None) -> QueueRow | None:
        now = self.clock()
        with self.db.transaction() as conn:
            row = get_row(conn, run_id)
            if row is None or row.is_final:
                return row
            if row.has_live_claim(now):
                raise RunLocked(f"Run {run_id} is being run by another piw process ({row.runner_id}).")
            conn.execute(_FINAL_UPDATE + " WHERE run_id = ?", (status, error, now, run_id))
            return get_row(conn, run_id)

    def reopen(self, run_id: str) -> None:
        now = self.clock()
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE run_queue SET status = 'parked', park_reason = 'interrupted', updated_at = ? "
                "WHERE run_id = ? AND status IN ('done', 'failed', 'cancelled')",
                (now, run_id),
            )

    # ---- flags (set by anyone, read by the holder) --------------------------------------------------

    def _flag(self, run_id: str, column: str, value: int) -> QueueRow:
        with self.db.transaction() as conn:
            conn.execute(
                f"UPDATE run_queue SET {column} = ?, updated_at = ? WHERE run_id = ?",
                (value, self.clock(), run_id),
            )
            row = get_row(conn, run_id)
        if row is None:
            raise RunNotFound(f"Run {run_id} is not in the run queue.")
        return row

    def request_pause(self, run_id: str) -> QueueRow:
        return self._flag(run_id, "pause_requested", 1)

    def clear_pause(self, run_id: str) -> None:
        with contextlib.suppress(RunNotFound):
            self._flag(run_id, "pause_requested", 0)

    def request_cancel(self, run_id: str) -> QueueRow:
        return self._flag(run_id, "cancel_requested", 1)


_FINAL_UPDATE = (
    "UPDATE run_queue SET status = ?, claim_token = NULL, claim_expires_at = NULL, runner_id = NULL, "
    "park_reason = NULL, input_json = NULL, error_message = ?, updated_at = ?"
)
"""A row's final status, its claim and input cleared (parameters: status, error, now)."""


def read_row(home: Path, run_id: str) -> QueueRow | None:
    """One run's queue row for a reader that must not write (a viewer): read through a read-only connection that
    never creates or changes ``piw.sqlite``; ``None`` without a database or a row, or when it cannot be read."""
    conn = read_only_connection(home)
    if conn is None:
        return None
    try:
        return get_row(conn, run_id)
    except (sqlite3.Error, ValueError):  # (a foreign schema, or a JSON column that does not parse)
        return None
    finally:
        conn.close()
