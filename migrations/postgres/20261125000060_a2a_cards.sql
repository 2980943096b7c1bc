-- The agent cards served, by name ('' for the hub card): the ETag of the content last served
-- and when that content first appeared, so Last-Modified changes only when a card does.
CREATE TABLE a2a_cards (
    name TEXT PRIMARY KEY,
    etag TEXT NOT NULL,
    modified_at BIGINT NOT NULL
);
