//! The contract's timestamp: ISO 8601 in UTC with millisecond precision and a `Z` suffix.

use chrono::{DateTime, SecondsFormat, TimeZone, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An instant serialised as `2026-01-02T03:04:05.678Z`.
///
/// Any RFC 3339 offset is accepted on input and normalised to UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(DateTime<Utc>);

impl Timestamp {
    /// Wraps a UTC instant, dropping precision below a millisecond.
    #[must_use]
    pub fn from_datetime(dt: DateTime<Utc>) -> Self {
        Self::from_unix_millis(dt.timestamp_millis())
    }

    /// The instant `ms` milliseconds after the Unix epoch (clamped to the representable range).
    #[must_use]
    pub fn from_unix_millis(ms: i64) -> Self {
        Self(Utc.timestamp_millis_opt(ms).single().unwrap_or_default())
    }

    /// Milliseconds since the Unix epoch.
    #[must_use]
    pub fn unix_millis(&self) -> i64 {
        self.0.timestamp_millis()
    }

    /// The wrapped instant.
    #[must_use]
    pub fn as_datetime(&self) -> DateTime<Utc> {
        self.0
    }

    /// Parses an RFC 3339 string.
    ///
    /// # Errors
    /// When the string is not RFC 3339.
    pub fn parse(s: &str) -> Result<Self, chrono::ParseError> {
        DateTime::parse_from_rfc3339(s).map(|dt| Self::from_datetime(dt.with_timezone(&Utc)))
    }
}

impl std::fmt::Display for Timestamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.to_rfc3339_opts(SecondsFormat::Millis, true))
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = std::borrow::Cow::<'de, str>::deserialize(d)?;
        Self::parse(&s)
            .map_err(|e| serde::de::Error::custom(format!("invalid timestamp {s:?}: {e}")))
    }
}

impl schemars::JsonSchema for Timestamp {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Timestamp".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "ISO 8601 UTC with millisecond precision, e.g. 2026-01-02T03:04:05.678Z",
            "type": "string",
            "format": "date-time"
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_offsets_to_utc_millis() {
        let t = Timestamp::parse("2026-01-02T05:04:05.678912+02:00").unwrap();
        assert_eq!(t.to_string(), "2026-01-02T03:04:05.678Z");
        assert_eq!(Timestamp::from_unix_millis(t.unix_millis()), t);
    }

    #[test]
    fn rejects_non_rfc3339() {
        assert!(serde_json::from_str::<Timestamp>("\"yesterday\"").is_err());
    }
}
