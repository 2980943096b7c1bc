//! The one reader of server-sent events (`text/event-stream`), for every client that receives
//! them: webhook agents and remote A2A agents.
//!
//! It follows the parsing rules of the WHATWG HTML standard ("Server-sent events", the
//! event-stream interpretation):
//!
//! - a line ends in CRLF, LF or a lone CR, and a CRLF split across two chunks is one line end;
//! - one byte order mark at the start of the stream is skipped;
//! - a line starting with `:` is a comment;
//! - `field: value` loses one leading space of its value; a line without a colon is a field
//!   with an empty value;
//! - `data` appends its value and a line feed to the event's data (so several `data` lines
//!   join with `\n`), `event` sets the event type, `id` sets the last event ID unless the value
//!   contains NUL, `retry` sets the reconnection time when it is ASCII digits only; other fields
//!   are ignored;
//! - a blank line dispatches the event, unless no `data` line came since the last one;
//! - an event still open when the stream ends is discarded.
//!
//! The reader is incremental ([`SseReader::feed`] takes the body as it arrives, cut anywhere);
//! [`parse`] reads a complete body.

use std::time::Duration;

/// The UTF-8 byte order mark.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Whether a response's `Content-Type` is `text/event-stream`.
#[must_use]
pub fn is_event_stream(headers: &reqwest::header::HeaderMap) -> bool {
    headers
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';')
                .next()
                .is_some_and(|t| t.trim().eq_ignore_ascii_case("text/event-stream"))
        })
}

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The event type: the event's last `event` field, `message` when it had none.
    pub event: String,
    /// The values of the event's `data` lines, joined with `\n`.
    pub data: String,
    /// The stream's last event ID when the event was dispatched (an `id` holds until another
    /// replaces it).
    pub last_event_id: String,
}

/// Reads an event stream incrementally: feed it the body's bytes as they arrive.
///
/// Dropping the reader discards the event it has not seen the end of, as the end of a stream
/// does.
#[derive(Debug, Default)]
pub struct SseReader {
    /// The bytes of the line not ended yet (at the very start, also the bytes that may still
    /// turn out to be a byte order mark).
    line: Vec<u8>,
    /// The stream's start has been seen, with its byte order mark skipped if it had one.
    started: bool,
    /// The last line ended with a CR at the end of a chunk: a LF opening the next chunk belongs
    /// to that line end.
    after_cr: bool,
    /// The event's data, each `data` value followed by a line feed.
    data: String,
    /// The event's type; empty for `message`.
    event: String,
    /// The last event ID.
    last_event_id: String,
    /// The reconnection time the stream asked for.
    retry: Option<Duration>,
}

/// The events of a complete event-stream `body`, in order (an unfinished last event is
/// discarded).
#[must_use]
pub fn parse(body: &[u8]) -> Vec<SseEvent> {
    SseReader::default().feed(body)
}

