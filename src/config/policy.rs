//! `[policy]`: the single-use states switchboard mints for agents' policy parts.

use serde::{Deserialize, Serialize};

/// Policy parts (consent, payment, sign-in): how long the state a part carries stays valid.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PolicyConfig {
    /// How long a minted state may be presented (A2A metadata, or the link's landing page).
    pub state_ttl_seconds: u64,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        Self {
            state_ttl_seconds: 86_400,
        }
    }
}

impl PolicyConfig {
    /// At least a minute (a reader has to get to the link), at most 30 days.
    pub(super) fn check(&self, problems: &mut Vec<String>) {
        if !(60..=30 * 86_400).contains(&self.state_ttl_seconds) {
            problems.push(format!(
                "policy.state_ttl_seconds {}: must be between 60 and 2592000 (30 days)",
                self.state_ttl_seconds
            ));
        }
    }
}
