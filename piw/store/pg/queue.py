"""The run queue on PostgreSQL: claims with ``FOR UPDATE SKIP LOCKED``, leases on the database clock
(``docs/many-machines.md``, "Claims and leases").

The same protocol and rules as SQLite mode (:class:`~piw.store.db.queue.RunQueue`; the conformance suite runs
both), with these differences, each because several machines share the rows:

- Every time a lease is compared with or set from is ``now_ms()`` on the server, inside the statement; a host's
  clock never decides (the ``clock`` attribute is only an estimate of the server's, for values written).
- :meth:`PostgresQueue.claim_next` is one autocommit statement: it locks up to one expired held row and up to two
  ready rows (this runner's affinity, the oldest) with ``FOR UPDATE SKIP LOCKED``, so claimers never wait for
  one another, and takes the first: ``starting``, a fresh token, ``generation + 1``, a new lease. Recovery is
  exactly this claim of an expired lease; no worker registry is consulted. :attr:`PostgresQueue.serve_keys`,
  when set, limits it to the runs this host can serve (the routing of ``docs/many-machines.md``).
- A dead holder on *this* host (its pid gone) is still taken over at once, as in SQLite mode, by a
  compare-and-swap on its token; a holder on another host only ever by expiry.
- :meth:`PostgresQueue.claim_run` waits for the row (``FOR UPDATE``) instead of skipping it.
- ``request_pause``/``request_cancel`` also ``NOTIFY`` the schema's ``flags`` channel, so holders need not poll
  the row often.

Driver errors while renewing or fencing become ``StoreBusy`` (the lease retries), with the password scrubbed.
"""

from __future__ import annotations

import contextlib
import hashlib
import secrets
import socket
from collections.abc import Collection, Iterable, Iterator
from typing import Any

from piw.errors import (
    ClaimLost,
    DatabaseUnavailable,
    IdempotencyConflict,
    RunLocked,
    RunNotFound,
    StoreBusy,
)
from piw.store.db import rows as shared_rows
from piw.store.db.database import Clock
from piw.store.db.dialect import POSTGRES, dumps
from piw.store.db.holders import holder_is_dead
from piw.store.db.idempotency import Adopted, guard_start
from piw.store.db.queue import ClaimCheck, claimable, fenced
from piw.store.db.rows import COLUMNS, LEASE_MS, Claim, FinalStatus, NewRun, ParkReason, QueueRow, QueueStatus
from piw.store.pg.clock import ClockedDatabase
from piw.store.pg.connection import PgDatabase

# ``(SELECT now_ms())`` is evaluated once per statement, so the held rows' index can seek to the expired ones
# (``now_ms()`` itself is volatile: a per-row filter over every held row). A held row always has an expiry.
_READY = (
    "status IN ('queued', 'parked') AND park_reason IS NULL AND NOT pause_requested AND NOT cancel_requested "
    "AND available_at <= (SELECT now_ms())"
)
_EXPIRED = (
    "status IN ('starting', 'running') AND claim_expires_at <= (SELECT now_ms()) "
    "AND NOT pause_requested AND NOT cancel_requested"
)


def _pick(where: str, order: str) -> str:
    """One candidate row, locked unless another claimer holds it (``{keys}``: the serve-key filter)."""
    return (
        f"SELECT run_id, runner_id, created_at FROM run_queue WHERE {where}{{keys}} ORDER BY {order} "
        "LIMIT 1 FOR UPDATE SKIP LOCKED"
    )


_CLAIM_NEXT = (
    f"WITH expired AS ({_pick(_EXPIRED, 'claim_expires_at')}), "
    f"mine AS ({_pick(_READY + ' AND affinity_runner_id = %(runner)s', 'created_at, run_id')}), "
    f"oldest AS ({_pick(_READY, 'created_at, run_id')}), "
    "pick AS (SELECT run_id, runner_id, 0 AS rank, created_at FROM expired "
    "  UNION ALL SELECT run_id, runner_id, 1, created_at FROM mine "
    "  UNION ALL SELECT run_id, runner_id, 2, created_at FROM oldest ORDER BY rank, created_at, run_id LIMIT 1) "
    "UPDATE run_queue q SET status = 'starting', claim_token = %(token)s, claim_generation = q.claim_generation + 1, "
    "claim_expires_at = now_ms() + %(lease)s, runner_id = %(runner)s, park_reason = NULL, updated_at = now_ms() "
    "FROM pick WHERE q.run_id = pick.run_id "
    "RETURNING q.run_id, q.claim_generation, q.claim_expires_at, pick.runner_id"
)
"""Expired held rows first (recovery), then this runner's affinity, then the oldest ready row."""
_FINAL_UPDATE = (
    "UPDATE run_queue SET status = %s, claim_token = NULL, claim_expires_at = NULL, runner_id = NULL, "
    "park_reason = NULL, input_json = NULL, error_message = %s, updated_at = now_ms()"
)


