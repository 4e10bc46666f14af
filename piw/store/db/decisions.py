"""Human decisions, checkpoint answers and their continuations in the run database (``docs/checkpoints.md``).

The rules, each kept by one ``BEGIN IMMEDIATE`` transaction:

- A gate records its request once (insert unless present on the decision id, then read back): a rerun after a
  crash adopts the recorded request and its deadline, so the deadline never moves.
- The first valid answer wins: ``UPDATE … SET status='resolved' … WHERE decision_id=? AND status='open'``, the
  continuation's queue row (the unique ``parent_run_id`` index allows one per waiting run) and the idempotency
  record commit together. A plain checkpoint answer is the same transaction without the decision row.
- A repeat is compared by fingerprint with the idempotency record: identical → the stored receipt is adopted;
  different → a conflict (the caller raises ``DecisionResolved`` / ``ContinuationExists``). The timeout sweeper
  resolves through the same statement with provenance ``timeout``.
- Cancelling a waiting run turns its open decision into a ``cancelled`` tombstone in the transaction that cancels
  its queue row, so no answer can win after it.

:class:`Decisions` is the protocol, :class:`SqliteDecisions` its implementation over ``piw.sqlite``; the queue
rows it inserts and claims go through the shared row operations of ``piw.store.db.rows``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol

from piw.errors import RunNotFound
from piw.store.db import idempotency
from piw.store.db.database import Clock, Database, now_ms
from piw.store.db.dialect import SQLITE, Connection, Dialect, dumps, loads
from piw.store.db.rows import (
    Claim,
    NewRun,
    QueueRow,
    cancel_waiting_row,
    continuation_row,
    get_row,
    insert_run,
    take_claim,
)

DecisionStatus = Literal["open", "resolved", "cancelled"]


@dataclass(frozen=True)
class NewDecision:
    """A gate that just opened: its request (what the person sees) and deadline (epoch ms, or none)."""

    decision_id: str
    run_id: str
    node_id: str
    attempt_id: str
    request: dict[str, Any]
    request_sha256: str
    expires_at: int | None = None
    on_timeout: dict[str, Any] | None = None


@dataclass(frozen=True)
class DecisionRow:
    """One ``human_decisions`` row: open, or its one immutable winner (or a cancelled tombstone)."""

    decision_id: str
    run_id: str
    node_id: str
    attempt_id: str | None
    request: dict[str, Any]
    request_sha256: str | None
    expires_at: int | None
    on_timeout: dict[str, Any] | None
    status: str
    response: dict[str, Any] | None
    provenance: str | None
    answered_by: str | None
    resolved_at: int | None
    continuation_run_id: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "decisionId": self.decision_id,
            "runId": self.run_id,
            "nodeId": self.node_id,
            "status": self.status,
            "requestSha256": self.request_sha256,
            "expiresAt": self.expires_at,
            "response": self.response,
            "provenance": self.provenance,
            "answeredBy": self.answered_by,
            "resolvedAt": self.resolved_at,
            "continuationRunId": self.continuation_run_id,
        }


@dataclass(frozen=True)
class AnswerRecord:
    """One attempt to answer a waiting run, as the transaction needs it."""

    scope: Literal["run.answer", "decision.answer"]
    key: str
    """The idempotency key: the decision id, or the waiting run's id (a plain checkpoint)."""
    fingerprint: str
    receipt: dict[str, Any]
    """What a repeat gets back (the continuation it started)."""
    continuation: NewRun
    """The continuation's queue row (``parent_run_id`` = the waiting run)."""
    decision: NewDecision | None = None
    """The gate (recorded here if the run opened it before the database held decisions)."""
    response: dict[str, Any] | None = None
    provenance: str = "human"
    answered_by: str = ""
    claim_for: str | None = None
    """Claim the continuation row for this runner in the same transaction (a foreground answer)."""


@dataclass(frozen=True)
class Resolution:
    """How an answer fared: ``won`` (it is the winner), ``adopted`` (an identical repeat) or ``conflict``.

    ``conflict`` also covers a cancelled decision (``cancelled``); ``receipt`` is the stored winner's receipt
    (``None`` for a tombstone).
    """

    outcome: Literal["won", "adopted", "conflict", "cancelled"]
    receipt: dict[str, Any] | None
    claim: Claim | None = None
    provenance: str | None = None


