"""The schema of ``piw.sqlite``: every table (:data:`TABLES`), index (:data:`INDEXES`) and the digest that names
them (``docs/detached.md``, "What the database holds").

A feature that keeps rows in the run database adds its table here as one block with a comment naming it, and its
PostgreSQL twin as a numbered migration under ``piw/store/pg/migrations/`` (``docs/many-machines.md``). Changing
anything here changes :func:`ddl_sha256`, which every open checks (``piw.store.db.database``).
"""

from __future__ import annotations

import hashlib
import json

from piw.store.db.ddl import TableSpec

SCHEMA_ID = "piw.sqlite.v1"

TABLES: dict[str, TableSpec] = {
    # Index cache of run summaries: rebuilt from the bundles, never used for recovery decisions.
    "runs": TableSpec(
        columns={
            "run_id": str,
            "workflow_name": str,
            "run_title": str,
            "status": str,
            "paused": int,
            "parent_run_id": str,
            "started_at": int,
            "updated_at": int,
            "finished_at": int,
            "trace_seq": int,
            "current_node": str,
            "notice": str,  # set when the bundle could not be replayed (the row then comes from the manifest)
            "cost": float,  # USD over the run's model requests, when every part is known
            "damage_line": int,  # the trace's first damaged line; the row shows its readable prefix
            "usage_json": str,  # the run's usage, or its spend when it has a budget
            "trace_stamp": str,  # size:mtime_ns of trace.ndjson when the row was computed
            # Finding runs (piw runs --search/--schedule, docs/cli.md): title and input as text, the schedule fire.
            "search_text": str,
            "schedule_name": str,
            "fire_at": int,
        },
        pk="run_id",
        not_null=("workflow_name", "status"),
        defaults={"paused": 0, "trace_seq": 0},
    ),
    # The authoritative queue and claims (docs/detached.md).
    "run_queue": TableSpec(
        columns={
            "run_id": str,
            "workflow_ref": str,
            "workflow_source_json": str,
            "definition_digest": str,
            "input_json": str,
            "options_json": str,  # provider, model, script, title the run was started with (never keys)
            "status": str,
            "claim_token": str,
            "claim_generation": int,
            "claim_expires_at": int,
            "runner_id": str,
            "available_at": int,
            "affinity_runner_id": str,
            "origin_session_id": str,
            "park_reason": str,
            "pause_requested": int,
            "cancel_requested": int,
            "parent_run_id": str,
            "error_message": str,
            "created_at": int,
            "updated_at": int,
        },
        pk="run_id",
        not_null=("status", "claim_generation", "available_at", "pause_requested", "cancel_requested"),
        defaults={"claim_generation": 0, "available_at": 0, "pause_requested": 0, "cancel_requested": 0},
    ),
    # The notification outbox.
    "notifications": TableSpec(
        columns={
            "notification_id": str,
            "run_id": str,
            "node_id": str,
            "attempt_id": str,
            "notification_index": int,
            "kind": str,
            "target_session_id": str,
            "content": str,
            "content_sha256": str,
            "created_at": int,
            "delivery_token": str,
            "delivery_expires_at": int,
            "delivered_at": int,
        },
        pk="notification_id",
        not_null=("run_id", "node_id", "notification_index", "kind"),
    ),
    # Human decisions: one immutable winner per decision (docs/checkpoints.md).
    "human_decisions": TableSpec(
        columns={
            "decision_id": str,
            "run_id": str,
            "node_id": str,
            "attempt_id": str,
            "request_json": str,
            "request_sha256": str,
            "expires_at": int,
            "on_timeout_json": str,
            "status": str,
            "response_json": str,
            "provenance": str,
            "answered_by": str,
            "resolved_at": int,
            "continuation_run_id": str,
        },
        pk="decision_id",
        not_null=("run_id", "node_id", "status"),
        defaults={"status": "open"},
    ),
    # Schedules and their fires (issue 33, docs/schedules.md; piw.store.db.schedules).
    "schedules": TableSpec(
        columns={
            "name": str,
            "workflow_ref": str,
            "input_json": str,
            "timing_json": str,
            "missed": str,
            "max_backlog": int,
            "overlap": str,
            "budget": str,
            "title": str,
            "paused": int,
            "held_json": str,
            "cursor_at": int,
            "created_at": int,
            "updated_at": int,
        },
        pk="name",
        not_null=("workflow_ref", "timing_json", "missed", "max_backlog", "overlap", "paused", "cursor_at"),
        defaults={"paused": 0},
    ),
    "schedule_fires": TableSpec(
        columns={
            "schedule_name": str,
            "fire_at": int,
            "state": str,
            "run_id": str,
            "claimer": str,
            "claim_expires_at": int,
            "note": str,
            "created_at": int,
            "updated_at": int,
        },
        pk=("schedule_name", "fire_at"),
        not_null=("state",),
    ),
    # Command-level idempotency records.
    "idempotency": TableSpec(
        columns={
            "scope": str,
            "key": str,
            "request_sha256": str,
            "receipt_json": str,
            "created_at": int,
        },
        pk=("scope", "key"),
        not_null=("request_sha256",),
    ),
    # piw serve: API tokens, only the SHA-256 of each secret (docs/serve.md, piw.store.db.tokens).
    "api_tokens": TableSpec(
        columns={
            "name": str,
            "scope": str,
            "token_sha256": str,
            "created_at": int,
            "expires_at": int,
            "revoked_at": int,
        },
        pk="name",
        not_null=("scope", "token_sha256", "created_at"),
    ),
    # Shared provider rate limits: one token bucket per provider and the requests in flight (docs/rate-limits.md).
    "rate_limits": TableSpec(
        columns={
            "bucket": str,
            "requests": float,  # request tokens left (requests_per_minute)
            "tokens": float,  # model tokens left (tokens_per_minute); below 0 after a large request
            "refilled_at": int,
            "paused_until": int,  # a 429 with Retry-After: every caller waits until then
            "pause_reason": str,
        },
        pk="bucket",
        not_null=("requests", "tokens", "refilled_at", "paused_until"),
        defaults={"paused_until": 0},
    ),
    "rate_limit_slots": TableSpec(
        columns={"slot_id": str, "bucket": str, "holder": str, "acquired_at": int, "expires_at": int},
        pk="slot_id",
        not_null=("bucket", "holder", "expires_at"),
    ),
    # Channels (docs/channels.md): one post per wait and channel, the answer tokens its buttons carry (hashes
    # only), and each Telegram bot's getUpdates offset with the lease of the one host that polls it.
    "channel_posts": TableSpec(
        columns={
            "post_id": str,
            "decision_id": str,
            "run_id": str,
            "node_id": str,
            "channel": str,
            "request_sha256": str,
            "status": str,
            "sends": int,
            "attempts": int,
            "due_at": int,
            "last_error": str,
            "lease_token": str,
            "lease_expires_at": int,
            "sent_at": int,
            "created_at": int,
        },
        pk="post_id",
        not_null=("decision_id", "run_id", "channel", "status"),
        defaults={"status": "pending", "sends": 0, "attempts": 0},
    ),
    "answer_tokens": TableSpec(
        columns={
            "token_sha256": str,
            "post_id": str,
            "decision_id": str,
            "run_id": str,
            "request_sha256": str,
            "channel": str,
            "choice": str,
            "expires_at": int,
            "used_at": int,
            "used_by": str,
            "created_at": int,
        },
        pk="token_sha256",
        not_null=("decision_id", "run_id", "channel", "expires_at"),
    ),
    "channel_cursors": TableSpec(
        columns={"channel": str, "cursor": int, "holder": str, "lease_expires_at": int},
        pk="channel",
    ),
}

