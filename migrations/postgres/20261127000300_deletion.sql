-- Deletion and retention (docs/safety.md#deletion-and-retention).
--
-- A message its author deleted keeps its row, for threading and dedupe, with a body reduced to
-- its ids, its addressing and who sent it when (parts, attachments and the raw wire form are
-- gone); `deleted_at` says when (unix ms). Retention deletes rows outright.
ALTER TABLE messages ADD COLUMN deleted_at BIGINT;

-- History windows leave erased turns out and are still read from this index alone.
DROP INDEX messages_thread;
CREATE INDEX messages_thread ON messages (thread_id, seq, deleted_at);

-- Which stored message refers to which blob (by the `"digest"` it names): a blob is erased with
-- the last message that referred to it. Messages stored before this migration are read once.
CREATE TABLE blob_refs (
    digest      TEXT NOT NULL,
    message_id  TEXT NOT NULL,
    PRIMARY KEY (digest, message_id)
);
CREATE INDEX blob_refs_message ON blob_refs (message_id);
INSERT INTO blob_refs (digest, message_id)
    SELECT DISTINCT d #>> '{}', m.id
    FROM messages m CROSS JOIN LATERAL jsonb_path_query(m.body::jsonb, 'strict $.**.digest') AS d
    WHERE m.body LIKE '%"digest":"%' AND jsonb_typeof(d) = 'string'
      AND length(d #>> '{}') = 64
    ON CONFLICT DO NOTHING;

-- Retention erases blobs oldest first.
CREATE INDEX blobs_created ON blobs (created_at);

-- Retention deletes received ActivityPub notes oldest first (our agents' own notes stay).
CREATE INDEX ap_objects_received ON ap_objects (created_at) WHERE kind = 'in';

-- Retention deletes A2A tasks (whose documents hold the caller's messages) by when their
-- status last changed, with their idempotency keys.
CREATE INDEX a2a_tasks_status ON a2a_tasks (status_at);
CREATE INDEX a2a_idempotency_task ON a2a_idempotency (task_id);
