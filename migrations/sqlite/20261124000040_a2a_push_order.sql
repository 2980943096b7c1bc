-- Push notifications go out in event order: each config remembers the last event delivered to
-- it, and a notification job first sends what earlier, unfinished ones have not. Configs
-- stored before this column start from the first event: a notification may be repeated,
-- never skipped.
ALTER TABLE a2a_push_configs ADD COLUMN delivered_seq INTEGER NOT NULL DEFAULT 0;
