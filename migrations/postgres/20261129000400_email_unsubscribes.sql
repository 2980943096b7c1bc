-- One-click unsubscribes (RFC 8058) from mail an agent writes to someone who did not write to
-- it (an agent mentioned in a thread answering the person there): each such mail carries a
-- List-Unsubscribe URL naming `token`; a POST to it sets `unsubscribed_at`, and that agent
-- writes to that address unasked no more. Replies to the person's own mail are not affected.
CREATE TABLE email_unsubscribes (
    agent            TEXT NOT NULL,
    address          TEXT NOT NULL,
    token            TEXT NOT NULL UNIQUE,
    created_at       BIGINT NOT NULL,
    unsubscribed_at  BIGINT,
    PRIMARY KEY (agent, address)
);
