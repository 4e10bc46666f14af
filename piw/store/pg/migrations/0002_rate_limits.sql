-- kind: expand
-- Shared provider rate limits across hosts (docs/rate-limits.md): one token bucket per provider and the requests in
-- flight. A caller locks its bucket row (FOR UPDATE), counts the live slots, takes a request token and inserts a
-- slot in one transaction, so every host of the database sees one limit. Times are now_ms(), the database clock.
CREATE TABLE rate_limits (
  bucket text PRIMARY KEY,
  requests double precision NOT NULL,
  tokens double precision NOT NULL,
  refilled_at bigint NOT NULL,
  paused_until bigint NOT NULL DEFAULT 0,
  pause_reason text
);

CREATE TABLE rate_limit_slots (
  slot_id text PRIMARY KEY,
  bucket text NOT NULL,
  holder text NOT NULL,
  acquired_at bigint NOT NULL,
  expires_at bigint NOT NULL
);
CREATE INDEX rate_limit_slots_bucket ON rate_limit_slots (bucket);
