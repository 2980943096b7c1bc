//! Push notifications: every stored task event is enqueued (in the transaction that stores it)
//! as one durable `a2a_push` job per push config of the task, and delivered as a StreamResponse
//! POST with the config's `Authorization`, retried with backoff, through the SSRF-guarded
//! client. Each POST also carries a short-lived JWT signed with switchboard's Ed25519 key
//! (`a2a:push`), whose JWKS is served at `/.well-known/jwks.json`.
//!
//! A config receives its task's events in order: it remembers the last event delivered to it,
//! and a job sends every event after that one up to its own, one after the other. A job whose
//! event went out with a later job's is simply done; a temporary failure holds the later events
//! back until it is retried; an event refused for good is skipped (its job is dead). In one
//! process a task's notifications to one config are sent by one worker at a time.

use std::collections::HashMap;
use std::hash::{Hash as _, Hasher as _};
use std::sync::Arc;

use bytes::Bytes;
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{Value, json};

use super::store as sql;
use crate::clock::SharedClock;
use crate::error::{OutboundError, Result};
use crate::keys::Keys;
use crate::net::{HttpClient, HttpRequest};
use crate::queue::{JobHandler, Queue};
use crate::store::Db;
use crate::store::jobs::JobRow;

/// The job kind of push deliveries.
pub const KIND: &str = "a2a_push";
/// The server's A2A key: push JWTs and agent cards are signed with it.
pub const KEY_NAME: &str = "a2a:push";
/// How long a push JWT is valid.
const JWT_TTL_S: i64 = 300;
/// Locks that keep a task's notifications to one config on one worker at a time.
const STRIPES: usize = 64;

/// The id of the job that pushes event `seq` of `task_id` to config `config_id`; also the
/// POST's `Idempotency-Key`, so a repeated notification can be recognised.
#[must_use]
pub fn job_id(task_id: &str, config_id: &str, seq: i64) -> String {
    format!("{KIND}:{task_id}:{config_id}:{seq}")
}

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

use crate::jws::b64url;

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
    Ok(json!({ "keys": [crate::jws::ed25519_jwk(&raw, &kid(&raw))] }))
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
    stripes: Vec<tokio::sync::Mutex<()>>,
}

