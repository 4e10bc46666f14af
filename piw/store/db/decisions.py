"""Human decisions, checkpoint answers and idempotency records in ``piw.sqlite`` (``persistence.md`` §10.3).

The rules, each kept by one ``BEGIN IMMEDIATE`` transaction:

- A gate records its request once (``INSERT OR IGNORE`` on the decision id, then read back): a rerun after a
  crash adopts the recorded request and its deadline, so the deadline never moves.
- The first valid answer wins: ``UPDATE … SET status='resolved' … WHERE decision_id=? AND status='open'``, the
  continuation's queue row (the unique ``parent_run_id`` index allows one per waiting run) and the idempotency
  record commit together. A plain checkpoint answer is the same transaction without the decision row.
- A repeat is compared by fingerprint with the idempotency record: identical → the stored receipt is adopted;
  different → a conflict (the caller raises ``DecisionResolved`` / ``ContinuationExists``). The timeout sweeper
  resolves through the same statement with provenance ``timeout``.

The functions take the queue (its ``db``, ``clock`` and row helpers) so ``SqliteQueue`` exposes them as methods
of the one ``RunQueue`` protocol.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from piw.store.db.queue import Claim, NewRun, SqliteQueue, StartKey

DecisionStatus = Literal["open", "resolved", "cancelled"]


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


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


_DECISION_COLUMNS = (
    "decision_id, run_id, node_id, attempt_id, request_json, request_sha256, expires_at, on_timeout_json, status, "
    "response_json, provenance, answered_by, resolved_at, continuation_run_id"
)


def _decision(values: tuple[Any, ...]) -> DecisionRow:
    (ident, run_id, node_id, attempt_id, request, request_sha, expires, on_timeout, status, response,
     provenance, answered_by, resolved_at, continuation) = values  # fmt: skip
    return DecisionRow(
        decision_id=ident,
        run_id=run_id,
        node_id=node_id,
        attempt_id=attempt_id,
        request=_loads(request) or {},
        request_sha256=request_sha,
        expires_at=expires,
        on_timeout=_loads(on_timeout),
        status=status,
        response=_loads(response),
        provenance=provenance,
        answered_by=answered_by,
        resolved_at=resolved_at,
        continuation_run_id=continuation,
    )


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


def open_decision(queue: SqliteQueue, decision: NewDecision) -> DecisionRow:
    """Record an opened gate unless it exists; the recorded row either way (the first request wins)."""
    with queue.db.transaction() as conn:
        _insert_decision(conn, decision, queue.clock())
        row = _get_decision(conn, decision.decision_id)
    assert row is not None
    return row


def _insert_decision(conn: sqlite3.Connection, decision: NewDecision, now: int) -> None:
    conn.execute(
        "INSERT OR IGNORE INTO human_decisions (decision_id, run_id, node_id, attempt_id, request_json, "
        "request_sha256, expires_at, on_timeout_json, status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'open')",
        (
            decision.decision_id,
            decision.run_id,
            decision.node_id,
            decision.attempt_id,
            _dumps(decision.request),
            decision.request_sha256,
            decision.expires_at,
            None if decision.on_timeout is None else _dumps(decision.on_timeout),
        ),
    )


def _get_decision(conn: sqlite3.Connection, decision_id: str) -> DecisionRow | None:
    found = conn.execute(
        f"SELECT {_DECISION_COLUMNS} FROM human_decisions WHERE decision_id = ?", (decision_id,)
    ).fetchone()
    return None if found is None else _decision(found)


def get_decision(queue: SqliteQueue, decision_id: str) -> DecisionRow | None:
    return _get_decision(queue.db.connection(), decision_id)


def decisions_of(queue: SqliteQueue, run_id: str) -> list[DecisionRow]:
    found = queue.db.connection().execute(
        f"SELECT {_DECISION_COLUMNS} FROM human_decisions WHERE run_id = ? ORDER BY decision_id", (run_id,)
    )
    return [_decision(values) for values in found.fetchall()]


def due_decisions(queue: SqliteQueue, now: int | None = None) -> list[DecisionRow]:
    """Open decisions whose deadline has passed (oldest deadline first)."""
    at = queue.clock() if now is None else now
    found = queue.db.connection().execute(
        f"SELECT {_DECISION_COLUMNS} FROM human_decisions WHERE status = 'open' AND expires_at IS NOT NULL "
        "AND expires_at <= ? ORDER BY expires_at, decision_id",
        (at,),
    )
    return [_decision(values) for values in found.fetchall()]


def cancel_decisions(queue: SqliteQueue, run_id: str, answered_by: str = "") -> int:
    """Turn the run's open decisions into ``cancelled`` tombstones (cancelling a waiting run); how many."""
    with queue.db.transaction() as conn:
        return tombstone(conn, run_id, queue.clock(), answered_by)


