-- The operator's actions (blocks added and removed, jobs retried and purged, messages handed
-- in, tokens and approvals), one row each, written in the same transaction as the action:
-- when, what (`action`, its `target` and a small JSON `detail`), with which credential (a
-- non-secret id of the API token or console session) and from which client address. Read by
-- `GET /api/v1/audit` and the console's audit page; pruned with the messages per
-- `database.retention_days`.
CREATE TABLE audit_log (
    id          TEXT PRIMARY KEY,
    at          BIGINT NOT NULL,
    action      TEXT NOT NULL,
    target      TEXT NOT NULL,
    detail      TEXT NOT NULL,
    credential  TEXT NOT NULL,
    client      TEXT
);
CREATE INDEX audit_log_at ON audit_log (at, id);
CREATE INDEX audit_log_action ON audit_log (action, at, id);
