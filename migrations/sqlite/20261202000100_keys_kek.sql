-- Private keys sealed under a key-encryption key (AES-256-GCM: nonce, ciphertext, tag in
-- private_der) name that KEK's id here; NULL: stored plain, as before.
ALTER TABLE keys ADD COLUMN kek_id TEXT;
