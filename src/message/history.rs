//! The sliding-window history policy (spec §7): a stable head, a recent window, a character
//! budget, consecutive turns of one sender merged, and a cache breakpoint after the head.
//!
//! Where the spec merges every run of one role so roles alternate, turns of one role from
//! different senders are kept apart here, each with its sender: in a thread with several people
//! or agents a merged turn would put one sender's words under another's name. Roles then
//! alternate only when each role has one sender; a model's prompt, which must alternate, is
//! merged by the assembly layer with every sender named.

use serde::{Deserialize, Serialize};

use super::types::{HistoricalMessage, Part};

/// How much of a thread an agent sees.
///
/// ```
/// use switchboard::message::HistoryPolicy;
/// let policy = HistoryPolicy { keep_head: 1, window: 20, max_chars: 32_000 };
/// let trimmed = policy.apply(Vec::new());
/// assert!(trimmed.turns.is_empty() && trimmed.cache_breakpoint_after.is_none());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HistoryPolicy {
    /// Opening turns always kept (default 1: the opening post).
    pub keep_head: usize,
    /// Most recent turns kept after the head (default 20).
    pub window: usize,
    /// Character budget over all kept turns (default 32,000).
    pub max_chars: usize,
}

impl Default for HistoryPolicy {
    fn default() -> Self {
        Self {
            keep_head: 1,
            window: 20,
            max_chars: 32_000,
        }
    }
}

/// The trimmed history and where a prompt cache may break.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TrimmedHistory {
    /// Turns, oldest first, with alternating roles.
    pub turns: Vec<HistoricalMessage>,
    /// Index of the last head turn, when there is a head.
    pub cache_breakpoint_after: Option<usize>,
}

fn chars(turn: &HistoricalMessage) -> usize {
    turn.parts.iter().map(Part::text_len).sum()
}

/// Appends `turn`, merging it into the previous turn when both have the same role and the same
/// sender. Turns of one role from different senders (two people, or a person and another agent)
/// stay apart, each with its own sender: merged, the second would be attributed to the first.
/// A model's prompt merges them itself, with each sender named ([`crate::agents::assembly`]).
fn push_merged(out: &mut Vec<HistoricalMessage>, turn: HistoricalMessage) {
    match out.last_mut() {
        Some(prev)
            if prev.role == turn.role
                && prev
                    .sender
                    .address
                    .eq_ignore_ascii_case(&turn.sender.address) =>
        {
            std::sync::Arc::make_mut(&mut prev.parts).extend(turn.parts.iter().cloned());
            prev.timestamp = turn.timestamp;
        }
        _ => out.push(turn),
    }
}

