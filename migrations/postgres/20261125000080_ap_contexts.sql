-- Thread contexts switchboard mints (FEP-7888) for replies in threads whose notes carried
-- none: one per thread key, served at {actor}/contexts/{id} as the collection of the thread's
-- public notes (ap_objects with that thread_key), attributed to the agent that minted it.
CREATE TABLE ap_contexts (
    id           TEXT PRIMARY KEY,
    thread_key   TEXT NOT NULL UNIQUE,
    agent        TEXT NOT NULL,
    created_at   BIGINT NOT NULL
);
-- The notes of a thread, oldest first.
CREATE INDEX ap_objects_thread ON ap_objects (thread_key, created_at);
