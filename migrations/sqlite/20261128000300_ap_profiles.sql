-- The fediverse profile each agent last announced ([agents.activitypub]): the digest of what
-- its actor published, so that a start with a changed profile sends one `Update` of the actor
-- to its followers and a start with the same profile sends nothing; and the profile images it
-- stored in the blob store (digests, space-separated), kept while the profile names them.
CREATE TABLE ap_profiles (
    agent       TEXT PRIMARY KEY,
    digest      TEXT NOT NULL,
    images      TEXT NOT NULL,
    updated_at  INTEGER NOT NULL
);
