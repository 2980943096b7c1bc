-- Each job index holds only the rows its query looks for: due jobs to claim, leases to reap,
-- finished jobs to clean up, dead jobs to count. A job handed straight to a worker (inserted
-- running) and finished never touches the claim index, and a day of finished jobs no longer
-- sits in it.
DROP INDEX jobs_claim;
CREATE INDEX jobs_ready ON jobs (kind, run_at) WHERE state = 'ready';
CREATE INDEX jobs_running ON jobs (kind, lease_until) WHERE state = 'running';
CREATE INDEX jobs_done ON jobs (updated_at) WHERE state = 'done';
CREATE INDEX jobs_dead ON jobs (kind) WHERE state = 'dead';
