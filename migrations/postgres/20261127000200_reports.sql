-- Remote actors that blocked one of our agents (ActivityPub `Block`, until its `Undo`): the agent
-- never addresses or delivers to them, and their messages to it are stored but not answered.
-- `activity_id` is the Block's id, so an `Undo` naming only that id finds it.
CREATE TABLE ap_blocked_by (
    agent       TEXT NOT NULL,
    actor       TEXT NOT NULL,
    activity_id TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (agent, actor)
);
CREATE INDEX ap_blocked_by_actor ON ap_blocked_by (actor);

-- The last delivery error of a host (set with each failure, kept after a success), for the
-- operator's remote-hosts page.
ALTER TABLE ap_hosts ADD COLUMN last_error TEXT;

-- Reports of abuse received from remote servers (ActivityPub `Flag`): who reported (often an
-- instance actor), from which host, the reported objects (a JSON array of our actor and note
-- IRIs), the reporter's comment. One row per report activity.
CREATE TABLE reports (
    id          TEXT PRIMARY KEY,
    activity_id TEXT NOT NULL UNIQUE,
    transport   TEXT NOT NULL,
    reporter    TEXT NOT NULL,
    host        TEXT NOT NULL,
    agent       TEXT,
    objects     TEXT NOT NULL,
    content     TEXT NOT NULL,
    received_at BIGINT NOT NULL
);
CREATE INDEX reports_received ON reports (received_at, id);
