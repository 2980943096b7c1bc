-- One conversation at a time across instances (docs/scaling.md#one-conversation-at-a-time).
--
-- While an agent's turn in a thread runs, the thread is leased to the instance running it, until
-- `until_ms` (unix ms): taken when the dispatch starts, deleted in the transaction that commits
-- its outcome, left to expire when the instance dies. An agent's live leases also count its runs
-- in flight on every instance, against the `max_concurrent_calls` its operator set.
--
-- SQLite serves one instance, whose runs are held in memory: these tables stay empty there.
CREATE TABLE run_leases (
    thread_id  TEXT NOT NULL,
    agent      TEXT NOT NULL,
    owner      TEXT NOT NULL,
    until_ms   INTEGER NOT NULL,
    PRIMARY KEY (agent, thread_id)
);

-- The messages waiting for a thread's run, oldest (`seq`) first: a run goes to the oldest one
-- whose wait is still live, and ending a run makes the oldest waiter's dispatch job due at once.
CREATE TABLE run_waiters (
    thread_id  TEXT NOT NULL,
    agent      TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    job_id     TEXT NOT NULL,
    until_ms   INTEGER NOT NULL,
    PRIMARY KEY (thread_id, agent, seq)
);
CREATE INDEX run_waiters_job ON run_waiters (job_id);
