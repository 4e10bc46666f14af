"""The ``run_queue`` row: its records, its statuses, and the row operations several transactions share.

A run's queue row holds its claim (a token and a generation that grows with every claim), the lease deadline, who
holds it, the pause and cancel requests and how the run was started (``docs/detached.md``, "What the database
holds"). The claim protocol (``piw.store.db.queue``) and the first-answer-wins transaction
(``piw.store.db.decisions``) both insert rows, take claims and read rows; they do it through the public functions
here, each over a connection inside the caller's transaction, so neither reaches into the other.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from piw.store.db.dialect import SQLITE, Connection, Dialect, dumps, loads
from piw.store.db.holders import holder_is_dead
from piw.store.db.idempotency import StartKey
from piw.store.db.serve_keys import serve_key

LEASE_MS = int(os.environ.get("PIW_TEST_LEASE_MS", "") or 30_000)
"""How long a claim lasts unless its holder renews it (``PIW_TEST_LEASE_MS`` shortens it for the tests that stop
a host past its lease)."""

QueueStatus = Literal["queued", "starting", "running", "parked", "done", "failed", "cancelled"]
FinalStatus = Literal["done", "failed", "cancelled"]
ParkReason = Literal[
    "source_changed",
    "import_timeout",
    "bundle_linked",
    "trace_corrupt",
    "needs-origin-session",
    "interrupted",
    "disk_full",
    "outcome_unknown",
]
QUEUE_STATUSES: tuple[str, ...] = ("queued", "starting", "running", "parked", "done", "failed", "cancelled")
FINAL_STATUSES = frozenset({"done", "failed", "cancelled"})
FINAL_QUEUE_STATUS: dict[str, FinalStatus] = {
    "completed": "done",
    "waiting": "done",
    "failed": "failed",
    "timed_out": "failed",
    "cancelled": "cancelled",
}
"""The queue row status a run ends with, by the status its fold ended in (a waiting run is done: its answer
starts a continuation)."""
HELD_STATUSES = frozenset({"starting", "running"})
PARK_REASONS: tuple[str, ...] = get_args(ParkReason)
RETRIED_PARK_REASONS: tuple[str, ...] = ("disk_full",)
"""Reasons a host retries on its own once the row's ``available_at`` has passed (the disk may have room again);
every other reason waits for a person (``piw resume``)."""


def claim_is_live(status: object, expires: object, holder: object, now: int) -> bool:
    """A queue row's claim is held by a process that may still be writing: a held status, a lease that has not
    expired, and a holder not known to be dead (values as read from the row, of any type)."""
    return (
        status in HELD_STATUSES
        and isinstance(expires, int)
        and expires > now
        and not holder_is_dead(holder if isinstance(holder, str) else None)
    )


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
    """Recorded in ``idempotency`` (scope ``run.start``) in the row's own transaction."""


# ---- the row codec ------------------------------------------------------------------------------------

COLUMNS = (
    "run_id, status, workflow_ref, workflow_source_json, definition_digest, input_json, options_json, "
    "claim_token, claim_generation, claim_expires_at, runner_id, available_at, affinity_runner_id, "
    "origin_session_id, park_reason, pause_requested, cancel_requested, parent_run_id, error_message, "
    "created_at, updated_at"
)
"""Every column of ``run_queue``, in the order :func:`decode_row` reads them."""

_INSERTED = (
    "run_id",
    "workflow_ref",
    "workflow_source_json",
    "definition_digest",
    "input_json",
    "options_json",
    "status",
    "available_at",
    "affinity_runner_id",
    "origin_session_id",
    "parent_run_id",
    "created_at",
    "updated_at",
)


