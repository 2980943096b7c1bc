-- The single-use `state` of every policy part an agent sent (consent, payment, sign-in…),
-- bound to the agent, the thread and the evidence of the sender it was sent to. A later turn
-- that carries the state (A2A message metadata, or the landing page a link leads to) consumes
-- it; a state already consumed, expired, or presented for another agent, thread or sender is
-- refused. `part` is the policy part as sent, for the landing page.
CREATE TABLE policy_states (
    state        TEXT PRIMARY KEY,
    agent        TEXT NOT NULL,
    thread_id    TEXT NOT NULL,
    message_id   TEXT NOT NULL,
    response_id  TEXT NOT NULL,
    kind         TEXT NOT NULL,
    binding      TEXT NOT NULL,
    part         TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    consumed_at  INTEGER,
    consumed_by  TEXT
);
CREATE INDEX policy_states_expiry ON policy_states (expires_at);
