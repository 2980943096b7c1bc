-- A2A tasks, their stored events (for streams, resubscription and Last-Event-ID replay),
-- idempotency keys and push notification configs. Times are unix milliseconds.

CREATE TABLE a2a_tasks (
    id              TEXT PRIMARY KEY,
    agent           TEXT NOT NULL,
    owner           TEXT NOT NULL,
    context_id      TEXT NOT NULL,
    state           TEXT NOT NULL,
    -- The NormalizedMessage id of the turn the task is working on (or last worked on).
    turn_message_id TEXT NOT NULL,
    -- The wire messageId of that turn: a resend while the task runs attaches to it.
    wire_message_id TEXT NOT NULL,
    -- The last NormalizedResponse applied to the task (the next turn's in_reply_to).
    last_response_id TEXT,
    -- The Task document (1.0 ProtoJSON), history and artifacts included.
    body            TEXT NOT NULL,
    last_seq        INTEGER NOT NULL,
    status_at       INTEGER NOT NULL,
    created_at      INTEGER NOT NULL
);
CREATE INDEX a2a_tasks_owner ON a2a_tasks (owner, status_at, id);
CREATE INDEX a2a_tasks_context ON a2a_tasks (context_id);
CREATE INDEX a2a_tasks_wire ON a2a_tasks (owner, wire_message_id);

CREATE TABLE a2a_task_events (
    task_id     TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    -- One StreamResponse (1.0 ProtoJSON), without the JSON-RPC envelope.
    body        TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (task_id, seq)
);

CREATE TABLE a2a_idempotency (
    owner       TEXT NOT NULL,
    key         TEXT NOT NULL,
    task_id     TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (owner, key)
);

CREATE TABLE a2a_push_configs (
    task_id     TEXT NOT NULL,
    id          TEXT NOT NULL,
    owner       TEXT NOT NULL,
    body        TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (task_id, id)
);
