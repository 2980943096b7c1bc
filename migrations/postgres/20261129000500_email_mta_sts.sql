-- MTA-STS policies (RFC 8461) of recipient domains, kept until they expire (fetched at + the
-- policy's max_age), so that every instance, and an instance started again, holds a domain to
-- the policy it saw last even while the domain's TXT record is missing or its policy host is
-- unreachable. `body` is the policy as fetched; `policy_id` the TXT record's id it came under.
CREATE TABLE email_mta_sts (
    domain      TEXT PRIMARY KEY,
    policy_id   TEXT NOT NULL,
    body        TEXT NOT NULL,
    expires_at  BIGINT NOT NULL
);
