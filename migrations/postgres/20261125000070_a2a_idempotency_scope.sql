-- Idempotency keys are scoped per caller and endpoint (the hub, or one agent's), and remember
-- a fingerprint of the request they started, so the same key with another request is refused.
-- Rows from before keep the hub scope and no fingerprint.
ALTER TABLE a2a_idempotency ADD COLUMN scope TEXT NOT NULL DEFAULT '';
ALTER TABLE a2a_idempotency ADD COLUMN fingerprint TEXT;
ALTER TABLE a2a_idempotency DROP CONSTRAINT a2a_idempotency_pkey;
ALTER TABLE a2a_idempotency ADD PRIMARY KEY (owner, scope, key);
