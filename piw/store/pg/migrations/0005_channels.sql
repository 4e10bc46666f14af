-- kind: expand
-- Channels (issue 31, docs/channels.md), shared by every host of the database: the same columns as SQLite mode's
-- (piw.store.db.channels), so the statements are shared. (decision_id, channel) is the key that makes each wait post
-- once on each channel, whichever host queues it; answer tokens are stored as SHA-256 hashes only.
CREATE TABLE channel_posts (
  post_id text PRIMARY KEY,
  decision_id text NOT NULL,
  run_id text NOT NULL,
  node_id text,
  channel text NOT NULL,
  request_sha256 text,
  status text NOT NULL DEFAULT 'pending',
  sends bigint NOT NULL DEFAULT 0,
  attempts bigint NOT NULL DEFAULT 0,
  due_at bigint,
  last_error text,
  lease_token text,
  lease_expires_at bigint,
  sent_at bigint,
  created_at bigint
);
CREATE UNIQUE INDEX channel_posts_one_per_wait ON channel_posts (decision_id, channel);
CREATE INDEX channel_posts_due ON channel_posts (due_at) WHERE due_at IS NOT NULL;
CREATE INDEX channel_posts_run ON channel_posts (run_id);

CREATE TABLE answer_tokens (
  token_sha256 text PRIMARY KEY,
  post_id text,
  decision_id text NOT NULL,
  run_id text NOT NULL,
  request_sha256 text,
  channel text NOT NULL,
  choice text,
  expires_at bigint NOT NULL,
  used_at bigint,
  used_by text,
  created_at bigint
);
CREATE INDEX answer_tokens_decision ON answer_tokens (decision_id);

CREATE TABLE channel_cursors (
  channel text PRIMARY KEY,
  cursor bigint,
  holder text,
  lease_expires_at bigint
);
