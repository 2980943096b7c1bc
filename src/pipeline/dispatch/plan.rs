//! What a dispatch batch does, decided without the database: [`plan`] turns how each job's turn
//! went ([`JobResult`]) into the batch's [`Effects`] — the responses to store with their policy
//! states and sibling turns, how the turns that end without a response end, the turn-end jobs,
//! the jobs kept to wait for their thread — which [`super::apply`] writes in one transaction and
//! [`super::after_commit`] follows up.

use crate::error::OutboundError;
use crate::message::{NormalizedMessage, NormalizedResponse};
use crate::pipeline::conversation::{INTERRUPTED, MERGED};
use crate::pipeline::runs::{Key, Place};
use crate::pipeline::{Hold, TurnEndJob};
use crate::store::jobs::Finish;

/// A response to store.
#[derive(Debug)]
pub(in crate::pipeline) struct Answer {
    pub(super) response: NormalizedResponse,
    /// `response` as stored, serialised on the dispatch's own task, before the batch takes the
    /// database's writer.
    pub(super) body: String,
    /// The agent's local name.
    pub(super) agent: String,
    /// The transport it goes out by.
    pub(super) transport: String,
    /// The dispatch span's trace context, when traces are exported (the delivery job and the
    /// relayed turns it enqueues carry it).
    pub(super) trace: Option<crate::telemetry::TraceParent>,
    /// The message answered (without history), when the transport delivers in the
    /// transaction that stores the response ([`crate::pipeline::DeliversInTransaction::deliver_in`]).
    pub(super) original: Option<std::sync::Arc<NormalizedMessage>>,
    /// The states of its policy parts, recorded with it.
    pub(super) states: Vec<crate::store::policy::NewState>,
    /// The sibling agents it wakes ([`crate::pipeline::chain`]), stored and dispatched with it.
    pub(super) siblings: Vec<crate::pipeline::chain::Sibling>,
    /// The earlier messages its turn took in, which end `merged`.
    pub(super) absorbed: Vec<String>,
}

/// How one dispatch job went.
#[derive(Debug)]
pub(super) enum Dispatched {
    /// A response to store.
    Answer(Box<Answer>),
    /// The agent had nothing to say (to its message and the earlier ones it took in).
    Silent {
        /// The earlier messages the turn took in.
        absorbed: Vec<String>,
    },
    /// The message joins a later turn: it ends `merged`, without a call.
    Merged,
    /// A newer message interrupted the call: it ends `interrupted`, without a response.
    Interrupted,
    /// A later turn already took the message in: nothing left to do.
    Taken,
    /// Its thread has a run in flight: the job is put back until that run ends.
    Deferred,
    /// On PostgreSQL: its thread's run is taken (here or on another instance), an older message
    /// waits for it, or its agent's runs are all in flight. The job goes back to the table until
    /// the run it waits for ends, at the latest until then (unix ms).
    Waiting(i64),
    /// A safety rule holds the message: the agent is not called ([`Hold`]).
    Held(Hold),
    /// The message was erased (its author deleted it) before its turn: the agent is not
    /// called, its job ends `deleted`.
    Deleted,
}

/// Why a dispatch failed for good, as the operator API reports it (its text stays in the job's
/// `last_error` for the logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FailureClass {
    /// The agent could not be reached, or kept failing until the attempts ran out.
    Unavailable,
    /// The agent refused the request (HTTP 4xx).
    Refused,
    /// Any other failure that retrying would not fix.
    Error,
}

impl FailureClass {
    /// The class of `e`.
    pub(super) fn of(e: &OutboundError) -> Self {
        match e {
            OutboundError::Temporary { .. } => Self::Unavailable,
            OutboundError::Permanent { status, .. } if status.is_some_and(|s| s.is_refusal()) => {
                Self::Refused
            }
            OutboundError::Permanent { .. } => Self::Error,
        }
    }

    /// The class as stored and reported.
    pub(super) const fn as_str(self) -> &'static str {
        match self {
            Self::Unavailable => "agent_unavailable",
            Self::Refused => "agent_refused",
            Self::Error => "agent_error",
        }
    }
}

