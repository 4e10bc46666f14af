-- kind: expand
-- piw serve's API tokens (docs/serve.md): a name, a scope, an expiry and only the SHA-256 of the secret, as
-- SQLite mode's api_tokens table holds them (piw.store.db.tokens shares the statements). Additive: older piws
-- never read it.
CREATE TABLE api_tokens (
  name text PRIMARY KEY,
  scope text NOT NULL CHECK (scope IN ('read', 'answer', 'operate')),
  token_sha256 text NOT NULL,
  created_at bigint NOT NULL,
  expires_at bigint,
  revoked_at bigint
);
CREATE UNIQUE INDEX api_tokens_digest ON api_tokens (token_sha256);
