//! A reply too long for one message of a transport, split into chunks that each fit.
//!
//! Lengths are counted in Unicode scalar values (`char`s). A cut prefers, in this order, a
//! paragraph break, a line break, the end of a sentence, a space, and only then falls back to a
//! hard cut (moved back so that it does not separate an emoji from its modifiers or joiners).
//! A fenced code block (```` ``` ```` or `~~~`) is never cut: it goes whole into one chunk, and
//! a block longer than the limit on its own is one chunk over the limit.
//!
//! The whitespace at a cut is dropped; nothing else is. Chunks may carry a ` (k/n)` marker
//! ([`chunk`]), counted inside the limit like the per-chunk overhead the caller names (a mention
//! prefix, say).

use std::ops::Range;

/// The byte ranges of the fenced code blocks of `text`, each from the start of its opening
/// line to the end of its closing line (or to the end of the text when it is never closed).
#[must_use]
pub fn fences(text: &str) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    // (start, fence char, fence length) of the block being read.
    let mut open: Option<(usize, char, usize)> = None;
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let start = at;
        at += line.len();
        let body = line.trim_end_matches(['\n', '\r']);
        let Some((ch, len, rest)) = fence_line(body) else {
            continue;
        };
        match open {
            None => open = Some((start, ch, len)),
            Some((from, c, l)) if c == ch && len >= l && rest.trim().is_empty() => {
                out.push(from..start + body.len());
                open = None;
            }
            Some(_) => {}
        }
    }
    if let Some((from, _, _)) = open {
        out.push(from..text.trim_end().len().max(from));
    }
    out
}

/// A fence line: at most three spaces, then three or more of one fence character. Returns the
/// character, the run's length and what follows it.
fn fence_line(line: &str) -> Option<(char, usize, &str)> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let rest = &line[indent..];
    let ch = rest.chars().next().filter(|c| matches!(c, '`' | '~'))?;
    let len = rest.len() - rest.trim_start_matches(ch).len();
    (len >= 3).then(|| (ch, len, &rest[len..]))
}

/// Whether `text` ends with the closing line of a fenced code block (a marker appended on that
/// line would make it an ordinary line and leave the block open).
fn ends_with_fence(text: &str) -> bool {
    fences(text).last().is_some_and(|f| f.end == text.len())
}

/// The text split into pieces of at most `limit` characters each (a fenced code block longer
/// than `limit` is one piece over it), without markers. Empty when the text is only
/// whitespace; the whole text (trimmed) when it fits, or when `limit` is 0.
#[must_use]
pub fn split(text: &str, limit: usize) -> Vec<String> {
    let fences = fences(text);
    let mut out = Vec::new();
    let mut pos = skip_space(text, 0);
    while pos < text.len() {
        let window_end = advance(text, pos, limit);
        if limit == 0 || window_end >= text.len() {
            push(&mut out, &text[pos..]);
            break;
        }
        let cut = match fences.iter().find(|f| f.start <= pos && pos < f.end) {
            // A block starting here that does not fit: it goes whole.
            Some(f) if f.end > window_end => {
                tracing::debug!(
                    chars = text[f.start..f.end].chars().count(),
                    limit,
                    "a fenced code block longer than the limit is sent whole"
                );
                f.end
            }
            _ => best_cut(text, pos, window_end, limit, &fences),
        };
        push(&mut out, &text[pos..cut]);
        pos = skip_space(text, cut);
    }
    out
}

fn push(out: &mut Vec<String>, piece: &str) {
    let piece = piece.trim_end();
    if !piece.is_empty() {
        out.push(piece.to_owned());
    }
}

/// The byte index `n` characters after `from` (or the end of `text`).
fn advance(text: &str, from: usize, n: usize) -> usize {
    text[from..]
        .char_indices()
        .nth(n)
        .map_or(text.len(), |(i, _)| from + i)
}

fn skip_space(text: &str, from: usize) -> usize {
    text.len() - text[from..].trim_start().len()
}

/// Whether a cut at byte `at` would fall inside a fenced code block.
fn inside_fence(fences: &[Range<usize>], at: usize) -> bool {
    fences.iter().any(|f| f.start < at && at < f.end)
}

