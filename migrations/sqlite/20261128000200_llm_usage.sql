-- The tokens chat models reported using, one row per answer of an `openai` backend: the
-- console's agents page sums them per agent over the last 24 hours. Rows older than seven days
-- are deleted as new ones are written.
CREATE TABLE llm_usage (
    agent              TEXT NOT NULL,
    model              TEXT NOT NULL,
    at_ms              INTEGER NOT NULL,
    prompt_tokens      INTEGER NOT NULL,
    completion_tokens  INTEGER NOT NULL
);
CREATE INDEX llm_usage_at ON llm_usage (at_ms);