/// How a turn ended without a response, as recorded on its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    /// The agent had nothing to say.
    NoReply,
    /// The message joined another turn.
    Merged,
    /// A newer message interrupted the call.
    Interrupted,
    /// A safety rule held the message.
    Held(Hold),
    /// The message was erased before its turn.
    Deleted,
    /// The dispatch failed for good.
    Failed(FailureClass),
}

impl Outcome {
    /// The outcome as stored on the message and counted (`switchboard_turns_total`).
    pub(super) const fn as_str(self) -> &'static str {
        match self {
            Self::NoReply => "no_reply",
            Self::Merged => MERGED,
            Self::Interrupted => INTERRUPTED,
            Self::Held(_) => "held",
            Self::Deleted => super::DELETED,
            Self::Failed(_) => "failed",
        }
    }

    /// The class stored beside it: a hold's reason or a failure's class.
    pub(super) const fn class(self) -> Option<&'static str> {
        match self {
            Self::Held(h) => Some(h.label()),
            Self::Failed(c) => Some(c.as_str()),
            _ => None,
        }
    }
}

/// How one job of a batch went: what [`plan`] reads.
#[derive(Debug)]
pub(super) struct JobResult {
    /// Its message's id, when the job's payload could be read (a job without one applies
    /// nothing: it failed for good already).
    pub(super) message_id: Option<String>,
    /// Its message's run (thread and agent) and position in the thread, when it was loaded.
    pub(super) run: Option<Place>,
    /// Whether its transport wants to hear of turns that end without a response
    /// ([`crate::pipeline::Transport::ends_turns`]).
    pub(super) ends_turns: bool,
    /// The turn's result.
    pub(super) ran: Result<Dispatched, OutboundError>,
    /// How the queue ended the job; `None` when its lease was lost (it applies nothing).
    pub(super) end: Option<Finish>,
}

/// A turn ended without a response.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Ended {
    /// The message.
    pub(super) message_id: String,
    /// How it ended.
    pub(super) outcome: Outcome,
}

/// A job kept leased here to wait for its thread's run.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Parked {
    /// The run it waits for.
    pub(super) key: Key,
    /// Its message's position in the thread.
    pub(super) seq: i64,
    /// Its index in the batch.
    pub(super) job: usize,
    /// Its renewed lease's end (unix ms).
    pub(super) lease_until: i64,
}

/// What a dispatch batch does.
#[derive(Debug, Default)]
pub(super) struct Effects {
    /// Responses to store (each with its policy states and the sibling turns it wakes), and to
    /// deliver in the transaction or by a delivery job. Kept boxed as the turns made them: an
    /// answer is kilobytes, and moving a batch's worth into one vector copies them all.
    #[allow(clippy::vec_box)]
    pub(super) answers: Vec<Box<Answer>>,
    /// Turns that end without a response, recorded on their messages.
    pub(super) ended: Vec<Ended>,
    /// Turn-end jobs for the transports that want to know.
    pub(super) turn_ends: Vec<TurnEndJob>,
    /// How each job's message ended, for the metrics (answers are counted once stored; a message
    /// another turn took in is counted by its own job, once).
    pub(super) counted: Vec<Outcome>,
    /// Jobs kept leased to wait for their thread.
    pub(super) parked: Vec<Parked>,
    /// Waiters whose job this batch lost (it went back to the table).
    pub(super) lost: Vec<Place>,
    /// Jobs put back in the table to wait for their thread (their index in the batch).
    pub(super) waiting: Vec<usize>,
}

impl Effects {
    /// `message_id`'s turn ended with `outcome`; a turn-end job follows where the transport of
    /// the job that ended it wants one.
    fn end(
        &mut self,
        message_id: String,
        outcome: Outcome,
        ends_turns: bool,
        failure: Option<&str>,
    ) {
        if ends_turns {
            self.turn_ends.push(TurnEndJob {
                message_id: message_id.clone(),
                failure: failure.map(str::to_owned),
            });
        }
        self.ended.push(Ended {
            message_id,
            outcome,
        });
    }

    /// The earlier messages a turn took in end `merged`.
    fn merged(&mut self, absorbed: Vec<String>, ends_turns: bool) {
        for id in absorbed {
            self.end(id, Outcome::Merged, ends_turns, None);
        }
    }
}

