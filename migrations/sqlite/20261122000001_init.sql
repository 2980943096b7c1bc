-- switchboard schema, SQLite. Times are unix milliseconds; ids are TEXT.

CREATE TABLE threads (
    id          TEXT PRIMARY KEY,
    transport   TEXT NOT NULL,
    thread_key  TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    UNIQUE (transport, thread_key)
);

-- Inbound NormalizedMessages (direction 'in') and agents' NormalizedResponses ('out').
CREATE TABLE messages (
    seq         INTEGER PRIMARY KEY,
    id          TEXT NOT NULL UNIQUE,
    thread_id   TEXT NOT NULL REFERENCES threads (id),
    direction   TEXT NOT NULL CHECK (direction IN ('in', 'out')),
    agent       TEXT NOT NULL,
    transport   TEXT NOT NULL,
    answers     TEXT UNIQUE,
    body        TEXT NOT NULL,
    created_at  INTEGER NOT NULL
);
CREATE INDEX messages_thread ON messages (thread_id, seq);

-- Dedupe of inbound wire messages by (transport, external id).
CREATE TABLE inbound_seen (
    transport   TEXT NOT NULL,
    external_id TEXT NOT NULL,
    message_id  TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (transport, external_id)
);

-- The durable queue.
CREATE TABLE jobs (
    id           TEXT PRIMARY KEY,
    kind         TEXT NOT NULL,
    payload      TEXT NOT NULL,
    state        TEXT NOT NULL CHECK (state IN ('ready', 'running', 'done', 'dead')),
    attempts     INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL,
    run_at       INTEGER NOT NULL,
    lease_owner  TEXT,
    lease_until  INTEGER,
    last_error   TEXT,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL
);
CREATE INDEX jobs_claim ON jobs (kind, state, run_at);

-- The outcome of every finished delivery, kept after its job is purged.
CREATE TABLE deliveries (
    job_id      TEXT PRIMARY KEY,
    response_id TEXT NOT NULL,
    transport   TEXT NOT NULL,
    outcome     TEXT NOT NULL,
    attempts    INTEGER NOT NULL,
    detail      TEXT,
    finished_at INTEGER NOT NULL
);
CREATE INDEX deliveries_response ON deliveries (response_id);