/// Where to end the piece starting at `pos`, at most at `end`: the last break of the most
/// preferred kind in the window's second half, else of any kind anywhere in it, else a hard cut.
fn best_cut(text: &str, pos: usize, end: usize, limit: usize, fences: &[Range<usize>]) -> usize {
    let floor = advance(text, pos, limit / 2);
    // A break right at `end` still leaves a piece within the limit: look two characters on.
    let window = &text[pos..advance(text, end, 2)];
    let last = end - pos;
    // Each kind: the byte offsets (within the window) where a piece may end.
    let kinds: [&dyn Fn() -> Vec<usize>; 4] = [
        &|| window.match_indices("\n\n").map(|(i, _)| i).collect(),
        &|| window.match_indices('\n').map(|(i, _)| i).collect(),
        &|| sentence_ends(window),
        &|| {
            window
                .char_indices()
                .filter(|(_, c)| c.is_whitespace())
                .map(|(i, _)| i)
                .collect()
        },
    ];
    let usable = |i: &usize| *i > 0 && *i <= last && !inside_fence(fences, pos + i);
    let found: Vec<Vec<usize>> = kinds
        .iter()
        .map(|k| k().into_iter().filter(usable).collect())
        .collect();
    for min in [floor, pos] {
        if let Some(i) = found
            .iter()
            .find_map(|cuts| cuts.iter().rev().find(|i| pos + **i > min))
        {
            return pos + i;
        }
    }
    hard_cut(text, pos, end, fences)
}

/// Byte offsets just after each sentence end of `window`: `.`, `!`, `?` or `…` followed by
/// whitespace, or a full-width `。`, `！`, `？` anywhere.
fn sentence_ends(window: &str) -> Vec<usize> {
    let mut out = Vec::new();
    let mut chars = window.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let after = i + c.len_utf8();
        let next_space = chars.peek().is_some_and(|(_, n)| n.is_whitespace());
        if matches!(c, '。' | '！' | '？') || (matches!(c, '.' | '!' | '?' | '…') && next_space)
        {
            out.push(after);
        }
    }
    out
}

/// Characters a cut must not fall before: joiners, variation selectors, emoji modifiers,
/// combining marks, tag characters.
fn clings(c: char) -> bool {
    matches!(c,
        '\u{200D}' | '\u{FE00}'..='\u{FE0F}' | '\u{1F3FB}'..='\u{1F3FF}' | '\u{0300}'..='\u{036F}'
        | '\u{1AB0}'..='\u{1AFF}' | '\u{20D0}'..='\u{20FF}' | '\u{E0020}'..='\u{E007F}')
}

fn regional(c: char) -> bool {
    matches!(c, '\u{1F1E6}'..='\u{1F1FF}')
}

/// A cut at `end` moved back, while it would split a character from what clings to it (or a
/// flag's two regional indicators), and off any fenced code block: a block that does not fit
/// starts the next piece. Never at `pos` itself.
fn hard_cut(text: &str, pos: usize, end: usize, fences: &[Range<usize>]) -> usize {
    let mut cut = end;
    if let Some(f) = fences.iter().find(|f| f.start < cut && cut < f.end) {
        cut = f.start;
    }
    let original = cut;
    loop {
        if cut <= pos {
            return original.max(advance(text, pos, 1));
        }
        let before = text[..cut].chars().next_back();
        let at = text[cut..].chars().next();
        let splits_cluster = at.is_some_and(clings) || before == Some('\u{200D}');
        let splits_flag = at.is_some_and(regional) && before.is_some_and(regional) && {
            // An odd run of indicators before the cut ends mid-flag.
            text[pos..cut]
                .chars()
                .rev()
                .take_while(|c| regional(*c))
                .count()
                % 2
                == 1
        };
        if !(splits_cluster || splits_flag) {
            return cut;
        }
        cut -= before.map_or(1, char::len_utf8);
    }
}

/// The ` (k/n)` marker of chunk `k` of `n` (1-based).
#[must_use]
pub fn marker(k: usize, n: usize) -> String {
    format!("({k}/{n})")
}

/// The characters a marker of a text in `n` chunks may take at most, its separator included.
#[must_use]
pub fn marker_reserve(n: usize) -> usize {
    // "\n\n(k/n)" after a code block, " (k/n)" otherwise.
    marker(n, n).chars().count() + 2
}

/// `piece` with the marker of chunk `k` of `n`: after a space, or on a line of its own after a
/// closing code fence.
#[must_use]
pub fn with_marker(piece: &str, k: usize, n: usize) -> String {
    let sep = if ends_with_fence(piece) { "\n\n" } else { " " };
    format!("{piece}{sep}{}", marker(k, n))
}

