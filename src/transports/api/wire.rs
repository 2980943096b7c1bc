//! The operator API's wire types: what its endpoints accept and answer. The OpenAPI document
//! (`docs/api.openapi.json`) is generated from them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::message::{NormalizedMessage, NormalizedResponse, Timestamp};

/// `POST /api/v1/messages`: a message to hand to an agent.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct PostMessage {
    /// The caller's id for this message: a second POST with the same id is a duplicate and
    /// answers the first one's ids.
    pub external_id: String,
    /// A NormalizedMessage. `id`, `received_at`, `received_via`, `raw` and
    /// `recipient_capabilities` may be left out; `thread_id` continues a thread when it is a
    /// `thread_id` this API returned (or the thread key of an earlier message), and opens a new
    /// thread when left out.
    pub message: serde_json::Map<String, Value>,
}

/// The answer to `POST /api/v1/messages` (HTTP 202).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Accepted {
    /// Switchboard's id of the message.
    pub id: String,
    /// Switchboard's id of its thread: pass it back as `message.thread_id` to continue it.
    pub thread_id: String,
    /// Whether `external_id` was seen before (nothing new was stored).
    pub duplicate: bool,
}

/// An error.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ApiError {
    /// What went wrong.
    pub error: String,
}

/// A hosted agent and its addresses.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct AgentView {
    /// The local name.
    pub name: String,
    /// Display name.
    pub display_name: Option<String>,
    /// Fediverse handle, `@name@domain`.
    pub handle: String,
    /// Email address, when the email transport is on.
    pub email: Option<String>,
    /// URL of its A2A agent card, when A2A is on.
    pub card_url: Option<String>,
    /// What answers for it: `echo`, `conformance`, `webhook` or `a2a`.
    pub backend: String,
}

/// `GET /api/v1/blocks`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct BlockList {
    /// Every block in force: the configuration file's first, then those added at run time,
    /// oldest first.
    pub blocks: Vec<crate::moderation::Block>,
}

/// `GET /api/v1/agents`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct AgentList {
    /// The agents, by name.
    pub agents: Vec<AgentView>,
}

/// A thread as listed.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ThreadSummary {
    /// Switchboard's thread id.
    pub id: String,
    /// The transport it lives on.
    pub transport: String,
    /// The agents that took part (local names).
    pub agents: Vec<String>,
    /// When it was opened.
    pub created_at: Timestamp,
    /// When its last message or response was stored.
    pub last_activity: Timestamp,
    /// Messages and responses in it.
    pub message_count: i64,
}

/// `GET /api/v1/threads`: one page, newest thread first.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ThreadPage {
    /// The threads of this page.
    pub threads: Vec<ThreadSummary>,
    /// Pass as `cursor` for the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

/// `in` for a message to an agent, `out` for an agent's response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// A message to an agent.
    In,
    /// An agent's response.
    Out,
}

/// Where a message is on its way from ingest to the delivered response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Stored; its agent has not been called yet.
    Queued,
    /// Its agent is being called (or is called again after a failure).
    Dispatching,
    /// The agent answered; the response is not delivered yet.
    Answered,
    /// The agent had nothing to say: there will be no response.
    NoReply,
    /// The agent could not answer (see `error_class`): there will be no response.
    Failed,
    /// The message joined a later message's turn (inbound debounce, or queue mode `collect`):
    /// that turn's response answers it.
    Merged,
    /// A newer message of the thread interrupted the agent's call (queue mode `interrupt`):
    /// there will be no response.
    Interrupted,
    /// The response is being delivered (or delivered again after a failure).
    Delivering,
    /// The response was delivered.
    Delivered,
    /// The response could not be delivered.
    DeliveryFailed,
    /// A safety rule held the message (see `reason`): it is stored, its agent was not called,
    /// there will be no response.
    Held,
    /// Its author deleted the message before it was answered: its content is erased, its
    /// agent is not called, there will be no response.
    Deleted,
}

