//! The DATA framing (RFC 5321 §4.1.1.4, §4.5.2): a message body ends at `<CRLF>.<CRLF>` and
//! nowhere else, and a line that starts with a dot loses that dot. Any other CR or LF around a
//! dot (`<CRLF>.<CR><CRLF>`, `<LF>.<LF>`, …) is body, so a second message hidden behind a
//! look-alike terminator stays inside the first one (which the message checks then refuse for
//! its bare CR or LF) and never runs as commands: no SMTP smuggling.
//!
//! The reader holds only where it is in a possible terminator, so the end is found the same
//! however the reads split the bytes; it keeps the body, or just finds its end when the body is
//! not kept (over the size limit or the memory budget).

use memchr::memmem;

/// Where the reader stands relative to a possible `<CRLF>.<CRLF>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    /// Inside a line.
    Line,
    /// Just after a CR.
    Cr,
    /// At the start of a line (just after a CRLF).
    LineStart,
    /// After a CRLF and a dot (the dot held back).
    Dot,
    /// After a CRLF, a dot and a CR (both held back).
    DotCr,
}

/// Reads one message body off the DATA stream.
#[derive(Debug, Clone, Copy)]
pub(super) struct DataReader {
    at: At,
}

impl DataReader {
    /// A reader at the start of the body: the 354 reply ended a line, so a dot straight away
    /// is the end of an empty message or a stuffed dot, as after any CRLF.
    pub(super) fn new() -> Self {
        Self { at: At::LineStart }
    }

    /// Takes body bytes from `bytes` into `body` (or drops them when `body` is `None`) up to
    /// the end of the message; returns whether it was reached, `bytes` then standing just
    /// after the terminator. The body keeps the CRLF that ends its last line.
    pub(super) fn ingest(
        &mut self,
        bytes: &mut std::slice::Iter<'_, u8>,
        mut body: Option<&mut Vec<u8>>,
    ) -> bool {
        let mut rest = bytes.as_slice();
        let mut push = |b: &[u8]| {
            if let Some(body) = body.as_deref_mut() {
                body.extend_from_slice(b);
            }
        };
        loop {
            if self.at == At::Line {
                // The fast path: everything up to the next line that starts with a dot.
                match memmem::find(rest, b"\r\n.") {
                    Some(i) => {
                        push(&rest[..i + 2]);
                        rest = &rest[i + 3..];
                        self.at = At::Dot;
                    }
                    None => {
                        push(rest);
                        self.at = match rest {
                            [.., b'\r', b'\n'] => At::LineStart,
                            [.., b'\r'] => At::Cr,
                            _ => At::Line,
                        };
                        rest = &[];
                    }
                }
            }
            let Some((&b, tail)) = rest.split_first() else {
                *bytes = rest.iter();
                return false;
            };
            rest = tail;
            self.at = match (self.at, b) {
                (At::DotCr, b'\n') => {
                    *bytes = rest.iter();
                    self.at = At::LineStart;
                    return true;
                }
                // A CR after the dot that no LF follows: the dot was a line's first character
                // (dropped), the CR is body, and this byte comes after it.
                (At::DotCr, b'\r') => {
                    push(b"\r\r");
                    At::Cr
                }
                (At::DotCr, _) => {
                    push(&[b'\r', b]);
                    At::Line
                }
                (At::Dot, b'\r') => At::DotCr,
                (At::LineStart, b'.') => At::Dot,
                (At::Cr, b'\n') => {
                    push(b"\n");
                    At::LineStart
                }
                (_, b'\r') => {
                    push(b"\r");
                    At::Cr
                }
                (_, _) => {
                    push(&[b]);
                    At::Line
                }
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `wire` in pieces cut at `cuts`; returns the body and what followed the end.
    fn read(wire: &[u8], cuts: &[usize]) -> Option<(Vec<u8>, Vec<u8>)> {
        let mut reader = DataReader::new();
        let mut body = Vec::new();
        let mut from = 0;
        for &to in cuts.iter().chain([&wire.len()]) {
            let mut it = wire[from..to].iter();
            if reader.ingest(&mut it, Some(&mut body)) {
                let mut after = it.as_slice().to_vec();
                after.extend_from_slice(&wire[to..]);
                return Some((body, after));
            }
            from = to;
        }
        None
    }

    #[test]
    fn only_crlf_dot_crlf_ends_the_body() {
        let (body, after) = read(b"a\r\n..b\r\n.c\r\n.\r\nNOOP\r\n", &[]).unwrap();
        assert_eq!(body, b"a\r\n.b\r\nc\r\n");
        assert_eq!(after, b"NOOP\r\n");
        assert_eq!(read(b".\r\n", &[]).unwrap().0, b"");
        for fake in [
            "\r\n.\r\r\n",
            "\r\n.\r\r\r\n",
            "\r\n.\n",
            "\n.\r\n",
            "\n.\n",
            "\r.\r\n",
            "\r.\r",
            "\r\n.\rx\r\n",
        ] {
            let wire = format!("hi{fake}MAIL FROM:<a@b.example>\r\n");
            assert_eq!(read(wire.as_bytes(), &[]), None, "{fake:?} ended the body");
        }
    }

    #[test]
    fn the_end_is_found_however_the_reads_split_the_bytes() {
        let wire = b"x\r\n..y\r\n.\r\r\nz\r\n.\r\nNEXT";
        let whole = read(wire, &[]).unwrap();
        assert_eq!(whole.0, b"x\r\n.y\r\n\r\r\nz\r\n");
        for a in 0..=wire.len() {
            for b in a..=wire.len() {
                assert_eq!(
                    read(wire, &[a, b]).as_ref(),
                    Some(&whole),
                    "cut at {a}, {b}"
                );
            }
        }
    }

    #[test]
    fn a_body_not_kept_ends_in_the_same_place() {
        let mut reader = DataReader::new();
        let mut it = b"big\r\n.\r\r\nMAIL\r\n.\r\nNOOP".iter();
        assert!(reader.ingest(&mut it, None));
        assert_eq!(it.as_slice(), b"NOOP");
    }
}
