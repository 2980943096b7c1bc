//! A small HTML tokenizer with the two things the transport needs from it: converting a note's
//! (untrusted) HTML to plain text, and sanitising HTML to the allow-list Mastodon keeps (`p`,
//! `br`, `a`, `span`, …; `http(s)` links only; microformat and mention classes only).
//!
//! Not a full HTML5 parser, deliberately: both outputs are built only from recognised pieces, so
//! anything it does not understand is dropped or escaped, never passed through.

use std::collections::HashMap;

/// One token.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// Text, entities decoded.
    Text(String),
    /// `<name attrs…>` (also `<br/>`).
    Start {
        name: String,
        attrs: Vec<(String, String)>,
    },
    /// `</name>`.
    End(String),
}

fn decode_entities(s: &str) -> String {
    if !s.contains('&') {
        return s.to_owned();
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        let end = rest.find(';').filter(|&e| e <= 12);
        let decoded = end.and_then(|e| {
            let name = &rest[1..e];
            let c = match name {
                "amp" => Some('&'),
                "lt" => Some('<'),
                "gt" => Some('>'),
                "quot" => Some('"'),
                "apos" | "#39" => Some('\''),
                "nbsp" => Some('\u{a0}'),
                n if n.starts_with("#x") || n.starts_with("#X") => u32::from_str_radix(&n[2..], 16)
                    .ok()
                    .and_then(char::from_u32),
                n if n.starts_with('#') => n[1..].parse().ok().and_then(char::from_u32),
                _ => None,
            };
            c.map(|c| (c, e))
        });
        match decoded {
            Some((c, e)) => {
                out.push(c);
                rest = &rest[e + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

fn parse_attrs(s: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        while i < b.len() && (b[i].is_ascii_whitespace() || b[i] == b'/') {
            i += 1;
        }
        let start = i;
        while i < b.len() && !b[i].is_ascii_whitespace() && b[i] != b'=' && b[i] != b'/' {
            i += 1;
        }
        if start == i {
            break;
        }
        let name = s[start..i].to_ascii_lowercase();
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        let mut value = String::new();
        if i < b.len() && b[i] == b'=' {
            i += 1;
            while i < b.len() && b[i].is_ascii_whitespace() {
                i += 1;
            }
            if i < b.len() && (b[i] == b'"' || b[i] == b'\'') {
                let q = b[i];
                i += 1;
                let vs = i;
                while i < b.len() && b[i] != q {
                    i += 1;
                }
                value = decode_entities(&s[vs..i.min(b.len())]);
                i += 1;
            } else {
                let vs = i;
                while i < b.len() && !b[i].is_ascii_whitespace() {
                    i += 1;
                }
                value = decode_entities(&s[vs..i]);
            }
        }
        out.push((name, value));
    }
    out
}

fn tokenize(html: &str) -> Vec<Token> {
    let mut out = Vec::new();
    let mut rest = html;
    while !rest.is_empty() {
        let Some(lt) = rest.find('<') else {
            out.push(Token::Text(decode_entities(rest)));
            break;
        };
        if lt > 0 {
            out.push(Token::Text(decode_entities(&rest[..lt])));
        }
        rest = &rest[lt..];
        if let Some(after) = rest.strip_prefix("<!--") {
            rest = after.find("-->").map_or("", |e| &after[e + 3..]);
            continue;
        }
        let Some(gt) = rest.find('>') else {
            // An unterminated tag: the rest is text.
            out.push(Token::Text(decode_entities(rest)));
            break;
        };
        let inner = &rest[1..gt];
        rest = &rest[gt + 1..];
        if let Some(name) = inner.strip_prefix('/') {
            out.push(Token::End(name.trim().to_ascii_lowercase()));
        } else if inner.starts_with('!') || inner.starts_with('?') {
            continue;
        } else {
            let name_end = inner
                .find(|c: char| c.is_ascii_whitespace() || c == '/')
                .unwrap_or(inner.len());
            let name = inner[..name_end].to_ascii_lowercase();
            if name.is_empty() {
                out.push(Token::Text(format!("<{inner}>")));
                continue;
            }
            let attrs = parse_attrs(&inner[name_end..]);
            // Skip the content of elements whose text is never prose.
            if matches!(name.as_str(), "script" | "style" | "template") {
                let close = format!("</{name}");
                let lower = rest.to_ascii_lowercase();
                rest = lower
                    .find(&close)
                    .and_then(|i| rest[i..].find('>').map(|g| &rest[i + g + 1..]))
                    .unwrap_or("");
                continue;
            }
            out.push(Token::Start { name, attrs });
        }
    }
    out
}

fn attr<'a>(attrs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    attrs
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

fn has_class(attrs: &[(String, String)], class: &str) -> bool {
    attr(attrs, "class").is_some_and(|c| c.split_ascii_whitespace().any(|x| x == class))
}

/// Converts note HTML to plain text: paragraphs become blank lines, `<br>` newlines; a mention
/// link becomes `@user@domain` (from `mentions`, href → canonical address, falling back to the
/// link text plus the href's host); other links keep their URL.
#[must_use]
pub fn to_text(html: &str, mentions: &HashMap<String, String>) -> String {
    let mut out = String::new();
    // Inside a link: (href, kind, collected text).
    let mut link: Option<(String, bool, bool, String)> = None;
    for t in tokenize(html) {
        match t {
            Token::Text(s) => match &mut link {
                Some((_, _, _, buf)) => buf.push_str(&s),
                None => out.push_str(&s),
            },
            Token::Start { name, attrs } => match name.as_str() {
                "br" => out.push('\n'),
                "p" | "div" | "blockquote" | "pre" | "ul" | "ol"
                    if !out.is_empty() && !out.ends_with("\n\n") =>
                {
                    out.push_str(if out.ends_with('\n') { "\n" } else { "\n\n" });
                }
                "li" => {
                    if !out.is_empty() && !out.ends_with('\n') {
                        out.push('\n');
                    }
                    out.push_str("- ");
                }
                "a" => {
                    let href = attr(&attrs, "href").unwrap_or_default().to_owned();
                    let is_mention = has_class(&attrs, "mention") || mentions.contains_key(&href);
                    let is_tag = has_class(&attrs, "hashtag");
                    link = Some((href, is_mention, is_tag, String::new()));
                }
                _ => {}
            },
            Token::End(name) => match name.as_str() {
                "p" | "div" | "blockquote" | "pre" | "ul" | "ol" if !out.ends_with("\n\n") => {
                    out.push_str(if out.ends_with('\n') { "\n" } else { "\n\n" });
                }
                "a" => {
                    if let Some((href, is_mention, is_tag, text)) = link.take() {
                        out.push_str(&render_link(&href, is_mention, is_tag, &text, mentions));
                    }
                }
                _ => {}
            },
        }
    }
    if let Some((href, m, h, text)) = link {
        out.push_str(&render_link(&href, m, h, &text, mentions));
    }
    let out = out.replace('\u{a0}', " ");
    out.trim().to_owned()
}

fn render_link(
    href: &str,
    is_mention: bool,
    is_tag: bool,
    text: &str,
    mentions: &HashMap<String, String>,
) -> String {
    let text = text.trim();
    if let Some(addr) = mentions.get(href) {
        return addr.clone();
    }
    if is_tag {
        return text.to_owned();
    }
    if is_mention {
        let user = text.trim_start_matches('@');
        let user = user.split('@').next().unwrap_or(user);
        return match url::Url::parse(href).ok().and_then(|u| {
            u.host_str().map(|h| match u.port() {
                Some(p) => format!("{h}:{p}"),
                None => h.to_owned(),
            })
        }) {
            Some(host) => format!("@{user}@{host}"),
            None => text.to_owned(),
        };
    }
    if text == href || href.is_empty() {
        return text.to_owned();
    }
    // Mastodon shortens link text with invisible spans; the href is the truth.
    if href.ends_with(text.trim_end_matches('…')) || text.is_empty() {
        return href.to_owned();
    }
    format!("{text} ({href})")
}

pub use crate::markdown::escape_html as escape;

/// Plain text to HTML: paragraphs on blank lines, `<br>` on single newlines, bare `http(s)` URLs
/// linked.
#[must_use]
pub fn text_to_html(text: &str) -> String {
    let mut out = String::new();
    for para in text.split("\n\n").map(str::trim).filter(|p| !p.is_empty()) {
        out.push_str("<p>");
        let lines: Vec<String> = para.lines().map(linkify).collect();
        out.push_str(&lines.join("<br>"));
        out.push_str("</p>");
    }
    out
}

fn linkify(line: &str) -> String {
    linkify_with(line, |url| {
        let w = escape(url);
        format!("<a href=\"{w}\" rel=\"nofollow noopener noreferrer\" target=\"_blank\">{w}</a>")
    })
}

/// One line of text as HTML: words escaped, every bare `http(s)` URL replaced by what `link`
/// makes of it.
#[must_use]
pub fn linkify_with(line: &str, link: impl Fn(&str) -> String) -> String {
    let mut out = String::new();
    for (i, word) in line.split(' ').enumerate() {
        if i > 0 {
            out.push(' ');
        }
        if (word.starts_with("https://") || word.starts_with("http://"))
            && url::Url::parse(word).is_ok()
        {
            out.push_str(&link(word));
        } else {
            out.push_str(&escape(word));
        }
    }
    out
}

const ALLOWED: &[&str] = &[
    "p",
    "span",
    "br",
    "a",
    "del",
    "pre",
    "code",
    "em",
    "strong",
    "b",
    "i",
    "u",
    "ul",
    "ol",
    "li",
    "blockquote",
];

fn allowed_class(c: &str) -> bool {
    ["h-", "p-", "u-", "dt-", "e-"]
        .iter()
        .any(|p| c.starts_with(p))
        || matches!(c, "mention" | "hashtag" | "ellipsis" | "invisible")
}

/// Sanitises HTML to Mastodon's allow-list: other elements are dropped (their text kept), only
/// `href` (http/https) and allowed `class` values survive, and every open element is closed.
#[must_use]
pub fn sanitize(html: &str) -> String {
    let mut out = String::new();
    let mut open: Vec<String> = Vec::new();
    for t in tokenize(html) {
        match t {
            Token::Text(s) => out.push_str(&escape(&s)),
            Token::Start { name, attrs } => {
                if !ALLOWED.contains(&name.as_str()) {
                    continue;
                }
                out.push('<');
                out.push_str(&name);
                if name == "a"
                    && let Some(href) = attr(&attrs, "href")
                    && url::Url::parse(href).is_ok_and(|u| matches!(u.scheme(), "http" | "https"))
                {
                    out.push_str(&format!(
                        " href=\"{}\" rel=\"nofollow noopener noreferrer\" target=\"_blank\"",
                        escape(href)
                    ));
                }
                if let Some(class) = attr(&attrs, "class") {
                    let kept: Vec<&str> = class
                        .split_ascii_whitespace()
                        .filter(|c| allowed_class(c))
                        .collect();
                    if !kept.is_empty() {
                        out.push_str(&format!(" class=\"{}\"", escape(&kept.join(" "))));
                    }
                }
                out.push('>');
                if name != "br" {
                    open.push(name);
                }
            }
            Token::End(name) => {
                if let Some(pos) = open.iter().rposition(|n| *n == name) {
                    while open.len() > pos {
                        if let Some(n) = open.pop() {
                            out.push_str(&format!("</{n}>"));
                        }
                    }
                }
            }
        }
    }
    while let Some(n) = open.pop() {
        out.push_str(&format!("</{n}>"));
    }
    out
}

/// Mastodon's mention markup for an actor.
#[must_use]
pub fn mention_html(href: &str, user: &str) -> String {
    format!(
        "<span class=\"h-card\" translate=\"no\"><a href=\"{}\" class=\"u-url mention\">@<span>{}</span></a></span>",
        escape(href),
        escape(user)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mastodon_note_html_becomes_text() {
        let html = r#"<p><span class="h-card" translate="no"><a href="https://example.org/agents/helper" class="u-url mention">@<span>helper</span></a></span> what&#39;s the weather? See <a href="https://weather.example/today?x=1&amp;y=2" rel="nofollow noopener" target="_blank"><span class="invisible">https://</span><span class="ellipsis">weather.example/to</span><span class="invisible">day?x=1&amp;y=2</span></a></p><p>line<br>two <a href="https://m.example/tags/rust" class="mention hashtag">#<span>rust</span></a></p>"#;
        let mut m = HashMap::new();
        m.insert(
            "https://example.org/agents/helper".to_owned(),
            "@helper@example.org".to_owned(),
        );
        assert_eq!(
            to_text(html, &m),
            "@helper@example.org what's the weather? See https://weather.example/today?x=1&y=2\n\nline\ntwo #rust"
        );
    }

    #[test]
    fn mention_without_tag_uses_href_host() {
        let html = r#"<a href="https://gts.example/@bob" class="mention">@bob</a> hi <script>alert(1)</script>"#;
        assert_eq!(to_text(html, &HashMap::new()), "@bob@gts.example hi");
    }

    #[test]
    fn sanitize_keeps_allow_list_only() {
        let dirty = r#"<p onclick="x()">Hi <img src=x onerror=alert(1)><a href="javascript:alert(1)" class="mention evil">@x</a> <a href="https://ok.example" style="x">ok</a><script>bad()</script><b>bold"#;
        assert_eq!(
            sanitize(dirty),
            r#"<p>Hi <a class="mention">@x</a> <a href="https://ok.example" rel="nofollow noopener noreferrer" target="_blank">ok</a><b>bold</b></p>"#
        );
    }

    #[test]
    fn text_to_html_escapes_and_links() {
        assert_eq!(
            text_to_html("a <b> & c\nsee https://x.example/a?b=1\n\nsecond"),
            "<p>a &lt;b&gt; &amp; c<br>see <a href=\"https://x.example/a?b=1\" rel=\"nofollow noopener noreferrer\" target=\"_blank\">https://x.example/a?b=1</a></p><p>second</p>"
        );
    }
}
