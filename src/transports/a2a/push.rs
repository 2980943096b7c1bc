//! Push notifications: every stored task event is enqueued (in the transaction that stores it)
//! as one durable `a2a_push` job per push config of the task, and delivered as a StreamResponse
//! POST with the config's `Authorization`, retried with backoff, through the SSRF-guarded
//! client. Each POST also carries a short-lived JWT signed with switchboard's Ed25519 key
//! (`a2a:push`), whose JWKS is served at `/.well-known/jwks.json`.

use std::sync::Arc;

use base64::Engine as _;
use bytes::Bytes;
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{Value, json};

use crate::clock::SharedClock;
use crate::error::{Error, OutboundError, Result};
use crate::keys::Keys;
use crate::net::{HttpClient, HttpRequest};
use crate::queue::{JobHandler, Queue};
use crate::store::Db;
use crate::store::a2a as sql;
use crate::store::jobs::JobRow;

/// The job kind of push deliveries.
pub const KIND: &str = "a2a_push";
/// The key push JWTs are signed with.
pub const KEY_NAME: &str = "a2a:push";
/// How long a push JWT is valid.
const JWT_TTL_S: i64 = 300;

/// Payload of an `a2a_push` job.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct PushJob {
    /// The task.
    pub task_id: String,
    /// The push config.
    pub config_id: String,
    /// The event to deliver.
    pub seq: i64,
}

fn b64url(b: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
}

/// The key id of the push key: a thumbprint of its public key.
#[must_use]
pub fn kid(public_raw: &[u8; 32]) -> String {
    use sha2::Digest as _;
    b64url(&sha2::Sha256::digest(public_raw)[..12])
}

/// The JWKS document of the push key.
///
/// # Errors
/// Key store errors.
pub async fn jwks(keys: &Keys) -> Result<Value> {
    let key = keys.ed25519(KEY_NAME).await?;
    let raw = key.public_key_raw();
    Ok(json!({ "keys": [{
        "kty": "OKP", "crv": "Ed25519", "x": b64url(&raw),
        "kid": kid(&raw), "alg": "EdDSA", "use": "sig",
    }]}))
}

/// Delivers `a2a_push` jobs.
#[derive(Debug)]
pub struct PushHandler {
    db: Db,
    http: HttpClient,
    keys: Keys,
    clock: SharedClock,
    queue: Arc<Queue>,
    issuer: String,
}

impl PushHandler {
    /// A handler posting through `http`; `issuer` is the public URL (the JWT `iss`).
    #[must_use]
    pub fn new(
        db: Db,
        http: HttpClient,
        keys: Keys,
        clock: SharedClock,
        queue: Arc<Queue>,
        issuer: String,
    ) -> Self {
        Self {
            db,
            http,
            keys,
            clock,
            queue,
            issuer,
        }
    }

    async fn jwt(&self, job_id: &str, task_id: &str, audience: &str) -> Result<String> {
        let key = self.keys.ed25519(KEY_NAME).await?;
        let now = self.clock.now_ms() / 1000;
        let header = json!({"alg": "EdDSA", "typ": "JWT", "kid": kid(&key.public_key_raw())});
        let claims = json!({
            "iss": self.issuer, "aud": audience, "iat": now, "exp": now + JWT_TTL_S,
            "jti": job_id, "taskId": task_id,
        });
        let input = format!(
            "{}.{}",
            b64url(header.to_string().as_bytes()),
            b64url(claims.to_string().as_bytes())
        );
        let sig = key.sign(input.as_bytes());
        Ok(format!("{input}.{}", b64url(&sig)))
    }

    async fn deliver(&self, job: &JobRow) -> std::result::Result<(), OutboundError> {
        let p: PushJob = serde_json::from_str(&job.payload)
            .map_err(|e| OutboundError::permanent(format!("push job payload: {e}")))?;
        let temp = |e: Error| OutboundError::temporary(e.to_string());
        let Some(cfg) = sql::push_config(&self.db, &p.task_id, &p.config_id)
            .await
            .map_err(temp)?
        else {
            // Deleted since: nothing to deliver.
            return Ok(());
        };
        let Some(event) = sql::event(&self.db, &p.task_id, p.seq)
            .await
            .map_err(temp)?
        else {
            return Err(OutboundError::permanent("the event is not stored"));
        };
        let cfg: Value = serde_json::from_str(&cfg.body)
            .map_err(|e| OutboundError::permanent(format!("push config: {e}")))?;
        let url = cfg["url"]
            .as_str()
            .ok_or_else(|| OutboundError::permanent("push config without url"))?;
        let jwt = self.jwt(&job.id, &p.task_id, url).await.map_err(temp)?;
        let mut headers = HeaderMap::new();
        headers.insert(
            reqwest::header::CONTENT_TYPE,
            HeaderValue::from_static("application/a2a+json"),
        );
        let authorization = match (
            cfg.pointer("/authentication/scheme")
                .and_then(Value::as_str),
            cfg.pointer("/authentication/credentials")
                .and_then(Value::as_str),
        ) {
            (Some(scheme), Some(cred)) => format!("{scheme} {cred}"),
            (Some(scheme), None) => scheme.to_owned(),
            _ => format!("Bearer {jwt}"),
        };
        let value = |s: &str| {
            HeaderValue::from_str(s)
                .map_err(|_| OutboundError::permanent("push header is not a header value"))
        };
        headers.insert(reqwest::header::AUTHORIZATION, value(&authorization)?);
        headers.insert("x-a2a-notification-jwt", value(&jwt)?);
        if let Some(token) = cfg["token"].as_str() {
            headers.insert("x-a2a-notification-token", value(token)?);
        }
        headers.insert("idempotency-key", value(&job.id)?);
        let resp = self
            .http
            .send(HttpRequest {
                method: reqwest::Method::POST,
                url,
                headers,
                body: Some(Bytes::from(event.body)),
                timeout: Some(std::time::Duration::from_secs(15)),
            })
            .await?;
        self.http.classify_status(&resp)
    }
}

#[async_trait::async_trait]
impl JobHandler for PushHandler {
    async fn handle(&self, owner: &str, batch: &[JobRow]) -> Result<()> {
        let results = futures_util::future::join_all(batch.iter().map(|j| self.deliver(j))).await;
        let now = self.clock.now_ms();
        let mut tx = self.db.begin().await?;
        self.queue
            .finish_batch(&mut tx, owner, batch, &results, now)
            .await?;
        tx.commit().await
    }
}
