//! Policy parts and their round trip: an agent answers with a policy part (`consent_required`,
//! `payment_required`, `unauthorized`, or a kind switchboard does not know), switchboard mints a
//! single-use `state` for it bound to the agent, the thread and the evidence of the sender it
//! goes to, and a later turn that presents the state reaches the agent with a
//! `policy_resolution` marked `verified` — only after the state was looked up and consumed.
//!
//! The state arrives in A2A message metadata under [`POLICY_EXTENSION`], or through the landing
//! page a link in an email or fediverse reply leads to (`/policy/{state}`, [`landing_url`]),
//! which stores a turn of its own in the same thread. Either way the check is one function,
//! [`verify_in`], run by ingest inside the transaction that stores the turn, so a state is
//! consumed exactly when the turn that presents it is stored. A state already consumed,
//! expired, unknown, or presented for another agent, thread or sender is refused
//! ([`Refusal`]) and the turn is not stored.
//!
//! Terminal kinds (`forbidden`, `too_many_requests`, `unavailable_for_legal_reasons`,
//! `service_unavailable`) get no state: nothing the sender does resolves them.

use sha2::{Digest as _, Sha256};

use crate::error::{Error, Result};
use crate::message::{
    LinkPart, NormalizedResponse, Part, PolicyKind, PolicyPart, PolicyResolution, ResponseState,
    Sender, Timestamp,
};
use crate::store::Tx;
use crate::store::policy::{self as sql, NewState, StateRow};

/// The A2A extension a policy state is presented under (message metadata key) and advertised
/// by (agent card).
pub const POLICY_EXTENSION: &str = "https://mentionable.dev/ns/policy/v0.1";

/// The path of the landing page of a state, under the public URL.
pub const LANDING_PATH: &str = "/policy";

/// Why a presented state was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Never minted here (or purged long after it expired).
    Unknown,
    /// Consumed already.
    Replayed,
    /// Past its lifetime (`policy.state_ttl_seconds`).
    Expired,
    /// Minted for another agent, thread or sender.
    Foreign,
}

impl Refusal {
    /// The metric and log label.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Self::Unknown => "unknown",
            Self::Replayed => "replayed",
            Self::Expired => "expired",
            Self::Foreign => "foreign",
        }
    }
}

impl From<Refusal> for Error {
    fn from(r: Refusal) -> Self {
        Self::Invalid(format!("policy state refused: {}", r.label()))
    }
}

/// Whether a part of this kind gets a state: every kind the sender can resolve, unknown kinds
/// included (they are kept, and never read as success).
#[must_use]
pub fn mints_state(kind: &PolicyKind) -> bool {
    !matches!(
        kind,
        PolicyKind::Forbidden
            | PolicyKind::TooManyRequests
            | PolicyKind::UnavailableForLegalReasons
            | PolicyKind::ServiceUnavailable
    )
}

/// What a state is bound to of its sender: a digest of the address and of every verified
/// identity (method, issuer, subject), in a fixed order. A later turn presenting the state must
/// come from a sender with the same digest.
#[must_use]
pub fn binding(sender: &Sender) -> String {
    let mut ids: Vec<String> = sender
        .identities
        .iter()
        .flatten()
        .map(|e| format!("{}\u{1f}{}\u{1f}{}", e.method.as_str(), e.issuer, e.subject))
        .collect();
    ids.sort();
    ids.dedup();
    let mut h = Sha256::new();
    h.update(sender.address.to_lowercase().as_bytes());
    for id in ids {
        h.update(b"\x1e");
        h.update(id.as_bytes());
    }
    hex::encode(h.finalize())
}

/// A fresh state: 256 random bits, URL-safe.
#[must_use]
pub fn new_state() -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(rand::random::<[u8; 32]>())
}

/// The landing page of `state` under the public base URL `base`.
#[must_use]
pub fn landing_url(base: &str, state: &str) -> String {
    format!("{}{LANDING_PATH}/{state}", base.trim_end_matches('/'))
}

/// What a response's states are bound to.
#[derive(Debug, Clone, Copy)]
pub struct Issue<'a> {
    /// The agent's local name.
    pub agent: &'a str,
    /// Switchboard's thread id.
    pub thread_id: &'a str,
    /// The inbound message answered.
    pub message_id: &'a str,
    /// Its sender.
    pub sender: &'a Sender,
    /// When the states expire (unix ms).
    pub expires_at: i64,
}