SCHEMA_INFO = TableSpec(columns={"id": int, "schema_id": str, "ddl_sha256": str}, pk="id")
"""The one-row table naming the schema a file holds (checked on every open, not part of ``ddl_sha256``)."""

INDEXES: tuple[str, ...] = (
    # One continuation per parent (a checkpoint answer), enforced by the database (docs/checkpoints.md).
    "CREATE UNIQUE INDEX IF NOT EXISTS run_queue_one_continuation ON run_queue(parent_run_id) "
    "WHERE parent_run_id IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS run_queue_claimable ON run_queue(status, available_at)",
    "CREATE UNIQUE INDEX IF NOT EXISTS notifications_one_per_index "
    "ON notifications(run_id, node_id, notification_index)",
    "CREATE INDEX IF NOT EXISTS notifications_undelivered ON notifications(delivered_at, target_session_id)",
    "CREATE INDEX IF NOT EXISTS human_decisions_open ON human_decisions(status, expires_at)",
    "CREATE INDEX IF NOT EXISTS human_decisions_run ON human_decisions(run_id, node_id)",
    "CREATE INDEX IF NOT EXISTS runs_started ON runs(started_at)",
    # piw serve: a token is found by its digest (docs/serve.md).
    "CREATE UNIQUE INDEX IF NOT EXISTS api_tokens_digest ON api_tokens(token_sha256)",
    "CREATE INDEX IF NOT EXISTS rate_limit_slots_bucket ON rate_limit_slots(bucket)",
    # Channels (docs/channels.md): one post per decision and channel; due posts; a post's tokens.
    "CREATE UNIQUE INDEX IF NOT EXISTS channel_posts_one_per_wait ON channel_posts(decision_id, channel)",
    "CREATE INDEX IF NOT EXISTS channel_posts_due ON channel_posts(due_at) WHERE due_at IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS answer_tokens_decision ON answer_tokens(decision_id)",
    # Schedules: the fires a host looks at again (issue 33).
    "CREATE INDEX IF NOT EXISTS schedule_fires_pending ON schedule_fires(state) "
    "WHERE state IN ('claimed', 'queued')",
    "CREATE INDEX IF NOT EXISTS schedule_fires_run ON schedule_fires(run_id)",
)


def ddl_sha256() -> str:
    """The digest of the schema this piw writes: every table spec and index statement, canonical JSON."""
    canonical = {
        "schema": SCHEMA_ID,
        "tables": {name: spec.canonical() for name, spec in sorted(TABLES.items())},
        "indexes": list(INDEXES),
    }
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
