//! Long replies: what the servers a reply goes to take (their NodeInfo software, whose limit
//! `activitypub.max_reply_chars` gives) and a reply's parts cut into the notes of a thread to fit
//! it. Pure functions: the NodeInfo fetches are `software`'s, the delivery `outbound`'s.

use serde_json::Value;

use crate::message::{Part, TextMime};

/// Characters the parts of a reply take in its note, a paragraph break between each two (files
/// none: they are attachments).
#[must_use]
pub fn note_chars(parts: &[Part]) -> usize {
    let counted: Vec<usize> = parts.iter().map(part_chars).filter(|n| *n > 0).collect();
    counted.iter().sum::<usize>() + counted.len().saturating_sub(1)
}

/// Characters a part takes in a note: a text's own, a link's title (or URL); files none (they
/// are attachments).
fn part_chars(p: &Part) -> usize {
    match p {
        Part::Text(t) => t.content.chars().count(),
        Part::Link(l) => l.title.as_deref().unwrap_or(&l.url).chars().count(),
        _ => 0,
    }
}

/// Whether a text part may be cut: plain text and markdown (HTML goes whole).
fn splittable(p: &Part) -> bool {
    matches!(p, Part::Text(t) if !matches!(t.mime, TextMime::Html))
}

/// A reply's parts as the notes of a thread, for a server taking `limit` characters per note
/// (0: any) with `overhead` of them taken by the mention prefix: one group when they fit, else
/// several, each within the limit (save a code block or HTML part longer than it), each ending
/// with a ` (k/n)` marker. Texts are cut by [`crate::message::chunk`]; links and whole texts
/// are packed in order; files stay with the first group (they become its attachments).
#[must_use]
pub fn chunk_parts(parts: &[Part], limit: usize, overhead: usize) -> Vec<Vec<Part>> {
    use crate::message::chunk;
    if limit == 0 || note_chars(parts) + overhead <= limit {
        return vec![parts.to_vec()];
    }
    let packed = chunk::fit(limit, overhead, |budget| {
        let mut groups: Vec<(Vec<Part>, usize)> = vec![(Vec::new(), 0)];
        for p in parts.iter().filter(|p| part_chars(p) > 0) {
            let pieces: Vec<Part> = match p {
                Part::Text(t) if splittable(p) => chunk::split(&t.content, budget)
                    .into_iter()
                    .map(|content| {
                        Part::Text(crate::message::TextPart {
                            content,
                            ..t.clone()
                        })
                    })
                    .collect(),
                other => vec![other.clone()],
            };
            for piece in pieces {
                let n = part_chars(&piece);
                let Some(last) = groups.last_mut() else {
                    continue;
                };
                // Parts in one note are a paragraph apart: one more character.
                if last.0.is_empty() || last.1 + 1 + n <= budget {
                    last.1 += n + usize::from(!last.0.is_empty());
                    last.0.push(piece);
                } else {
                    groups.push((vec![piece], n));
                }
            }
        }
        groups.into_iter().map(|(g, _)| g).collect::<Vec<_>>()
    });
    let Some(mut groups) = packed.filter(|g| g.len() > 1) else {
        return vec![parts.to_vec()];
    };
    let n = groups.len();
    for (i, g) in groups.iter_mut().enumerate() {
        match g.last_mut() {
            Some(Part::Text(t)) if !matches!(t.mime, TextMime::Html) => {
                t.content = chunk::with_marker(&t.content, i + 1, n);
            }
            _ => g.push(Part::text(chunk::marker(i + 1, n))),
        }
    }
    if let Some(first) = groups.first_mut() {
        first.extend(parts.iter().filter(|p| matches!(p, Part::File(_))).cloned());
    }
    groups
}

/// The `href` of the NodeInfo 2.x document in a `/.well-known/nodeinfo` answer (the newest
/// schema listed).
#[must_use]
pub fn nodeinfo_href(links: &Value) -> Option<&str> {
    super::mapping::many(links.get("links"))
        .into_iter()
        .filter_map(|l| {
            let minor = super::mapping::str_of(l, "rel")?
                .strip_prefix("http://nodeinfo.diaspora.software/ns/schema/2.")?
                .parse::<u32>()
                .ok()?;
            Some((minor, super::mapping::str_of(l, "href")?))
        })
        .max_by_key(|(minor, _)| *minor)
        .map(|(_, href)| href)
}