/// Gives every policy part of `response` that can be resolved a fresh state (replacing any the
/// agent set: states are switchboard's), and returns the rows to record with the response.
#[must_use]
pub fn mint(response: &mut NormalizedResponse, issue: &Issue<'_>) -> Vec<NewState> {
    let mut minted = Vec::new();
    for part in &mut response.parts {
        let Part::Policy(p) = part else { continue };
        let policy = &mut p.policy;
        if !mints_state(&policy.kind) {
            policy.state = None;
            continue;
        }
        let state = new_state();
        policy.state = Some(state.clone());
        minted.push(NewState {
            state,
            agent: issue.agent.to_owned(),
            thread_id: issue.thread_id.to_owned(),
            message_id: issue.message_id.to_owned(),
            response_id: response.id.clone(),
            kind: policy.kind.as_str().to_owned(),
            binding: binding(issue.sender),
            part: serde_json::to_string(policy).unwrap_or_default(),
            expires_at: issue.expires_at,
        });
    }
    minted
}

/// Settles the state of a response that carries policy parts and says it `completed` (or says
/// nothing): a part the sender can resolve is never success, so the turn waits for them —
/// `auth_required` for `unauthorized`, else `input_required` (unknown kinds included); a
/// response with only `forbidden` or `unavailable_for_legal_reasons` parts is `rejected`, one
/// with only `too_many_requests` or `service_unavailable` parts `failed`. A state the agent
/// chose otherwise is kept.
pub fn settle_state(response: &mut NormalizedResponse) {
    if response.effective_state() != ResponseState::Completed {
        return;
    }
    let kinds: Vec<&PolicyKind> = response
        .parts
        .iter()
        .filter_map(|p| match p {
            Part::Policy(w) => Some(&w.policy.kind),
            _ => None,
        })
        .collect();
    if kinds.is_empty() {
        return;
    }
    let state = if kinds.contains(&&PolicyKind::Unauthorized) {
        ResponseState::AuthRequired
    } else if kinds.iter().any(|k| mints_state(k)) {
        ResponseState::InputRequired
    } else if kinds.iter().any(|k| {
        matches!(
            k,
            PolicyKind::Forbidden | PolicyKind::UnavailableForLegalReasons
        )
    }) {
        ResponseState::Rejected
    } else {
        ResponseState::Failed
    };
    response.state = Some(state);
}

/// Whether `row` may be consumed by a turn to `agent` in thread `thread_id` from a sender with
/// `binding`, at `now`.
///
/// # Errors
/// The [`Refusal`].
pub fn check(
    row: &StateRow,
    agent: &str,
    thread_id: Option<&str>,
    binding: &str,
    now: i64,
) -> std::result::Result<(), Refusal> {
    if row.consumed_at.is_some() {
        return Err(Refusal::Replayed);
    }
    if row.expires_at <= now {
        return Err(Refusal::Expired);
    }
    if !row.agent.eq_ignore_ascii_case(agent)
        || thread_id != Some(row.thread_id.as_str())
        || row.binding != binding
    {
        return Err(Refusal::Foreign);
    }
    Ok(())
}

/// A turn presenting a state, as ingest sees it.
#[derive(Debug, Clone, Copy)]
pub struct Presented<'a> {
    /// The agent the turn goes to (local name).
    pub agent: &'a str,
    /// Its transport.
    pub transport: &'a str,
    /// Its wire thread key.
    pub thread_key: &'a str,
    /// Its sender.
    pub sender: &'a Sender,
    /// Its message id (recorded as the consumer).
    pub message_id: &'a str,
}

