"""The run queue protocol: claims, leases, fencing, park and release (``persistence.md`` §10.2).

One small interface, :class:`RunQueue`, with :class:`SqliteQueue` (``piw.sqlite``) as its first implementation;
a PostgreSQL one for many machines can come later and must pass the same suite (``tests/store/db/test_queue.py`` is
parametrised by implementation).

The rules every implementation keeps:

- A *claim* is ``(token, generation)`` on one row. ``claim_next``/``claim_run`` take a row whose claim is not live
  (queued, parked, or a ``starting``/``running`` row whose lease expired or whose holder on this host is dead) and
  give it a fresh token and ``generation + 1``: recovery always takes a new generation.
- A lease lasts :data:`LEASE_MS` and the holder renews it every :data:`RENEW_MS`; an expired claim never renews.
- :meth:`RunQueue.fence` checks a claim against the row: same token and generation, status ``starting``/
  ``running``, lease not expired; else ``ClaimLost(reason)``.
- Only the holder of a live claim changes its row's token, generation or status; everyone else only sets the
  ``pause_requested``/``cancel_requested`` flags, which the holder polls. (``piw.store.db.lease`` relies on this to
  fence cheaply.)
- A final row (``done``, ``failed``, ``cancelled``) is never claimed again and its ``input_json`` is cleared.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import sqlite3
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from piw.errors import ClaimLost, RunFinished, RunLocked, RunNotFound
from piw.store.db import decisions, outbox
from piw.store.db.database import Clock, Database, now_ms, open_database
from piw.store.db.decisions import AnswerRecord, DecisionRow, NewDecision, Resolution
from piw.store.db.outbox import NewNotification, NotificationRow

LEASE_MS = 30_000
RENEW_MS = 10_000
POLL_MS = 200
"""How often a holder reads its row's pause/cancel flags (the spec asks for at most every second)."""

QueueStatus = Literal["queued", "starting", "running", "parked", "done", "failed", "cancelled"]
FinalStatus = Literal["done", "failed", "cancelled"]
ParkReason = Literal["source_changed", "trace_corrupt", "needs-origin-session", "interrupted"]
QUEUE_STATUSES: tuple[str, ...] = ("queued", "starting", "running", "parked", "done", "failed", "cancelled")
FINAL_STATUSES = frozenset({"done", "failed", "cancelled"})
HELD_STATUSES = frozenset({"starting", "running"})
PARK_REASONS: tuple[str, ...] = ("source_changed", "trace_corrupt", "needs-origin-session", "interrupted")


# ---- runner identity and dead holders ------------------------------------------------------------------


