//! The A2A client backend: puts an existing A2A agent behind a switchboard address
//! (`backend = { kind = "a2a", card = "https://…/agent-card.json" }`).
//!
//! It resolves the card (cached), calls the agent's first JSON-RPC interface with
//! `SendStreamingMessage` when the card allows streaming (else a blocking `SendMessage`, then
//! `GetTask` polling while the task is still running), and maps the task's artifacts, status
//! message and state back to a NormalizedResponse. A thread's first message names no context;
//! the next ones carry the contextId the agent answered with, so a conversation continues in one
//! context across restarts (the agent names its contexts: a server may refuse one a client
//! invents, and switchboard does for anonymous callers); a task that asked for input is
//! continued by the next message of its thread. Both are found from the agent's last stored
//! response in that thread, so a restart, or another instance, continues them too.

use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use jsonwebtoken::jwk::{Jwk, JwkSet};
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{Map, Value, json};
use tokio::sync::Mutex;

use super::{AgentBackend, Progress};
use crate::config::Secret;
use crate::error::OutboundError;
use crate::jws::JwsError;
use crate::message::{
    ArtifactPart, BytesRef, DeltaEvent, Extra, FilePart, InlineBytes, LinkPart, NormalizedMessage,
    NormalizedResponse, Part, PartEvent, ResponseEvent, ResponseState, TextMime, TextPart,
    UrlBytes,
};
use crate::net::sse::{self, SseReader};
use crate::net::{DocumentCache, HttpClient, HttpRequest};
use crate::store::{Db, messages};

/// The remote agent's card, as far as the client needs it.
#[derive(Debug, Clone)]
struct RemoteCard {
    url: String,
    streaming: bool,
    legacy: bool,
}

/// How long a remote card's key set is used before it is fetched again.
const JWKS_TTL_MS: i64 = 300_000;
/// A key set is fetched again at most this often.
const JWKS_MIN_REFETCH_MS: i64 = 1_000;

/// The remote agent and how it is called.
#[derive(Debug, Clone)]
pub struct A2aRemote {
    /// URL of its agent card.
    pub card_url: String,
    /// Bearer token sent on every call.
    pub token: Option<Secret>,
    /// Per-call timeout.
    pub timeout: Duration,
    /// Stream when the card allows it.
    pub streaming: bool,
    /// Refuse an unsigned card.
    pub require_signed_card: bool,
    /// The keys the card must be signed with (none: the JWKS its signature names, on the
    /// card's origin).
    pub card_keys: Vec<Jwk>,
}

/// Calls a remote A2A agent.
#[derive(Debug)]
pub struct A2aAgent {
    card_url: String,
    token: Option<Secret>,
    timeout: Duration,
    streaming: bool,
    require_signed_card: bool,
    card_keys: Vec<Jwk>,
    /// The remote card's key sets, fetched (and kept a while) through the guarded client.
    jwks: DocumentCache,
    http: HttpClient,
    card: Mutex<Option<RemoteCard>>,
    /// Where the agent's earlier responses are: the remote task a thread's last turn left
    /// waiting for input is read from there.
    db: Db,
    /// The agent's local name.
    agent: String,
}

/// What the client needs of its agent's last stored response in a thread.
#[derive(serde::Deserialize)]
struct LastTurn {
    state: Option<ResponseState>,
    metadata: Option<Map<String, Value>>,
}

fn temporary(e: impl std::fmt::Display) -> OutboundError {
    OutboundError::temporary(e.to_string())
}

impl A2aAgent {
    /// A client, for the agent named `agent`, of `remote`.
    #[must_use]
    pub fn new(agent: String, db: Db, remote: A2aRemote, http: HttpClient) -> Self {
        Self {
            card_url: remote.card_url,
            token: remote.token,
            timeout: remote.timeout,
            streaming: remote.streaming,
            require_signed_card: remote.require_signed_card,
            card_keys: remote.card_keys,
            jwks: DocumentCache::new(http.clone(), JWKS_TTL_MS, JWKS_MIN_REFETCH_MS),
            http,
            card: Mutex::new(None),
            db,
            agent,
        }
    }

