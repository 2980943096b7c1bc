-- Senders refused before anything of theirs is stored, added at run time through the operator
-- API or console (the configuration file's `[[moderation.blocks]]` are not stored). `kind` is
-- sender, domain or issuer; `pattern` may hold `*`; `agent` scopes the block to one agent.
CREATE TABLE blocks (
    id          TEXT PRIMARY KEY,
    kind        TEXT NOT NULL,
    pattern     TEXT NOT NULL,
    agent       TEXT NOT NULL DEFAULT '',
    reason      TEXT,
    created_at  BIGINT NOT NULL
);
CREATE UNIQUE INDEX blocks_unique ON blocks (kind, pattern, agent);
