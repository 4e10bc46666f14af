"""Answering a gate with a channel's answer token (``docs/channels.md``, "Answer tokens").

A token is used once (:meth:`~piw.store.db.channels.ChannelStore.take_token`), then the answer goes through the
same path as ``piw decide``: the waiting run's recorded request is read, the answer is checked against it with
the token's ``request_sha256`` as the digest the person saw, and the decision book records the first valid
answer and its continuation in one transaction (``piw.run.answers``). Provenance is ``human``; ``answered_by``
names the channel and its user. A token is refused when it is unknown, used, expired, or when its wait is over
(answered another way, timed out, cancelled, or a newer wait of the same node).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from piw.errors import AnswerInvalid, AnswerTokenRefused, DecisionResolved, PiwError
from piw.run.answers import AnswerReceipt, claim_decision, now_text, read_wait, record_answer
from piw.store.db.channels import ChannelStore, TokenRow, open_channel_store
from piw.store.db.run_database import open_run_database

REFUSED = "This answer link was already used, has expired, or its question is no longer waiting."


def token_wait(home: Path, store: ChannelStore, token: str) -> TokenRow:
    """The token's row when it can still answer (unused, unexpired, its decision open); else refused."""
    row = store.get_token(token)
    if row is None or row.used_at is not None or row.expires_at <= store.clock():
        raise AnswerTokenRefused(REFUSED)
    decision = open_run_database(home).decisions.get_decision(row.decision_id)
    if decision is None or decision.status != "open" or decision.request_sha256 != row.request_sha256:
        raise AnswerTokenRefused(REFUSED)
    return row


def answer_with_token(
    home: Path,
    token: str,
    choice: str | None,
    texts: Mapping[str, str],
    answered_by: str,
    store: ChannelStore | None = None,
) -> AnswerReceipt:
    """Use ``token`` to decide its gate with ``choice`` (the token's own when it is a button's); the receipt.

    ``AnswerTokenRefused`` for a used, expired or stale token; ``AnswerInvalid`` for an answer that does not fit
    (the token stays usable, so the person can fix it); ``DecisionResolved`` when another answer won meanwhile.
    """
    store = store or open_channel_store(home)
    token_wait(home, store, token)
    row = store.take_token(token, answered_by)
    if row is None:
        raise AnswerTokenRefused(REFUSED)
    picked = row.choice or choice
    try:
        if picked is None or (row.choice is not None and choice not in (None, row.choice)):
            raise AnswerInvalid("Pick one of the choices.")
        database = open_run_database(home)
        wait, state = read_wait(home, row.run_id)
        if wait.decision_id != row.decision_id:
            raise AnswerTokenRefused(REFUSED)
        claim = claim_decision(
            wait, picked, texts, answered_by=answered_by, seen_sha256=row.request_sha256, now_iso=now_text()
        )
        receipt, _ = record_answer(home, database, claim, state)
    except AnswerTokenRefused:
        raise
    except AnswerInvalid as exc:
        if "not waiting" in str(exc):
            raise AnswerTokenRefused(REFUSED) from None
        store.give_back(token)
        raise
    except DecisionResolved:
        raise
    except PiwError:
        store.give_back(token)  # not recorded for a reason that may pass (a busy database): try again
        raise
    return receipt