    fn headers(&self, accept_sse: bool) -> Result<HeaderMap, OutboundError> {
        let mut h = HeaderMap::new();
        h.insert("a2a-version", HeaderValue::from_static("1.0"));
        h.insert(
            reqwest::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if accept_sse {
            h.insert(
                reqwest::header::ACCEPT,
                HeaderValue::from_static("text/event-stream"),
            );
        }
        if let Some(t) = &self.token {
            let v = HeaderValue::from_str(&format!("Bearer {}", t.expose()))
                .map_err(|_| OutboundError::permanent("the A2A token is not a header value"))?;
            h.insert(reqwest::header::AUTHORIZATION, v);
        }
        crate::telemetry::inject(&mut h);
        Ok(h)
    }

    async fn card(&self) -> Result<RemoteCard, OutboundError> {
        if let Some(c) = self.card.lock().await.clone() {
            return Ok(c);
        }
        let resp = self
            .http
            .send(HttpRequest {
                method: reqwest::Method::GET,
                url: &self.card_url,
                headers: HeaderMap::new(),
                body: None,
                timeout: None,
            })
            .await?;
        self.http.classify_status(&resp)?;
        let card: Value = serde_json::from_slice(&resp.body)
            .map_err(|e| OutboundError::permanent(format!("agent card: {e}")))?;
        self.check_signature(&card).await?;
        let iface = card["supportedInterfaces"]
            .as_array()
            .and_then(|ifs| {
                ifs.iter()
                    .find(|i| i["protocolBinding"] == "JSONRPC")
                    .or_else(|| ifs.first())
            })
            .cloned();
        let (url, legacy) = match iface {
            Some(i) => (
                i["url"].as_str().unwrap_or_default().to_owned(),
                i["protocolVersion"] == "0.3",
            ),
            // A 0.3 card: top-level url.
            None => (card["url"].as_str().unwrap_or_default().to_owned(), true),
        };
        if url.is_empty() {
            return Err(OutboundError::permanent("the agent card names no endpoint"));
        }
        if legacy {
            return Err(OutboundError::permanent(
                "the agent speaks A2A 0.3 only; the client backend speaks 1.0",
            ));
        }
        let c = RemoteCard {
            url,
            streaming: card["capabilities"]["streaming"] == true,
            legacy,
        };
        *self.card.lock().await = Some(c.clone());
        Ok(c)
    }

    /// Holds the card to its signatures: one must verify when the card carries any (or when
    /// `require_signed_card`), with a pinned key, else with the key set its `jku` names on
    /// the card's own origin (`/.well-known/jwks.json` there when it names none): a key set
    /// from anywhere else would let whoever rewrote the card sign it too.
    async fn check_signature(&self, card: &Value) -> Result<(), OutboundError> {
        let outcome = crate::jws::verify(card, |header| async move {
            if !self.card_keys.is_empty() {
                return Ok(self.card_keys.clone());
            }
            let jwks = self.jwks_url(header.jku.as_deref())?;
            self.fetch_keys(&jwks).await
        })
        .await;
        match outcome {
            Ok(()) => Ok(()),
            Err(JwsError::Unsigned) if !self.require_signed_card => Ok(()),
            Err(JwsError::Unsigned) => Err(OutboundError::permanent(
                "the agent card is not signed, and require_signed_card is set",
            )),
            Err(e @ JwsError::KeysUnavailable(_)) => {
                Err(OutboundError::temporary(format!("agent card: {e}")))
            }
            Err(e) => Err(OutboundError::permanent(format!("agent card: {e}"))),
        }
    }

    /// The key set a card signature's `jku` names, held to the card's origin.
    fn jwks_url(&self, jku: Option<&str>) -> Result<String, JwsError> {
        let card = url::Url::parse(&self.card_url)
            .map_err(|_| JwsError::Malformed("the card URL is not a URL".into()))?;
        let Some(jku) = jku else {
            return card
                .join("/.well-known/jwks.json")
                .map(String::from)
                .map_err(|_| JwsError::Malformed("no key set URL".into()));
        };
        let url = card
            .join(jku)
            .map_err(|_| JwsError::Malformed(format!("jku {jku:?} is not a URL")))?;
        if url.origin() != card.origin() {
            return Err(JwsError::Malformed(format!(
                "jku {jku:?} is not on the card's origin; pin its keys with card_keys"
            )));
        }
        Ok(url.into())
    }

    async fn fetch_keys(&self, url: &str) -> Result<Vec<Jwk>, JwsError> {
        let body = self
            .jwks
            .get(url, false)
            .await
            .map_err(|e| JwsError::KeysUnavailable(format!("{url}: {e}")))?;
        serde_json::from_slice::<JwkSet>(&body)
            .map(|set| set.keys)
            .map_err(|e| JwsError::Malformed(format!("key set {url}: {e}")))
    }

    async fn call(
        &self,
        card: &RemoteCard,
        method: &str,
        params: Value,
        stream: bool,
        progress: Option<Progress<'_>>,
    ) -> Result<Vec<Value>, OutboundError> {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        // The remote's artifact chunks are reported as they arrive: text as deltas, other
        // parts whole. An update that replaces an artifact already begun (`append: false` on a
        // known id, as a streamed answer's final artifact does) adds nothing new.
        let mut reader = SseReader::new();
        let mut begun: std::collections::HashSet<String> = std::collections::HashSet::new();
        let mut observe = |_: &reqwest::header::HeaderMap, chunk: &[u8]| {
            let Some(report) = progress.filter(|_| stream) else {
                return;
            };
            for event in reader.feed(chunk) {
                let Ok(env) = serde_json::from_str::<Value>(&event.data) else {
                    continue;
                };
                let Some(update) = env.pointer("/result/artifactUpdate") else {
                    continue;
                };
                let id = update
                    .pointer("/artifact/artifactId")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                let append = update.get("append").and_then(Value::as_bool) == Some(true);
                if !append && !begun.insert(id) {
                    continue;
                }
                let parts = update.pointer("/artifact/parts").and_then(Value::as_array);
                for p in parts.into_iter().flatten() {
                    match p.get("text").and_then(Value::as_str) {
                        Some(text) => report(ResponseEvent::Delta(DeltaEvent {
                            text: text.to_owned(),
                        })),
                        None => {
                            if let Some(part) = from_remote_part(p) {
                                report(ResponseEvent::Part(PartEvent { part }));
                            }
                        }
                    }
                }
            }
        };
        let resp = self
            .http
            .send_observed(
                HttpRequest {
                    method: reqwest::Method::POST,
                    url: &card.url,
                    headers: self.headers(stream)?,
                    body: Some(Bytes::from(body.to_string())),
                    timeout: Some(self.timeout),
                },
                &mut observe,
            )
            .await?;
        self.http.classify_status(&resp)?;
        let envelopes: Vec<Value> = if resp.media_type() == "text/event-stream" {
            stream_envelopes(&resp.body)
        } else {
            vec![
                serde_json::from_slice(&resp.body)
                    .map_err(|e| temporary(format!("A2A answer is not JSON: {e}")))?,
            ]
        };
        let mut results = Vec::with_capacity(envelopes.len());
        for env in envelopes {
            if let Some(err) = env.get("error") {
                let code = err["code"].as_i64().unwrap_or(0);
                let msg = format!("remote A2A error {code}");
                return Err(if code == -32603 {
                    OutboundError::temporary(msg)
                } else {
                    OutboundError::permanent(msg)
                });
            }
            results.push(env["result"].clone());
        }
        Ok(results)
    }
}

/// The JSON-RPC envelopes of an event-stream answer, one per event; events whose data is not
/// JSON are skipped.
fn stream_envelopes(body: &[u8]) -> Vec<Value> {
    sse::parse(body)
        .into_iter()
        .filter_map(|event| serde_json::from_str(&event.data).ok())
        .collect()
}

/// A contract part as a 1.0 Part (media are passed by their signed URL).
fn to_remote_part(p: &Part) -> Option<Value> {
    Some(match p {
        Part::Text(t) => json!({"text": t.content}),
        Part::File(f) => {
            let mut v = match &f.bytes_ref {
                BytesRef::Inline(i) => json!({"raw": i.data_base64}),
                BytesRef::Url(u) => json!({"url": u.url}),
                BytesRef::ContentAddressed(c) => json!({"url": c.url.clone()?}),
                BytesRef::Other(_) => return None,
            };
            v["mediaType"] = json!(f.mime);
            if let Some(n) = &f.name {
                v["filename"] = json!(n);
            }
            v
        }
        Part::Link(l) => json!({"url": l.url}),
        Part::Artifact(a) => json!({"data": a.data.clone()?, "mediaType": a.mime}),
        _ => return None,
    })
}

/// A remote 1.0 Part as a contract part.
fn from_remote_part(p: &Value) -> Option<Part> {
    let media = p["mediaType"].as_str();
    let name = p["filename"].as_str().map(str::to_owned);
    if let Some(t) = p["text"].as_str() {
        let mime = match media {
            Some("text/markdown") => TextMime::Markdown,
            Some("text/html") => TextMime::Html,
            _ => TextMime::Plain,
        };
        return Some(Part::Text(TextPart {
            mime,
            content: t.to_owned(),
            extra: Extra::new(),
        }));
    }
    if let Some(raw) = p["raw"].as_str() {
        base64::engine::general_purpose::STANDARD.decode(raw).ok()?;
        return Some(Part::File(FilePart {
            name,
            mime: media.unwrap_or("application/octet-stream").to_owned(),
            size: None,
            bytes_ref: BytesRef::Inline(InlineBytes {
                data_base64: raw.to_owned(),
            }),
            extra: Extra::new(),
        }));
    }
    if let Some(url) = p["url"].as_str() {
        return Some(match media {
            Some(m) => Part::File(FilePart {
                name,
                mime: m.to_owned(),
                size: None,
                bytes_ref: BytesRef::Url(UrlBytes {
                    url: url.to_owned(),
                    expires_at: None,
                }),
                extra: Extra::new(),
            }),
            None => Part::Link(LinkPart {
                url: url.to_owned(),
                title: name,
                description: None,
                extra: Extra::new(),
            }),
        });
    }
    p.get("data").map(|d| {
        Part::Artifact(ArtifactPart {
            artifact_type: None,
            name,
            mime: media.unwrap_or("application/json").to_owned(),
            bytes_ref: None,
            data: Some(d.clone()),
            extra: Extra::new(),
        })
    })
}

/// What the remote agent said, folded from a result or a stream of events.
#[derive(Debug, Default)]
struct Outcome {
    task_id: Option<String>,
    /// The context the agent answered in.
    context_id: Option<String>,
    state: Option<String>,
    status_parts: Vec<Value>,
    artifacts: Vec<(String, Vec<Value>)>,
    message_parts: Vec<Value>,
}

impl Outcome {
    fn artifact(&mut self, a: &Value, append: bool) {
        let id = a["artifactId"].as_str().unwrap_or_default().to_owned();
        let parts = a["parts"].as_array().cloned().unwrap_or_default();
        match self.artifacts.iter_mut().find(|(i, _)| *i == id) {
            Some((_, existing)) if append => existing.extend(parts),
            Some((_, existing)) => *existing = parts,
            None => self.artifacts.push((id, parts)),
        }
    }

