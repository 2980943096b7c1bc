//! The W3C Trace Context `traceparent` header (<https://www.w3.org/TR/trace-context/>): which
//! trace a piece of work belongs to and which span caused it. Parsed from inbound requests,
//! carried in queued jobs, sent on outbound requests.

use std::fmt;
use std::str::FromStr;

/// A span's place in a trace: the trace id, the span id and the trace flags, as the
/// `traceparent` header carries them (`00-{trace id}-{span id}-{flags}`, lowercase hex).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    /// The trace, 16 bytes, never all zero.
    pub trace_id: [u8; 16],
    /// The span, 8 bytes, never all zero.
    pub span_id: [u8; 8],
    /// The trace flags (bit 0: sampled).
    pub flags: u8,
}

/// A `traceparent` value that is not one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not a W3C traceparent")]
pub struct InvalidTraceParent;

/// Lowercase hex digits only (the header allows no uppercase).
fn hex_into(src: &[u8], out: &mut [u8]) -> Result<(), InvalidTraceParent> {
    if src.len() != out.len() * 2 {
        return Err(InvalidTraceParent);
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Ok(c - b'0'),
        b'a'..=b'f' => Ok(c - b'a' + 10),
        _ => Err(InvalidTraceParent),
    };
    for (o, pair) in out.iter_mut().zip(src.chunks_exact(2)) {
        *o = (digit(pair[0])? << 4) | digit(pair[1])?;
    }
    Ok(())
}

impl FromStr for TraceParent {
    type Err = InvalidTraceParent;

    /// Version `00` exactly; a later version's first four fields are read and what follows is
    /// ignored, as the specification asks. Version `ff`, all-zero ids and uppercase hex are
    /// refused.
    fn from_str(s: &str) -> Result<Self, InvalidTraceParent> {
        let b = s.trim().as_bytes();
        if b.len() < 55 || b[2] != b'-' || b[35] != b'-' || b[52] != b'-' {
            return Err(InvalidTraceParent);
        }
        let mut version = [0u8; 1];
        hex_into(&b[0..2], &mut version)?;
        match (version[0], b.len()) {
            (0xff, _) => return Err(InvalidTraceParent),
            (0, 55) => {}
            (0, _) => return Err(InvalidTraceParent),
            (_, 55) => {}
            (_, _) if b[55] == b'-' => {}
            _ => return Err(InvalidTraceParent),
        }
        let mut tp = Self {
            trace_id: [0; 16],
            span_id: [0; 8],
            flags: 0,
        };
        hex_into(&b[3..35], &mut tp.trace_id)?;
        hex_into(&b[36..52], &mut tp.span_id)?;
        let mut flags = [0u8; 1];
        hex_into(&b[53..55], &mut flags)?;
        tp.flags = flags[0];
        if tp.trace_id == [0; 16] || tp.span_id == [0; 8] {
            return Err(InvalidTraceParent);
        }
        Ok(tp)
    }
}

impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("00-")?;
        for b in self.trace_id {
            write!(f, "{b:02x}")?;
        }
        f.write_str("-")?;
        for b in self.span_id {
            write!(f, "{b:02x}")?;
        }
        write!(f, "-{:02x}", self.flags)
    }
}

impl serde::Serialize for TraceParent {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for TraceParent {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Reads an optional `traceparent` where a malformed one must not fail what carries it (a
/// queued job): it is read as none.
///
/// # Errors
/// Only when the value is not a string or null.
pub fn lenient<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<TraceParent>, D::Error> {
    let s = <Option<std::borrow::Cow<'de, str>> as serde::Deserialize>::deserialize(d)?;
    Ok(s.and_then(|s| s.parse().ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn round_trips_the_specifications_example() {
        let tp: TraceParent = EXAMPLE.parse().unwrap();
        assert_eq!(tp.trace_id[0], 0x4b, "first trace id byte");
        assert_eq!(tp.span_id[7], 0xb7, "last span id byte");
        assert_eq!(tp.flags, 1, "sampled");
        assert_eq!(tp.to_string(), EXAMPLE, "formatted as parsed");
        let json = serde_json::to_string(&tp).unwrap();
        assert_eq!(json, format!("\"{EXAMPLE}\""), "a JSON string");
        let back: TraceParent = serde_json::from_str(&json).unwrap();
        assert_eq!(back, tp, "read back from JSON");
    }

    #[test]
    fn refuses_what_the_specification_refuses() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert!(bad.parse::<TraceParent>().is_err(), "{bad:?} is refused");
        }
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes";
        assert!(
            later.parse::<TraceParent>().is_ok(),
            "a later version's extra fields are ignored"
        );
    }
}