impl HistoryPolicy {
    /// Trims `turns` (oldest first: the whole thread before the current message, or its first
    /// `keep_head` and last `window + 1` turns, which is all that can be kept plus one turn to
    /// show whether anything was elided) to the policy.
    ///
    /// The head is the first `keep_head` turns and never changes as the thread grows, so a
    /// prompt cache placed after it stays valid. The window is filled from the newest turn
    /// backwards while the budget allows. When turns were elided between head and window, window
    /// turns with the same role as the last head turn are dropped rather than merged into the
    /// head, which would change it.
    #[must_use]
    pub fn apply(&self, turns: Vec<HistoricalMessage>) -> TrimmedHistory {
        let n = turns.len();
        let head_len = self.keep_head.min(n);
        let mut rest = turns;
        let tail_all = rest.split_off(head_len);
        let head_raw = rest;

        // Budget: the head first, then the newest turns of the window backwards.
        let mut budget = self.max_chars;
        let mut head: Vec<HistoricalMessage> = Vec::with_capacity(head_raw.len());
        for turn in head_raw {
            let c = chars(&turn);
            if c > budget && !head.is_empty() {
                break;
            }
            budget = budget.saturating_sub(c);
            push_merged(&mut head, turn);
        }
        let tail_len = tail_all.len();
        let window_start = tail_len.saturating_sub(self.window);
        let mut kept_rev = Vec::new();
        for turn in tail_all.into_iter().skip(window_start).rev() {
            let c = chars(&turn);
            if c > budget {
                break;
            }
            budget -= c;
            kept_rev.push(turn);
        }
        let contiguous = window_start == 0 && kept_rev.len() == tail_len;
        let mut tail: Vec<HistoricalMessage> = kept_rev.into_iter().rev().collect();

        if head.is_empty() {
            let mut turns = Vec::with_capacity(tail.len());
            for t in tail {
                push_merged(&mut turns, t);
            }
            return TrimmedHistory {
                turns,
                cache_breakpoint_after: None,
            };
        }

        if !contiguous {
            // Turns were elided: keep the head byte-for-byte and start the window on the
            // other role.
            let last_head_role = head.last().map(|t| t.role);
            let skip = tail
                .iter()
                .take_while(|t| Some(t.role) == last_head_role)
                .count();
            tail.drain(..skip);
        }
        let breakpoint = head.len() - 1;
        let mut turns = head;
        for t in tail {
            push_merged(&mut turns, t);
        }
        TrimmedHistory {
            turns,
            cache_breakpoint_after: Some(breakpoint),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Role, Sender, Timestamp};

    fn turn(i: usize, role: Role, text: &str) -> HistoricalMessage {
        HistoricalMessage {
            id: Some(format!("m{i}")),
            role,
            sender: Sender::local_agent("@a@example.org").into(),
            parts: vec![Part::text(text)].into(),
            timestamp: Timestamp::from_unix_millis(i64::try_from(i).unwrap()),
        }
    }

    fn alternating(n: usize) -> Vec<HistoricalMessage> {
        (0..n)
            .map(|i| {
                turn(
                    i,
                    if i % 2 == 0 {
                        Role::User
                    } else {
                        Role::Assistant
                    },
                    &format!("t{i}"),
                )
            })
            .collect()
    }

    fn ids(h: &TrimmedHistory) -> Vec<String> {
        h.turns.iter().map(|t| t.id.clone().unwrap()).collect()
    }

    #[test]
    fn short_thread_is_kept_whole() {
        let h = HistoryPolicy::default().apply(alternating(5));
        assert_eq!(ids(&h), ["m0", "m1", "m2", "m3", "m4"]);
        assert_eq!(h.cache_breakpoint_after, Some(0));
    }

    #[test]
    fn empty_history() {
        let h = HistoryPolicy::default().apply(vec![]);
        assert!(h.turns.is_empty());
        assert_eq!(h.cache_breakpoint_after, None);
    }

    #[test]
    fn window_slides_and_head_stays() {
        let p = HistoryPolicy {
            keep_head: 1,
            window: 4,
            max_chars: 10_000,
        };
        let h = p.apply(alternating(11));
        // head m0 (user); window m7..m10 starts with m7 (assistant): alternation holds.
        assert_eq!(ids(&h), ["m0", "m7", "m8", "m9", "m10"]);
        assert_eq!(h.cache_breakpoint_after, Some(0));
        let h = p.apply(alternating(12));
        // window m8..m11 starts with a user turn after a user head: dropped, not merged.
        assert_eq!(ids(&h), ["m0", "m9", "m10", "m11"]);
        assert_eq!(h.turns[0].parts.len(), 1, "the head must not change");
        for w in h.turns.windows(2) {
            assert_ne!(w[0].role, w[1].role, "roles alternate");
        }
    }

    #[test]
    fn head_plus_window_and_one_gives_the_same_answer_as_the_whole_thread() {
        let p = HistoryPolicy {
            keep_head: 1,
            window: 4,
            max_chars: 10_000,
        };
        for n in 1..15 {
            let full = alternating(n);
            let mut loaded: Vec<_> = full.iter().take(1).cloned().collect();
            let tail_from = n.saturating_sub(p.window + 1).max(1);
            loaded.extend(full.iter().skip(tail_from).cloned());
            assert_eq!(p.apply(loaded), p.apply(full), "thread of {n} turns");
        }
    }

    #[test]
    fn consecutive_same_role_turns_merge() {
        let turns = vec![
            turn(0, Role::User, "a"),
            turn(1, Role::User, "b"),
            turn(2, Role::Assistant, "c"),
            turn(3, Role::Assistant, "d"),
            turn(4, Role::User, "e"),
        ];
        let h = HistoryPolicy::default().apply(turns);
        assert_eq!(h.turns.len(), 3);
        assert_eq!(h.turns[0].parts.len(), 2);
        assert_eq!(h.turns[1].parts.len(), 2);
        assert_eq!(h.cache_breakpoint_after, Some(0));
    }

    #[test]
    fn turns_of_one_role_from_different_senders_stay_apart() {
        let from = |i, who: &str, text| {
            let mut t = turn(i, Role::User, text);
            t.sender = Sender::local_agent(who).into();
            t
        };
        let turns = vec![
            from(0, "@alice@example.org", "a"),
            from(1, "@bob@example.org", "b"),
            from(2, "@BOB@example.org", "c"),
            turn(3, Role::Assistant, "d"),
        ];
        let h = HistoryPolicy::default().apply(turns);
        let senders: Vec<&str> = h.turns.iter().map(|t| t.sender.address.as_str()).collect();
        assert_eq!(
            senders,
            ["@alice@example.org", "@bob@example.org", "@a@example.org"]
        );
        assert_eq!(h.turns[1].parts.len(), 2, "bob's two turns merge");
    }

    #[test]
    fn budget_drops_oldest_window_turns_first() {
        let p = HistoryPolicy {
            keep_head: 1,
            window: 10,
            max_chars: 12,
        };
        let turns: Vec<_> = (0..6)
            .map(|i| {
                turn(
                    i,
                    if i % 2 == 0 {
                        Role::User
                    } else {
                        Role::Assistant
                    },
                    "abcd",
                )
            })
            .collect();
        let h = p.apply(turns);
        // head 4 chars, then m5 and m4 (8 chars) fit, m3 does not.
        assert_eq!(
            ids(&h),
            ["m0", "m5"],
            "m4 is a user turn after a user head and is dropped"
        );
        let total: usize = h.turns.iter().map(chars).sum();
        assert!(total <= 12);
    }

    #[test]
    fn no_head() {
        let p = HistoryPolicy {
            keep_head: 0,
            window: 3,
            max_chars: 1000,
        };
        let h = p.apply(alternating(6));
        assert_eq!(ids(&h), ["m3", "m4", "m5"]);
        assert_eq!(h.cache_breakpoint_after, None);
    }
}
