-- Fixed-window rate-limit counters shared by every instance on one database: one row per
-- bucket (agent, and sender or host) and window start; old windows are deleted by
-- housekeeping. SQLite instances count in memory and leave this table empty.
CREATE TABLE rate_windows (
    bucket       TEXT NOT NULL,
    window_start BIGINT NOT NULL,
    hits         BIGINT NOT NULL,
    PRIMARY KEY (bucket, window_start)
);
CREATE INDEX rate_windows_start ON rate_windows (window_start);
