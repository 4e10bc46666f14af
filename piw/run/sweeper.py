"""The timeout sweeper: due human decisions are answered with their declared choice, provenance ``timeout``.

A gate's deadline is fixed when it opens (the decision row's ``expires_at``, also the request's
``onTimeout.expiresAt``) and survives restarts; the sweep resolves through the same first-answer-wins
transaction a person's answer uses, so a person and the sweeper can never both win. Where sweeps happen:

- ``piw host``, on every pass of its loop (all due decisions; their continuations are queued for a host);
- ``piw decide`` / ``piw answer``, for the run they answer, before recording the person's answer (a deadline
  that has passed wins, as declared; an identical choice then adopts it);
- the terminal prompt of a foreground run, for its own decision, when the deadline passes while it waits.

Read-only commands (``piw runs``, ``piw inspect``, ``piw watch``) never sweep.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from piw.errors import DecisionResolved, PiwError
from piw.run.answers import AnswerReceipt, claim_decision, read_wait, record_answer
from piw.store.db.run_database import RunDatabase
from piw.wire import format_time

TIMEOUT_ANSWERER = "piw (on_timeout policy)"


def sweep_timeouts(home: Path, database: RunDatabase, *, run_id: str | None = None) -> list[AnswerReceipt]:
    """Resolve every due decision (of ``run_id`` only, when given); the continuations this sweep started.

    A decision whose run is not waiting on it (the run crashed before it finished opening the gate) is left for
    later: an answer is valid only once the trace says the run waits there.
    """
    now = database.decisions.clock()
    made: list[AnswerReceipt] = []
    for row in database.decisions.due_decisions(now):
        if run_id is not None and row.run_id != run_id:
            continue
        try:
            wait, state = read_wait(home, row.run_id)
        except PiwError:
            continue
        if wait.decision_id != row.decision_id:
            continue
        choice = str(
            (row.on_timeout or {}).get("choice") or (wait.output.get("onTimeout") or {}).get("choice")
        )
        resolved_at = format_time(datetime.fromtimestamp(now / 1000, UTC))
        claim = claim_decision(
            wait, choice, {}, provenance="timeout", answered_by=TIMEOUT_ANSWERER, now_iso=resolved_at
        )
        try:
            receipt, _ = record_answer(home, database, claim, state)
        except DecisionResolved:
            continue  # a person (or another sweeper) won first
        if not receipt.adopted:
            made.append(receipt)
    return made