/// `software.name` of a NodeInfo document, in lower case.
#[must_use]
pub fn nodeinfo_software(doc: &Value) -> Option<String> {
    doc.get("software")
        .and_then(|s| super::mapping::str_of(s, "name"))
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_ascii_lowercase)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn text_of(p: &Part) -> &str {
        match p {
            Part::Text(t) => &t.content,
            other => panic!("not text: {other:?}"),
        }
    }

    #[test]
    fn parts_that_fit_stay_one_note() {
        let parts = vec![Part::text("a".repeat(90))];
        assert_eq!(chunk_parts(&parts, 100, 10), vec![parts.clone()]);
        assert_eq!(chunk_parts(&parts, 0, 10), vec![parts.clone()]);
        assert_eq!(chunk_parts(&parts, 99, 10).len(), 2);
        assert_eq!(note_chars(&parts), 90);
        let two = vec![Part::text("ab"), Part::text("cd")];
        assert_eq!(note_chars(&two), 5, "a paragraph between parts");
    }

    #[test]
    fn parts_are_chunked_with_markers_files_first_and_html_whole() {
        let long = "One sentence of some length here. ".repeat(10);
        let html = Part::Text(crate::message::TextPart {
            mime: TextMime::Html,
            content: format!("<p>{}</p>", "x".repeat(150)),
            extra: crate::message::Extra::new(),
        });
        let file = Part::File(crate::message::FilePart {
            name: Some("a.png".into()),
            mime: "image/png".into(),
            bytes_ref: crate::message::BytesRef::Url(crate::message::UrlBytes {
                url: "https://x.example/a.png".into(),
                expires_at: None,
            }),
            size: None,
            extra: crate::message::Extra::new(),
        });
        let link = Part::Link(crate::message::LinkPart {
            url: "https://x.example/more".into(),
            title: Some("More".into()),
            description: None,
            extra: crate::message::Extra::new(),
        });
        let md = Part::Text(crate::message::TextPart {
            mime: TextMime::Markdown,
            content: long.clone(),
            extra: crate::message::Extra::new(),
        });
        let parts = vec![md, file.clone(), html.clone(), link.clone()];
        let groups = chunk_parts(&parts, 160, 20);
        let n = groups.len();
        assert!(n >= 4, "{groups:#?}");
        for (i, g) in groups.iter().enumerate() {
            let marker = format!("({}/{n})", i + 1);
            let shown = note_chars(g);
            // Within the limit but for the HTML part, which is never cut.
            assert!(shown + 20 <= 160 || g.contains(&html), "{g:?}");
            let last_text = g.iter().rev().find_map(|p| match p {
                Part::Text(t) => Some(t.content.as_str()),
                _ => None,
            });
            let ends_marked = last_text.is_some_and(|t| t.ends_with(&marker));
            assert!(ends_marked, "{i}: {g:?}");
        }
        // The file goes with the first note, once; the markdown keeps its type.
        assert!(groups[0].contains(&file));
        assert_eq!(groups.iter().flatten().filter(|p| **p == file).count(), 1);
        assert!(matches!(&groups[0][0], Part::Text(t) if t.mime == TextMime::Markdown));
        // The HTML is whole, its marker a part of its own; the link follows it.
        let at = groups.iter().position(|g| g.contains(&html)).unwrap();
        assert!(groups[at..].iter().flatten().any(|p| *p == link));
        let texts: String = groups
            .iter()
            .flatten()
            .filter_map(|p| match p {
                Part::Text(t) if t.mime == TextMime::Markdown => Some(text_of(p)),
                _ => None,
            })
            .collect();
        assert_eq!(texts.matches("One sentence").count(), 10);
    }

    #[test]
    fn nodeinfo_names_the_software() {
        let links = json!({"links": [
            {"rel": "http://nodeinfo.diaspora.software/ns/schema/2.0", "href": "https://m.example/nodeinfo/2.0"},
            {"rel": "http://nodeinfo.diaspora.software/ns/schema/2.1", "href": "https://m.example/nodeinfo/2.1"},
            {"rel": "https://www.w3.org/ns/activitystreams#Application", "href": "https://m.example/actor"},
        ]});
        assert_eq!(
            nodeinfo_href(&links),
            Some("https://m.example/nodeinfo/2.1")
        );
        assert_eq!(nodeinfo_href(&json!({"links": []})), None);
        assert_eq!(
            nodeinfo_href(
                &json!({"links": {"rel": "http://nodeinfo.diaspora.software/ns/schema/1.0", "href": "x"}})
            ),
            None
        );
        assert_eq!(
            nodeinfo_software(&json!({"software": {"name": " Mastodon ", "version": "4.3"}}))
                .as_deref(),
            Some("mastodon")
        );
        assert_eq!(nodeinfo_software(&json!({"software": {"name": ""}})), None);
        assert_eq!(nodeinfo_software(&json!({"software": "mastodon"})), None);
    }
}
