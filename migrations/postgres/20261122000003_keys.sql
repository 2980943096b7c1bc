-- Signing keys of this server (RSA for ActivityPub and DKIM, Ed25519 for proofs and JWTs),
-- generated on first use and shared by every instance.
CREATE TABLE keys (
    name        TEXT PRIMARY KEY,
    algorithm   TEXT NOT NULL,
    private_der BYTEA NOT NULL,
    public_der  BYTEA NOT NULL,
    created_at  BIGINT NOT NULL
);
