//! Mapping between A2A and the contract: inbound Parts → NormalizedMessage parts (checked,
//! pure), and a NormalizedResponse → A2A Parts and task state. Storing raw bytes in the blob
//! store is the caller's job; this module only decodes and checks them.

use base64::Engine as _;
use serde_json::{Map, Value, json};

use super::wire::{RpcError, TaskState};
use crate::message::{
    AgentChain, Extra, LinkPart, NormalizedResponse, Part, PolicyKind, PolicyResolution,
    ResponseState, TextMime, TextPart,
};
use crate::policy::POLICY_EXTENSION;
use crate::trust::{IDENTITY_EXTENSION, LEGACY_IDENTITY_EXTENSION};

/// The extension URI of tool events carried as DataParts.
pub const TOOL_EVENTS_EXTENSION: &str = "https://mentionable.dev/ns/a2a-tool-events/v0.1/";

/// One inbound part, checked and decoded, before attachments are stored.
#[derive(Debug, Clone, PartialEq)]
pub enum InPart {
    /// Ready as it is (text, link, data artifact).
    Ready(Box<Part>),
    /// Bytes to store in the blob store, then refer to as a file.
    Bytes {
        /// The decoded bytes.
        data: Vec<u8>,
        /// Media type (`application/octet-stream` when absent).
        mime: String,
        /// File name.
        name: Option<String>,
    },
}

/// Limits applied to an inbound message.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Most parts in one message.
    pub max_parts: usize,
    /// Most bytes of text and decoded data across the parts.
    pub max_bytes: usize,
}

/// Checks and decodes the parts of an inbound 1.0 message.
///
/// # Errors
/// -32602 naming the offending part.
pub fn parse_parts(parts: &[Value], limits: Limits) -> Result<Vec<InPart>, RpcError> {
    if parts.is_empty() {
        return Err(RpcError::invalid_field(
            "message.parts",
            "at least one part is required",
        ));
    }
    if parts.len() > limits.max_parts {
        return Err(RpcError::invalid_field(
            "message.parts",
            format!("at most {} parts are accepted", limits.max_parts),
        ));
    }
    let mut total = 0usize;
    let mut out = Vec::with_capacity(parts.len());
    for (i, p) in parts.iter().enumerate() {
        let field = format!("message.parts[{i}]");
        let Some(obj) = p.as_object() else {
            return Err(RpcError::invalid_field(&field, "a part is an object"));
        };
        let media_type = obj.get("mediaType").and_then(Value::as_str);
        let filename = obj.get("filename").and_then(Value::as_str);
        let present: Vec<&str> = ["text", "raw", "url", "data"]
            .into_iter()
            .filter(|k| obj.get(*k).is_some_and(|v| !v.is_null()))
            .collect();
        let part = match present.as_slice() {
            ["text"] => {
                let Some(text) = obj.get("text").and_then(Value::as_str) else {
                    return Err(RpcError::invalid_field(
                        &format!("{field}.text"),
                        "a string",
                    ));
                };
                total += text.len();
                let mime = match media_type {
                    Some("text/markdown") => TextMime::Markdown,
                    Some("text/html") => TextMime::Html,
                    _ => TextMime::Plain,
                };
                InPart::Ready(Box::new(Part::Text(TextPart {
                    mime,
                    content: text.to_owned(),
                    extra: Extra::new(),
                })))
            }
            ["raw"] => {
                let Some(b64) = obj.get("raw").and_then(Value::as_str) else {
                    return Err(RpcError::invalid_field(
                        &format!("{field}.raw"),
                        "base64 string",
                    ));
                };
                let data = base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .map_err(|e| {
                        RpcError::invalid_field(
                            &format!("{field}.raw"),
                            format!("not valid base64: {e}"),
                        )
                    })?;
                total += data.len();
                InPart::Bytes {
                    data,
                    mime: media_type.unwrap_or("application/octet-stream").to_owned(),
                    name: filename.map(str::to_owned),
                }
            }
            ["url"] => {
                let Some(url) = obj.get("url").and_then(Value::as_str) else {
                    return Err(RpcError::invalid_field(&format!("{field}.url"), "a string"));
                };
                if url::Url::parse(url).is_err() {
                    return Err(RpcError::invalid_field(
                        &format!("{field}.url"),
                        "not an absolute URL",
                    ));
                }
                total += url.len();
                let mut extra = Extra::new();
                if let Some(m) = media_type {
                    extra.insert("media_type".into(), json!(m));
                }
                InPart::Ready(Box::new(Part::Link(LinkPart {
                    url: url.to_owned(),
                    title: filename.map(str::to_owned),
                    description: None,
                    extra,
                })))
            }
            ["data"] => {
                let data = obj.get("data").cloned().unwrap_or(Value::Null);
                total += data.to_string().len();
                let mut m = Map::new();
                m.insert("kind".into(), json!("artifact"));
                m.insert(
                    "mime".into(),
                    json!(media_type.unwrap_or("application/json")),
                );
                if let Some(n) = filename {
                    m.insert("name".into(), json!(n));
                }
                m.insert("data".into(), data);
                let part: Part = serde_json::from_value(Value::Object(m)).map_err(|e| {
                    RpcError::invalid_field(&format!("{field}.data"), e.to_string())
                })?;
                InPart::Ready(Box::new(part))
            }
            [] => {
                return Err(RpcError::invalid_field(
                    &field,
                    "exactly one of text, raw, url, data is required",
                ));
            }
            _ => {
                return Err(RpcError::invalid_field(
                    &field,
                    "only one of text, raw, url, data may be set",
                ));
            }
        };
        if total > limits.max_bytes {
            return Err(RpcError::invalid_field(
                "message.parts",
                format!("the parts exceed {} bytes", limits.max_bytes),
            ));
        }
        out.push(part);
    }
    Ok(out)
}

