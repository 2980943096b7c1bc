//! Rate limits and backend concurrency per agent ([`crate::config::LimitsConfig`]): fixed-window
//! counters per sender, per agent and (ActivityPub) per remote host, asked by the pipeline on
//! every message after the access rules; the conversation budget of each automated party
//! (a bot, another agent) with each agent, with its cooldown; and a cap on an agent's backend
//! calls at once.
//!
//! Per sender and per host have built-in defaults ([`DEFAULT_PER_SENDER`], [`DEFAULT_PER_HOST`])
//! on the open networks' transports; the budget of automated parties
//! ([`DEFAULT_PER_AUTOMATED`]) holds on every transport. An operator's `"off"` removes any of
//! them.
//!
//! On PostgreSQL the counters are rows shared by every instance (one upsert per bucket); on
//! SQLite, which serves one instance, they are counted in memory.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Semaphore;

use crate::config::{
    DEFAULT_AUTOMATED_COOLDOWN_SECONDS, DEFAULT_MAX_CONCURRENT_CALLS, DEFAULT_MAX_HOPS,
    DEFAULT_PER_AUTOMATED, DEFAULT_PER_HOST, DEFAULT_PER_SENDER, LimitsConfig, Rate,
};
use crate::error::Result;
use crate::message::Sender;
use crate::store::{Arg, Backend, Db};

/// How a transport's senders count against the limits (declared by the transport).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counting {
    /// Its senders are anyone on the open networks: the built-in defaults apply where the
    /// agent sets no limit.
    pub open: bool,
    /// A sender's address names its server (`@user@host`): the per-host limit applies.
    pub per_host: bool,
}

/// One agent's limits, resolved over the global defaults.
#[derive(Debug, Clone)]
pub struct AgentLimits {
    /// As configured: `None` takes the default on the open networks.
    per_sender: Option<Rate>,
    per_agent: Option<Rate>,
    /// As configured: `None` takes the default on the open networks.
    per_host: Option<Rate>,
    per_automated: Rate,
    automated_cooldown_ms: i64,
    /// Permits for backend calls.
    pub calls: Arc<Semaphore>,
    /// The `max_concurrent_calls` the operator set (for the agent or in `[limits]`), if any: on
    /// PostgreSQL it also caps the agent's runs in flight on every instance together. The
    /// built-in default bounds each instance's calls only.
    pub cluster_calls: Option<usize>,
    /// Agent turns a multi-agent chain started by this agent may take.
    pub max_hops: u32,
}

impl Default for AgentLimits {
    fn default() -> Self {
        Self::new(&LimitsConfig::default())
    }
}

impl AgentLimits {
    /// From the agent's resolved configuration.
    #[must_use]
    pub fn new(c: &LimitsConfig) -> Self {
        let max_calls = c
            .max_concurrent_calls
            .unwrap_or(DEFAULT_MAX_CONCURRENT_CALLS);
        let cluster_calls = c.max_concurrent_calls;
        Self {
            per_sender: c.per_sender,
            per_agent: c.per_agent,
            per_host: c.per_host,
            per_automated: c.per_automated.unwrap_or(DEFAULT_PER_AUTOMATED),
            automated_cooldown_ms: i64::from(
                c.automated_cooldown_seconds
                    .unwrap_or(DEFAULT_AUTOMATED_COOLDOWN_SECONDS),
            ) * 1000,
            calls: Arc::new(Semaphore::new(max_calls)),
            cluster_calls,
            max_hops: c.max_hops.unwrap_or(DEFAULT_MAX_HOPS),
        }
    }

    /// The buckets a message from `sender` to `agent` counts in, with their rates, as its
    /// transport's senders are counted.
    fn buckets(&self, agent: &str, counting: Counting, sender: &Sender) -> Vec<(String, Rate)> {
        let open = counting.open;
        let or_default = |set: Option<Rate>, default: Rate| {
            set.or(open.then_some(default)).filter(|r| !r.is_off())
        };
        let mut out = Vec::new();
        if let Some(rate) = self.per_agent.filter(|r| !r.is_off()) {
            out.push((format!("agent:{agent}"), rate));
        }
        if let Some(rate) = or_default(self.per_sender, DEFAULT_PER_SENDER) {
            out.push((format!("sender:{agent}:{}", party(sender)), rate));
        }
        if let Some(rate) = or_default(self.per_host, DEFAULT_PER_HOST)
            && counting.per_host
            && let Some((_, host)) = sender.address.trim_start_matches('@').split_once('@')
        {
            out.push((format!("host:{agent}:{}", host.to_lowercase()), rate));
        }
        out
    }
}

/// Who a sender is for its limits: its first verified identity, else its address, with the
/// network address it came from where the transport names one (anonymous A2A callers share an
/// address, not a bucket).
fn party(sender: &Sender) -> std::borrow::Cow<'_, str> {
    match (
        sender.identities.as_deref().and_then(<[_]>::first),
        sender.client,
    ) {
        (Some(e), _) => e.subject.as_str().into(),
        (None, Some(client)) => format!("{} from {client}", sender.address).into(),
        (None, None) => sender.address.as_str().into(),
    }
}

/// The counters.
#[derive(Debug, Clone)]
pub struct Windows {
    db: Db,
    /// SQLite: bucket → (window start, hits).
    local: Arc<Mutex<HashMap<String, (i64, u64)>>>,
    /// Counts hits, so that ended windows are deleted every so often.
    hits: Arc<std::sync::atomic::AtomicU64>,
}

impl Windows {
    /// Counters on `db` (in memory for SQLite).
    #[must_use]
    pub fn new(db: Db) -> Self {
        Self {
            db,
            local: Arc::default(),
            hits: Arc::default(),
        }
    }

