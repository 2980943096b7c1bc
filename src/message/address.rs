//! Address syntax: agent and fediverse handles (`@name@domain`) and email addresses
//! (`local@domain`).

/// A parsed `@name@domain` or `name@domain` address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address<'a> {
    /// The part before the last `@` (without a leading `@`).
    pub local: &'a str,
    /// The host, possibly with a port.
    pub domain: &'a str,
    /// Whether the address was written as a handle (`@name@domain`).
    pub handle: bool,
}

impl<'a> Address<'a> {
    /// Parses `@name@domain` (a handle) or `local@domain` (an email address).
    ///
    /// ```
    /// use switchboard::message::Address;
    /// let a = Address::parse("@helper@example.org").unwrap();
    /// assert_eq!((a.local, a.domain, a.handle), ("helper", "example.org", true));
    /// assert!(Address::parse("helper@example.org").is_some_and(|a| !a.handle));
    /// assert!(Address::parse("@helper").is_none());
    /// ```
    #[must_use]
    pub fn parse(s: &'a str) -> Option<Self> {
        let (handle, rest) = match s.strip_prefix('@') {
            Some(rest) => (true, rest),
            None => (false, s),
        };
        let (local, domain) = rest.rsplit_once('@')?;
        let local_ok = if handle {
            is_handle_name(local)
        } else {
            is_email_local(local)
        };
        (local_ok && is_domain(domain)).then_some(Self {
            local,
            domain,
            handle,
        })
    }

    /// Parses a handle only (`@name@domain`).
    #[must_use]
    pub fn parse_handle(s: &'a str) -> Option<Self> {
        Self::parse(s).filter(|a| a.handle)
    }
}

/// A fediverse or agent user name: letters, digits, `_`, `-`, `.`.
#[must_use]
pub fn is_handle_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// The local part of an email address: a dot-atom (RFC 5322) or UTF-8 (RFC 6531).
fn is_email_local(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && !s.starts_with('.')
        && !s.ends_with('.')
        && !s.contains("..")
        && s.chars().all(|c| {
            c.is_alphanumeric() || (c.is_ascii_punctuation() && "!#$%&'*+-/=?^_`{|}~.".contains(c))
        })
}

/// A host name with an optional port: dot-separated labels of letters, digits and `-`.
#[must_use]
pub fn is_domain(s: &str) -> bool {
    let host = match s.rsplit_once(':') {
        Some((host, port)) if !port.is_empty() && port.parse::<u16>().is_ok() => host,
        Some(_) => return false,
        None => s,
    };
    !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.chars().all(|c| c.is_alphanumeric() || c == '-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_and_emails() {
        let a = Address::parse("@helper@example.org").unwrap();
        assert_eq!(
            (a.local, a.domain, a.handle),
            ("helper", "example.org", true)
        );
        let e = Address::parse("bob.smith+tag@mail.example.com").unwrap();
        assert_eq!(
            (e.local, e.domain, e.handle),
            ("bob.smith+tag", "mail.example.com", false)
        );
        assert!(Address::parse("@helper@localhost:8080").is_some());
        assert!(Address::parse_handle("bob@example.com").is_none());
    }

    #[test]
    fn rejects_malformed() {
        for bad in [
            "",
            "@",
            "@@",
            "helper",
            "@helper",
            "@helper@",
            "@@example.org",
            "@he lper@example.org",
            "a@b@c@",
            "bob@exa mple.com",
            "bob@-example.com",
            "bob@example..com",
            ".bob@example.com",
            "bob@example.com:99999",
            "@x@example.com:",
            "<bob@example.com>",
        ] {
            assert!(Address::parse(bad).is_none(), "{bad:?} should be rejected");
        }
    }
}