    fn status(&mut self, s: &Value) {
        if let Some(st) = s["state"].as_str() {
            self.state = Some(st.to_owned());
        }
        if let Some(parts) = s.pointer("/message/parts").and_then(Value::as_array) {
            self.status_parts.clone_from(parts);
        }
    }

    fn fold(&mut self, r: &Value) {
        if let Some(c) = ["task", "message", "statusUpdate", "artifactUpdate"]
            .iter()
            .find_map(|k| r.get(*k)?.get("contextId")?.as_str())
        {
            self.context_id = Some(c.to_owned());
        }
        if let Some(t) = r.get("task") {
            self.task_id = t["id"].as_str().map(str::to_owned);
            self.status(&t["status"]);
            self.artifacts.clear();
            for a in t["artifacts"].as_array().into_iter().flatten() {
                self.artifact(a, false);
            }
        } else if let Some(m) = r.get("message") {
            self.message_parts = m["parts"].as_array().cloned().unwrap_or_default();
            self.state = Some("TASK_STATE_COMPLETED".into());
        } else if let Some(s) = r.get("statusUpdate") {
            self.status(&s["status"]);
        } else if let Some(a) = r.get("artifactUpdate") {
            self.artifact(&a["artifact"], a["append"] == true);
        } else if r.get("id").is_some() && r.get("status").is_some() {
            // GetTask answers with a bare Task.
            self.fold(&json!({ "task": r }));
        }
    }

