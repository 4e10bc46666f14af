"""Channel posts, answer tokens and poll cursors in the run database (``docs/channels.md``).

- **One post per wait and channel.** A gate that opens queues ``(decision_id, channel)`` with ``INSERT OR
  IGNORE`` and reads it back, like the notification outbox (``piw.store.db.outbox``): a rerun after a crash, on
  this host or another, finds the same row, so the person is told once. Delivering it is a lease on the row
  (:data:`POST_LEASE_MS`): whoever holds it sends, then marks it sent with its token; a failed send keeps the row
  ``pending`` with a later ``due_at`` (backoff) and the error, which ``piw inspect`` shows. A reminder is the same
  row due again (``sends`` counts what was sent).
- **Answer tokens** are stored as SHA-256 hashes only; the token itself exists in the message sent and nowhere
  else. :meth:`ChannelStore.take_token` uses one in a single ``UPDATE … WHERE used_at IS NULL AND expires_at >
  now``, so two presses of one button cannot both pass.
- **Poll cursors**: a Telegram bot answers ``getUpdates`` for one poller at a time, so hosts take a lease on the
  bot's cursor row and only the holder polls.

The SQL is written once for both dialects: :func:`open_channel_store` gives SQLite's, or in database mode
PostgreSQL's with the database clock (tables: migration ``0005_channels.sql``).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Any

from piw.store.db.database import Clock, Database, now_ms
from piw.store.db.dialect import POSTGRES, SQLITE, Dialect
from piw.wire import sha256_hex

POST_LEASE_MS = 60_000
CURSOR_LEASE_MS = 90_000
MAX_ERROR_CHARS = 300
RETRY_BASE_MS = 5_000
RETRY_MAX_MS = 600_000
MAX_ATTEMPTS = 30
"""After this many failed sends in a row the post is ``failed`` (shown by ``piw inspect``; the run is unaffected)."""


def post_id(decision_id: str, channel: str) -> str:
    return "chp_" + sha256_hex(f"{decision_id}/{channel}")[:32]


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def backoff_ms(attempts: int) -> int:
    """The wait before retry number ``attempts`` (1, 2, …): 5 s doubling, at most 10 min."""
    return int(min(RETRY_MAX_MS, RETRY_BASE_MS * 2 ** max(0, attempts - 1)))


@dataclass(frozen=True)
class PostRow:
    post_id: str
    decision_id: str
    run_id: str
    node_id: str
    channel: str
    request_sha256: str | None
    status: str
    """``pending`` (not sent yet, or retrying), ``sent``, ``failed`` (gave up), ``closed`` (the wait ended)."""
    sends: int
    attempts: int
    due_at: int | None
    last_error: str | None
    lease_token: str | None
    lease_expires_at: int | None
    sent_at: int | None
    created_at: int | None

    def to_json(self) -> dict[str, Any]:
        return {
            "postId": self.post_id,
            "channel": self.channel,
            "decisionId": self.decision_id,
            "nodeId": self.node_id,
            "status": self.status,
            "sends": self.sends,
            "attempts": self.attempts,
            "dueAt": self.due_at,
            "lastError": self.last_error,
            "sentAt": self.sent_at,
        }


@dataclass(frozen=True)
class TokenRow:
    token_sha256: str
    post_id: str | None
    decision_id: str
    run_id: str
    request_sha256: str | None
    channel: str
    choice: str | None
    """The one choice this token answers (a button), or ``None`` (a page link: any choice)."""
    expires_at: int
    used_at: int | None
    used_by: str | None
    created_at: int | None


_POST_COLUMNS = tuple(PostRow.__dataclass_fields__)
_TOKEN_COLUMNS = tuple(TokenRow.__dataclass_fields__)
_POSTS = f"SELECT {', '.join(_POST_COLUMNS)} FROM channel_posts"
_TOKENS = f"SELECT {', '.join(_TOKEN_COLUMNS)} FROM answer_tokens"


class ChannelStore:
    """The ``channel_posts``, ``answer_tokens`` and ``channel_cursors`` tables."""

    def __init__(self, db: Database, clock: Clock = now_ms, dialect: Dialect = SQLITE) -> None:
        self.db = db
        self.clock = clock
        self.dialect = dialect

    # ---- posts --------------------------------------------------------------------------------------------

    def queue_post(
        self, *, decision_id: str, run_id: str, node_id: str, channel: str, request_sha256: str
    ) -> PostRow:
        """The wait's post on ``channel``: inserted unless present, then read back."""
        ident = post_id(decision_id, channel)
        now = self.clock()
        with self.db.transaction() as conn:
            conn.execute(
                self.dialect.insert(
                    "channel_posts",
                    (
                        "post_id",
                        "decision_id",
                        "run_id",
                        "node_id",
                        "channel",
                        "request_sha256",
                        "status",
                        "sends",
                        "attempts",
                        "due_at",
                        "created_at",
                    ),
                    ignore=True,
                ),
                (ident, decision_id, run_id, node_id, channel, request_sha256, "pending", 0, 0, now, now),
            )
            found = conn.execute(self.dialect.sql(f"{_POSTS} WHERE post_id = ?"), (ident,)).fetchone()
        return PostRow(*found)

    def posts_of(self, run_id: str) -> list[PostRow]:
        found = self.db.connection().execute(
            self.dialect.sql(f"{_POSTS} WHERE run_id = ? ORDER BY channel, post_id"), (run_id,)
        )
        return [PostRow(*values) for values in found.fetchall()]

    def lease_due(self, *, run_id: str | None = None, limit: int = 20) -> list[PostRow]:
        """Take the delivery lease of due posts nobody holds (of one run, when given); each gets its own token."""
        now = self.clock()
        sql = self.dialect.sql
        where = "due_at IS NOT NULL AND due_at <= ? AND (lease_expires_at IS NULL OR lease_expires_at <= ?)"
        params: list[Any] = [now, now]
        if run_id is not None:
            where += " AND run_id = ?"
            params.append(run_id)
        taken: list[PostRow] = []
        with self.db.transaction() as conn:
            found = conn.execute(
                sql(f"SELECT post_id FROM channel_posts WHERE {where} ORDER BY due_at, post_id LIMIT ?"),
                (*params, limit),
            ).fetchall()
            for (ident,) in found:
                cursor = conn.execute(
                    sql(
                        "UPDATE channel_posts SET lease_token = ?, lease_expires_at = ? WHERE post_id = ? "
                        "AND (lease_expires_at IS NULL OR lease_expires_at <= ?)"
                    ),
                    (secrets.token_hex(16), now + POST_LEASE_MS, ident, now),
                )
                if cursor.rowcount == 1:
                    row = conn.execute(sql(f"{_POSTS} WHERE post_id = ?"), (ident,)).fetchone()
                    taken.append(PostRow(*row))
        return taken

    def _finish(self, post: PostRow, assignments: str, params: tuple[Any, ...]) -> bool:
        with self.db.transaction() as conn:
            cursor = conn.execute(
                self.dialect.sql(
                    f"UPDATE channel_posts SET {assignments}, lease_token = NULL, lease_expires_at = NULL "
                    "WHERE post_id = ? AND lease_token = ?"
                ),
                (*params, post.post_id, post.lease_token),
            )
            return cursor.rowcount == 1

    def mark_sent(self, post: PostRow, next_due: int | None) -> bool:
        """One send succeeded; ``next_due`` is the reminder's time (``None``: nothing more to send)."""
        return self._finish(
            post,
            "status = 'sent', sends = sends + 1, attempts = 0, last_error = NULL, sent_at = ?, due_at = ?",
            (self.clock(), next_due),
        )

    def mark_failed(self, post: PostRow, error: str) -> bool:
        """A send failed: retried after a backoff, given up (``failed``) after :data:`MAX_ATTEMPTS`."""
        attempts = post.attempts + 1
        gave_up = attempts >= MAX_ATTEMPTS
        status = "failed" if gave_up else ("sent" if post.sends else "pending")
        due = None if gave_up else self.clock() + backoff_ms(attempts)
        return self._finish(
            post,
            "status = ?, attempts = ?, last_error = ?, due_at = ?",
            (status, attempts, error[:MAX_ERROR_CHARS], due),
        )

    def postpone(self, post: PostRow, due: int) -> bool:
        """Not sendable yet (its run is still writing the gate): looked at again at ``due``."""
        return self._finish(post, "due_at = ?", (due,))

    def mark_closed(self, post: PostRow) -> bool:
        """The wait ended (answered, timed out, cancelled): nothing more is sent."""
        return self._finish(
            post, "status = CASE WHEN sends > 0 THEN 'sent' ELSE 'closed' END, due_at = NULL", ()
        )

    # ---- tokens -------------------------------------------------------------------------------------------

    def mint_token(self, post: PostRow, choice: str | None, expires_at: int) -> str:
        """A new single-use answer token for ``post`` (one choice, or any with ``None``); only its hash is kept."""
        token = secrets.token_urlsafe(18)
        with self.db.transaction() as conn:
            conn.execute(
                self.dialect.insert("answer_tokens", _TOKEN_COLUMNS),
                (
                    token_hash(token),
                    post.post_id,
                    post.decision_id,
                    post.run_id,
                    post.request_sha256,
                    post.channel,
                    choice,
                    expires_at,
                    None,
                    None,
                    self.clock(),
                ),
            )
        return token

    def get_token(self, token: str) -> TokenRow | None:
        found = self.db.connection().execute(
            self.dialect.sql(f"{_TOKENS} WHERE token_sha256 = ?"), (token_hash(token),)
        )
        row = found.fetchone()
        return None if row is None else TokenRow(*row)

    def take_token(self, token: str, used_by: str) -> TokenRow | None:
        """Use ``token`` once: the row when this call used it, ``None`` when it is unknown, used or expired."""
        now = self.clock()
        ident = token_hash(token)
        with self.db.transaction() as conn:
            cursor = conn.execute(
                self.dialect.sql(
                    "UPDATE answer_tokens SET used_at = ?, used_by = ? WHERE token_sha256 = ? AND used_at IS NULL "
                    "AND expires_at > ?"
                ),
                (now, used_by, ident, now),
            )
            if cursor.rowcount != 1:
                return None
            row = conn.execute(self.dialect.sql(f"{_TOKENS} WHERE token_sha256 = ?"), (ident,)).fetchone()
        return TokenRow(*row)

    def give_back(self, token: str) -> None:
        """The answer a token carried was not recorded for a reason the person can fix (a blank text): usable
        again."""
        with self.db.transaction() as conn:
            conn.execute(
                self.dialect.sql(
                    "UPDATE answer_tokens SET used_at = NULL, used_by = NULL WHERE token_sha256 = ?"
                ),
                (token_hash(token),),
            )

    # ---- poll cursors -------------------------------------------------------------------------------------

    def hold_cursor(self, channel: str, holder: str) -> int | None:
        """Take or renew the poll lease of ``channel``; its cursor when this holder has it, else ``None``."""
        now = self.clock()
        sql = self.dialect.sql
        with self.db.transaction() as conn:
            conn.execute(
                self.dialect.insert("channel_cursors", ("channel", "cursor"), ignore=True), (channel, 0)
            )
            cursor = conn.execute(
                sql(
                    "UPDATE channel_cursors SET holder = ?, lease_expires_at = ? WHERE channel = ? AND "
                    "(holder IS NULL OR holder = ? OR lease_expires_at IS NULL OR lease_expires_at <= ?)"
                ),
                (holder, now + CURSOR_LEASE_MS, channel, holder, now),
            )
            if cursor.rowcount != 1:
                return None
            row = conn.execute(
                sql("SELECT cursor FROM channel_cursors WHERE channel = ?"), (channel,)
            ).fetchone()
        return int(row[0] or 0)

    def advance_cursor(self, channel: str, holder: str, value: int) -> bool:
        with self.db.transaction() as conn:
            cursor = conn.execute(
                self.dialect.sql(
                    "UPDATE channel_cursors SET cursor = ? WHERE channel = ? AND holder = ? AND cursor < ?"
                ),
                (value, channel, holder, value),
            )
            return cursor.rowcount == 1

    def release_cursor(self, channel: str, holder: str) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                self.dialect.sql(
                    "UPDATE channel_cursors SET holder = NULL, lease_expires_at = NULL WHERE channel = ? AND holder = ?"
                ),
                (channel, holder),
            )


def open_channel_store(home: Any, clock: Clock | None = None) -> ChannelStore:
    """The channel tables of ``home``'s run database (``piw.sqlite``, or PostgreSQL in database mode)."""
    from piw.store.place import database_place

    place = database_place(home)
    if place is not None:
        from piw.store.pg.clock import ClockedDatabase

        database = ClockedDatabase(place.db, clock)
        # ClockedDatabase's transaction() and connection() are shaped like SQLite's Database.
        return ChannelStore(database, database.clock, POSTGRES)  # type: ignore[arg-type]
    from piw.store.db.database import open_database

    return ChannelStore(open_database(home), clock or now_ms)
