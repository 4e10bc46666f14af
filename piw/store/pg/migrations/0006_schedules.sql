-- kind: expand
-- Schedules and their fires (issue 33, docs/schedules.md), shared by every host of the database: the same columns
-- as SQLite mode's (piw.store.db.schedules), so the statements are shared. The (schedule_name, fire_at) key is the
-- claim that makes each fire start exactly once, whichever host decides it first.
CREATE TABLE schedules (
  name text PRIMARY KEY,
  workflow_ref text NOT NULL,
  input_json text,
  timing_json text NOT NULL,
  missed text NOT NULL,
  max_backlog bigint NOT NULL,
  overlap text NOT NULL,
  budget text,
  title text,
  paused bigint NOT NULL DEFAULT 0,
  held_json text,
  cursor_at bigint NOT NULL,
  created_at bigint,
  updated_at bigint
);
CREATE TABLE schedule_fires (
  schedule_name text NOT NULL,
  fire_at bigint NOT NULL,
  state text NOT NULL,
  run_id text,
  claimer text,
  claim_expires_at bigint,
  note text,
  created_at bigint,
  updated_at bigint,
  PRIMARY KEY (schedule_name, fire_at)
);
CREATE INDEX schedule_fires_pending ON schedule_fires (state) WHERE state IN ('claimed', 'queued');
CREATE INDEX schedule_fires_run ON schedule_fires (run_id);
