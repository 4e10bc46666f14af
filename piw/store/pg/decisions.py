"""Human decisions and checkpoint answers on PostgreSQL: one winner across hosts (``docs/checkpoints.md``,
``docs/many-machines.md``).

The statements are SQLite mode's (:class:`~piw.store.db.decisions.SqliteDecisions`, through the PostgreSQL
dialect); what differs is how one transaction excludes another. ``BEGIN IMMEDIATE`` serialises every writer of
``piw.sqlite``; under PostgreSQL's READ COMMITTED, an answer first takes a transaction-scoped advisory lock on the
waiting run, then the waiting run's queue row and the decision's row ``FOR UPDATE`` (in that order, the order
``cancel_waiting`` locks them too). Every later read of the transaction then sees the winner's commit, so a repeat
adopts it, a different answer conflicts, and a timeout sweeper on another host loses to a person who answered
first. A unique violation (an insert racing outside these locks) retries the whole transaction.
"""

from __future__ import annotations

from typing import Any, ClassVar

from piw.store.db.database import Clock
from piw.store.db.decisions import AnswerRecord, Resolution, SqliteDecisions
from piw.store.db.dialect import POSTGRES, Dialect
from piw.store.pg.clock import ClockedDatabase

_ATTEMPTS = 3


class PgDecisions(SqliteDecisions):
    """:class:`~piw.store.db.decisions.Decisions` over PostgreSQL (``human_decisions``, ``idempotency``,
    continuation rows of ``run_queue``)."""

    dialect: ClassVar[Dialect] = POSTGRES

    def __init__(self, db: ClockedDatabase, clock: Clock | None = None) -> None:
        self.db = db  # type: ignore[assignment]  # (transaction()/connection() shaped like SQLite's Database)
        self.clock = clock or db.clock

    def resolve_answer(self, record: AnswerRecord) -> Resolution:
        import psycopg

        for attempt in range(_ATTEMPTS):
            try:
                with self.db.timed() as (conn, now):  # type: ignore[attr-defined]
                    self._serialise(conn, record)
                    return self._resolve(conn, record, now)
            except psycopg.errors.UniqueViolation:
                if attempt == _ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _serialise(self, conn: Any, record: AnswerRecord) -> None:
        """Lock what the answer depends on: the waiting run (advisory, then its row) and the decision's row."""
        parent = record.continuation.parent_run_id or (
            record.decision.run_id if record.decision else record.key
        )
        conn.execute(
            "SELECT pg_advisory_xact_lock(hashtext(current_schema() || ':answer:' || %s))", (parent,)
        )
        conn.execute("SELECT 1 FROM run_queue WHERE run_id = %s FOR UPDATE", (parent,))
        if record.decision is not None:
            self._insert_decision(conn, record.decision)
            conn.execute(
                "SELECT 1 FROM human_decisions WHERE decision_id = %s FOR UPDATE",
                (record.decision.decision_id,),
            )