/// A message's status.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct StatusView {
    /// The status.
    pub status: Status,
    /// For `failed`: `agent_unavailable` (unreachable or failing until the attempts ran out),
    /// `agent_refused` (it refused the request) or `agent_error` (any other lasting failure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_class: Option<String>,
    /// For `held`: the rule that held it: `bot-loop` (an automated party past its conversation
    /// budget with the agent), `max-hops` (an agent conversation continued from another server
    /// past its hop limit), `refused` or `rate-limited` (a turn relayed by another agent that
    /// the woken agent's own access rules or rate limits refuse), `blocked-by-sender` (the
    /// sender has blocked the agent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `GET /api/v1/messages/{id}`: a message to an agent and where it is.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct MessageView {
    /// Switchboard's id.
    pub id: String,
    /// Switchboard's thread id.
    pub thread_id: String,
    /// The agent it is for (local name).
    pub agent: String,
    /// The transport it came in on.
    pub transport: String,
    /// When it was stored.
    pub created_at: Timestamp,
    /// Where it is.
    #[serde(flatten)]
    pub status: StatusView,
    /// Attempts at calling the agent, while its dispatch job is kept.
    pub dispatch_attempts: Option<i64>,
    /// The response's id, once there is one.
    pub response_id: Option<String>,
    /// Attempts at delivering the response, once known.
    pub delivery_attempts: Option<i64>,
    /// What the remote side said when the response's delivery failed (`delivery_failed`), where
    /// it said something: a bounce's report, for email. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_failure: Option<DeliveryFailure>,
    /// Its author deleted it: `message` keeps only its ids, addressing and sender, with no
    /// parts and no raw form. Absent when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deleted: bool,
    /// When it was deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted_at: Option<Timestamp>,
    /// The message as stored.
    #[schemars(with = "NormalizedMessage")]
    pub message: Value,
}

/// What the remote side said of a failed delivery (for email, the delivery status notification
/// of a bounce, RFC 3464); each field absent when it did not say.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DeliveryFailure {
    /// The enhanced status code (RFC 3463), e.g. `5.1.1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_code: Option<String>,
    /// The remote server's diagnostic, e.g. `550 5.1.1 <bob@example.com>: user unknown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnostic: Option<String>,
    /// The server that gave it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_mta: Option<String>,
    /// The recipient it failed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recipient: Option<String>,
}

/// One message or response of a thread.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ThreadEntry {
    /// Switchboard's id.
    pub id: String,
    /// `in` (a message) or `out` (a response).
    pub direction: Direction,
    /// The agent (local name).
    pub agent: String,
    /// When it was stored.
    pub created_at: Timestamp,
    /// For a message: where it is (`status`, and `error_class` when it failed).
    #[serde(flatten)]
    pub status: Option<StatusView>,
    /// For a response: the message it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_reply_to: Option<String>,
    /// For a message: its author deleted it (`message` keeps only its ids, addressing and
    /// sender, with no parts and no raw form). Absent when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deleted: bool,
    /// When it was deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted_at: Option<Timestamp>,
    /// For a message: the NormalizedMessage as stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<NormalizedMessage>")]
    pub message: Option<Value>,
    /// For a response: the NormalizedResponse as stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<NormalizedResponse>")]
    pub response: Option<Value>,
}

/// `GET /api/v1/threads/{id}`: a thread with its messages and responses in order.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ThreadDetail {
    /// The thread.
    #[serde(flatten)]
    pub thread: ThreadSummary,
    /// Its messages and responses, oldest first (at most the first 1,000).
    pub entries: Vec<ThreadEntry>,
}

/// A report of abuse received from a remote server (an ActivityPub `Flag`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ReportView {
    /// Switchboard's id of the report.
    pub id: String,
    /// The report activity's id.
    pub activity_id: String,
    /// The transport it came by (`activitypub`).
    pub transport: String,
    /// Who reported: an actor IRI, often the reporting server's instance actor.
    pub reporter: String,
    /// The reporter's host.
    pub host: String,
    /// The local agent reported, when the report names one.
    pub agent: Option<String>,
    /// The reported objects of ours: actor and note IRIs.
    pub objects: Vec<String>,
    /// The reporter's comment (plain text, possibly empty).
    pub content: String,
    /// When it arrived.
    pub received_at: Timestamp,
}

/// `GET /api/v1/reports`: reports, newest first.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ReportList {
    /// The reports.
    pub reports: Vec<ReportView>,
}

/// One recorded operator action (`GET /api/v1/audit`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct AuditEntry {
    /// Switchboard's id of the record.
    pub id: String,
    /// When the action was taken.
    pub at: Timestamp,
    /// What was done: `block.add`, `block.remove`, `queue.retry`, `queue.purge`,
    /// `message.send`, `agent_token.create`, `agent_token.revoke`, `outbound.approve`,
    /// `outbound.reject`.
    pub action: String,
    /// What it was done to: a block's or a message's id, a job's id (`*` for every dead job),
    /// the state purged.
    pub target: String,
    /// What else tells the action apart (a block's pattern, how many jobs it changed, …).
    pub detail: Value,
    /// Which credential: `api:` and the first 8 hex digits of the SHA-256 of the API token, or
    /// `console` (with `:` and a short session id when signed in). Never a secret.
    pub credential: String,
    /// The client's address (behind trusted proxies, the one they name).
    pub client: Option<String>,
}

/// `GET /api/v1/audit`: one page of recorded operator actions, newest first.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct AuditPage {
    /// The records of this page.
    pub entries: Vec<AuditEntry>,
    /// Pass as `cursor` for the next page; absent on the last page.
    pub next_cursor: Option<String>,
}
