//! The one HTTP-date codec (RFC 9110 §5.6.7), on the `httpdate` crate: `Date` on signed
//! requests, `Retry-After` on responses, `Last-Modified` on agent cards.
//!
//! Dates are written as IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`); all three forms the RFC
//! requires a recipient to accept are read (IMF-fixdate, RFC 850 and asctime). Times cross this
//! module as unix seconds, named so (`unix_s`); HTTP dates have no finer resolution.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The last second an HTTP date can carry (9999-12-31T23:59:59Z): later ones are written as it.
const MAX_UNIX_S: i64 = 253_402_300_799;

/// Formats unix seconds as an IMF-fixdate. Times before 1970 are written as the epoch and
/// times after 9999 as its last second, the range an HTTP date covers.
#[must_use]
pub fn format_unix_s(unix_s: i64) -> String {
    let secs = unix_s.clamp(0, MAX_UNIX_S).unsigned_abs();
    httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(secs))
}

/// Formats unix milliseconds as an IMF-fixdate, dropping the fraction of a second.
#[must_use]
pub fn format_unix_ms(unix_ms: i64) -> String {
    format_unix_s(unix_ms.div_euclid(1000))
}

/// Parses an HTTP date (surrounding whitespace ignored) to unix seconds; `None` when it is not
/// one of the three forms or names an impossible date (a wrong weekday included).
#[must_use]
pub fn parse_unix_s(value: &str) -> Option<i64> {
    let at: SystemTime = httpdate::parse_http_date(value.trim()).ok()?;
    let since_epoch = at.duration_since(UNIX_EPOCH).ok()?;
    i64::try_from(since_epoch.as_secs()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_imf_fixdate() {
        assert_eq!(format_unix_s(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(
            format_unix_ms(784_111_777_999),
            "Sun, 06 Nov 1994 08:49:37 GMT"
        );
        assert_eq!(format_unix_s(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(format_unix_s(-5), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(format_unix_s(i64::MAX), "Fri, 31 Dec 9999 23:59:59 GMT");
    }

    #[test]
    fn parses_the_three_forms() {
        for form in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
            "  Sun, 06 Nov 1994 08:49:37 GMT \t",
        ] {
            assert_eq!(parse_unix_s(form), Some(784_111_777), "{form:?}");
        }
    }

    #[test]
    fn round_trips() {
        for unix_s in [0, 1_700_000_000, 4_102_444_800, MAX_UNIX_S] {
            assert_eq!(parse_unix_s(&format_unix_s(unix_s)), Some(unix_s));
        }
    }

    #[test]
    fn rejects_what_is_not_an_http_date() {
        for bad in [
            "",
            "yesterday",
            "1700000000",
            "Mon, 06 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 08:49:37 +0100",
            "Sun, 6 Nov 1994 08:49:37 GMT",
            "Sun, 31 Nov 1994 08:49:37 GMT",
            "2026-11-25T12:00:00Z",
        ] {
            assert_eq!(parse_unix_s(bad), None, "{bad:?}");
        }
    }
}