/// Looks up the state `claim` presents, checks it against the turn, and consumes it, in `tx`
/// (the transaction that stores the turn). On success the claim becomes the verified
/// resolution: its kind is the one the state was minted for (whatever the turn said), it is
/// marked `verified`, and the sender's evidence is attached.
///
/// # Errors
/// [`Refusal`] (as [`Error::Invalid`]) when the state may not be used; database errors.
pub async fn verify_in(
    tx: &mut Tx,
    claim: &mut PolicyResolution,
    turn: &Presented<'_>,
    now: i64,
) -> Result<std::result::Result<(), Refusal>> {
    claim.verified = false;
    let Some(row) = sql::get_in(tx, &claim.in_reply_to_state).await? else {
        return Ok(Err(Refusal::Unknown));
    };
    let thread =
        crate::store::messages::thread_ids(tx, std::iter::once((turn.transport, turn.thread_key)))
            .await?
            .into_values()
            .next();
    if let Err(r) = check(
        &row,
        turn.agent,
        thread.as_deref(),
        &binding(turn.sender),
        now,
    ) {
        return Ok(Err(r));
    }
    if !sql::consume(tx, &row.state, turn.message_id, now).await? {
        return Ok(Err(Refusal::Replayed));
    }
    claim.kind = PolicyKind::from(row.kind.as_str());
    claim.verified = true;
    claim.completed_at = Timestamp::from_unix_millis(now);
    claim.evidence = turn.sender.identities.clone().filter(|i| !i.is_empty());
    Ok(Ok(()))
}

/// The parts of a response as a transport without policy parts of its own (email,
/// ActivityPub) carries them: each policy part becomes its text (title, message) and, when it
/// has a state, a link to the state's landing page under `base`.
#[must_use]
pub fn as_text(parts: &[Part], base: &str) -> Vec<Part> {
    let mut out = Vec::with_capacity(parts.len() + 1);
    for p in parts {
        let Part::Policy(w) = p else {
            out.push(p.clone());
            continue;
        };
        let policy = &w.policy;
        out.push(Part::text(match &policy.title {
            Some(t) => format!("{t}\n\n{}", policy.message),
            None => policy.message.clone(),
        }));
        if let Some(state) = &policy.state {
            out.push(Part::Link(LinkPart {
                url: landing_url(base, state),
                title: Some(action_label(policy).to_owned()),
                description: None,
                extra: crate::message::Extra::new(),
            }));
        }
    }
    out
}