def tombstone(conn: sqlite3.Connection, run_id: str, now: int, answered_by: str = "") -> int:
    """Inside a caller's transaction (``cancel_waiting``): open decisions of the run become ``cancelled``."""
    cursor = conn.execute(
        "UPDATE human_decisions SET status = 'cancelled', provenance = 'cancel', answered_by = ?, "
        "resolved_at = ? WHERE run_id = ? AND status = 'open'",
        (answered_by or None, now, run_id),
    )
    return cursor.rowcount


def _stored(conn: sqlite3.Connection, scope: str, key: str) -> tuple[str, dict[str, Any]] | None:
    found = conn.execute(
        "SELECT request_sha256, receipt_json FROM idempotency WHERE scope = ? AND key = ?", (scope, key)
    ).fetchone()
    return None if found is None else (str(found[0]), _loads(found[1]) or {})


def record_idempotency(
    conn: sqlite3.Connection, scope: str, key: str, fingerprint: str, receipt: dict[str, Any], now: int
) -> None:
    """Inside the transaction it guards: the first record of ``(scope, key)`` stands."""
    conn.execute(
        "INSERT INTO idempotency (scope, key, request_sha256, receipt_json, created_at) VALUES (?, ?, ?, ?, ?)",
        (scope, key, fingerprint, _dumps(receipt), now),
    )


START_SCOPE = "run.start"


def guard_start(conn: sqlite3.Connection, start: StartKey, run_id: str, now: int) -> None:
    """``run.start`` idempotency, inside the transaction that inserts the run's queue row.

    The first start with a key records ``{runId}``; an exact repeat raises ``StartAdopted`` with that run, any
    other request under the key raises ``IdempotencyConflict``. Either way the caller's transaction rolls back,
    so no row (and, since the row comes before the bundle, no bundle) is created.
    """
    from piw.errors import IdempotencyConflict
    from piw.store.db.queue import StartAdopted

    stored = _stored(conn, START_SCOPE, start.key)
    if stored is None:
        record_idempotency(conn, START_SCOPE, start.key, start.fingerprint, {"runId": run_id}, now)
        return
    original = str(stored[1].get("runId", ""))
    if stored[0] == start.fingerprint:
        raise StartAdopted(original)
    raise IdempotencyConflict(
        f"Idempotency key {start.key!r} already started run {original} with a different request (workflow, input, "
        "title, budget or provider); use a new key, or repeat the original command to get that run."
    )


def idempotent_receipt(
    queue: SqliteQueue, scope: str, key: str, fingerprint: str
) -> tuple[Literal["none", "adopted", "conflict"], dict[str, Any] | None]:
    """Look a command up: ``none`` (never seen), ``adopted`` (same fingerprint: the receipt) or ``conflict``."""
    stored = _stored(queue.db.connection(), scope, key)
    if stored is None:
        return "none", None
    return ("adopted" if stored[0] == fingerprint else "conflict"), stored[1]


def resolve_answer(queue: SqliteQueue, record: AnswerRecord) -> Resolution:
    """The first valid answer wins, in one transaction (decision row, continuation row, idempotency)."""
    now = queue.clock()
    with queue.db.transaction() as conn:
        stored = _stored(conn, record.scope, record.key)
        if stored is not None:
            outcome: Literal["adopted", "conflict"] = (
                "adopted" if stored[0] == record.fingerprint else "conflict"
            )
            return Resolution(outcome, stored[1], provenance=stored[1].get("provenance"))
        decision = record.decision
        if decision is not None:
            _insert_decision(conn, decision, now)
            row = _get_decision(conn, decision.decision_id)
            assert row is not None
            if row.status == "cancelled":
                return Resolution("cancelled", None, provenance="cancel")
            if row.status != "open":  # resolved without a record here: only by an older piw; never adopt it
                return Resolution("conflict", {"continuation": {"runId": row.continuation_run_id}})
            cursor = conn.execute(
                "UPDATE human_decisions SET status = 'resolved', response_json = ?, provenance = ?, "
                "answered_by = ?, resolved_at = ?, continuation_run_id = ? WHERE decision_id = ? AND status = 'open'",
                (
                    _dumps(record.response),
                    record.provenance,
                    record.answered_by,
                    now,
                    record.continuation.run_id,
                    decision.decision_id,
                ),
            )
            assert cursor.rowcount == 1  # the row is open and this transaction holds the write lock
        parent = queue._get(conn, record.continuation.parent_run_id or "")
        if parent is not None and parent.status == "cancelled":
            return Resolution("cancelled", None, provenance="cancel")
        existing = conn.execute(
            "SELECT run_id FROM run_queue WHERE parent_run_id = ?", (record.continuation.parent_run_id,)
        ).fetchone()
        if existing is not None:  # a continuation made some other way: one per waiting run, whatever made it
            return Resolution("conflict", {"continuation": {"runId": existing[0]}})
        queue._insert(conn, record.continuation, "queued", now, ignore=False)
        claim = None
        if record.claim_for is not None:
            claim = queue._take(conn, record.continuation.run_id, record.claim_for, 0, now)
        record_idempotency(conn, record.scope, record.key, record.fingerprint, record.receipt, now)
    return Resolution("won", record.receipt, claim, record.provenance)
