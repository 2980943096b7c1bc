-- Content-addressed attachments (sha256 of the bytes).
CREATE TABLE blobs (
    digest      TEXT PRIMARY KEY,
    mime        TEXT NOT NULL,
    size        INTEGER NOT NULL,
    data        BLOB NOT NULL,
    created_at  INTEGER NOT NULL
);