/// How far a run of one task's events to one config got.
#[derive(Debug, Default)]
struct Run {
    /// Every event up to this one was delivered (or skipped after a permanent failure).
    reached: i64,
    /// Events refused for good, and why.
    refused: HashMap<i64, OutboundError>,
    /// Why the run stopped before the last event, if it did.
    stopped: Option<OutboundError>,
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
            stripes: (0..STRIPES).map(|_| tokio::sync::Mutex::new(())).collect(),
        }
    }

    async fn jwt(&self, job_id: &str, task_id: &str, audience: &str) -> Result<String> {
        let key = self.keys.ed25519(KEY_NAME).await?;
        let now_s = self.clock.now_s();
        let header = json!({"alg": "EdDSA", "typ": "JWT", "kid": kid(&key.public_key_raw())});
        let claims = json!({
            "iss": self.issuer, "aud": audience, "iat": now_s, "exp": now_s + JWT_TTL_S,
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

    /// Sends event `seq` (its StreamResponse `body`) of `task_id` to the config `cfg`.
    async fn post(
        &self,
        task_id: &str,
        config_id: &str,
        cfg: &Value,
        seq: i64,
        body: String,
    ) -> std::result::Result<(), OutboundError> {
        let key = job_id(task_id, config_id, seq);
        let url = cfg["url"]
            .as_str()
            .ok_or_else(|| OutboundError::permanent("push config without url"))?;
        let jwt = self.jwt(&key, task_id, url).await?;
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
        headers.insert("idempotency-key", value(&key)?);
        let resp = self
            .http
            .send(HttpRequest {
                method: reqwest::Method::POST,
                url,
                headers,
                body: Some(Bytes::from(body)),
                timeout: Some(std::time::Duration::from_secs(15)),
            })
            .await?;
        self.http.classify_status(&resp)
    }

    /// Sends the events of `task_id` after the last one delivered to `config_id`, up to
    /// `upto`, in order.
    async fn run(&self, task_id: &str, config_id: &str, upto: i64) -> Run {
        let temp = OutboundError::from;
        let mut run = Run::default();
        let cfg = match sql::push_config(&self.db, task_id, config_id).await {
            // Deleted since: nothing is owed to it.
            Ok(None) => {
                run.reached = upto;
                return run;
            }
            Ok(Some(c)) => c,
            Err(e) => {
                run.stopped = Some(temp(e));
                return run;
            }
        };
        run.reached = cfg.delivered_seq;
        if cfg.delivered_seq >= upto {
            return run;
        }
        let body: Value = match serde_json::from_str(&cfg.body) {
            Ok(b) => b,
            Err(e) => {
                run.stopped = Some(OutboundError::permanent(format!("push config: {e}")));
                return run;
            }
        };
        let events = match sql::events_after(&self.db, task_id, cfg.delivered_seq).await {
            Ok(ev) => ev,
            Err(e) => {
                run.stopped = Some(temp(e));
                return run;
            }
        };
        for ev in events.into_iter().take_while(|e| e.seq <= upto) {
            match self.post(task_id, config_id, &body, ev.seq, ev.body).await {
                Ok(()) => {}
                Err(e @ OutboundError::Permanent { .. }) => {
                    tracing::warn!(task = task_id, config = config_id, seq = ev.seq, error = %e, "push notification refused; skipped");
                    run.refused.insert(ev.seq, e);
                }
                Err(e) => {
                    run.stopped = Some(e);
                    break;
                }
            }
            if let Err(e) = sql::push_delivered(&self.db, task_id, config_id, ev.seq).await {
                run.stopped = Some(temp(e));
                break;
            }
            run.reached = ev.seq;
        }
        run
    }

    /// Runs one task's events to one config up to the latest of `seqs`; the outcome of each.
    async fn deliver(
        &self,
        task_id: &str,
        config_id: &str,
        seqs: &[i64],
    ) -> Vec<std::result::Result<(), OutboundError>> {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (task_id, config_id).hash(&mut h);
        let stripe = usize::try_from(h.finish() % STRIPES as u64).unwrap_or(0);
        let run = {
            let _turn = self.stripes[stripe].lock().await;
            self.run(task_id, config_id, seqs.iter().copied().max().unwrap_or(0))
                .await
        };
        seqs.iter()
            .map(|seq| {
                if let Some(e) = run.refused.get(seq) {
                    Err(e.clone())
                } else if *seq <= run.reached {
                    Ok(())
                } else {
                    Err(run
                        .stopped
                        .clone()
                        .unwrap_or_else(|| OutboundError::permanent("the event is not stored")))
                }
            })
            .collect()
    }
}

#[async_trait::async_trait]
impl JobHandler for PushHandler {
    async fn handle(&self, owner: &str, batch: &[JobRow]) -> Result<()> {
        // The batch's jobs by task and config: each group is one run, in event order.
        let mut results: Vec<std::result::Result<(), OutboundError>> = vec![Ok(()); batch.len()];
        let mut groups: HashMap<(String, String), Vec<(usize, i64)>> = HashMap::new();
        for (i, job) in batch.iter().enumerate() {
            match serde_json::from_str::<PushJob>(&job.payload) {
                Ok(p) => groups
                    .entry((p.task_id, p.config_id))
                    .or_default()
                    .push((i, p.seq)),
                Err(e) => {
                    results[i] = Err(OutboundError::permanent(format!("push job payload: {e}")));
                }
            }
        }
        let groups: Vec<_> = groups.into_iter().collect();
        let runs = futures_util::future::join_all(groups.iter().map(|((task, config), jobs)| {
            let seqs: Vec<i64> = jobs.iter().map(|(_, s)| *s).collect();
            async move { self.deliver(task, config, &seqs).await }
        }))
        .await;
        for ((_, jobs), outcomes) in groups.iter().zip(runs) {
            for ((i, _), outcome) in jobs.iter().zip(outcomes) {
                results[*i] = outcome;
            }
        }
        let now = self.clock.now_ms();
        let mut tx = self.db.begin().await?;
        let finished = self
            .queue
            .finish(&mut tx, owner, batch, &results, now)
            .await?;
        self.queue.commit(tx, finished).await
    }
}
