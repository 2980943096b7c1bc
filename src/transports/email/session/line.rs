//! Command lines, framed before anything parses them (RFC 5321 §2.3.8, §4.5.3.1.4): a line ends
//! at its first LF, must end in CRLF and hold no other CR, and is at most
//! [`MAX_COMMAND_LINE`] bytes long. An overlong line is answered once and dropped whole, up to
//! its LF, so what follows it is the next line.
//!
//! The reader holds only the line begun so far (or that it is inside an overlong one), so a
//! line is the same however the reads split the bytes, and a command's answer never depends on
//! them.

use memchr::memchr;

/// The longest command line, its CRLF included. RFC 5321 asks for 512 bytes; a longer limit
/// leaves room for extensions' parameters (SMTPUTF8 addresses, several MAIL parameters).
pub(super) const MAX_COMMAND_LINE: usize = 4096;

/// What the reader found.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Line<'a> {
    /// A whole line, its CRLF included, with no other CR or LF in it.
    Command(&'a [u8]),
    /// A line that ends in a bare LF, or holds a CR that no LF follows.
    BareLineEnding,
    /// A line past [`MAX_COMMAND_LINE`]: said once, when the limit is passed; the rest of the
    /// line, up to its LF, is dropped without another word.
    TooLong,
}

/// Reads command lines off the stream.
#[derive(Debug, Default)]
pub(super) struct LineReader {
    /// The line begun so far.
    buf: Vec<u8>,
    /// Whether `buf` holds a line already handed out, to be dropped before the next one.
    handed: bool,
    /// Inside an overlong line: everything up to its LF is dropped.
    skipping: bool,
}

impl LineReader {
    /// Takes bytes from `bytes` up to the end of the next line and returns it; `None` when the
    /// bytes ran out first (what was read is kept for the next call).
    pub(super) fn next(&mut self, bytes: &mut std::slice::Iter<'_, u8>) -> Option<Line<'_>> {
        if self.handed {
            self.buf.clear();
            self.handed = false;
        }
        let mut rest = bytes.as_slice();
        while self.skipping {
            match memchr(b'\n', rest) {
                Some(at) => {
                    rest = &rest[at + 1..];
                    self.skipping = false;
                }
                None => {
                    *bytes = [].iter();
                    return None;
                }
            }
        }
        let room = MAX_COMMAND_LINE - self.buf.len();
        let window = &rest[..rest.len().min(room)];
        match memchr(b'\n', window) {
            Some(at) => {
                self.buf.extend_from_slice(&window[..=at]);
                *bytes = rest[at + 1..].iter();
                self.handed = true;
                let line = self.buf.as_slice();
                let body = &line[..line.len() - 1];
                Some(match body.split_last() {
                    Some((b'\r', text)) if memchr(b'\r', text).is_none() => Line::Command(line),
                    _ => Line::BareLineEnding,
                })
            }
            None if window.len() == room => {
                // MAX_COMMAND_LINE bytes and no LF among them: too long, whatever follows.
                *bytes = rest[room..].iter();
                self.buf.clear();
                self.skipping = true;
                Some(Line::TooLong)
            }
            None => {
                self.buf.extend_from_slice(window);
                *bytes = [].iter();
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every line `wire` holds, each as it came, read with the bytes cut at `cuts`.
    fn lines(wire: &[u8], cuts: &[usize]) -> Vec<Result<Vec<u8>, &'static str>> {
        let mut reader = LineReader::default();
        let mut out = Vec::new();
        let mut from = 0;
        for &to in cuts.iter().chain([&wire.len()]) {
            let mut it = wire[from..to].iter();
            while let Some(line) = reader.next(&mut it) {
                out.push(match line {
                    Line::Command(l) => Ok(l.to_vec()),
                    Line::BareLineEnding => Err("bare"),
                    Line::TooLong => Err("long"),
                });
            }
            from = to;
        }
        out
    }

    #[test]
    fn lines_end_at_crlf_and_bare_endings_are_refused() {
        let got = lines(b"NOOP\r\nMAIL FROM\nRSET\r\nA\rB\r\n\r\nQUIT\r", &[]);
        assert_eq!(
            got,
            vec![
                Ok(b"NOOP\r\n".to_vec()),
                Err("bare"),
                Ok(b"RSET\r\n".to_vec()),
                Err("bare"),
                Ok(b"\r\n".to_vec()),
            ]
        );
    }

    #[test]
    fn an_overlong_line_is_refused_once_and_dropped_to_its_end() {
        let mut wire = b"NOOP ".to_vec();
        wire.extend(std::iter::repeat_n(b'x', 2 * MAX_COMMAND_LINE));
        wire.extend_from_slice(b"RSET\r\nQUIT\r\n");
        assert_eq!(
            lines(&wire, &[]),
            vec![Err("long"), Ok(b"QUIT\r\n".to_vec())]
        );
        // At the limit is a line; one byte more is not.
        let mut at = vec![b'y'; MAX_COMMAND_LINE - 2];
        at.extend_from_slice(b"\r\n");
        assert_eq!(lines(&at, &[]), vec![Ok(at.clone())]);
        let mut over = vec![b'y'; MAX_COMMAND_LINE - 1];
        over.extend_from_slice(b"\r\nNOOP\r\n");
        assert_eq!(
            lines(&over, &[]),
            vec![Err("long"), Ok(b"NOOP\r\n".to_vec())]
        );
    }

    #[test]
    fn the_lines_are_the_same_however_the_reads_split_the_bytes() {
        let mut wire = b"EHLO a\r\nMAIL FROM\nX\rY\r\n".to_vec();
        wire.extend(std::iter::repeat_n(b'z', MAX_COMMAND_LINE + 3));
        wire.extend_from_slice(b"\r\nNOOP\r\nRS");
        let whole = lines(&wire, &[]);
        assert_eq!(whole.len(), 5, "{whole:?}");
        for a in (0..=wire.len()).step_by(7) {
            for b in (a..=wire.len()).step_by(331) {
                assert_eq!(lines(&wire, &[a, b]), whole, "cut at {a}, {b}");
            }
        }
        let bytewise: Vec<usize> = (1..wire.len()).collect();
        assert_eq!(lines(&wire, &bytewise), whole);
    }
}
