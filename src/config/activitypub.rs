//! `[activitypub]`: the fediverse transport's limits, time budgets and delivery breaker.

use serde::{Deserialize, Serialize};

/// The ActivityPub transport (`/agents/{name}`, inboxes, WebFinger, NodeInfo).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ActivityPubConfig {
    /// Serve the fediverse endpoints and deliver replies.
    pub enabled: bool,
    /// Largest inbox body accepted (413 above).
    pub max_body_bytes: usize,
    /// Deepest JSON nesting accepted in an activity (400 above).
    pub max_json_depth: usize,
    /// Time budget of one inbox request, key fetches included (503 when exceeded).
    pub processing_timeout_ms: u64,
    /// Timeout of one outbound fetch or delivery.
    pub fetch_timeout_ms: u64,
    /// How long fetched actors and keys are trusted before a refetch.
    pub actor_cache_seconds: u64,
    /// Unknown parents fetched to find a thread's root.
    pub max_parent_fetches: usize,
    /// Attachments of one note downloaded into the blob store.
    pub max_attachments: usize,
    /// Concurrent deliveries to one host.
    pub host_concurrency: usize,
    /// Days of failures after which a host's deliveries stop (a success resets it).
    pub breaker_days: u64,
    /// Where remote servers truncate replies (`recipient_capabilities.max_text_chars`).
    pub max_reply_chars: u64,
}

impl Default for ActivityPubConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            max_body_bytes: 256 * 1024,
            max_json_depth: 32,
            processing_timeout_ms: 10_000,
            fetch_timeout_ms: 10_000,
            actor_cache_seconds: 86_400,
            max_parent_fetches: 3,
            max_attachments: 4,
            host_concurrency: 4,
            breaker_days: 7,
            max_reply_chars: 500,
        }
    }
}

impl ActivityPubConfig {
    /// Limits that would refuse everything are refused.
    pub(super) fn check(&self, problems: &mut Vec<String>) {
        if self.max_body_bytes == 0 || self.max_json_depth == 0 || self.host_concurrency == 0 {
            problems.push(
                "activitypub: max_body_bytes, max_json_depth and host_concurrency must be > 0"
                    .into(),
            );
        }
    }
}
