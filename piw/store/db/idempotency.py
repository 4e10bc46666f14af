"""Command idempotency records: the ``idempotency`` table, written inside the transaction each record guards.

``piw run --idempotency-key`` (scope ``run.start``), ``piw answer`` (``run.answer``) and ``piw decide``
(``decision.answer``) record ``(scope, key)`` with the SHA-256 of their canonical request and the receipt a repeat
gets back. An exact repeat adopts the stored receipt; a different request under the key is a conflict
(``docs/detached.md``, "What the database holds"; ``docs/checkpoints.md``, "One continuation per checkpoint").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from piw.errors import IdempotencyConflict
from piw.store.db.dialect import SQLITE, Connection, Dialect, dumps, loads

START_SCOPE = "run.start"
Lookup = tuple[Literal["none", "adopted", "conflict"], dict[str, Any] | None]
"""How a command fared against its record: never seen, an exact repeat (with the receipt), or a conflict."""


@dataclass(frozen=True)
class StartKey:
    """``piw run --idempotency-key``: the key, and the SHA-256 of the canonical start request it guards."""

    key: str
    fingerprint: str


@dataclass(frozen=True)
class Adopted:
    """A repeated start with the same key and request: nothing new was created; ``run_id`` is the original run."""

    run_id: str
    key: str
    """The idempotency key that started it."""


def stored(
    conn: Connection, scope: str, key: str, dialect: Dialect = SQLITE
) -> tuple[str, dict[str, Any]] | None:
    """The recorded ``(fingerprint, receipt)`` of ``(scope, key)``, if any."""
    found = conn.execute(
        dialect.sql("SELECT request_sha256, receipt_json FROM idempotency WHERE scope = ? AND key = ?"),
        (scope, key),
    ).fetchone()
    return None if found is None else (str(found[0]), loads(found[1]) or {})


def lookup(conn: Connection, scope: str, key: str, fingerprint: str, dialect: Dialect = SQLITE) -> Lookup:
    """``none`` (never seen), ``adopted`` (same fingerprint: the receipt) or ``conflict`` (and the receipt)."""
    found = stored(conn, scope, key, dialect)
    if found is None:
        return "none", None
    return ("adopted" if found[0] == fingerprint else "conflict"), found[1]


def record(
    conn: Connection,
    scope: str,
    key: str,
    fingerprint: str,
    receipt: dict[str, Any],
    now: int,
    dialect: Dialect = SQLITE,
) -> None:
    """Inside the transaction it guards: the first record of ``(scope, key)`` stands."""
    columns = ("scope", "key", "request_sha256", "receipt_json", "created_at")
    conn.execute(dialect.insert("idempotency", columns), (scope, key, fingerprint, dumps(receipt), now))


def guard_start(
    conn: Connection, start: StartKey, run_id: str, now: int, dialect: Dialect = SQLITE
) -> Adopted | None:
    """``run.start`` idempotency, inside the transaction that inserts the run's queue row.

    The first start with a key records ``{runId}`` and returns ``None``; an exact repeat returns :class:`Adopted`
    with that run, and the caller inserts nothing. Any other request under the key raises
    ``IdempotencyConflict``, which rolls the caller's transaction back, so no row (and, since the row comes
    before the bundle, no bundle) is created.
    """
    found = stored(conn, START_SCOPE, start.key, dialect)
    if found is None:
        record(conn, START_SCOPE, start.key, start.fingerprint, {"runId": run_id}, now, dialect)
        return None
    original = str(found[1].get("runId", ""))
    if found[0] == start.fingerprint:
        return Adopted(original, start.key)
    raise IdempotencyConflict(
        f"Idempotency key {start.key!r} already started run {original} with a different request (workflow, input, "
        "title, budget or provider); use a new key, or repeat the original command to get that run."
    )