/// The pieces `split_at(budget)` makes, for the largest budget that leaves room, within
/// `limit`, for `overhead` and the markers of as many chunks as result. `None` when `limit` is
/// 0 or leaves no room at all.
pub fn fit<T>(
    limit: usize,
    overhead: usize,
    mut split_at: impl FnMut(usize) -> Vec<T>,
) -> Option<Vec<T>> {
    if limit == 0 {
        return None;
    }
    let mut most = 9;
    loop {
        let budget = limit.checked_sub(overhead + marker_reserve(most))?;
        if budget == 0 {
            return None;
        }
        let pieces = split_at(budget);
        if pieces.len() <= most {
            return Some(pieces);
        }
        most = most.saturating_mul(10).saturating_add(9);
    }
}

/// `text` as the chunks a transport limited to `limit` characters per message sends, each
/// carrying `overhead` characters of the caller's besides: the text whole when it fits (or
/// when `limit` is 0 or too small to hold anything), else pieces with ` (k/n)` markers.
#[must_use]
pub fn chunk(text: &str, limit: usize, overhead: usize) -> Vec<String> {
    let text = text.trim();
    if limit == 0 || text.chars().count() + overhead <= limit {
        return vec![text.to_owned()];
    }
    let Some(pieces) = fit(limit, overhead, |budget| split(text, budget)) else {
        return vec![text.to_owned()];
    };
    let n = pieces.len();
    if n <= 1 {
        return pieces;
    }
    pieces
        .iter()
        .enumerate()
        .map(|(i, p)| with_marker(p, i + 1, n))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn len(s: &str) -> usize {
        s.chars().count()
    }

    /// The text without any whitespace: what must survive a split exactly.
    fn squeeze(s: &str) -> String {
        s.chars().filter(|c| !c.is_whitespace()).collect()
    }

    fn assert_nothing_lost(text: &str, pieces: &[String]) {
        assert_eq!(squeeze(&pieces.concat()), squeeze(text), "{pieces:#?}");
    }

    /// Removes the ` (k/n)` marker `chunk` added.
    fn unmark(c: &str, k: usize, n: usize) -> String {
        let m = marker(k, n);
        let c = c.strip_suffix(&m).expect("marker at the end");
        c.strip_suffix(' ')
            .or_else(|| c.strip_suffix("\n\n"))
            .expect("separator")
            .to_owned()
    }

    #[test]
    fn short_text_is_one_chunk_without_marker() {
        assert_eq!(chunk("hello world", 11, 0), vec!["hello world"]);
        assert_eq!(chunk("  hello  ", 5, 0), vec!["hello"]);
        assert_eq!(chunk("hello", 0, 10), vec!["hello"], "0 is no limit");
        assert_eq!(split("", 10), Vec::<String>::new());
        assert_eq!(split(" \n\n ", 10), Vec::<String>::new());
    }

    #[test]
    fn exact_boundary_fits_and_one_more_splits() {
        let text = "a".repeat(20);
        assert_eq!(chunk(&text, 20, 0), vec![text.clone()]);
        assert_eq!(chunk(&text, 25, 5), vec![text.clone()], "overhead counts");
        let longer = "a".repeat(21);
        let c = chunk(&longer, 20, 0);
        assert_eq!(c.len(), 2, "{c:?}");
        for (i, piece) in c.iter().enumerate() {
            assert!(len(piece) <= 20, "{piece}");
            assert!(piece.ends_with(&format!(" ({}/2)", i + 1)), "{piece}");
        }
        // split itself: a piece of exactly the limit.
        assert_eq!(split("abcd efgh", 4), vec!["abcd", "efgh"]);
        assert_eq!(split("abcdefgh", 4), vec!["abcd", "efgh"]);
    }

    #[test]
    fn prefers_paragraphs_then_lines_then_sentences_then_spaces() {
        let para = "one two three four.\n\nfive six seven. eight\nnine ten";
        assert_eq!(
            split(para, 30),
            vec!["one two three four.", "five six seven. eight\nnine ten"]
        );
        let lines = "one two three four\nfive six. seven eight nine ten";
        assert_eq!(
            split(lines, 30),
            vec!["one two three four", "five six. seven eight nine ten"]
        );
        let sentences = "One two three four. Five six seven eight nine";
        assert_eq!(
            split(sentences, 30),
            vec!["One two three four.", "Five six seven eight nine"]
        );
        let spaces = "one two three four five six seven eight";
        assert_eq!(
            split(spaces, 30),
            vec!["one two three four five six", "seven eight"]
        );
    }

    #[test]
    fn a_break_too_early_gives_way_to_a_later_lesser_one() {
        // The paragraph break is in the first half of the window: a space near its end wins.
        let text = "ab\n\ncdefgh ijklmnopq rstuvwxyz 0123456789";
        let pieces = split(text, 30);
        assert_eq!(pieces[0], "ab\n\ncdefgh ijklmnopq rstuvwxyz");
        assert_nothing_lost(text, &pieces);
    }

    #[test]
    fn long_words_are_cut_hard() {
        let word = "x".repeat(95);
        let text = format!("short {word} end");
        let pieces = split(&text, 40);
        assert!(pieces.iter().all(|p| len(p) <= 40), "{pieces:?}");
        assert_eq!(pieces[0], "short");
        assert_nothing_lost(&text, &pieces);
    }

    #[test]
    fn a_fence_is_never_split() {
        let code = "```rust\nfn main() {\n    println!(\"hi\");\n}\n```";
        let text = format!("Intro line here.\n\n{code}\n\nAfter the code, more words.");
        for limit in 20..=text.chars().count() {
            let pieces = split(&text, limit);
            assert!(
                pieces.iter().any(|p| p.contains(code)),
                "limit {limit}: {pieces:#?}"
            );
            for p in &pieces {
                let over = len(p) > limit;
                assert!(!over || p == code, "limit {limit}: {p:?}");
                // Every piece has balanced fences.
                assert_eq!(p.matches("```").count() % 2, 0, "limit {limit}: {p:?}");
            }
            assert_nothing_lost(&text, &pieces);
        }
    }

    #[test]
    fn a_fence_longer_than_the_limit_is_one_piece_over_it() {
        let code = format!("~~~\n{}\n~~~", "let x = 1;\n".repeat(20));
        let text = format!("before\n{code}\nafter");
        let pieces = split(&text, 50);
        assert_eq!(
            pieces,
            vec!["before".to_owned(), code.clone(), "after".into()]
        );
        let marked = chunk(&text, 50, 0);
        assert_eq!(marked.len(), 3);
        // The marker goes on a line of its own so the fence still closes.
        assert!(marked[1].ends_with("~~~\n\n(2/3)"), "{}", marked[1]);
        assert_eq!(fences(&marked[1]).len(), 1);
    }

    #[test]
    fn an_unclosed_fence_runs_to_the_end() {
        let text = format!("lead words\n```\n{}", "code line\n".repeat(10));
        let f = fences(&text);
        assert_eq!(f.len(), 1);
        assert_eq!(&text[f[0].start..f[0].start + 3], "```");
        let pieces = split(&text, 20);
        assert_eq!(pieces[0], "lead words");
        assert!(pieces[1].starts_with("```"), "{pieces:?}");
        assert_eq!(pieces.len(), 2);
    }

    #[test]
    fn fence_rules() {
        // A tilde fence is not closed by backticks, nor by a shorter run; four spaces is code.
        let text = "~~~~\na\n```\nb\n~~~\nc\n~~~~\nd";
        let f = fences(text);
        assert_eq!(f.len(), 1);
        assert_eq!(&text[f[0].clone()], "~~~~\na\n```\nb\n~~~\nc\n~~~~");
        assert!(fences("    ```\nx\n    ```").is_empty());
        // An info string opens; a closing line with text after it does not close.
        let t2 = "```python\nx\n``` not closed\ny\n```";
        assert_eq!(fences(t2), vec![0..t2.len()]);
    }

    #[test]
    fn cjk_and_emoji_count_as_scalar_values() {
        // CJK without spaces: cut after a full-width full stop when one is in reach.
        let text = "今日は良い天気です。明日も晴れるでしょう。週末は雨かもしれません。";
        let pieces = split(text, 12);
        assert_eq!(pieces[0], "今日は良い天気です。");
        assert!(pieces.iter().all(|p| len(p) <= 12), "{pieces:?}");
        assert_nothing_lost(text, &pieces);
        // A ZWJ family emoji and a skin-tone modifier are not split by a hard cut.
        let family = "👨\u{200D}👩\u{200D}👧";
        let text = format!("{}{family}{}", "a".repeat(8), "b".repeat(8));
        for limit in 5..12 {
            let pieces = split(&text, limit);
            assert!(
                pieces.iter().any(|p| p.contains(family)),
                "limit {limit}: {pieces:?}"
            );
            assert!(pieces.iter().all(|p| len(p) <= limit), "{pieces:?}");
            assert_nothing_lost(&text, &pieces);
        }
        let thumbs = format!("{}👍🏽", "a".repeat(9));
        let pieces = split(&thumbs, 10);
        assert_eq!(pieces, vec!["a".repeat(9), "👍🏽".to_owned()]);
        // Flags are pairs of regional indicators.
        let flags = "🇫🇷🇩🇪🇯🇵";
        let pieces = split(flags, 3);
        assert_eq!(pieces, vec!["🇫🇷", "🇩🇪", "🇯🇵"]);
    }

    #[test]
    fn chunks_fit_with_overhead_and_markers_and_lose_nothing() {
        let sentence = "The quick brown fox jumps over the lazy dog. ";
        let text = format!(
            "{}\n\n```\n{}```\n\n{}",
            sentence.repeat(20),
            "code();\n".repeat(6),
            sentence.repeat(15)
        );
        for (limit, overhead) in [(120, 0), (200, 25), (500, 40), (97, 13)] {
            let chunks = chunk(&text, limit, overhead);
            let n = chunks.len();
            assert!(n > 1);
            let mut unmarked = Vec::new();
            for (i, c) in chunks.iter().enumerate() {
                assert!(len(c) + overhead <= limit, "{limit}/{overhead}: {c:?}");
                unmarked.push(unmark(c, i + 1, n));
            }
            assert_nothing_lost(&text, &unmarked);
            assert!(unmarked.iter().any(|c| c.contains("```\ncode();")));
        }
    }

    #[test]
    fn marker_reserve_grows_with_the_count() {
        // About 200 pieces: the marker takes " (200/200)", more than a shorter count would.
        let text = "word ".repeat(400);
        let chunks = chunk(&text, 20, 0);
        assert!(chunks.len() > 9);
        let n = chunks.len();
        assert!(chunks.iter().all(|c| len(c) <= 20), "{chunks:?}");
        assert!(chunks[n - 1].ends_with(&format!("({n}/{n})")));
    }

    #[test]
    fn a_limit_without_room_sends_the_text_whole() {
        let text = "a".repeat(30);
        assert_eq!(chunk(&text, 10, 5), vec![text.clone()]);
        assert!(fit(10, 10, |_| vec![1]).is_none());
    }

    /// Texts assembled from prose, breaks, fences, CJK, emoji and long words by a fixed
    /// pseudo-random sequence: at every limit, pieces fit (or are one whole fence), fences are
    /// never opened in one piece and closed in another, and nothing but whitespace is lost.
    #[test]
    fn generated_texts_keep_every_rule() {
        let atoms = [
            "word",
            "another",
            "x",
            "sentence ends here.",
            "really?",
            "wow!",
            "\n",
            "\n\n",
            "\n```\nlet a = 1;\nlet b = 2;\n```\n",
            "\n~~~~py\nprint('hi')\n~~~~\n",
            "今日は。",
            "漢字かなカナ",
            "👨\u{200D}👩\u{200D}👧",
            "👍🏽",
            "🇫🇷",
            "e\u{301}",
            "supercalifragilisticexpialidocious",
            "—",
            "  ",
        ];
        let mut seed: u64 = 0x5eed;
        let mut next = move |n: usize| {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            usize::try_from(seed >> 33).unwrap() % n
        };
        for _ in 0..300 {
            let mut text = String::new();
            for _ in 0..next(60) {
                text.push_str(atoms[next(atoms.len())]);
                if next(3) > 0 {
                    text.push(' ');
                }
            }
            let whole: Vec<String> = fences(&text)
                .into_iter()
                .map(|f| text[f].to_owned())
                .collect();
            let limit = 8 + next(60);
            let pieces = split(&text, limit);
            assert_nothing_lost(&text, &pieces);
            for p in &pieces {
                assert!(
                    len(p) <= limit || whole.iter().any(|w| w == p),
                    "{limit}: {p:?} of {text:?}"
                );
                assert_eq!(p.trim(), p, "pieces are trimmed");
            }
            // Every fence of the text is inside one piece.
            for w in &whole {
                assert!(
                    pieces.iter().any(|p| p.contains(w.as_str())),
                    "{limit}: {w:?} split in {pieces:#?}"
                );
            }
            if limit > 30 {
                let chunks = chunk(&text, limit, 5);
                let n = chunks.len();
                if n > 1 {
                    for (i, c) in chunks.iter().enumerate() {
                        let un = unmark(c, i + 1, n);
                        assert!(len(c) + 5 <= limit || whole.contains(&un), "{limit}: {c:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_fence_at_the_start_of_a_piece_that_fits_stays_with_what_follows() {
        let text = "```\nab\n```\nend of it all and more words here";
        let pieces = split(text, 20);
        assert_eq!(pieces[0], "```\nab\n```\nend of it");
        assert_nothing_lost(text, &pieces);
    }
}