/// `metadata.mentionable.agent_chain` of an inbound message, when well-formed.
#[must_use]
pub fn agent_chain(metadata: Option<&Map<String, Value>>) -> Option<AgentChain> {
    let chain = metadata?.get("mentionable")?.get("agent_chain")?;
    serde_json::from_value(chain.clone()).ok()
}

/// The policy state an inbound message presents in its metadata under the policy extension
/// (`{"state": "…", "data": {…}}`), as an unverified resolution for ingest to check: its kind
/// is filled in from the state once found. `None` when the extension is absent.
///
/// # Errors
/// What is wrong with a value present under the extension.
pub fn policy_claim(
    metadata: Option<&Map<String, Value>>,
    now: i64,
) -> Result<Option<PolicyResolution>, &'static str> {
    let Some(v) = metadata.and_then(|m| m.get(POLICY_EXTENSION)) else {
        return Ok(None);
    };
    let state = v
        .get("state")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty() && s.len() <= 256)
        .ok_or("the policy extension needs {\"state\": \"…\"}")?;
    let data = match v.get("data") {
        None | Some(Value::Null) => None,
        Some(Value::Object(d)) => Some(d.clone()),
        Some(_) => return Err("the policy extension's data must be an object"),
    };
    Ok(Some(PolicyResolution {
        kind: PolicyKind::Other(String::new()),
        in_reply_to_state: state.to_owned(),
        completed_at: crate::message::Timestamp::from_unix_millis(now),
        verified: false,
        evidence: None,
        data,
    }))
}

/// The compact JWS identity assertions forwarded in an inbound message's metadata under the
/// identity extension (the legacy URI is read too): `{"assertions": [jws, …]}`, or one JWS, or
/// a list of them. Anything else there is ignored.
#[must_use]
pub fn identity_assertions(metadata: Option<&Map<String, Value>>) -> Vec<String> {
    let Some(m) = metadata else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for uri in [IDENTITY_EXTENSION, LEGACY_IDENTITY_EXTENSION] {
        let list = match m.get(uri) {
            Some(Value::Object(o)) => o.get("assertions").or_else(|| o.get("assertion")),
            other => other,
        };
        match list {
            Some(Value::String(s)) => out.push(s.clone()),
            Some(Value::Array(a)) => {
                out.extend(a.iter().filter_map(|v| v.as_str().map(str::to_owned)))
            }
            _ => {}
        }
    }
    out
}

/// The task state a response ends its turn in.
#[must_use]
pub fn response_state(resp: &NormalizedResponse) -> TaskState {
    match resp.effective_state() {
        ResponseState::Completed => TaskState::Completed,
        ResponseState::InputRequired => TaskState::InputRequired,
        ResponseState::AuthRequired => TaskState::AuthRequired,
        ResponseState::Rejected => TaskState::Rejected,
        ResponseState::Failed => TaskState::Failed,
        ResponseState::Other(_) => TaskState::Completed,
    }
}

