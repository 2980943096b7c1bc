//! `[media]`: stored attachments and their signed URLs.

use serde::{Deserialize, Serialize};

use super::secret::Secret;

/// Attachments (`/media/{sha256}?exp=…&sig=…`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MediaConfig {
    /// HMAC key of media URLs; the same on every instance. A random key per start when unset.
    pub secret: Option<Secret>,
    /// How long a minted media URL stays valid.
    pub url_ttl_seconds: u64,
    /// Largest attachment stored.
    pub max_bytes: usize,
}

impl Default for MediaConfig {
    fn default() -> Self {
        Self {
            secret: None,
            url_ttl_seconds: 3_600,
            max_bytes: 25 * 1024 * 1024,
        }
    }
}
