//! Markdown from agents rendered as HTML, the one renderer every transport uses (email's HTML
//! alternative, ActivityPub note content), and the one HTML escape.
//!
//! Raw HTML inside the markdown is shown as text, never passed through: an agent's output is not
//! trusted markup. Transports with a stricter allow-list (ActivityPub) sanitise the result again.

use pulldown_cmark::{Event, Parser, html};

/// Markdown rendered as HTML, with raw HTML in the markdown escaped as text.
#[must_use]
pub fn to_html(md: &str) -> String {
    let events = Parser::new(md).map(|e| match e {
        Event::Html(h) | Event::InlineHtml(h) => Event::Text(h),
        other => other,
    });
    let mut out = String::with_capacity(md.len() * 3 / 2);
    html::push_html(&mut out, events);
    out
}

/// Escapes text for HTML content and attribute values.
#[must_use]
pub fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_html_is_escaped() {
        let h = to_html("a <script>alert(1)</script> **b**");
        assert!(!h.contains("<script>"), "{h}");
        assert!(h.contains("&lt;script&gt;"), "{h}");
        assert!(h.contains("<strong>b</strong>"), "{h}");
    }
}