/// A contract part as an A2A 1.0 Part.
#[must_use]
pub fn to_a2a_part(p: &Part) -> Value {
    match p {
        Part::Text(t) => {
            let mut v = json!({ "text": t.content });
            if t.mime != TextMime::Plain {
                v["mediaType"] = json!(t.mime.as_str());
            }
            v
        }
        Part::File(f) => {
            let mut v = bytes_ref_part(&f.bytes_ref);
            v["mediaType"] = json!(f.mime);
            if let Some(n) = &f.name {
                v["filename"] = json!(n);
            }
            v
        }
        Part::Link(l) => {
            let mut v = json!({ "url": l.url });
            if let Some(t) = &l.title {
                v["filename"] = json!(t);
            }
            v
        }
        Part::Artifact(a) => {
            let mut v = match (&a.data, &a.bytes_ref) {
                (Some(d), _) => json!({ "data": d }),
                (None, Some(b)) => bytes_ref_part(b),
                (None, None) => json!({ "data": null }),
            };
            v["mediaType"] = json!(a.mime);
            if let Some(n) = &a.name {
                v["filename"] = json!(n);
            }
            v
        }
        Part::ToolCall(tc) => {
            let kind = if tc.error.is_some() {
                "tool-error"
            } else if tc.result.is_some() {
                "tool-result"
            } else {
                "tool-call"
            };
            let mut data = json!({ "type": kind, "id": tc.id, "name": tc.name, "args": tc.args });
            if let Some(r) = &tc.result {
                data["result"] = r.clone();
            }
            if let Some(e) = &tc.error {
                data["error"] = json!({ "message": e.message });
            }
            json!({ "data": data, "mediaType": "application/json",
                    "metadata": { "extension": TOOL_EVENTS_EXTENSION } })
        }
        Part::Policy(pw) => json!({
            "data": { "type": "policy", "policy": pw.policy },
            "mediaType": "application/json",
        }),
        Part::Event(e) => json!({
            "data": { "type": "event", "event": e },
            "mediaType": "application/json",
        }),
        Part::Other(m) => {
            json!({ "data": Value::Object(m.clone()), "mediaType": "application/json" })
        }
    }
}

fn bytes_ref_part(b: &crate::message::BytesRef) -> Value {
    use crate::message::BytesRef;
    match b {
        BytesRef::Inline(i) => json!({ "raw": i.data_base64 }),
        BytesRef::Url(u) => json!({ "url": u.url }),
        BytesRef::ContentAddressed(c) => match &c.url {
            Some(u) => json!({ "url": u }),
            None => json!({ "data": { "sha256": c.digest } }),
        },
        BytesRef::Other(m) => json!({ "data": Value::Object(m.clone()) }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_assertions_are_read_under_both_extension_uris() {
        let m = |v: Value| v.as_object().cloned();
        assert_eq!(
            identity_assertions(
                m(json!({IDENTITY_EXTENSION: {"assertions": ["a", "b", 3]}})).as_ref()
            ),
            ["a", "b"]
        );
        assert_eq!(
            identity_assertions(m(json!({LEGACY_IDENTITY_EXTENSION: "c"})).as_ref()),
            ["c"]
        );
        assert_eq!(
            identity_assertions(m(json!({IDENTITY_EXTENSION: ["d"], "https://mentionable.dev/ns/identity/v0.1/": ["e"]})).as_ref()),
            ["d"],
            "URIs are compared exactly"
        );
        assert!(identity_assertions(None).is_empty());
    }

    const LIMITS: Limits = Limits {
        max_parts: 4,
        max_bytes: 1000,
    };

    #[test]
    fn parts_map_by_member() {
        let parts = vec![
            json!({"text":"hi"}),
            json!({"raw":"aGk=","filename":"a.txt","mediaType":"text/plain"}),
            json!({"url":"https://example.com/x"}),
            json!({"data":{"k":1}}),
        ];
        let got = parse_parts(&parts, LIMITS).unwrap();
        assert!(
            matches!(&got[0], InPart::Ready(p) if matches!(&**p, Part::Text(t) if t.content == "hi"))
        );
        assert!(
            matches!(&got[1], InPart::Bytes { data, mime, name } if data == b"hi" && mime == "text/plain" && name.as_deref() == Some("a.txt"))
        );
        assert!(
            matches!(&got[2], InPart::Ready(p) if matches!(&**p, Part::Link(l) if l.url == "https://example.com/x"))
        );
        assert!(
            matches!(&got[3], InPart::Ready(p) if matches!(&**p, Part::Artifact(a) if a.data == Some(json!({"k":1}))))
        );
    }

    #[test]
    fn bad_parts_are_invalid_params() {
        for (parts, field) in [
            (vec![], "message.parts"),
            (vec![json!({"raw":"%%%"})], "message.parts[0].raw"),
            (
                vec![json!({"text":"a","url":"https://x"})],
                "message.parts[0]",
            ),
            (vec![json!({})], "message.parts[0]"),
            (vec![json!({"text":1})], "message.parts[0].text"),
            (vec![json!({"text":"a"}); 5], "message.parts"),
            (vec![json!({"text":"a".repeat(2000)})], "message.parts"),
        ] {
            let e = parse_parts(&parts, LIMITS).unwrap_err();
            assert_eq!(e.code, -32602);
            assert_eq!(e.violations[0].0, field, "{parts:?}");
        }
    }

    #[test]
    fn tool_calls_become_data_parts() {
        let p: Part = serde_json::from_value(
            json!({"kind":"tool_call","id":"c1","name":"search","args":{"q":"x"},"result":[1]}),
        )
        .unwrap();
        let v = to_a2a_part(&p);
        assert_eq!(v["data"]["type"], "tool-result");
        assert_eq!(v["data"]["result"], json!([1]));
    }
}