class Decisions(Protocol):
    """Opened gates, the answers that win them, and the continuations those answers start."""

    clock: Clock

    def open_decision(self, decision: NewDecision) -> DecisionRow:
        """Record an opened gate unless it exists (a rerun adopts the recorded request and deadline)."""
        ...

    def get_decision(self, decision_id: str) -> DecisionRow | None: ...

    def decisions_of(self, run_id: str) -> list[DecisionRow]: ...

    def due_decisions(self, now: int | None = None) -> list[DecisionRow]:
        """Open decisions whose deadline has passed (oldest deadline first)."""
        ...

    def cancel_decisions(self, run_id: str, answered_by: str = "") -> int:
        """Open decisions of a cancelled waiting run become ``cancelled`` tombstones; how many."""
        ...

    def cancel_waiting(self, run_id: str) -> QueueRow:
        """Cancel a run that ended ``waiting`` (row ``done``): the row becomes ``cancelled`` and its open decision a
        tombstone, in one transaction; the bundle is final. ``RunNotFound`` without a row."""
        ...

    def resolve_answer(self, record: AnswerRecord) -> Resolution:
        """First valid answer wins: decision row, continuation queue row and idempotency in one transaction."""
        ...

    def idempotent_receipt(self, scope: str, key: str, fingerprint: str) -> idempotency.Lookup: ...

    def continuation_of(self, parent_run_id: str) -> QueueRow | None:
        """The one continuation row of a waiting run, if it was answered."""
        ...


_COLUMNS = (
    "decision_id",
    "run_id",
    "node_id",
    "attempt_id",
    "request_json",
    "request_sha256",
    "expires_at",
    "on_timeout_json",
    "status",
    "response_json",
    "provenance",
    "answered_by",
    "resolved_at",
    "continuation_run_id",
)
_SELECT = f"SELECT {', '.join(_COLUMNS)} FROM human_decisions"
_OPENED = _COLUMNS[:9]
"""The columns a gate opens its row with (the rest are set by the answer that wins it)."""


def _decision(values: tuple[Any, ...]) -> DecisionRow:
    row = dict(zip(_COLUMNS, values, strict=True))
    return DecisionRow(
        decision_id=row["decision_id"],
        run_id=row["run_id"],
        node_id=row["node_id"],
        attempt_id=row["attempt_id"],
        request=loads(row["request_json"]) or {},
        request_sha256=row["request_sha256"],
        expires_at=row["expires_at"],
        on_timeout=loads(row["on_timeout_json"]),
        status=row["status"],
        response=loads(row["response_json"]),
        provenance=row["provenance"],
        answered_by=row["answered_by"],
        resolved_at=row["resolved_at"],
        continuation_run_id=row["continuation_run_id"],
    )