    fn running(&self) -> bool {
        matches!(
            self.state.as_deref(),
            None | Some("TASK_STATE_SUBMITTED" | "TASK_STATE_WORKING")
        )
    }
}

#[async_trait::async_trait]
impl AgentBackend for A2aAgent {
    async fn respond(
        &self,
        msg: &NormalizedMessage,
    ) -> Result<Option<NormalizedResponse>, OutboundError> {
        self.answer(msg, None).await
    }

    fn streams(&self) -> bool {
        self.streaming
    }

    async fn respond_streaming(
        &self,
        msg: &NormalizedMessage,
        progress: Progress<'_>,
    ) -> Result<Option<NormalizedResponse>, OutboundError> {
        self.answer(msg, Some(progress)).await
    }
}

impl A2aAgent {
    /// The remote task this agent's last response in `thread` left waiting for input (or
    /// authorisation), if it did.
    /// The remote context of `thread` (the one the agent last answered in) and the remote task
    /// waiting for this message, if one asked for input.
    async fn remote_turn(
        &self,
        thread: &str,
    ) -> Result<(Option<String>, Option<String>), OutboundError> {
        let Some(row) = messages::last_response(&self.db, thread, &self.agent)
            .await
            .map_err(|e| OutboundError::temporary(format!("the thread's last turn: {e}")))?
        else {
            return Ok((None, None));
        };
        let Ok(last) = serde_json::from_str::<LastTurn>(&row.body) else {
            return Ok((None, None));
        };
        let meta = |key: &str| {
            last.metadata
                .as_ref()
                .and_then(|m| m.get(key)?.as_str().map(str::to_owned))
        };
        let waiting = matches!(
            last.state,
            Some(ResponseState::InputRequired | ResponseState::AuthRequired)
        );
        Ok((
            meta("a2a_remote_context_id"),
            waiting.then(|| meta("a2a_remote_task_id")).flatten(),
        ))
    }

