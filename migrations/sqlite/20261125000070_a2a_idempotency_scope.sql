-- Idempotency keys are scoped per caller and endpoint (the hub, or one agent's), and remember
-- a fingerprint of the request they started, so the same key with another request is refused.
-- Rows from before keep the hub scope and no fingerprint.
CREATE TABLE a2a_idempotency_new (
    owner       TEXT NOT NULL,
    scope       TEXT NOT NULL,
    key         TEXT NOT NULL,
    fingerprint TEXT,
    task_id     TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (owner, scope, key)
);
INSERT INTO a2a_idempotency_new (owner, scope, key, fingerprint, task_id, created_at)
    SELECT owner, '', key, NULL, task_id, created_at FROM a2a_idempotency;
DROP TABLE a2a_idempotency;
ALTER TABLE a2a_idempotency_new RENAME TO a2a_idempotency;
