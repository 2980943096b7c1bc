-- Forwarded identity assertions already used: one row per (issuer, jti) until the assertion
-- could no longer be accepted anyway (its exp plus the clock skew allowed), so a replay is
-- refused across instances and restarts. Expired rows are deleted as new ones arrive.
CREATE TABLE attestation_jtis (
    iss          TEXT NOT NULL,
    jti          TEXT NOT NULL,
    expires_at   INTEGER NOT NULL,
    PRIMARY KEY (iss, jti)
);
CREATE INDEX attestation_jtis_expiry ON attestation_jtis (expires_at);
