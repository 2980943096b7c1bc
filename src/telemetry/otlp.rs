//! The OTLP trace wire format: the few protobuf messages of
//! `opentelemetry/proto/collector/trace/v1` that an export request is made of
//! (`ExportTraceServiceRequest` → `ResourceSpans` → `ScopeSpans` → `Span`, with `KeyValue`
//! attributes and a `Status`), encoded by hand. Pure: no I/O, no clock.

/// What kind of work a span stands for (`Span.SpanKind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    /// Work inside switchboard.
    Internal = 1,
    /// An inbound request served.
    Server = 2,
    /// An outbound request made (an agent backend called).
    Client = 3,
    /// Work handed to a queue.
    Producer = 4,
    /// Work taken from a queue.
    Consumer = 5,
}

impl SpanKind {
    /// The kind an `otel.kind` field names (`server`, `client`, …), case-insensitive.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s.to_ascii_lowercase().as_str() {
            "internal" => Self::Internal,
            "server" => Self::Server,
            "client" => Self::Client,
            "producer" => Self::Producer,
            "consumer" => Self::Consumer,
            _ => return None,
        })
    }
}

/// A span's outcome (`Status.StatusCode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StatusCode {
    /// Not said.
    #[default]
    Unset = 0,
    /// Succeeded.
    Ok = 1,
    /// Failed.
    Error = 2,
}

/// An attribute's value (`AnyValue`, the scalar cases).
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    /// `string_value`.
    Str(String),
    /// `bool_value`.
    Bool(bool),
    /// `int_value`.
    Int(i64),
    /// `double_value`.
    Double(f64),
}