/// What the batch of `jobs` (in batch order) does.
pub(super) fn plan(jobs: Vec<JobResult>) -> Effects {
    let mut fx = Effects::default();
    for (i, job) in jobs.into_iter().enumerate() {
        let (Some(id), Some(end)) = (job.message_id, job.end) else {
            continue;
        };
        let ends = job.ends_turns;
        let ended = |fx: &mut Effects, outcome: Outcome| {
            fx.end(id.clone(), outcome, ends, None);
            fx.counted.push(outcome);
        };
        match (job.ran, end) {
            (Ok(Dispatched::Answer(mut answer)), _) => {
                fx.merged(std::mem::take(&mut answer.absorbed), ends);
                fx.answers.push(answer);
            }
            (Ok(Dispatched::Silent { absorbed }), _) => {
                fx.merged(absorbed, ends);
                ended(&mut fx, Outcome::NoReply);
            }
            (Ok(Dispatched::Merged), _) => ended(&mut fx, Outcome::Merged),
            (Ok(Dispatched::Taken), _) => fx.counted.push(Outcome::Merged),
            (Ok(Dispatched::Held(held)), _) => ended(&mut fx, Outcome::Held(held)),
            (Ok(Dispatched::Deleted), _) => ended(&mut fx, Outcome::Deleted),
            (Ok(Dispatched::Interrupted), _) => ended(&mut fx, Outcome::Interrupted),
            (Ok(Dispatched::Deferred), Finish::Deferred { lease_until }) => {
                if let Some(Place { key, seq }) = job.run {
                    fx.parked.push(Parked {
                        key,
                        seq,
                        job: i,
                        lease_until,
                    });
                }
            }
            (Ok(Dispatched::Deferred), _) => fx.lost.extend(job.run),
            (Ok(Dispatched::Waiting(_)), Finish::Waiting { .. }) => fx.waiting.push(i),
            (Ok(Dispatched::Waiting(_)), _) => {}
            (Err(e), Finish::Dead { error }) => {
                let outcome = Outcome::Failed(FailureClass::of(&e));
                fx.end(id, outcome, ends, Some(&error));
                fx.counted.push(outcome);
            }
            // Retried later: nothing ends yet.
            (Err(_), _) => {}
        }
    }
    fx
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::PeerStatus;
    use crate::pipeline::chain::Sibling;

    fn key(thread: &str) -> Key {
        Key::new(thread, "echo")
    }

    fn place(thread: &str, seq: i64) -> Place {
        Place {
            key: key(thread),
            seq,
        }
    }

    fn job(id: &str, ran: Result<Dispatched, OutboundError>, end: Finish) -> JobResult {
        JobResult {
            message_id: Some(id.to_owned()),
            run: Some(place("t1", 1)),
            ends_turns: false,
            ran,
            end: Some(end),
        }
    }

    fn answer(id: &str, absorbed: &[&str]) -> Box<Answer> {
        let mut response: NormalizedResponse = serde_json::from_value(serde_json::json!({
            "id": format!("r-{id}"), "in_reply_to": id, "thread_id": "t1",
            "agent": "@echo@example.com", "parts": []
        }))
        .unwrap();
        response.parts.push(crate::message::Part::text("hi"));
        Box::new(Answer {
            body: serde_json::to_string(&response).unwrap(),
            response,
            agent: "echo".into(),
            transport: "memory".into(),
            trace: None,
            original: None,
            states: Vec::new(),
            siblings: Vec::new(),
            absorbed: absorbed.iter().map(|s| (*s).to_owned()).collect(),
        })
    }

    fn ended(fx: &Effects) -> Vec<(&str, &str, Option<&str>)> {
        fx.ended
            .iter()
            .map(|e| (e.message_id.as_str(), e.outcome.as_str(), e.outcome.class()))
            .collect()
    }

    fn counted(fx: &Effects) -> Vec<&str> {
        fx.counted.iter().map(|o| o.as_str()).collect()
    }

    #[test]
    fn an_answer_is_stored_and_the_messages_its_turn_took_in_end_merged() {
        let fx = plan(vec![job(
            "m3",
            Ok(Dispatched::Answer(answer("m3", &["m1", "m2"]))),
            Finish::Done,
        )]);
        assert_eq!(fx.answers.len(), 1);
        assert_eq!(fx.answers[0].response.in_reply_to, "m3");
        assert!(
            fx.answers[0].absorbed.is_empty(),
            "the absorbed moved to `ended`"
        );
        assert_eq!(
            ended(&fx),
            vec![("m1", "merged", None), ("m2", "merged", None)]
        );
        // An answer is counted once it is stored, not here.
        assert!(fx.counted.is_empty());
        assert!(fx.turn_ends.is_empty());
    }

    #[test]
    fn no_reply_ends_the_turn_and_its_absorbed_messages() {
        let mut j = job(
            "m2",
            Ok(Dispatched::Silent {
                absorbed: vec!["m1".into()],
            }),
            Finish::Done,
        );
        j.ends_turns = true;
        let fx = plan(vec![j]);
        assert!(fx.answers.is_empty());
        assert_eq!(
            ended(&fx),
            vec![("m1", "merged", None), ("m2", "no_reply", None)]
        );
        assert_eq!(counted(&fx), vec!["no_reply"]);
        let ends: Vec<_> = fx
            .turn_ends
            .iter()
            .map(|t| (t.message_id.as_str(), t.failure.as_deref()))
            .collect();
        assert_eq!(ends, vec![("m1", None), ("m2", None)]);
    }

    #[test]
    fn queue_modes_end_turns_merged_interrupted_or_taken() {
        let fx = plan(vec![
            job("m1", Ok(Dispatched::Merged), Finish::Done),
            job("m2", Ok(Dispatched::Interrupted), Finish::Done),
            job("m3", Ok(Dispatched::Taken), Finish::Done),
        ]);
        // A message a later turn already took in is not recorded again, only counted.
        assert_eq!(
            ended(&fx),
            vec![("m1", "merged", None), ("m2", "interrupted", None)]
        );
        assert_eq!(counted(&fx), vec!["merged", "interrupted", "merged"]);
    }

    #[test]
    fn held_and_deleted_messages_end_without_a_call() {
        let fx = plan(vec![
            job("m1", Ok(Dispatched::Held(Hold::BotLoop)), Finish::Done),
            job("m2", Ok(Dispatched::Deleted), Finish::Done),
        ]);
        assert_eq!(
            ended(&fx),
            vec![("m1", "held", Some("bot-loop")), ("m2", "deleted", None)]
        );
        assert_eq!(counted(&fx), vec!["held", "deleted"]);
    }

    #[test]
    fn a_failure_ends_the_turn_only_when_the_job_is_dead() {
        let refused = OutboundError::permanent("HTTP 403").with_status(PeerStatus::Http(403));
        let mut dead = job(
            "m1",
            Err(refused),
            Finish::Dead {
                error: "HTTP 403: no".into(),
            },
        );
        dead.ends_turns = true;
        let retried = job(
            "m2",
            Err(OutboundError::temporary("connection refused")),
            Finish::Retry {
                run_at: 5,
                error: "connection refused".into(),
            },
        );
        let fx = plan(vec![dead, retried]);
        assert_eq!(ended(&fx), vec![("m1", "failed", Some("agent_refused"))]);
        assert_eq!(counted(&fx), vec!["failed"]);
        assert_eq!(fx.turn_ends.len(), 1);
        assert_eq!(fx.turn_ends[0].failure.as_deref(), Some("HTTP 403: no"));
    }

    #[test]
    fn failures_are_classed_without_their_text() {
        let unreachable = OutboundError::temporary("connection refused");
        let five_hundred = OutboundError::temporary("HTTP 500").with_status(PeerStatus::Http(500));
        let refused = OutboundError::permanent("HTTP 403").with_status(PeerStatus::Http(403));
        let malformed = OutboundError::permanent("answer is not a response");
        assert_eq!(FailureClass::of(&unreachable), FailureClass::Unavailable);
        assert_eq!(FailureClass::of(&five_hundred), FailureClass::Unavailable);
        assert_eq!(FailureClass::of(&refused), FailureClass::Refused);
        assert_eq!(FailureClass::of(&malformed), FailureClass::Error);
        assert_eq!(FailureClass::Unavailable.as_str(), "agent_unavailable");
        assert_eq!(FailureClass::Refused.as_str(), "agent_refused");
        assert_eq!(FailureClass::Error.as_str(), "agent_error");
    }

    #[test]
    fn a_deferred_job_is_parked_when_kept_and_leaves_its_place_when_lost() {
        let mut kept = job(
            "m2",
            Ok(Dispatched::Deferred),
            Finish::Deferred { lease_until: 99 },
        );
        kept.run = Some(place("t1", 2));
        let mut lost = job("m3", Ok(Dispatched::Deferred), Finish::Done);
        lost.run = Some(place("t2", 7));
        let fx = plan(vec![kept, lost]);
        assert_eq!(
            fx.parked,
            vec![Parked {
                key: key("t1"),
                seq: 2,
                job: 0,
                lease_until: 99
            }]
        );
        assert_eq!(fx.lost, vec![place("t2", 7)]);
        assert!(fx.ended.is_empty() && fx.counted.is_empty());
    }

    #[test]
    fn a_waiting_job_put_back_is_woken_if_its_run_is_over_and_ends_nothing() {
        let back = job(
            "m2",
            Ok(Dispatched::Waiting(50)),
            Finish::Waiting { run_at: 50 },
        );
        let mut lost = job("m3", Ok(Dispatched::Waiting(50)), Finish::Done);
        lost.end = None;
        let fx = plan(vec![back, lost]);
        assert_eq!(fx.waiting, vec![0], "only the job put back is looked at");
        assert!(fx.parked.is_empty() && fx.lost.is_empty());
        assert!(fx.ended.is_empty() && fx.counted.is_empty() && fx.turn_ends.is_empty());
    }

    #[test]
    fn a_job_whose_lease_was_lost_or_payload_unreadable_applies_nothing() {
        let mut lease_lost = job(
            "m1",
            Ok(Dispatched::Answer(answer("m1", &["m0"]))),
            Finish::Done,
        );
        lease_lost.end = None;
        let mut unreadable = job("m2", Err(OutboundError::permanent("bad")), Finish::Done);
        unreadable.message_id = None;
        unreadable.end = Some(Finish::Dead {
            error: "bad".into(),
        });
        let fx = plan(vec![lease_lost, unreadable]);
        assert!(fx.answers.is_empty() && fx.ended.is_empty() && fx.counted.is_empty());
        assert!(fx.parked.is_empty() && fx.lost.is_empty() && fx.turn_ends.is_empty());
    }

    #[test]
    fn an_answer_keeps_its_policy_states_and_the_sibling_turns_it_wakes() {
        let mut a = answer("m1", &[]);
        a.states.push(crate::store::policy::NewState {
            state: "s1".into(),
            agent: "echo".into(),
            thread_id: "t1".into(),
            message_id: "m1".into(),
            response_id: "r-m1".into(),
            kind: "payment_required".into(),
            binding: "b".into(),
            part: "{}".into(),
            expires_at: 1,
        });
        let msg: NormalizedMessage = serde_json::from_value(serde_json::json!({
            "id": "s-1", "thread_id": "t1",
            "sender": { "address": "@echo@example.com", "auth_method": "none", "verified": true },
            "recipient": "@second@example.com",
            "parts": [{ "kind": "text", "mime": "text/plain", "content": "hi" }],
            "recipient_capabilities": { "mention_relay": { "kind": "none" },
                "formats": ["text/plain"], "attachments": false, "streaming": false },
            "received_via": "activitypub",
            "received_at": "2026-11-28T00:00:00.000Z",
            "raw": {}
        }))
        .unwrap();
        a.siblings.push(Sibling {
            agent: "second".into(),
            chain: vec!["echo".into()],
            origin: msg.sender.clone(),
            msg,
        });
        let fx = plan(vec![job("m1", Ok(Dispatched::Answer(a)), Finish::Done)]);
        assert_eq!(fx.answers.len(), 1);
        assert_eq!(fx.answers[0].states.len(), 1);
        assert_eq!(fx.answers[0].siblings[0].agent, "second");
        assert_eq!(fx.answers[0].siblings[0].chain, vec!["echo".to_owned()]);
    }
}
