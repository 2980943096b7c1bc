-- How a message's dispatch ended when it ended without a response: `no_reply` (the agent had
-- nothing to say) or `failed` (out of attempts, or refused for good), with the failure's class
-- (`agent_unavailable`, `agent_refused`, `agent_error`; never the internal text). Kept on the
-- message because dispatch jobs are purged once finished, and the operator API reports it.
ALTER TABLE messages ADD COLUMN outcome TEXT;
ALTER TABLE messages ADD COLUMN error_class TEXT;

-- The operator API lists threads newest first.
CREATE INDEX threads_created ON threads (created_at, id);
