-- Content-addressed attachments (sha256 of the bytes).
CREATE TABLE blobs (
    digest      TEXT PRIMARY KEY,
    mime        TEXT NOT NULL,
    size        BIGINT NOT NULL,
    data        BYTEA NOT NULL,
    created_at  BIGINT NOT NULL
);