impl SseReader {
    /// A reader at the start of a stream.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the next `chunk` of the stream; returns the events it completed, in order.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        let mut out = Vec::new();
        if self.started {
            self.push(chunk, &mut out);
            return out;
        }
        // Until three bytes have arrived the stream may still open with a byte order mark.
        let mut head = std::mem::take(&mut self.line);
        head.extend_from_slice(chunk);
        if head.len() < BOM.len() && BOM.starts_with(&head) {
            self.line = head;
            return out;
        }
        self.started = true;
        let body = head.strip_prefix(BOM).unwrap_or(&head);
        self.push(body, &mut out);
        out
    }

    /// The last event ID the stream set (empty when none).
    #[must_use]
    pub fn last_event_id(&self) -> &str {
        &self.last_event_id
    }

    /// The reconnection time the stream's last valid `retry` field asked for.
    #[must_use]
    pub fn retry(&self) -> Option<Duration> {
        self.retry
    }

    /// Splits `bytes` into lines, keeping an unfinished last line for the next chunk.
    fn push(&mut self, mut bytes: &[u8], out: &mut Vec<SseEvent>) {
        if bytes.is_empty() {
            return;
        }
        if std::mem::take(&mut self.after_cr)
            && let Some(rest) = bytes.strip_prefix(b"\n")
        {
            bytes = rest;
        }
        while let Some(end) = memchr::memchr2(b'\r', b'\n', bytes) {
            let (text, rest) = bytes.split_at(end);
            if self.line.is_empty() {
                self.line_ended(text, out);
            } else {
                let mut line = std::mem::take(&mut self.line);
                line.extend_from_slice(text);
                self.line_ended(&line, out);
                line.clear();
                self.line = line;
            }
            bytes = match rest {
                [b'\r', b'\n', after @ ..] => after,
                [b'\r'] => {
                    self.after_cr = true;
                    &[]
                }
                [_, after @ ..] => after,
                [] => &[],
            };
        }
        self.line.extend_from_slice(bytes);
    }

    /// Interprets one complete line (without its line end).
    fn line_ended(&mut self, line: &[u8], out: &mut Vec<SseEvent>) {
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        if line.starts_with(b":") {
            return;
        }
        let (field, value) = match memchr::memchr(b':', line) {
            Some(colon) => {
                let (field, value) = line.split_at(colon);
                let value = value.get(1..).unwrap_or_default();
                (field, value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &[][..]),
        };
        match field {
            b"data" => {
                self.data.push_str(&String::from_utf8_lossy(value));
                self.data.push('\n');
            }
            b"event" => self.event = String::from_utf8_lossy(value).into_owned(),
            // An id holding NUL is ignored.
            b"id" if !value.contains(&0) => {
                self.last_event_id = String::from_utf8_lossy(value).into_owned();
            }
            // Digits only; anything else (or a number past u64) is ignored.
            b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                if let Some(ms) = std::str::from_utf8(value)
                    .ok()
                    .and_then(|v| v.parse::<u64>().ok())
                {
                    self.retry = Some(Duration::from_millis(ms));
                }
            }
            _ => {}
        }
    }

    /// Ends the event at a blank line: emits it when it has data, and starts the next one.
    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        let mut data = std::mem::take(&mut self.data);
        let event = std::mem::take(&mut self.event);
        if data.is_empty() {
            return;
        }
        if data.ends_with('\n') {
            data.pop();
        }
        out.push(SseEvent {
            event: if event.is_empty() {
                "message".to_owned()
            } else {
                event
            },
            data,
            last_event_id: self.last_event_id.clone(),
        });
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{SseEvent, SseReader, parse};

    fn data(events: &[SseEvent]) -> Vec<&str> {
        events.iter().map(|e| e.data.as_str()).collect()
    }

    /// The events of `stream` fed in the pieces `cuts` make of it.
    fn fed(stream: &[u8], cuts: &[usize]) -> Vec<SseEvent> {
        let mut r = SseReader::new();
        let mut got = Vec::new();
        let mut from = 0;
        for &cut in cuts.iter().chain([&stream.len()]) {
            got.extend(r.feed(&stream[from..cut]));
            from = cut;
        }
        got
    }

    #[test]
    fn lines_end_in_crlf_lf_or_cr() {
        for stream in [
            &b"data: a\r\n\r\ndata: b\r\n\r\n"[..],
            b"data: a\n\ndata: b\n\n",
            b"data: a\r\rdata: b\r\r",
            b"data: a\r\n\ndata: b\r\r\n",
        ] {
            assert_eq!(
                data(&parse(stream)),
                ["a", "b"],
                "{}",
                String::from_utf8_lossy(stream)
            );
        }
        // A lone CR ends a line even inside what would otherwise be one.
        assert_eq!(data(&parse(b"data: a\rdata: b\n\n")), ["a\nb"]);
    }

    #[test]
    fn comments_are_ignored() {
        let events = parse(b": hello\n:\ndata: x\n: between\n\n: keep-alive\n\n");
        assert_eq!(data(&events), ["x"], "comments dispatch nothing");
    }

    #[test]
    fn one_leading_space_is_removed_from_a_value() {
        assert_eq!(
            data(&parse(b"data:x\n\ndata: x\n\ndata:  x\n\ndata:\n\n")),
            ["x", "x", " x", ""],
            "only the first space goes; an empty `data` is still an event"
        );
        // A colon inside the value is part of it.
        assert_eq!(data(&parse(b"data: a: b\n\n")), ["a: b"]);
    }

    #[test]
    fn data_lines_join_with_line_feeds() {
        assert_eq!(
            data(&parse(b"data: {\"a\":\ndata: 1}\n\n")),
            ["{\"a\":\n1}"],
            "multi-line data"
        );
        // A field name alone is the field with an empty value.
        assert_eq!(data(&parse(b"data\ndata\n\n")), ["\n"]);
        assert_eq!(data(&parse(b"data: a\ndata\ndata: b\n\n")), ["a\n\nb"]);
    }

    #[test]
    fn event_type_defaults_to_message_and_lasts_one_event() {
        let events = parse(b"event: delta\ndata: 1\n\ndata: 2\n\nevent: a\nevent: b\ndata: 3\n\n");
        let types: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
        assert_eq!(types, ["delta", "message", "b"], "the last `event` wins");
    }

    #[test]
    fn id_sets_the_last_event_id_unless_it_holds_nul() {
        let mut r = SseReader::new();
        let events = r.feed(b"id: 7\ndata: a\n\ndata: b\n\nid: 8\0\ndata: c\n\nid\ndata: d\n\n");
        let ids: Vec<&str> = events.iter().map(|e| e.last_event_id.as_str()).collect();
        assert_eq!(
            ids,
            ["7", "7", "7", ""],
            "the id carries over, a NUL id is ignored, an empty id clears it"
        );
        // An id without data still sets the stream's last event ID.
        r.feed(b"id: 9\n\n");
        assert_eq!(r.last_event_id(), "9");
    }

    #[test]
    fn retry_takes_digits_only() {
        let mut r = SseReader::new();
        assert!(r.feed(b"retry: 1500\n\n").is_empty(), "retry is no event");
        assert_eq!(r.retry(), Some(Duration::from_millis(1500)));
        for bad in [
            &b"retry: 15x\n"[..],
            b"retry: -1\n",
            b"retry: 1.5\n",
            b"retry:\n",
            b"retry:  20\n",
            b"retry: 99999999999999999999999\n",
        ] {
            r.feed(bad);
            assert_eq!(
                r.retry(),
                Some(Duration::from_millis(1500)),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        r.feed(b"retry: 0\n");
        assert_eq!(r.retry(), Some(Duration::ZERO));
    }

    #[test]
    fn a_blank_line_dispatches_only_when_there_is_data() {
        let events = parse(b"\n\nevent: x\n\nid: 1\n\ndata: a\n\n\n\nevent: y\n\ndata: b\n\n");
        assert_eq!(data(&events), ["a", "b"]);
        assert_eq!(
            events[1].event, "message",
            "an event type without data is dropped with its event"
        );
    }

    #[test]
    fn unknown_fields_are_ignored() {
        assert_eq!(
            data(&parse(b"foo: bar\ndata: a\nData: b\n data: c\n\n")),
            ["a"],
            "field names are exact"
        );
    }

    #[test]
    fn a_leading_byte_order_mark_is_skipped_once() {
        assert_eq!(data(&parse(b"\xEF\xBB\xBFdata: a\n\n")), ["a"]);
        // A second one is part of the first line's field name.
        assert!(parse(b"\xEF\xBB\xBF\xEF\xBB\xBFdata: a\n\n").is_empty());
        // Not at the start: part of the value.
        assert_eq!(
            data(&parse(b"data: \xEF\xBB\xBFa\n\n")),
            ["\u{feff}a"],
            "mid-stream"
        );
        // Split over chunks, byte by byte.
        let stream = b"\xEF\xBB\xBFdata: a\n\n";
        assert_eq!(data(&fed(stream, &[1, 2, 3])), ["a"]);
        assert_eq!(data(&fed(stream, &[1])), ["a"]);
        // Bytes that begin like one but are not.
        assert_eq!(data(&fed(b"\xEFdata: a\n\n", &[1])), [] as [&str; 0]);
        assert_eq!(data(&fed(b"data: a\n\n", &[1, 2])), ["a"]);
        assert_eq!(data(&fed(b"\n\ndata: a\n\n", &[1])), ["a"]);
    }

    #[test]
    fn an_unfinished_event_at_the_end_is_discarded() {
        assert_eq!(data(&parse(b"data: a\n\ndata: b\n")), ["a"]);
        assert_eq!(data(&parse(b"data: a\n\ndata: b")), ["a"]);
        let mut r = SseReader::new();
        assert!(r.feed(b"data: one\n").is_empty(), "not yet dispatched");
        assert_eq!(data(&r.feed(b"\n")), ["one"]);
    }

    #[test]
    fn chunks_may_cut_anywhere() {
        let stream: &[u8] = b"\xEF\xBB\xBF: c\r\nevent: delta\r\nid: 1\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\ndata: x\r\rdata: y\n\nretry: 10\nid: 2\ndata: z\r\n\r\n";
        let whole = parse(stream);
        assert_eq!(data(&whole), ["{\"a\":\n1}", "x", "y", "z"]);
        assert_eq!(whole[0].event, "delta");
        assert_eq!(whole[3].last_event_id, "2");
        for cut in 0..=stream.len() {
            assert_eq!(fed(stream, &[cut]), whole, "cut at {cut}");
        }
        for a in 0..=stream.len() {
            for b in a..=stream.len() {
                assert_eq!(fed(stream, &[a, b]), whole, "cut at {a} and {b}");
            }
        }
        let every: Vec<usize> = (1..stream.len()).collect();
        assert_eq!(fed(stream, &every), whole, "byte by byte");
    }

    #[test]
    fn crlf_split_across_chunks_is_one_line_end() {
        // Were the LF read as a second line end, the blank line would dispatch early.
        let got = fed(b"data: a\r\ndata: b\r\n\r\n", &[8]);
        assert_eq!(data(&got), ["a\nb"]);
        let got = fed(b"data: a\r\ndata: b\r\n\r\n", &[8, 8, 8]);
        assert_eq!(data(&got), ["a\nb"], "empty chunks keep the pending CR");
        // A CR at a chunk's end followed by more than a LF.
        assert_eq!(data(&fed(b"data: a\r\rdata: b\r\r", &[8])), ["a", "b"]);
    }

    #[test]
    fn events_split_across_chunks_come_out_whole_and_in_order() {
        let stream = b": a comment\r\ndata: {\"type\":\"delta\",\"text\":\"Hel\"}\r\n\r\ndata: {\"type\":\"delta\",\ndata: \"text\":\"lo\"}\n\nevent: x\ndata: {\"type\":\"done\"}\n\n";
        // Every way of cutting the stream in two gives the same events.
        for cut in 0..stream.len() {
            let mut r = SseReader::new();
            let mut got = r.feed(&stream[..cut]);
            got.extend(r.feed(&stream[cut..]));
            assert_eq!(
                data(&got),
                [
                    "{\"type\":\"delta\",\"text\":\"Hel\"}",
                    "{\"type\":\"delta\",\n\"text\":\"lo\"}",
                    "{\"type\":\"done\"}",
                ],
                "cut at {cut}"
            );
        }
        // Byte by byte, and an unfinished event stays buffered.
        let mut r = SseReader::new();
        let mut got = Vec::new();
        for b in b"data: one\n\ndata: two" {
            got.extend(r.feed(&[*b]));
        }
        assert_eq!(data(&got), ["one"]);
        assert_eq!(data(&r.feed(b"\n\n")), ["two"]);
    }

    #[test]
    fn invalid_utf8_is_replaced() {
        assert_eq!(data(&parse(b"data: a\xFFb\n\n")), ["a\u{fffd}b"]);
    }
}