def process_start_time(pid: int) -> str | None:
    """The process's start time (clock ticks since boot, from ``/proc``), ``None`` when it does not exist.

    Without ``/proc`` (not Linux) the start time is ``"?"`` for any existing process, so a dead holder is
    still recognised by its pid, though a reused pid then looks alive until the lease expires.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return None
    except OSError:
        return _exists(pid)
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    fields = data[data.rfind(b")") + 2 :].split()
    return fields[19].decode("ascii") if len(fields) > 19 else "?"


def _exists(pid: int) -> str | None:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return "?"
    return "?"


def runner_id(pid: int | None = None) -> str:
    """``{hostname}:{pid}:{process start time}``: who holds a claim, precise enough to tell it died."""
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}:{pid}:{process_start_time(pid) or '?'}"


def claim_is_live(status: object, expires: object, holder: object, now: int) -> bool:
    """A queue row's claim is held by a process that may still be writing: a held status, a lease that has not
    expired, and a holder not known to be dead (values as read from the row, of any type)."""
    return (
        status in HELD_STATUSES
        and isinstance(expires, int)
        and expires > now
        and not holder_is_dead(holder if isinstance(holder, str) else None)
    )


def holder_is_dead(holder: str | None) -> bool:
    """True only for a holder on this host whose process is gone (or is another process with that pid)."""
    if not holder:
        return True
    parts = holder.rsplit(":", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return False
    host, pid_text, started = parts
    if host != socket.gethostname():
        return False  # a holder on another host is only ever taken over by expiry
    now_started = process_start_time(int(pid_text))
    if now_started is None:
        return True
    return "?" not in (started, now_started) and started != now_started


# ---- records ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """A claim on one queue row, as its holder knows it. ``expires_at`` is the lease deadline the holder set."""

    run_id: str
    token: str
    generation: int
    runner_id: str
    expires_at: int
    taken_from: str | None = None
    """The previous holder when this claim took over an expired or dead one (its shell groups may linger)."""


@dataclass(frozen=True)
class QueueRow:
    """One ``run_queue`` row."""

    run_id: str
    status: str
    workflow_ref: str | None = None
    workflow_source: dict[str, Any] | None = None
    definition_digest: str | None = None
    input: Any = None
    options: dict[str, Any] = field(default_factory=dict)
    claim_token: str | None = None
    claim_generation: int = 0
    claim_expires_at: int | None = None
    runner_id: str | None = None
    available_at: int = 0
    affinity_runner_id: str | None = None
    origin_session_id: str | None = None
    park_reason: str | None = None
    pause_requested: bool = False
    cancel_requested: bool = False
    parent_run_id: str | None = None
    error_message: str | None = None
    created_at: int | None = None
    updated_at: int | None = None

    @property
    def is_final(self) -> bool:
        return self.status in FINAL_STATUSES

    def has_live_claim(self, now: int) -> bool:
        """Held by a process that may still be writing (:func:`claim_is_live`)."""
        return claim_is_live(self.status, self.claim_expires_at, self.runner_id, now)

    def held_for_another(self, now: int, me: str) -> bool:
        """Queued and held (until ``available_at``) for the live process named by ``affinity_runner_id``, which is
        not ``me``: a continuation waiting for the foreground process whose answer won to claim it by name."""
        held_for = self.affinity_runner_id  # None: held for nobody (holder_is_dead(None) is true)
        return (
            self.status == "queued"
            and self.available_at > now
            and held_for != me
            and not holder_is_dead(held_for)
        )


@dataclass(frozen=True)
class ClaimCheck:
    """What a fence read returns to the holder: the row's status and the flags others may have set."""

    status: str
    pause_requested: bool
    cancel_requested: bool


@dataclass(frozen=True)
class StartKey:
    """``piw run --idempotency-key``: the key, and the SHA-256 of the canonical start request it guards."""

    key: str
    fingerprint: str


class StartAdopted(Exception):  # a signal, not an error: the repeat adopts the run the key started
    """A repeated start with the same key and request: nothing new is created; ``run_id`` is the original run."""

    def __init__(self, run_id: str) -> None:
        super().__init__(run_id)
        self.run_id = run_id


@dataclass(frozen=True)
class NewRun:
    """What a queue row is created with: enough for a host to (re)create the bundle and run it."""

    run_id: str
    workflow_ref: str
    workflow_source: dict[str, Any]
    definition_digest: str
    input: Any
    options: dict[str, Any] = field(default_factory=dict)
    origin_session_id: str | None = None
    parent_run_id: str | None = None
    affinity_runner_id: str | None = None
    available_at: int | None = None
    start_key: StartKey | None = None
    """Recorded in ``idempotency`` (scope ``run.start``) in the row's own transaction (persistence §10.3)."""


# ---- the protocol -------------------------------------------------------------------------------------


