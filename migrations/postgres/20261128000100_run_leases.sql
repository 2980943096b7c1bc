-- One conversation at a time across instances (docs/scaling.md#one-conversation-at-a-time).
-- Both tables are UNLOGGED: rows that live for one run, written and deleted for every dispatch,
-- are not worth the write-ahead log; a crash of PostgreSQL empties them, and ends every run in
-- flight with it (their transactions cannot commit).
--
-- While an agent's turn in a thread runs, the thread is leased to the instance running it, until
-- `until_ms` (unix ms): taken when the dispatch starts, deleted in the transaction that commits
-- its outcome, left to expire when the instance dies. An agent's live leases also count its runs
-- in flight on every instance, against the `max_concurrent_calls` its operator set.
CREATE UNLOGGED TABLE run_leases (
    thread_id  TEXT NOT NULL,
    agent      TEXT NOT NULL,
    owner      TEXT NOT NULL,
    until_ms   BIGINT NOT NULL,
    PRIMARY KEY (agent, thread_id)
);

-- The messages waiting for a thread's run, oldest (`seq`) first: a run goes to the oldest one
-- whose wait is still live, and ending a run makes the oldest waiter's dispatch job due at once.
CREATE UNLOGGED TABLE run_waiters (
    thread_id  TEXT NOT NULL,
    agent      TEXT NOT NULL,
    seq        BIGINT NOT NULL,
    job_id     TEXT NOT NULL,
    until_ms   BIGINT NOT NULL,
    PRIMARY KEY (thread_id, agent, seq)
);
CREATE INDEX run_waiters_job ON run_waiters (job_id);
