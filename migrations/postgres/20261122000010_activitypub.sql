-- ActivityPub transport: followers, cached remote actors, notes (ours and received), seen
-- activity ids, and per-host delivery health. Times are unix milliseconds.

CREATE TABLE ap_followers (
    agent        TEXT NOT NULL,
    actor        TEXT NOT NULL,
    inbox        TEXT NOT NULL,
    follow_id    TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    PRIMARY KEY (agent, actor)
);

CREATE TABLE ap_actors (
    id           TEXT PRIMARY KEY,
    doc          TEXT NOT NULL,
    fetched_at   BIGINT NOT NULL
);

-- kind: 'out' (a note one of our agents posted) or 'in' (a note that woke an agent).
CREATE TABLE ap_objects (
    id           TEXT PRIMARY KEY,
    kind         TEXT NOT NULL CHECK (kind IN ('in', 'out')),
    agent        TEXT NOT NULL,
    author       TEXT NOT NULL,
    message_id   TEXT,
    thread_key   TEXT NOT NULL,
    public       BIGINT NOT NULL,
    body         TEXT NOT NULL,
    deleted      BIGINT NOT NULL DEFAULT 0,
    created_at   BIGINT NOT NULL,
    updated_at   BIGINT NOT NULL
);
CREATE INDEX ap_objects_outbox ON ap_objects (agent, kind, created_at);

CREATE TABLE ap_seen (
    id           TEXT PRIMARY KEY,
    created_at   BIGINT NOT NULL
);

CREATE TABLE ap_hosts (
    host          TEXT PRIMARY KEY,
    failing_since BIGINT,
    failures      BIGINT NOT NULL DEFAULT 0,
    rfc9421       BIGINT NOT NULL DEFAULT 0,
    updated_at    BIGINT NOT NULL
);
