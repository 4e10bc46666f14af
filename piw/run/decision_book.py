"""The record of an opened human decision: the row a gate writes when it opens, and the book it writes it through.

The engine hands :func:`open_decision_book` to the checkpoint executor for every run. It lives apart from
:mod:`piw.run.answers` (answering, deciding, the continuation), which a run that opens no gate never needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from piw.store.db.decisions import NewDecision
from piw.wire import parse_time

if TYPE_CHECKING:
    from piw.run.executors.checkpoint import DecisionBook
    from piw.store.db.decisions import Decisions


def new_decision(run_id: str, node_id: str, attempt_id: str, opened: dict[str, Any]) -> NewDecision:
    """The decision row of an opened gate; its deadline is the request's ``onTimeout.expiresAt``."""
    timeout = opened.get("onTimeout") if isinstance(opened.get("onTimeout"), dict) else None
    expires = None
    if timeout is not None and timeout.get("expiresAt"):
        expires = int(parse_time(str(timeout["expiresAt"])).timestamp() * 1000)
    return NewDecision(
        decision_id=str(opened["decisionId"]),
        run_id=run_id,
        node_id=node_id,
        attempt_id=attempt_id,
        request=opened,
        request_sha256=str(opened.get("requestSha256", "")),
        expires_at=expires,
        on_timeout=None
        if timeout is None
        else {"choice": timeout.get("choice"), "afterMinutes": timeout.get("afterMinutes")},
    )


def open_decision_book(decisions: Decisions) -> DecisionBook:
    """The checkpoint executor's decision book over the run database: a gate's request is recorded once."""

    class _Book:
        def open_decision(
            self, *, run_id: str, node_id: str, attempt_id: str, decision_id: str, request: dict[str, Any]
        ) -> dict[str, Any]:
            row = decisions.open_decision(new_decision(run_id, node_id, attempt_id, request))
            return row.request

    return _Book()
