-- Agents that moved to another account (`switchboard agents move`): the actor IRI they moved
-- to, which their actor publishes as `movedTo`, and when. Moving again replaces the row.
CREATE TABLE ap_moves (
    agent     TEXT PRIMARY KEY,
    target    TEXT NOT NULL,
    moved_at  INTEGER NOT NULL
);
