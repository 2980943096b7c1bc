-- Email: the RFC 5322 Message-IDs switchboard has seen or sent, per agent, so replies thread
-- (In-Reply-To / References are looked up here) and `in_reply_to` maps to our stored message.
CREATE TABLE email_message_ids (
    message_id  TEXT NOT NULL,
    agent       TEXT NOT NULL,
    thread_key  TEXT NOT NULL,
    stored_id   TEXT NOT NULL,
    direction   TEXT NOT NULL CHECK (direction IN ('in', 'out')),
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (message_id, agent)
);
CREATE INDEX email_message_ids_stored ON email_message_ids (stored_id);