/// The label of the action that resolves `policy`: the agent's, else one for its kind.
#[must_use]
pub fn action_label(policy: &PolicyPart) -> &str {
    if let Some(l) = policy
        .action_label
        .as_deref()
        .filter(|l| !l.trim().is_empty())
    {
        return l;
    }
    match policy.kind {
        PolicyKind::ConsentRequired => "Review and consent",
        PolicyKind::PaymentRequired => "Review and pay",
        PolicyKind::Unauthorized => "Sign in",
        _ => "Continue",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::PolicyPartWrapper;

    fn response(parts: Vec<Part>) -> NormalizedResponse {
        let mut r: NormalizedResponse = serde_json::from_value(serde_json::json!({
            "id": "r1", "in_reply_to": "m1", "thread_id": "t1", "agent": "@bot@example.com",
            "parts": []
        }))
        .unwrap();
        r.parts = parts;
        r
    }

    fn sender(address: &str) -> Sender {
        Sender::local_agent(address)
    }

    fn policy(kind: &str) -> Part {
        Part::Policy(PolicyPartWrapper {
            policy: serde_json::from_value(
                serde_json::json!({"kind": kind, "message": "m", "state": "agent-chosen"}),
            )
            .unwrap(),
            extra: crate::message::Extra::new(),
        })
    }

    fn row(state: &str) -> StateRow {
        StateRow {
            state: state.into(),
            agent: "bot".into(),
            thread_id: "t1".into(),
            message_id: "m1".into(),
            response_id: "r1".into(),
            kind: "consent_required".into(),
            binding: binding(&sender("a@example.com")),
            part: "{}".into(),
            created_at: 0,
            expires_at: 1_000,
            consumed_at: None,
            consumed_by: None,
        }
    }

    #[test]
    fn states_are_minted_for_resolvable_kinds_only_and_replace_the_agents() {
        let mut r = response(vec![
            policy("consent_required"),
            policy("forbidden"),
            policy("x-new-kind"),
        ]);
        r.state = Some(ResponseState::InputRequired);
        let s = sender("a@example.com");
        let issue = Issue {
            agent: "bot",
            thread_id: "t1",
            message_id: "m1",
            sender: &s,
            expires_at: 5,
        };
        let minted = mint(&mut r, &issue);
        assert_eq!(minted.len(), 2);
        assert_eq!(minted[0].kind, "consent_required");
        assert_eq!(minted[1].kind, "x-new-kind");
        let states: Vec<Option<String>> = r
            .parts
            .iter()
            .map(|p| match p {
                Part::Policy(w) => w.policy.state.clone(),
                _ => None,
            })
            .collect();
        assert_eq!(states[0].as_deref(), Some(minted[0].state.as_str()));
        assert_eq!(states[1], None, "a forbidden part has nothing to resolve");
        assert_ne!(states[0].as_deref(), Some("agent-chosen"));
        assert_eq!(minted[0].state.len(), 43);
        assert_ne!(minted[0].state, minted[1].state);
    }

    #[test]
    fn a_policy_part_is_never_read_as_success() {
        let settled = |kinds: &[&str], state: Option<ResponseState>| {
            let mut r = response(kinds.iter().map(|k| policy(k)).collect());
            r.state = state;
            settle_state(&mut r);
            r.effective_state()
        };
        use ResponseState as S;
        assert_eq!(settled(&["consent_required"], None), S::InputRequired);
        assert_eq!(
            settled(&["x-new-kind"], Some(S::Completed)),
            S::InputRequired
        );
        assert_eq!(
            settled(&["payment_required", "unauthorized"], None),
            S::AuthRequired
        );
        assert_eq!(settled(&["forbidden"], None), S::Rejected);
        assert_eq!(settled(&["too_many_requests"], None), S::Failed);
        assert_eq!(
            settled(&["consent_required"], Some(S::Rejected)),
            S::Rejected
        );
        assert_eq!(settled(&[], None), S::Completed);
    }

    #[test]
    fn a_state_is_checked_against_agent_thread_sender_time_and_use() {
        let b = binding(&sender("A@example.com"));
        assert_eq!(check(&row("s"), "bot", Some("t1"), &b, 999), Ok(()));
        assert_eq!(
            check(&row("s"), "bot", Some("t1"), &b, 1_000),
            Err(Refusal::Expired)
        );
        assert_eq!(
            check(&row("s"), "other", Some("t1"), &b, 1),
            Err(Refusal::Foreign)
        );
        assert_eq!(
            check(&row("s"), "bot", Some("t2"), &b, 1),
            Err(Refusal::Foreign)
        );
        assert_eq!(check(&row("s"), "bot", None, &b, 1), Err(Refusal::Foreign));
        let other = binding(&sender("b@example.com"));
        assert_eq!(
            check(&row("s"), "bot", Some("t1"), &other, 1),
            Err(Refusal::Foreign)
        );
        let mut used = row("s");
        used.consumed_at = Some(1);
        assert_eq!(
            check(&used, "bot", Some("t1"), &b, 1),
            Err(Refusal::Replayed)
        );
    }

    #[test]
    fn the_binding_covers_every_verified_identity() {
        let plain = sender("a@example.com");
        let mut with_id = plain.clone();
        with_id.identities = Some(vec![
            serde_json::from_value(serde_json::json!({
                "subject": "mailto:a@example.com", "issuer": "dns:example.com",
                "method": "email-dmarc", "assurance": "address", "audience": "switchboard",
                "issued_at": "2026-01-01T00:00:00.000Z",
                "proof": {"type": "transport", "verified_by": "switchboard"}
            }))
            .unwrap(),
        ]);
        assert_ne!(binding(&plain), binding(&with_id));
        assert_eq!(binding(&with_id), binding(&with_id.clone()));
    }

    #[test]
    fn email_and_fediverse_get_the_text_and_a_landing_link() {
        let mut r = response(vec![Part::text("before"), policy("payment_required")]);
        if let Part::Policy(w) = &mut r.parts[1] {
            w.policy.title = Some("Payment".into());
            w.policy.state = Some("abc".into());
        }
        let out = as_text(&r.parts, "https://sb.example/");
        assert_eq!(out.len(), 3);
        assert!(matches!(&out[1], Part::Text(t) if t.content == "Payment\n\nm"));
        assert!(
            matches!(&out[2], Part::Link(l) if l.url == "https://sb.example/policy/abc"
                && l.title.as_deref() == Some("Review and pay"))
        );
    }
}
