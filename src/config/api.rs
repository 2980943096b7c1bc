//! `[api]`: the operator's HTTP message API and its callback.

use serde::{Deserialize, Serialize};

use super::secret::Secret;

/// The operator's HTTP message API (`POST /api/v1/messages`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApiConfig {
    /// Bearer token; the API is off without one.
    pub token: Option<Secret>,
    /// Where responses to API messages are POSTed; without it they are stored only.
    pub callback_url: Option<String>,
    /// HMAC secret for callback signatures (the webhook scheme).
    pub callback_secret: Option<Secret>,
}

impl ApiConfig {
    /// The callback, when set, must be a URL.
    pub(super) fn check(&self, problems: &mut Vec<String>) {
        if let Some(cb) = &self.callback_url
            && url::Url::parse(cb).is_err()
        {
            problems.push(format!("api.callback_url {cb:?}: not a URL"));
        }
    }
}