    async fn answer(
        &self,
        msg: &NormalizedMessage,
        progress: Option<Progress<'_>>,
    ) -> Result<Option<NormalizedResponse>, OutboundError> {
        let card = self.card().await?;
        debug_assert!(!card.legacy);
        let parts: Vec<Value> = msg.parts.iter().filter_map(to_remote_part).collect();
        if parts.is_empty() {
            return Err(OutboundError::permanent(
                "nothing in the message can be sent over A2A",
            ));
        }
        let mut message = json!({
            "messageId": msg.id,
            "role": "ROLE_USER",
            "parts": parts,
        });
        let (context_id, task_id) = self.remote_turn(&msg.thread_id).await?;
        if let Some(c) = context_id {
            message["contextId"] = json!(c);
        }
        if let Some(t) = task_id {
            message["taskId"] = json!(t);
        }
        // The chain always travels, so that the remote agent, and any agent its own backend
        // calls in turn, is judged as a turn of an agent conversation (its hop limit, and the
        // budget an agent gives other agents): a person's turn opens one at hop 1.
        let chain =
            msg.recipient_capabilities
                .agent_chain
                .unwrap_or(crate::message::AgentChain::first(
                    crate::config::DEFAULT_MAX_HOPS,
                ));
        message["metadata"] = json!({"mentionable": {
            "agent_chain": chain,
            "on_behalf_of": msg.on_behalf_of(),
        }});
        let stream = self.streaming && card.streaming;
        let method = if stream {
            "SendStreamingMessage"
        } else {
            "SendMessage"
        };
        let results = self
            .call(
                &card,
                method,
                json!({ "message": message }),
                stream,
                progress,
            )
            .await?;
        let mut outcome = Outcome::default();
        for r in &results {
            outcome.fold(r);
        }
        // A task still running after a blocking call (or a stream cut short): poll it.
        let deadline = tokio::time::Instant::now() + self.timeout;
        while outcome.running() && tokio::time::Instant::now() < deadline {
            let Some(id) = outcome.task_id.clone() else {
                break;
            };
            tokio::time::sleep(Duration::from_millis(250)).await;
            for r in self
                .call(&card, "GetTask", json!({"id": id}), false, None)
                .await?
            {
                outcome.fold(&r);
            }
        }
        if outcome.running() {
            return Err(OutboundError::temporary("the remote task is still running"));
        }
        let state = match outcome.state.as_deref() {
            Some("TASK_STATE_INPUT_REQUIRED") => Some(ResponseState::InputRequired),
            Some("TASK_STATE_AUTH_REQUIRED") => Some(ResponseState::AuthRequired),
            Some("TASK_STATE_REJECTED") => Some(ResponseState::Rejected),
            Some("TASK_STATE_FAILED" | "TASK_STATE_CANCELED") => Some(ResponseState::Failed),
            _ => None,
        };
        let remote: Vec<&Value> = outcome
            .artifacts
            .iter()
            .flat_map(|(_, parts)| parts.iter())
            .chain(outcome.message_parts.iter())
            .chain(outcome.status_parts.iter())
            .collect();
        let parts: Vec<Part> = remote.into_iter().filter_map(from_remote_part).collect();
        let mut metadata = Map::new();
        if let Some(id) = &outcome.task_id {
            metadata.insert("a2a_remote_task_id".into(), json!(id));
        }
        if let Some(id) = &outcome.context_id {
            metadata.insert("a2a_remote_context_id".into(), json!(id));
        }
        let state = if parts.is_empty() && state.is_none() {
            Some(ResponseState::Failed)
        } else {
            state
        };
        Ok(Some(NormalizedResponse {
            state,
            metadata: (!metadata.is_empty()).then_some(metadata),
            ..NormalizedResponse::reply_to(msg, parts)
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folds_streams_and_maps_parts() {
        let mut o = Outcome::default();
        for r in [
            json!({"task": {"id": "t", "status": {"state": "TASK_STATE_SUBMITTED"}}}),
            json!({"artifactUpdate": {"artifact": {"artifactId": "a", "parts": [{"text": "one "}]}}}),
            json!({"artifactUpdate": {"append": true, "artifact": {"artifactId": "a", "parts": [{"text": "two"}]}}}),
            json!({"statusUpdate": {"status": {"state": "TASK_STATE_COMPLETED"}}}),
        ] {
            o.fold(&r);
        }
        assert!(!o.running());
        assert_eq!(o.artifacts[0].1.len(), 2);
        assert!(matches!(
            from_remote_part(&json!({"data": {"k": 1}})),
            Some(Part::Artifact(_))
        ));
        assert!(matches!(
            from_remote_part(&json!({"url": "https://x"})),
            Some(Part::Link(_))
        ));
        assert!(from_remote_part(&json!({"raw": "%%"})).is_none());
    }

    #[test]
    fn stream_envelopes_join_multi_line_data() {
        let body = b"id: 1\ndata: {\"jsonrpc\": \"2.0\",\ndata:  \"result\": {\"n\": 1}}\n\n: keep-alive\n\nid: 2\r\ndata: {\"result\": {\"n\": 2}}\r\n\r\ndata: not json\n\n";
        let numbers: Vec<Value> = stream_envelopes(body)
            .iter()
            .map(|e| e["result"]["n"].clone())
            .collect();
        assert_eq!(numbers, [json!(1), json!(2)], "one envelope per event");
    }
}