class SqliteDecisions:
    """:class:`Decisions` over ``piw.sqlite`` (the ``human_decisions`` and ``idempotency`` tables, and the
    continuation rows of ``run_queue``)."""

    dialect: ClassVar[Dialect] = SQLITE

    def __init__(self, db: Database, clock: Clock = now_ms) -> None:
        self.db = db
        self.clock = clock

    def _insert_decision(self, conn: Connection, decision: NewDecision) -> None:
        conn.execute(
            self.dialect.insert("human_decisions", _OPENED, ignore=True),
            (
                decision.decision_id,
                decision.run_id,
                decision.node_id,
                decision.attempt_id,
                dumps(decision.request),
                decision.request_sha256,
                decision.expires_at,
                None if decision.on_timeout is None else dumps(decision.on_timeout),
                "open",
            ),
        )

    def _get_decision(self, conn: Connection, decision_id: str) -> DecisionRow | None:
        found = conn.execute(self.dialect.sql(f"{_SELECT} WHERE decision_id = ?"), (decision_id,)).fetchone()
        return None if found is None else _decision(found)

    def _tombstone(self, conn: Connection, run_id: str, now: int, answered_by: str = "") -> int:
        """Open decisions of the run become ``cancelled``, inside the caller's transaction; how many."""
        cursor = conn.execute(
            self.dialect.sql(
                "UPDATE human_decisions SET status = 'cancelled', provenance = 'cancel', answered_by = ?, "
                "resolved_at = ? WHERE run_id = ? AND status = 'open'"
            ),
            (answered_by or None, now, run_id),
        )
        return cursor.rowcount

    # ---- gates --------------------------------------------------------------------------------------------

    def open_decision(self, decision: NewDecision) -> DecisionRow:
        with self.db.transaction() as conn:
            self._insert_decision(conn, decision)
            row = self._get_decision(conn, decision.decision_id)
        assert row is not None
        return row

    def get_decision(self, decision_id: str) -> DecisionRow | None:
        return self._get_decision(self.db.connection(), decision_id)

    def decisions_of(self, run_id: str) -> list[DecisionRow]:
        found = self.db.connection().execute(
            self.dialect.sql(f"{_SELECT} WHERE run_id = ? ORDER BY decision_id"), (run_id,)
        )
        return [_decision(values) for values in found.fetchall()]

    def due_decisions(self, now: int | None = None) -> list[DecisionRow]:
        at = self.clock() if now is None else now
        found = self.db.connection().execute(
            self.dialect.sql(
                f"{_SELECT} WHERE status = 'open' AND expires_at IS NOT NULL AND expires_at <= ? "
                "ORDER BY expires_at, decision_id"
            ),
            (at,),
        )
        return [_decision(values) for values in found.fetchall()]

    def cancel_decisions(self, run_id: str, answered_by: str = "") -> int:
        with self.db.transaction() as conn:
            return self._tombstone(conn, run_id, self.clock(), answered_by)

    def cancel_waiting(self, run_id: str) -> QueueRow:
        now = self.clock()
        with self.db.transaction() as conn:
            cancel_waiting_row(conn, run_id, now, self.dialect)
            self._tombstone(conn, run_id, now)
            row = get_row(conn, run_id, self.dialect)
        if row is None:
            raise RunNotFound(f"Run {run_id} is not in the run queue.")
        return row

    # ---- answers ------------------------------------------------------------------------------------------

    def idempotent_receipt(self, scope: str, key: str, fingerprint: str) -> idempotency.Lookup:
        """Look a command up: ``none`` (never seen), ``adopted`` (same fingerprint: the receipt) or ``conflict``."""
        return idempotency.lookup(self.db.connection(), scope, key, fingerprint, self.dialect)

    def continuation_of(self, parent_run_id: str) -> QueueRow | None:
        return continuation_row(self.db.connection(), parent_run_id, self.dialect)

    def resolve_answer(self, record: AnswerRecord) -> Resolution:
        now = self.clock()
        with self.db.transaction() as conn:
            return self._resolve(conn, record, now)

    def _resolve(self, conn: Connection, record: AnswerRecord, now: int) -> Resolution:
        """The first-answer-wins transaction's statements, inside the caller's transaction (which serialises
        answers to one waiting run: ``BEGIN IMMEDIATE`` here, row locks on PostgreSQL)."""
        dialect = self.dialect
        stored = idempotency.stored(conn, record.scope, record.key, dialect)
        if stored is not None:
            outcome: Literal["adopted", "conflict"] = (
                "adopted" if stored[0] == record.fingerprint else "conflict"
            )
            return Resolution(outcome, stored[1], provenance=stored[1].get("provenance"))
        if record.decision is not None:
            refused = self._resolve_decision(conn, record, record.decision, now)
            if refused is not None:
                return refused
        parent_id = record.continuation.parent_run_id
        parent = get_row(conn, parent_id or "", dialect)
        if parent is not None and parent.status == "cancelled":
            return Resolution("cancelled", None, provenance="cancel")
        existing = continuation_row(conn, parent_id or "", dialect) if parent_id is not None else None
        if existing is not None:  # a continuation made some other way: one per waiting run, whatever made it
            return Resolution("conflict", {"continuation": {"runId": existing.run_id}})
        insert_run(conn, record.continuation, "queued", now, ignore=False, dialect=dialect)
        claim = None
        if record.claim_for is not None:
            claim = take_claim(conn, record.continuation.run_id, record.claim_for, 0, now, dialect=dialect)
        idempotency.record(conn, record.scope, record.key, record.fingerprint, record.receipt, now, dialect)
        return Resolution("won", record.receipt, claim, record.provenance)

    def _resolve_decision(
        self, conn: Connection, record: AnswerRecord, decision: NewDecision, now: int
    ) -> Resolution | None:
        """Resolve the gate's row for ``record`` (recorded first if it is missing); the refusal, if it cannot be."""
        self._insert_decision(conn, decision)
        row = self._get_decision(conn, decision.decision_id)
        assert row is not None
        if row.status == "cancelled":
            return Resolution("cancelled", None, provenance="cancel")
        if row.status != "open":  # resolved without a record here: only by an older piw; never adopt it
            return Resolution("conflict", {"continuation": {"runId": row.continuation_run_id}})
        cursor = conn.execute(
            self.dialect.sql(
                "UPDATE human_decisions SET status = 'resolved', response_json = ?, provenance = ?, "
                "answered_by = ?, resolved_at = ?, continuation_run_id = ? WHERE decision_id = ? AND status = 'open'"
            ),
            (
                dumps(record.response),
                record.provenance,
                record.answered_by,
                now,
                record.continuation.run_id,
                decision.decision_id,
            ),
        )
        assert cursor.rowcount == 1  # the row is open and this transaction holds the write lock
        return None