class RunQueue(Protocol):
    """Claims, leases and fencing of runs (and, in their own section, the outbox, decisions, idempotency)."""

    clock: Clock

    def enqueue(self, run: NewRun, *, claim_for: str | None = None) -> Claim | None:
        """Insert a row: ``queued``, or already claimed (``starting``) by ``claim_for`` (a foreground run).

        With ``run.start_key`` the key is recorded in the same transaction: a repeat with the same request raises
        :class:`StartAdopted` (the original run), a different one ``IdempotencyConflict``; neither inserts a row.
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
        """Extend a live lease by ``LEASE_MS``; ``ClaimLost`` when it expired or changed (never renews)."""
        ...

    def fence(self, claim: Claim) -> ClaimCheck:
        """Check a claim against its row (``ClaimLost(reason)`` otherwise); returns the row's flags."""
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
        """Set an unclaimed (or dead-held) row final without claiming it, e.g. cancelling a waiting run."""
        ...

    def cancel_waiting(self, run_id: str) -> QueueRow:
        """Cancel a run that ended ``waiting`` (row ``done``): the row becomes ``cancelled``; the bundle is final.

        Part B turns the run's open human decision into a ``cancelled`` tombstone in the same transaction."""
        ...

    def reopen(self, run_id: str) -> None:
        """A final row whose trace has no terminal event after all (its last line was torn, e.g. by power loss):
        the trace is the truth, so the row goes back to ``parked`` for ``piw resume`` to claim."""
        ...

    def request_pause(self, run_id: str) -> QueueRow: ...

    def clear_pause(self, run_id: str) -> None: ...

    def request_cancel(self, run_id: str) -> QueueRow: ...

    def set_options(self, run_id: str, options: dict[str, Any]) -> None: ...

    # ---- part B (owner: `decisions`): outbox, decisions, idempotency (piw.store.db.outbox / .decisions) --------

    def queue_notification(self, item: NewNotification) -> NotificationRow:
        """``INSERT OR IGNORE`` then read back: the first content recorded for a notification id wins."""
        ...

    def notifications_of(self, run_id: str) -> list[NotificationRow]: ...

    def lease_notifications(
        self,
        *,
        run_id: str | None = None,
        untargeted: bool = False,
        only: Collection[str] | None = None,
        limit: int = 100,
    ) -> list[NotificationRow]:
        """Take a 30 s delivery lease on undelivered rows (of one run, or with no target session)."""
        ...

    def mark_delivered(self, notification_id: str, token: str) -> bool: ...

    def open_decision(self, decision: NewDecision) -> DecisionRow:
        """Record an opened gate unless it exists (a rerun adopts the recorded request and deadline)."""
        ...

    def get_decision(self, decision_id: str) -> DecisionRow | None: ...

    def decisions_of(self, run_id: str) -> list[DecisionRow]: ...

    def due_decisions(self, now: int | None = None) -> list[DecisionRow]: ...

    def cancel_decisions(self, run_id: str, answered_by: str = "") -> int:
        """Open decisions of a cancelled waiting run become ``cancelled`` tombstones."""
        ...

    def resolve_answer(self, record: AnswerRecord) -> Resolution:
        """First valid answer wins: decision row, continuation queue row and idempotency in one transaction."""
        ...

    def idempotent_receipt(
        self, scope: str, key: str, fingerprint: str
    ) -> tuple[Literal["none", "adopted", "conflict"], dict[str, Any] | None]: ...

    def continuation_of(self, parent_run_id: str) -> QueueRow | None:
        """The one continuation row of a waiting run, if it was answered."""
        ...


# ---- SQLite -------------------------------------------------------------------------------------------

_COLUMNS = (
    "run_id, status, workflow_ref, workflow_source_json, definition_digest, input_json, options_json, "
    "claim_token, claim_generation, claim_expires_at, runner_id, available_at, affinity_runner_id, "
    "origin_session_id, park_reason, pause_requested, cancel_requested, parent_run_id, error_message, "
    "created_at, updated_at"
)


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _row(values: tuple[Any, ...]) -> QueueRow:
    (run_id, status, ref, source, digest, input_json, options, token, generation, expires, runner,
     available, affinity, origin, park, pause, cancel, parent, error, created, updated) = values  # fmt: skip
    return QueueRow(
        run_id=run_id,
        status=status,
        workflow_ref=ref,
        workflow_source=_loads(source),
        definition_digest=digest,
        input=_loads(input_json),
        options=_loads(options) or {},
        claim_token=token,
        claim_generation=int(generation or 0),
        claim_expires_at=expires,
        runner_id=runner,
        available_at=int(available or 0),
        affinity_runner_id=affinity,
        origin_session_id=origin,
        park_reason=park,
        pause_requested=bool(pause),
        cancel_requested=bool(cancel),
        parent_run_id=parent,
        error_message=error,
        created_at=created,
        updated_at=updated,
    )


