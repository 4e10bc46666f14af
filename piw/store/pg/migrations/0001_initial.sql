-- kind: expand
-- The first schema of piw on PostgreSQL (docs/many-machines.md): the queue and its claims, the trace as rows, the
-- run bundles' immutable parts, artifacts, session entries, the runs index, decisions, idempotency, the outbox and
-- the hosts list. Applied by piw.store.pg.migrate inside one transaction under the migration advisory lock, with
-- search_path set to the configured schema (every name below is unqualified). schema_migrations is created by
-- the migrator itself, before this file, since it records this file.
--
-- Times are bigint epoch milliseconds from now_ms(), the database clock: every lease comparison uses it, never a
-- host's clock. JSON values are stored as text, exactly as SQLite mode stores them (sorted keys, compact), so the
-- row codec is shared and a value reads back byte for byte.

-- The database clock. The session setting piw.now_ms pins it (the conformance suite's injected clock, a test
-- hook only: a host never sets it).
CREATE FUNCTION now_ms() RETURNS bigint LANGUAGE sql VOLATILE AS $$
  SELECT coalesce(nullif(current_setting('piw.now_ms', true), '')::bigint,
                  (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
$$;

-- LISTEN/NOTIFY channels are database-wide: each schema gets its own, named '<schema>_<kind>' (piw_trace,
-- piw_queue, piw_flags for the default schema). wake('trace', run_id) sends one notification.
CREATE FUNCTION channel(kind text) RETURNS text LANGUAGE sql STABLE AS $$
  SELECT current_schema() || '_' || kind
$$;
CREATE FUNCTION wake(kind text, payload text) RETURNS void LANGUAGE sql VOLATILE AS $$
  SELECT pg_notify(channel(kind), payload)
$$;

-- One coordination row per run: the claim, the lease, the flags and the trace head. Every write that matters is
-- conditional on it.
CREATE TABLE run_queue (
  run_id text PRIMARY KEY,
  status text NOT NULL CHECK (status IN ('queued', 'starting', 'running', 'parked', 'done', 'failed', 'cancelled')),
  workflow_ref text,
  workflow_source_json text,
  definition_digest text,
  serve_key text NOT NULL,                  -- which hosts may claim it (set from workflow_source_json if omitted)
  input_json text,
  options_json text,
  claim_token text,
  claim_generation bigint NOT NULL DEFAULT 0,
  claim_expires_at bigint,
  runner_id text,
  available_at bigint NOT NULL DEFAULT 0,
  affinity_runner_id text,
  origin_session_id text,
  park_reason text,
  pause_requested boolean NOT NULL DEFAULT false,
  cancel_requested boolean NOT NULL DEFAULT false,
  parent_run_id text,
  error_message text,
  trace_seq bigint NOT NULL DEFAULT 0,      -- head: the last committed trace seq
  session_seq bigint NOT NULL DEFAULT 0,    -- head of session entries
  priority smallint NOT NULL DEFAULT 0,     -- reserved (later: claims order by it)
  concurrency_key text,                     -- reserved (later: per-key concurrency limits)
  created_at bigint NOT NULL,
  updated_at bigint NOT NULL
);
CREATE UNIQUE INDEX run_queue_one_continuation ON run_queue (parent_run_id) WHERE parent_run_id IS NOT NULL;
CREATE INDEX run_queue_ready ON run_queue (serve_key, created_at, run_id)
  WHERE status IN ('queued', 'parked') AND park_reason IS NULL AND NOT pause_requested AND NOT cancel_requested;
CREATE INDEX run_queue_ready_any ON run_queue (created_at, run_id)
  WHERE status IN ('queued', 'parked') AND park_reason IS NULL AND NOT pause_requested AND NOT cancel_requested;
CREATE INDEX run_queue_affinity ON run_queue (affinity_runner_id, created_at, run_id)
  WHERE affinity_runner_id IS NOT NULL AND status IN ('queued', 'parked') AND park_reason IS NULL
    AND NOT pause_requested AND NOT cancel_requested;
CREATE INDEX run_queue_held ON run_queue (claim_expires_at) WHERE status IN ('starting', 'running');
CREATE INDEX run_queue_runner ON run_queue (runner_id) WHERE runner_id IS NOT NULL;

-- A row inserted without a serve_key (the row operations SQLite mode shares) gets the SHA-256 of its workflow
-- source, the same value piw.store.pg.queue.default_serve_key computes.
CREATE FUNCTION run_queue_serve_key() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.serve_key IS NULL THEN
    NEW.serve_key := encode(sha256(convert_to(coalesce(NEW.workflow_source_json, ''), 'UTF8')), 'hex');
  END IF;
  RETURN NEW;
END
$$;
CREATE TRIGGER run_queue_serve_key BEFORE INSERT ON run_queue
  FOR EACH ROW EXECUTE FUNCTION run_queue_serve_key();

-- Idle hosts LISTEN on '<schema>_queue': a row that becomes claimable (queued, parked) wakes them.
CREATE FUNCTION run_queue_wake() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify(channel('queue'), NEW.run_id);
  RETURN NULL;
END
$$;
CREATE TRIGGER run_queue_wake AFTER INSERT OR UPDATE OF status ON run_queue
  FOR EACH ROW WHEN (NEW.status IN ('queued', 'parked')) EXECUTE FUNCTION run_queue_wake();

-- The immutable parts of a bundle: workflow.json, and the manifest (a cache, as on disk).
CREATE TABLE run_bundles (
  run_id text PRIMARY KEY REFERENCES run_queue ON DELETE CASCADE,
  workflow_json bytea NOT NULL,
  manifest_json bytea NOT NULL
);

-- The trace: one row per event, line = its exact NDJSON bytes without the newline; seq contiguous from 1.
CREATE TABLE trace_events (
  run_id text NOT NULL,
  seq bigint NOT NULL,
  generation bigint NOT NULL,
  type text NOT NULL,
  line bytea NOT NULL,
  PRIMARY KEY (run_id, seq)
);
CREATE INDEX trace_events_type ON trace_events (run_id, type);

-- Session entries (the agent conversation), the same fenced pattern on run_queue.session_seq.
CREATE TABLE session_entries (
  run_id text NOT NULL,
  seq bigint NOT NULL,
  generation bigint NOT NULL,
  line bytea NOT NULL,
  PRIMARY KEY (run_id, seq)
);

-- Artifacts, bundle-scoped as on disk.
CREATE TABLE artifacts (
  run_id text NOT NULL,
  sha256 text NOT NULL,
  media_type text NOT NULL,
  bytes bytea NOT NULL,
  PRIMARY KEY (run_id, sha256)
);

-- The runs index: a cache of run summaries, never used for recovery decisions (SQLite mode's columns).
CREATE TABLE runs (
  run_id text PRIMARY KEY,
  workflow_name text NOT NULL,
  run_title text,
  status text NOT NULL,
  paused bigint DEFAULT 0,
  parent_run_id text,
  started_at bigint,
  updated_at bigint,
  finished_at bigint,
  trace_seq bigint DEFAULT 0,
  current_node text,
  notice text,
  cost double precision,
  damage_line bigint,
  usage_json text,
  trace_stamp text
);
CREATE INDEX runs_started ON runs (started_at);

-- The notification outbox: exactly one row per node execution.
CREATE TABLE notifications (
  notification_id text PRIMARY KEY,
  run_id text NOT NULL,
  node_id text NOT NULL,
  attempt_id text,
  notification_index bigint NOT NULL,
  kind text NOT NULL,
  target_session_id text,
  content text,
  content_sha256 text,
  created_at bigint,
  delivery_token text,
  delivery_expires_at bigint,
  delivered_at bigint
);
CREATE UNIQUE INDEX notifications_one_per_index ON notifications (run_id, node_id, notification_index);
CREATE INDEX notifications_undelivered ON notifications (created_at, notification_id) WHERE delivered_at IS NULL;

-- Human decisions: one immutable winner per decision.
CREATE TABLE human_decisions (
  decision_id text PRIMARY KEY,
  run_id text NOT NULL,
  node_id text NOT NULL,
  attempt_id text,
  request_json text,
  request_sha256 text,
  expires_at bigint,
  on_timeout_json text,
  status text NOT NULL DEFAULT 'open',
  response_json text,
  provenance text,
  answered_by text,
  resolved_at bigint,
  continuation_run_id text
);
CREATE INDEX human_decisions_open ON human_decisions (expires_at) WHERE status = 'open';
CREATE INDEX human_decisions_run ON human_decisions (run_id, node_id);

-- Command-level idempotency records.
CREATE TABLE idempotency (
  scope text NOT NULL,
  key text NOT NULL,
  request_sha256 text NOT NULL,
  receipt_json text,
  created_at bigint,
  PRIMARY KEY (scope, key)
);

-- Hosts: display only, never correctness (piw hosts, routing hints, migrate --contract's check of live older
-- hosts through schema_max: the highest schema version that host's piw knows).
CREATE TABLE hosts (
  runner_id text PRIMARY KEY,
  hostname text,
  started_at bigint,
  seen_at bigint,
  serve_keys text[],
  concurrency int,
  piw_version text,
  schema_max int
);