def default_serve_key(source: dict[str, Any] | None) -> str:
    """The SHA-256 of a run's stored workflow source: what the schema sets when a row names no serve key."""
    return hashlib.sha256(dumps(source).encode("utf-8")).hexdigest()


class PostgresQueue:
    """:class:`~piw.store.db.queue.RunQueue` over ``run_queue`` in PostgreSQL."""

    def __init__(
        self,
        db: PgDatabase | ClockedDatabase,
        clock: Clock | None = None,
        serve_keys: Collection[str] | None = None,
    ) -> None:
        self.db = db if isinstance(db, ClockedDatabase) else ClockedDatabase(db, clock)
        self.clock: Clock = self.db.clock
        self.serve_keys: list[str] | None = None if serve_keys is None else sorted(serve_keys)
        """Claim only rows with one of these serve keys (``None``: any)."""

    # ---- rows ---------------------------------------------------------------------------------------

    def get(self, run_id: str) -> QueueRow | None:
        with self.db.single() as conn:
            return shared_rows.get_row(conn, run_id, POSTGRES)

    def rows(self, run_ids: Iterable[str] | None = None) -> dict[str, QueueRow]:
        with self.db.single() as conn:
            if run_ids is None:
                found = conn.execute(f"SELECT {COLUMNS} FROM run_queue").fetchall()
            else:
                found = conn.execute(
                    f"SELECT {COLUMNS} FROM run_queue WHERE run_id = ANY(%s)", (list(run_ids),)
                ).fetchall()
        return {values[0]: shared_rows.decode_row(values) for values in found}

    def enqueue(self, run: NewRun, *, claim_for: str | None = None) -> Claim | Adopted | None:
        for attempt in range(3):
            try:
                with self.db.timed() as (conn, now):
                    if run.start_key is not None:
                        adopted = guard_start(conn, run.start_key, run.run_id, now, POSTGRES)
                        if adopted is not None:
                            return adopted
                    shared_rows.insert_run(conn, run, "queued", now, ignore=False, dialect=POSTGRES)
                    if claim_for is None:
                        return None
                    return shared_rows.take_claim(conn, run.run_id, claim_for, 0, now, dialect=POSTGRES)
            except IdempotencyConflict:
                raise
            except Exception as exc:
                # Two starts with one idempotency key at once: the second waits for the first, then fails on its
                # record; read it again to adopt (or refuse) the winner.
                if attempt == 2 or _constraint(exc) != "idempotency_pkey":
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def ensure(self, run: NewRun, status: QueueStatus = "parked") -> None:
        with self.db.timed() as (conn, now):
            shared_rows.insert_run(conn, run, status, now, ignore=True, dialect=POSTGRES)

    def set_options(self, run_id: str, options: dict[str, Any]) -> None:
        with self.db.single() as conn:
            conn.execute(
                "UPDATE run_queue SET options_json = %s, updated_at = now_ms() WHERE run_id = %s",
                (dumps(options), run_id),
            )

    # ---- claims -------------------------------------------------------------------------------------

    def claim_next(self, runner: str) -> Claim | None:
        keys = "" if self.serve_keys is None else " AND serve_key = ANY(%(keys)s)"
        token = secrets.token_hex(16)
        params = {
            "runner": runner,
            "token": token,
            "lease": LEASE_MS,
            "keys": self.serve_keys,
        }
        with self.db.single() as conn:
            found = conn.execute(_CLAIM_NEXT.format(keys=keys), params).fetchone()
        if found is not None:
            run_id, generation, expires, previous = found
            return Claim(run_id, token, int(generation), runner, int(expires), previous)
        return self._take_dead_local(runner)

    def _take_dead_local(self, runner: str) -> Claim | None:
        """A live-leased row whose holder is a dead process on this host, taken by compare-and-swap."""
        keys = "" if self.serve_keys is None else " AND serve_key = ANY(%s)"
        host = runner.split(":", 1)[0] if ":" in runner else socket.gethostname()  # (the holder's host id)
        params: list[Any] = [host + ":%"]
        if self.serve_keys is not None:
            params.append(self.serve_keys)
        with self.db.single() as conn:
            held = conn.execute(
                "SELECT run_id, claim_token, runner_id FROM run_queue WHERE status IN ('starting', 'running') "
                "AND claim_expires_at > now_ms() AND NOT pause_requested AND NOT cancel_requested "
                f"AND runner_id LIKE %s{keys} ORDER BY created_at, run_id",
                params,
            ).fetchall()
        for run_id, token, holder in held:
            if not holder_is_dead(holder):
                continue
            fresh = secrets.token_hex(16)
            with self.db.single() as conn:
                taken = conn.execute(
                    "UPDATE run_queue SET status = 'starting', claim_token = %s, "
                    "claim_generation = claim_generation + 1, claim_expires_at = now_ms() + %s, runner_id = %s, "
                    "park_reason = NULL, updated_at = now_ms() WHERE run_id = %s AND claim_token = %s "
                    "RETURNING claim_generation, claim_expires_at",
                    (fresh, LEASE_MS, runner, run_id, token),
                ).fetchone()
            if taken is not None:
                return Claim(run_id, fresh, int(taken[0]), runner, int(taken[1]), holder)
        return None

    def claim_run(self, run_id: str, runner: str) -> Claim:
        with self._lock_wait(run_id), self.db.timed() as (conn, now):
            found = conn.execute(f"SELECT {COLUMNS} FROM run_queue WHERE run_id = %s FOR UPDATE", (run_id,))
            values = found.fetchone()
            row = claimable(run_id, None if values is None else shared_rows.decode_row(values), now)
            return shared_rows.take_claim(
                conn, run_id, runner, row.claim_generation, now, row.runner_id, POSTGRES
            )

    @contextlib.contextmanager
    def _lock_wait(self, run_id: str) -> Iterator[None]:
        """A row lock not granted within ``lock_timeout`` is a busy row, not a failure of the database."""
        import psycopg

        try:
            yield
        except psycopg.errors.LockNotAvailable:
            raise RunLocked(f"Run {run_id} is being changed by another piw process; try again.") from None

    def renew(self, claim: Claim) -> Claim:
        with self._busy(claim, "renew"), self.db.single() as conn:
            found = conn.execute(
                "UPDATE run_queue SET claim_expires_at = now_ms() + %s, updated_at = now_ms() WHERE run_id = %s "
                "AND claim_token = %s AND claim_generation = %s AND status IN ('starting', 'running') "
                "AND claim_expires_at > now_ms() RETURNING claim_expires_at",
                (LEASE_MS, claim.run_id, claim.token, claim.generation),
            ).fetchone()
            if found is None:
                raise ClaimLost(self._lost(conn, claim))
        return Claim(
            claim.run_id, claim.token, claim.generation, claim.runner_id, int(found[0]), claim.taken_from
        )

    def fence(self, claim: Claim) -> ClaimCheck:
        with self._busy(claim, "check"), self.db.single() as conn:
            found = conn.execute(
                "SELECT claim_token, claim_generation, status, claim_expires_at, pause_requested, "
                "cancel_requested, now_ms() FROM run_queue WHERE run_id = %s",
                (claim.run_id,),
            ).fetchone()
        if found is None:
            raise ClaimLost("missing")
        return fenced(claim, tuple(found[:6]), found[6])  # (the server's clock read in the same statement)

    @contextlib.contextmanager
    def _busy(self, claim: Claim, doing: str) -> Iterator[None]:
        import psycopg

        try:
            yield
        except (psycopg.Error, DatabaseUnavailable) as exc:
            detail = self.db.pg.setting.scrub(" ".join(str(exc).split()))
            raise StoreBusy(f"The run queue could not {doing} run {claim.run_id}'s lease: {detail}") from exc

    def _lost(self, conn: Any, claim: Claim) -> str:
        now = self.db.now(conn)
        return (
            shared_rows.lost_reason(shared_rows.get_row(conn, claim.run_id, POSTGRES), claim, now)
            or "token_changed"
        )

    def _held(self, claim: Claim, sql: str, params: tuple[Any, ...]) -> None:
        """Update the holder's own row, guarded by its token and generation."""
        with self.db.single() as conn:
            cursor = conn.execute(
                sql + " WHERE run_id = %s AND claim_token = %s AND claim_generation = %s",
                (*params, claim.run_id, claim.token, claim.generation),
            )
            if cursor.rowcount != 1:
                raise ClaimLost(self._lost(conn, claim))

    def mark_running(self, claim: Claim) -> None:
        self._held(claim, "UPDATE run_queue SET status = 'running', updated_at = now_ms()", ())

    def park(
        self, claim: Claim, reason: ParkReason | None = None, *, delay_ms: int = 0, error: str | None = None
    ) -> None:
        self._held(
            claim,
            "UPDATE run_queue SET status = 'parked', claim_token = NULL, claim_expires_at = NULL, runner_id = NULL, "
            "park_reason = %s, available_at = now_ms() + %s, error_message = %s, updated_at = now_ms()",
            (reason, delay_ms, error),
        )

    def requeue(self, claim: Claim) -> None:
        self._held(
            claim,
            "UPDATE run_queue SET status = 'queued', claim_token = NULL, claim_expires_at = NULL, runner_id = NULL, "
            "park_reason = NULL, available_at = now_ms(), updated_at = now_ms()",
            (),
        )

    def release(self, claim: Claim, status: FinalStatus, error: str | None = None) -> None:
        self._held(claim, _FINAL_UPDATE, (status, error))

    def finalize(self, run_id: str, status: FinalStatus, error: str | None = None) -> QueueRow | None:
        with self._lock_wait(run_id), self.db.timed() as (conn, now):
            found = conn.execute(f"SELECT {COLUMNS} FROM run_queue WHERE run_id = %s FOR UPDATE", (run_id,))
            values = found.fetchone()
            row = None if values is None else shared_rows.decode_row(values)
            if row is None or row.is_final:
                return row
            if row.has_live_claim(now):
                raise RunLocked(f"Run {run_id} is being run by another piw process ({row.runner_id}).")
            conn.execute(_FINAL_UPDATE + " WHERE run_id = %s", (status, error, run_id))
            return shared_rows.get_row(conn, run_id, POSTGRES)

    def reopen(self, run_id: str) -> None:
        with self.db.single() as conn:
            conn.execute(
                "UPDATE run_queue SET status = 'parked', park_reason = 'interrupted', updated_at = now_ms() "
                "WHERE run_id = %s AND status IN ('done', 'failed', 'cancelled')",
                (run_id,),
            )

    # ---- flags (set by anyone, read by the holder) --------------------------------------------------

    def _flag(self, run_id: str, column: str, value: bool) -> QueueRow:
        with self.db.single() as conn:
            found = conn.execute(
                f"UPDATE run_queue SET {column} = %s, updated_at = now_ms() WHERE run_id = %s RETURNING {COLUMNS}",
                (value, run_id),
            ).fetchone()
            if found is not None and value:
                conn.execute("SELECT wake('flags', %s)", (run_id,))
        if found is None:
            raise RunNotFound(f"Run {run_id} is not in the run queue.")
        return shared_rows.decode_row(found)

    def request_pause(self, run_id: str) -> QueueRow:
        return self._flag(run_id, "pause_requested", True)

    def clear_pause(self, run_id: str) -> None:
        with contextlib.suppress(RunNotFound):
            self._flag(run_id, "pause_requested", False)

    def request_cancel(self, run_id: str) -> QueueRow:
        return self._flag(run_id, "cancel_requested", True)


def _constraint(exc: BaseException) -> str | None:
    """The constraint a unique violation names (``None`` for any other error)."""
    import psycopg

    if isinstance(exc, psycopg.errors.UniqueViolation):
        return exc.diag.constraint_name
    return None