def decode_row(values: tuple[Any, ...]) -> QueueRow:
    """A row selected as :data:`COLUMNS`."""
    (
        run_id,
        status,
        ref,
        source,
        digest,
        input_json,
        options,
        token,
        generation,
        expires,
        runner,
        available,
        affinity,
        origin,
        park,
        pause,
        cancel,
        parent,
        error,
        created,
        updated,
    ) = values
    return QueueRow(
        run_id=run_id,
        status=status,
        workflow_ref=ref,
        workflow_source=loads(source),
        definition_digest=digest,
        input=loads(input_json),
        options=loads(options) or {},
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


# ---- row operations inside a caller's transaction -----------------------------------------------------


def get_row(conn: Connection, run_id: str, dialect: Dialect = SQLITE) -> QueueRow | None:
    """The row of ``run_id``, if any."""
    found = conn.execute(
        dialect.sql(f"SELECT {COLUMNS} FROM run_queue WHERE run_id = ?"), (run_id,)
    ).fetchone()
    return None if found is None else decode_row(found)


def continuation_row(conn: Connection, parent_run_id: str, dialect: Dialect = SQLITE) -> QueueRow | None:
    """The one row whose ``parent_run_id`` is ``parent_run_id`` (the continuation of a waiting run), if any."""
    found = conn.execute(
        dialect.sql(f"SELECT {COLUMNS} FROM run_queue WHERE parent_run_id = ?"), (parent_run_id,)
    ).fetchone()
    return None if found is None else decode_row(found)


def insert_run(
    conn: Connection, run: NewRun, status: str, now: int, *, ignore: bool, dialect: Dialect = SQLITE
) -> int:
    """Insert ``run``'s row with ``status`` (``ignore``: leave an existing row alone); rows inserted."""
    columns: tuple[str, ...] = _INSERTED
    routed: tuple[str, ...] = ()
    if (
        dialect.name == "postgres"
    ):  # hosts claim by serve key (piw.store.db.serve_keys); SQLite has one machine
        columns, routed = (*_INSERTED, "serve_key"), (serve_key(run.workflow_source, run.definition_digest),)
    cursor = conn.execute(
        dialect.insert("run_queue", columns, ignore=ignore),
        (
            run.run_id,
            run.workflow_ref,
            dumps(run.workflow_source),
            run.definition_digest,
            dumps(run.input),
            dumps(run.options),
            status,
            now if run.available_at is None else run.available_at,
            run.affinity_runner_id,
            run.origin_session_id,
            run.parent_run_id,
            now,
            now,
            *routed,
        ),
    )
    return cursor.rowcount


def lost_reason(row: QueueRow | None, claim: Claim, now: int) -> str:
    """Why ``claim`` no longer holds ``row`` (the ``ClaimLost`` reason), or ``""`` when it still does."""
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


def take_claim(
    conn: Connection,
    run_id: str,
    runner: str,
    generation: int,
    now: int,
    taken_from: str | None = None,
    dialect: Dialect = SQLITE,
) -> Claim:
    """Give the row a fresh claim for ``runner``: ``starting``, a new token, ``generation + 1``, a new lease.

    The caller has checked that no live claim holds the row (or just inserted it)."""
    token = secrets.token_hex(16)
    expires = now + LEASE_MS
    conn.execute(
        dialect.sql(
            "UPDATE run_queue SET status = 'starting', claim_token = ?, claim_generation = ?, "
            "claim_expires_at = ?, runner_id = ?, park_reason = NULL, updated_at = ? WHERE run_id = ?"
        ),
        (token, generation + 1, expires, runner, now, run_id),
    )
    return Claim(run_id, token, generation + 1, runner, expires, taken_from)


def cancel_waiting_row(conn: Connection, run_id: str, now: int, dialect: Dialect = SQLITE) -> None:
    """A run that ended ``waiting`` (row ``done``) is cancelled: the row becomes ``cancelled``, its input cleared."""
    conn.execute(
        dialect.sql(
            "UPDATE run_queue SET status = 'cancelled', input_json = NULL, updated_at = ? "
            "WHERE run_id = ? AND status = 'done'"
        ),
        (now, run_id),
    )
