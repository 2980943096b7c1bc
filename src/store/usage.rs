//! `llm_usage`: the tokens chat models reported using, per answer, for the console's totals
//! (the Prometheus counter `switchboard_llm_tokens_total` counts the same, per instance since
//! its start).

use super::{Arg, Db};
use crate::error::Result;

/// How long a usage row is kept (ms): a week, well past the console's 24 hours.
const KEEP_MS: i64 = 7 * 86_400_000;

/// One answer's usage.
#[derive(Debug, Clone, Copy)]
pub struct Usage<'a> {
    /// The agent's local name.
    pub agent: &'a str,
    /// The model it called.
    pub model: &'a str,
    /// When (unix ms).
    pub at_ms: i64,
    /// Tokens of the prompt.
    pub prompt_tokens: i64,
    /// Tokens of the answer.
    pub completion_tokens: i64,
}

/// An agent's tokens over a period.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Deserialize)]
pub struct AgentTokens {
    /// The agent's local name.
    pub agent: String,
    /// Tokens of its prompts.
    pub prompt_tokens: i64,
    /// Tokens of its answers.
    pub completion_tokens: i64,
}

/// Records one answer's usage, and forgets what is older than a week.
///
/// # Errors
/// Database errors.
pub async fn record(db: &Db, u: &Usage<'_>) -> Result<()> {
    db.execute(
        "INSERT INTO llm_usage (agent, model, at_ms, prompt_tokens, completion_tokens) \
         VALUES ($1, $2, $3, $4, $5)",
        &[
            Arg::Text(u.agent),
            Arg::Text(u.model),
            Arg::Int(u.at_ms),
            Arg::Int(u.prompt_tokens),
            Arg::Int(u.completion_tokens),
        ],
    )
    .await?;
    db.execute(
        "DELETE FROM llm_usage WHERE at_ms < $1",
        &[Arg::Int(u.at_ms.saturating_sub(KEEP_MS))],
    )
    .await?;
    Ok(())
}

/// Each agent's tokens over the answers recorded since `since` (unix ms).
///
/// # Errors
/// Database errors.
pub async fn per_agent(db: &Db, since: i64) -> Result<Vec<AgentTokens>> {
    db.fetch_all(
        "SELECT agent, CAST(SUM(prompt_tokens) AS BIGINT) AS prompt_tokens, \
         CAST(SUM(completion_tokens) AS BIGINT) AS completion_tokens \
         FROM llm_usage WHERE at_ms >= $1 GROUP BY agent",
        &[Arg::Int(since)],
    )
    .await
}
