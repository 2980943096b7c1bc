-- What the remote side said of a delivery that failed: for a bounced mail, the fields of its
-- delivery status notification (RFC 3464) for the recipient that failed — the enhanced status
-- code (RFC 3463), the remote server's diagnostic, the server that gave it, and the recipient.
ALTER TABLE deliveries ADD COLUMN status_code TEXT;
ALTER TABLE deliveries ADD COLUMN diagnostic TEXT;
ALTER TABLE deliveries ADD COLUMN remote_mta TEXT;
ALTER TABLE deliveries ADD COLUMN recipient TEXT;