/// One finished span, as exported.
#[derive(Debug, Clone, PartialEq)]
pub struct SpanRecord {
    /// The trace (16 bytes).
    pub trace_id: [u8; 16],
    /// The span (8 bytes).
    pub span_id: [u8; 8],
    /// The span that caused it, when any (local or remote).
    pub parent_span_id: Option<[u8; 8]>,
    /// The W3C trace flags.
    pub flags: u8,
    /// The operation's name.
    pub name: String,
    /// What kind of work it is.
    pub kind: SpanKind,
    /// When it began (ns since the Unix epoch).
    pub start_unix_nano: u64,
    /// When it ended (ns since the Unix epoch).
    pub end_unix_nano: u64,
    /// Its attributes.
    pub attributes: Vec<(&'static str, AttrValue)>,
    /// How it ended.
    pub status: StatusCode,
    /// Why, when it failed.
    pub status_message: Option<String>,
}

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;
const FIXED32: u8 = 5;

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        // Seven bits at a time, low first, the high bit saying more follow.
        out.push((v & 0x7f) as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn tag(out: &mut Vec<u8>, field: u32, wire: u8) {
    varint(out, (u64::from(field) << 3) | u64::from(wire));
}

fn bytes_field(out: &mut Vec<u8>, field: u32, b: &[u8]) {
    tag(out, field, LEN);
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn message_field(out: &mut Vec<u8>, field: u32, f: impl FnOnce(&mut Vec<u8>)) {
    let mut inner = Vec::new();
    f(&mut inner);
    bytes_field(out, field, &inner);
}

fn key_value(out: &mut Vec<u8>, field: u32, key: &str, value: &AttrValue) {
    message_field(out, field, |kv| {
        bytes_field(kv, 1, key.as_bytes());
        message_field(kv, 2, |any| match value {
            AttrValue::Str(s) => bytes_field(any, 1, s.as_bytes()),
            AttrValue::Bool(b) => {
                tag(any, 2, VARINT);
                varint(any, u64::from(*b));
            }
            AttrValue::Int(i) => {
                tag(any, 3, VARINT);
                // int64: two's complement, as a 64-bit varint.
                varint(any, u64::from_ne_bytes(i.to_ne_bytes()));
            }
            AttrValue::Double(d) => {
                tag(any, 4, FIXED64);
                any.extend_from_slice(&d.to_le_bytes());
            }
        });
    });
}

fn span(out: &mut Vec<u8>, s: &SpanRecord) {
    bytes_field(out, 1, &s.trace_id);
    bytes_field(out, 2, &s.span_id);
    if let Some(parent) = &s.parent_span_id {
        bytes_field(out, 4, parent);
    }
    bytes_field(out, 5, s.name.as_bytes());
    tag(out, 6, VARINT);
    varint(out, s.kind as u64);
    tag(out, 7, FIXED64);
    out.extend_from_slice(&s.start_unix_nano.to_le_bytes());
    tag(out, 8, FIXED64);
    out.extend_from_slice(&s.end_unix_nano.to_le_bytes());
    for (k, v) in &s.attributes {
        key_value(out, 9, k, v);
    }
    if s.status != StatusCode::Unset {
        message_field(out, 15, |st| {
            if let Some(m) = &s.status_message {
                bytes_field(st, 2, m.as_bytes());
            }
            tag(st, 3, VARINT);
            varint(st, s.status as u64);
        });
    }
    // The W3C flags in the low byte; bit 8 says whether the parent was remote is left unset.
    tag(out, 16, FIXED32);
    out.extend_from_slice(&u32::from(s.flags).to_le_bytes());
}

/// An `ExportTraceServiceRequest` holding `spans`, all from one resource (`service.name` =
/// `service_name`) and one instrumentation scope (`scope`, `version`).
#[must_use]
pub fn export_request(
    service_name: &str,
    scope: &str,
    version: &str,
    spans: &[SpanRecord],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(256 * spans.len() + 128);
    message_field(&mut out, 1, |rs| {
        message_field(rs, 1, |res| {
            key_value(
                res,
                1,
                "service.name",
                &AttrValue::Str(service_name.to_owned()),
            );
        });
        message_field(rs, 2, |ss| {
            message_field(ss, 1, |sc| {
                bytes_field(sc, 1, scope.as_bytes());
                bytes_field(sc, 2, version.as_bytes());
            });
            for s in spans {
                message_field(ss, 2, |buf| span(buf, s));
            }
        });
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_as_protobuf_writes_them() {
        let enc = |v: u64| {
            let mut out = Vec::new();
            varint(&mut out, v);
            out
        };
        assert_eq!(enc(1), [1], "one byte");
        assert_eq!(enc(300), [0xac, 0x02], "the protobuf guide's example");
        assert_eq!(enc(u64::MAX).len(), 10, "a negative int64 takes ten bytes");
    }

    #[test]
    fn a_string_attribute_is_a_key_value_with_an_any_value() {
        let mut out = Vec::new();
        key_value(&mut out, 9, "a", &AttrValue::Str("b".into()));
        // Span.attributes (9, LEN) { key (1) "a", value (2) { string_value (1) "b" } }
        assert_eq!(
            out,
            [0x4a, 8, 0x0a, 1, b'a', 0x12, 3, 0x0a, 1, b'b'],
            "the encoded KeyValue"
        );
    }

    #[test]
    fn a_request_nests_resource_scope_and_spans() {
        let s = SpanRecord {
            trace_id: [1; 16],
            span_id: [2; 8],
            parent_span_id: Some([3; 8]),
            flags: 1,
            name: "dispatch".into(),
            kind: SpanKind::Consumer,
            start_unix_nano: 10,
            end_unix_nano: 20,
            attributes: vec![("n", AttrValue::Int(-1))],
            status: StatusCode::Error,
            status_message: Some("failed".into()),
        };
        let req = export_request("switchboard", "switchboard", "0.1.0", &[s]);
        assert_eq!(req[0], 0x0a, "resource_spans is field 1, length-delimited");
        let has = |needle: &[u8]| req.windows(needle.len()).any(|w| w == needle);
        assert!(has(b"service.name"), "the resource names the service");
        assert!(has(&[0x0a, 16, 1, 1]), "the trace id, 16 bytes");
        assert!(has(&[0x22, 8, 3, 3]), "the parent span id is field 4");
        assert!(has(&[0x30, 5]), "the kind is field 6");
    }
}