    /// Counts one message from `sender` to `agent` in each of its buckets; `Some(seconds)` to
    /// wait when one of them is over its rate (the message is then not let in).
    ///
    /// # Errors
    /// Database errors.
    pub async fn hit(
        &self,
        limits: &AgentLimits,
        agent: &str,
        counting: Counting,
        sender: &Sender,
        now_ms: i64,
    ) -> Result<Option<u64>> {
        let mut wait = None;
        for (bucket, rate) in limits.buckets(agent, counting, sender) {
            let window_ms = i64::from(rate.per_seconds) * 1000;
            let start = now_ms - now_ms.rem_euclid(window_ms);
            let hits = self.count(&bucket, start, now_ms).await?;
            if hits > u64::from(rate.requests) {
                let left_s = u64::try_from((start + window_ms - now_ms + 999) / 1000).unwrap_or(1);
                wait = Some(wait.unwrap_or(0).max(left_s.max(1)));
            }
        }
        Ok(wait)
    }

    /// Counts one message of the automated party `sender` to `agent` against its budget;
    /// `true` when the agent must not answer it: the party went past its budget with this
    /// message, or is still cooling down from an earlier one (such a message is not counted).
    ///
    /// # Errors
    /// Database errors.
    pub async fn over_budget(
        &self,
        limits: &AgentLimits,
        agent: &str,
        sender: &Sender,
        now_ms: i64,
    ) -> Result<bool> {
        let rate = limits.per_automated;
        if rate.is_off() {
            return Ok(false);
        }
        let who = party(sender);
        let cool = format!("cool:{agent}:{who}");
        if self.cooling_until(&cool).await? > now_ms {
            return Ok(true);
        }
        let window_ms = i64::from(rate.per_seconds) * 1000;
        let start = now_ms - now_ms.rem_euclid(window_ms);
        let hits = self
            .count(&format!("bot:{agent}:{who}"), start, now_ms)
            .await?;
        if hits <= u64::from(rate.requests) {
            return Ok(false);
        }
        self.cool_until(&cool, now_ms.saturating_add(limits.automated_cooldown_ms))
            .await?;
        Ok(true)
    }

    /// The end of the cooldown kept under `bucket` (0 when none). On PostgreSQL a cooldown is
    /// a row whose window starts where the cooldown ends.
    async fn cooling_until(&self, bucket: &str) -> Result<i64> {
        if self.db.backend() == Backend::Sqlite {
            let local = self.local.lock().unwrap_or_else(PoisonError::into_inner);
            return Ok(local.get(bucket).map_or(0, |(until, _)| *until));
        }
        #[derive(sqlx::FromRow, serde::Deserialize)]
        struct Until {
            until: Option<i64>,
        }
        let rows: Vec<Until> = self
            .db
            .fetch_all(
                "SELECT MAX(window_start) AS until FROM rate_windows WHERE bucket = $1",
                &[Arg::Text(bucket)],
            )
            .await?;
        Ok(rows.first().and_then(|r| r.until).unwrap_or(0))
    }

    async fn cool_until(&self, bucket: &str, until: i64) -> Result<()> {
        if self.db.backend() == Backend::Sqlite {
            let mut local = self.local.lock().unwrap_or_else(PoisonError::into_inner);
            local.insert(bucket.to_owned(), (until, 0));
            return Ok(());
        }
        self.db
            .execute(
                "INSERT INTO rate_windows (bucket, window_start, hits) VALUES ($1, $2, 1) \
                 ON CONFLICT (bucket, window_start) DO NOTHING",
                &[Arg::Text(bucket), Arg::Int(until)],
            )
            .await?;
        Ok(())
    }

    async fn count(&self, bucket: &str, start: i64, now_ms: i64) -> Result<u64> {
        if self.db.backend() == Backend::Sqlite {
            let mut local = self.local.lock().unwrap_or_else(PoisonError::into_inner);
            // Windows that ended are dropped now and then, so the map stays small.
            if local.len() > 10_000 {
                local.retain(|_, (s, _)| *s + 3_600_000 > now_ms);
            }
            let entry = local.entry(bucket.to_owned()).or_insert((start, 0));
            if entry.0 != start {
                *entry = (start, 0);
            }
            entry.1 += 1;
            return Ok(entry.1);
        }
        let n = self.hits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if n % 4096 == 4095 {
            // Windows are at most a day long in practice; older rows are dead.
            if let Err(e) = self.forget(now_ms - 86_400_000).await {
                tracing::debug!(error = %e, "ended rate windows not deleted");
            }
        }
        #[derive(sqlx::FromRow, serde::Deserialize)]
        struct Hits {
            hits: i64,
        }
        let rows: Vec<Hits> = self
            .db
            .write_fetch_all(
                "INSERT INTO rate_windows (bucket, window_start, hits) VALUES ($1, $2, 1) \
                 ON CONFLICT (bucket, window_start) \
                 DO UPDATE SET hits = rate_windows.hits + 1 RETURNING hits",
                &[Arg::Text(bucket), Arg::Int(start)],
            )
            .await?;
        Ok(rows
            .first()
            .map_or(0, |h| u64::try_from(h.hits).unwrap_or(0)))
    }

    /// Deletes windows that started before `before_ms`.
    ///
    /// # Errors
    /// Database errors.
    pub async fn forget(&self, before_ms: i64) -> Result<u64> {
        if self.db.backend() == Backend::Sqlite {
            return Ok(0);
        }
        self.db
            .execute(
                "DELETE FROM rate_windows WHERE window_start < $1",
                &[Arg::Int(before_ms)],
            )
            .await
    }
}