class SqliteQueue:
    """:class:`RunQueue` over ``piw.sqlite``: every mutation one ``BEGIN IMMEDIATE`` transaction."""

    def __init__(self, db: Database, clock: Clock = now_ms) -> None:
        self.db = db
        self.clock = clock

    @classmethod
    def open(cls, home: Path, clock: Clock = now_ms) -> SqliteQueue:
        return cls(open_database(home), clock)

    # ---- rows ---------------------------------------------------------------------------------------

    def _get(self, conn: sqlite3.Connection, run_id: str) -> QueueRow | None:
        found = conn.execute(f"SELECT {_COLUMNS} FROM run_queue WHERE run_id = ?", (run_id,)).fetchone()
        return None if found is None else _row(found)

    def get(self, run_id: str) -> QueueRow | None:
        return self._get(self.db.connection(), run_id)

    def rows(self, run_ids: Iterable[str] | None = None) -> dict[str, QueueRow]:
        conn = self.db.connection()
        if run_ids is None:
            found = conn.execute(f"SELECT {_COLUMNS} FROM run_queue").fetchall()
        else:
            wanted = list(run_ids)
            found = []
            for start in range(0, len(wanted), 500):
                chunk = wanted[start : start + 500]
                marks = ",".join("?" * len(chunk))
                found += conn.execute(
                    f"SELECT {_COLUMNS} FROM run_queue WHERE run_id IN ({marks})", chunk
                ).fetchall()
        return {values[0]: _row(values) for values in found}

    def _insert(self, conn: sqlite3.Connection, run: NewRun, status: str, now: int, *, ignore: bool) -> int:
        verb = "INSERT OR IGNORE" if ignore else "INSERT"
        cursor = conn.execute(
            f"{verb} INTO run_queue (run_id, workflow_ref, workflow_source_json, definition_digest, input_json, "
            "options_json, status, available_at, affinity_runner_id, origin_session_id, parent_run_id, "
            "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                run.run_id,
                run.workflow_ref,
                _dumps(run.workflow_source),
                run.definition_digest,
                _dumps(run.input),
                _dumps(run.options),
                status,
                now if run.available_at is None else run.available_at,
                run.affinity_runner_id,
                run.origin_session_id,
                run.parent_run_id,
                now,
                now,
            ),
        )
        return cursor.rowcount

    def enqueue(self, run: NewRun, *, claim_for: str | None = None) -> Claim | None:
        now = self.clock()
        with self.db.transaction() as conn:
            if run.start_key is not None:
                decisions.guard_start(conn, run.start_key, run.run_id, now)
            self._insert(conn, run, "queued", now, ignore=False)
            if claim_for is None:
                return None
            return self._take(conn, run.run_id, claim_for, 0, now)

    def ensure(self, run: NewRun, status: QueueStatus = "parked") -> None:
        now = self.clock()
        with self.db.transaction() as conn:
            self._insert(conn, run, status, now, ignore=True)

    def set_options(self, run_id: str, options: dict[str, Any]) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE run_queue SET options_json = ?, updated_at = ? WHERE run_id = ?",
                (_dumps(options), self.clock(), run_id),
            )

    # ---- claims -------------------------------------------------------------------------------------

    def _take(
        self,
        conn: sqlite3.Connection,
        run_id: str,
        runner: str,
        generation: int,
        now: int,
        taken_from: str | None = None,
    ) -> Claim:
        token = secrets.token_hex(16)
        expires = now + LEASE_MS
        conn.execute(
            "UPDATE run_queue SET status = 'starting', claim_token = ?, claim_generation = ?, "
            "claim_expires_at = ?, runner_id = ?, park_reason = NULL, updated_at = ? WHERE run_id = ?",
            (token, generation + 1, expires, runner, now, run_id),
        )
        return Claim(run_id, token, generation + 1, runner, expires, taken_from)

    def claim_next(self, runner: str) -> Claim | None:
        now = self.clock()
        with self.db.transaction() as conn:
            candidates = conn.execute(
                "SELECT run_id, status, claim_generation, claim_expires_at, runner_id FROM run_queue "
                "WHERE (status IN ('queued', 'parked') AND available_at <= ? AND pause_requested = 0 "
                "       AND cancel_requested = 0 AND park_reason IS NULL) "
                "   OR (status IN ('starting', 'running') AND pause_requested = 0 AND cancel_requested = 0) "
                "ORDER BY CASE WHEN affinity_runner_id = ? THEN 0 ELSE 1 END, created_at, run_id",
                (now, runner),
            ).fetchall()
            for run_id, status, generation, expires, holder in candidates:
                if claim_is_live(status, expires, holder, now):
                    continue  # a live lease
                return self._take(conn, run_id, runner, int(generation or 0), now, holder)
        return None

    def claim_run(self, run_id: str, runner: str) -> Claim:
        now = self.clock()
        with self.db.transaction() as conn:
            row = self._get(conn, run_id)
            if row is None:
                raise RunNotFound(f"Run {run_id} is not in the run queue.")
            if row.is_final:
                raise RunFinished(f"Run {run_id} already ended ({row.status} in the run queue).")
            if row.has_live_claim(now):
                raise RunLocked(
                    f"Run {run_id} is being run by another piw process ({row.runner_id}); wait for it, or stop "
                    f"it with 'piw cancel {run_id}'."
                )
            return self._take(conn, run_id, runner, row.claim_generation, now, row.runner_id)

    def renew(self, claim: Claim) -> Claim:
        now = self.clock()
        expires = now + LEASE_MS
        with self.db.transaction() as conn:
            cursor = conn.execute(
                "UPDATE run_queue SET claim_expires_at = ?, updated_at = ? WHERE run_id = ? AND claim_token = ? "
                "AND claim_generation = ? AND status IN ('starting', 'running') AND claim_expires_at > ?",
                (expires, now, claim.run_id, claim.token, claim.generation, now),
            )
            if cursor.rowcount != 1:
                raise ClaimLost(self._reason(self._get(conn, claim.run_id), claim, now))
        return Claim(claim.run_id, claim.token, claim.generation, claim.runner_id, expires, claim.taken_from)

    @staticmethod
    def _reason(row: QueueRow | None, claim: Claim, now: int) -> str:
        if row is None:
            return "missing"
        if row.claim_generation != claim.generation:
            return "generation_changed"
        if row.claim_token != claim.token:
            return "token_changed"
        if row.status not in HELD_STATUSES:
            return "status_changed"
        if row.claim_expires_at is None or row.claim_expires_at <= now:
            return "expired"
        return ""

    def fence(self, claim: Claim) -> ClaimCheck:
        now = self.clock()
        found = (
            self.db.connection()
            .execute(
                "SELECT claim_token, claim_generation, status, claim_expires_at, pause_requested, cancel_requested "
                "FROM run_queue WHERE run_id = ?",
                (claim.run_id,),
            )
            .fetchone()
        )
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

    def _held(self, conn: sqlite3.Connection, claim: Claim, sql: str, params: tuple[Any, ...]) -> None:
        """Run an update of the holder's own row, guarded by its token and generation."""
        cursor = conn.execute(
            sql + " WHERE run_id = ? AND claim_token = ? AND claim_generation = ?",
            (*params, claim.run_id, claim.token, claim.generation),
        )
        if cursor.rowcount != 1:
            raise ClaimLost(
                self._reason(self._get(conn, claim.run_id), claim, self.clock()) or "token_changed"
            )

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
            self._held(
                conn,
                claim,
                "UPDATE run_queue SET status = ?, claim_token = NULL, claim_expires_at = NULL, runner_id = NULL, "
                "park_reason = NULL, input_json = NULL, error_message = ?, updated_at = ?",
                (status, error, now),
            )

    def finalize(self, run_id: str, status: FinalStatus, error: str | None = None) -> QueueRow | None:
        now = self.clock()
        with self.db.transaction() as conn:
            row = self._get(conn, run_id)
            if row is None or row.is_final:
                return row
            if row.has_live_claim(now):
                raise RunLocked(f"Run {run_id} is being run by another piw process ({row.runner_id}).")
            conn.execute(
                "UPDATE run_queue SET status = ?, claim_token = NULL, claim_expires_at = NULL, runner_id = NULL, "
                "park_reason = NULL, input_json = NULL, error_message = ?, updated_at = ? WHERE run_id = ?",
                (status, error, now, run_id),
            )
            return self._get(conn, run_id)

    def cancel_waiting(self, run_id: str) -> QueueRow:
        now = self.clock()
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE run_queue SET status = 'cancelled', input_json = NULL, updated_at = ? "
                "WHERE run_id = ? AND status = 'done'",
                (now, run_id),
            )
            decisions.tombstone(conn, run_id, now)  # part B: its open decision, in this same transaction
            row = self._get(conn, run_id)
        if row is None:
            raise RunNotFound(f"Run {run_id} is not in the run queue.")
        return row

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
            row = self._get(conn, run_id)
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

    # ==== part B (owner: `decisions`): notification outbox, human decisions, idempotency records =========
    # Each one BEGIN IMMEDIATE transaction; the SQL lives in piw.store.db.outbox and piw.store.db.decisions.

    def queue_notification(self, item: NewNotification) -> NotificationRow:
        return outbox.queue_notification(self, item)

    def notifications_of(self, run_id: str) -> list[NotificationRow]:
        return outbox.notifications_of(self, run_id)

    def lease_notifications(
        self,
        *,
        run_id: str | None = None,
        untargeted: bool = False,
        only: Collection[str] | None = None,
        limit: int = 100,
    ) -> list[NotificationRow]:
        return outbox.lease_notifications(self, run_id=run_id, untargeted=untargeted, only=only, limit=limit)

    def mark_delivered(self, notification_id: str, token: str) -> bool:
        return outbox.mark_delivered(self, notification_id, token)

    def open_decision(self, decision: NewDecision) -> DecisionRow:
        return decisions.open_decision(self, decision)

    def get_decision(self, decision_id: str) -> DecisionRow | None:
        return decisions.get_decision(self, decision_id)

    def decisions_of(self, run_id: str) -> list[DecisionRow]:
        return decisions.decisions_of(self, run_id)

    def due_decisions(self, now: int | None = None) -> list[DecisionRow]:
        return decisions.due_decisions(self, now)

    def cancel_decisions(self, run_id: str, answered_by: str = "") -> int:
        return decisions.cancel_decisions(self, run_id, answered_by)

    def resolve_answer(self, record: AnswerRecord) -> Resolution:
        return decisions.resolve_answer(self, record)

    def idempotent_receipt(
        self, scope: str, key: str, fingerprint: str
    ) -> tuple[Literal["none", "adopted", "conflict"], dict[str, Any] | None]:
        return decisions.idempotent_receipt(self, scope, key, fingerprint)

    def continuation_of(self, parent_run_id: str) -> QueueRow | None:
        found = (
            self.db.connection()
            .execute(f"SELECT {_COLUMNS} FROM run_queue WHERE parent_run_id = ?", (parent_run_id,))
            .fetchone()
        )
        return None if found is None else _row(found)

    # ==== end of part B ================================================================================


def open_queue(home: Path, clock: Clock = now_ms) -> RunQueue:
    """The run queue of ``home`` (SQLite, the only implementation so far)."""
    return SqliteQueue.open(home, clock)
