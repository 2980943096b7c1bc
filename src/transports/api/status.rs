//! A message's status, derived from what the pipeline leaves behind: its dispatch job
//! (`dispatch:{id}`), the outcome recorded on the message when its dispatch ended without a
//! response, its response, the response's delivery job (`deliver:{response id}`) and the
//! delivery record. Pure: the facts are read elsewhere.

use super::wire::{Status, StatusView};
use crate::store::jobs::JobInfo;
use crate::store::threads::DeliveryRow;

/// What a message's status is derived from.
#[derive(Debug, Clone, Copy, Default)]
pub struct Facts<'a> {
    /// `no_reply`, `failed`, `merged`, `interrupted` or `held`, when its dispatch ended without
    /// a response.
    pub outcome: Option<&'a str>,
    /// The class of a failure.
    pub error_class: Option<&'a str>,
    /// Its dispatch job, while it is kept.
    pub dispatch: Option<&'a JobInfo>,
    /// Whether the agent's response is stored.
    pub answered: bool,
    /// The response's delivery job, while it is kept.
    pub deliver: Option<&'a JobInfo>,
    /// The response's delivery record.
    pub delivery: Option<&'a DeliveryRow>,
    /// Its author deleted the message.
    pub deleted: bool,
}

fn view(status: Status) -> StatusView {
    StatusView {
        status,
        error_class: None,
        reason: None,
    }
}

/// The status the facts give.
///
/// A response, once stored, decides (its delivery record, else its delivery job); before one,
/// being merged into a later turn does, then being deleted; then a dispatch job still waiting or running (a dead
/// job put back by the operator runs again); then the outcome recorded on the message. A
/// message with none of these is one whose finished dispatch job was purged before outcomes
/// were recorded: it was not answered.
#[must_use]
pub fn derive(f: &Facts<'_>) -> StatusView {
    if f.answered {
        if let Some(d) = f.delivery {
            return view(if d.outcome == "delivered" {
                Status::Delivered
            } else {
                Status::DeliveryFailed
            });
        }
        return view(match f.deliver.map(|j| (j.state.as_str(), j.attempts)) {
            Some(("ready", 0)) | None => Status::Answered,
            Some(("done", _)) => Status::Delivered,
            Some(("dead", _)) => Status::DeliveryFailed,
            Some(_) => Status::Delivering,
        });
    }
    // A message a later turn took in is merged for good, though its own job may still wait
    // (it will find nothing left to do).
    if f.outcome == Some("merged") {
        return view(Status::Merged);
    }
    // A deleted message not answered never will be: its job, if still waiting, ends
    // `deleted` without calling the agent.
    if f.deleted || f.outcome == Some("deleted") {
        return view(Status::Deleted);
    }
    match f.dispatch.map(|j| (j.state.as_str(), j.attempts)) {
        Some(("ready", 0)) => return view(Status::Queued),
        Some(("ready" | "running", _)) => return view(Status::Dispatching),
        _ => {}
    }
    match (f.outcome, f.dispatch.map(|j| j.state.as_str())) {
        (Some("failed"), _) | (None, Some("dead")) => StatusView {
            status: Status::Failed,
            error_class: Some(f.error_class.unwrap_or("agent_error").to_owned()),
            reason: None,
        },
        // A held message's reason is recorded as its class.
        (Some("held"), _) => StatusView {
            status: Status::Held,
            error_class: None,
            reason: f.error_class.map(str::to_owned),
        },
        (Some("interrupted"), _) => view(Status::Interrupted),
        _ => view(Status::NoReply),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(state: &str, attempts: i64) -> JobInfo {
        JobInfo {
            id: "j".into(),
            kind: "k".into(),
            state: state.into(),
            attempts,
            max_attempts: 3,
            run_at: 0,
            last_error: None,
            updated_at: 0,
        }
    }

    fn delivery(outcome: &str) -> DeliveryRow {
        DeliveryRow {
            job_id: "deliver:r".into(),
            response_id: "r".into(),
            outcome: outcome.into(),
            attempts: 1,
            finished_at: 0,
            status_code: None,
            diagnostic: None,
            remote_mta: None,
            recipient: None,
        }
    }

    #[test]
    fn every_status_follows_from_its_facts() {
        let s = |f: Facts<'_>| derive(&f).status;
        let (ready0, ready2, running, done, dead) = (
            job("ready", 0),
            job("ready", 2),
            job("running", 1),
            job("done", 1),
            job("dead", 3),
        );
        let dispatch = |j| Facts {
            dispatch: Some(j),
            ..Facts::default()
        };
        assert_eq!(s(dispatch(&ready0)), Status::Queued);
        assert_eq!(s(dispatch(&ready2)), Status::Dispatching);
        assert_eq!(s(dispatch(&running)), Status::Dispatching);
        assert_eq!(s(dispatch(&done)), Status::NoReply);
        let no_reply = Facts {
            outcome: Some("no_reply"),
            ..dispatch(&done)
        };
        assert_eq!(s(no_reply), Status::NoReply);
        // Taken into a later turn while its own debounced job still waits.
        let merged = Facts {
            outcome: Some("merged"),
            ..dispatch(&ready0)
        };
        assert_eq!(s(merged), Status::Merged);
        let interrupted = Facts {
            outcome: Some("interrupted"),
            ..dispatch(&done)
        };
        assert_eq!(s(interrupted), Status::Interrupted);
        // Deleted before its turn: at once, and once its job has ended so.
        let deleted = Facts {
            deleted: true,
            ..dispatch(&ready0)
        };
        assert_eq!(s(deleted), Status::Deleted);
        let ended_deleted = Facts {
            outcome: Some("deleted"),
            deleted: true,
            ..dispatch(&done)
        };
        assert_eq!(s(ended_deleted), Status::Deleted);
        let failed = Facts {
            outcome: Some("failed"),
            error_class: Some("agent_unavailable"),
            ..dispatch(&dead)
        };
        let v = derive(&failed);
        assert_eq!(
            (v.status, v.error_class.as_deref()),
            (Status::Failed, Some("agent_unavailable"))
        );
        // The dead job put back by the operator runs again.
        let retried = Facts {
            dispatch: Some(&ready0),
            ..failed
        };
        assert_eq!(s(retried), Status::Queued);
        // Purged jobs: the recorded outcome still answers.
        let purged = Facts {
            dispatch: None,
            ..failed
        };
        assert_eq!(s(purged), Status::Failed);
        assert_eq!(s(Facts::default()), Status::NoReply);

        let answered = Facts {
            answered: true,
            ..dispatch(&done)
        };
        assert_eq!(s(answered), Status::Answered);
        let deliver = |j| Facts {
            deliver: Some(j),
            ..answered
        };
        assert_eq!(s(deliver(&ready0)), Status::Answered);
        assert_eq!(s(deliver(&running)), Status::Delivering);
        assert_eq!(s(deliver(&ready2)), Status::Delivering);
        assert_eq!(s(deliver(&dead)), Status::DeliveryFailed);
        assert_eq!(s(deliver(&done)), Status::Delivered);
        let (ok, failed_delivery) = (delivery("delivered"), delivery("failed"));
        let recorded = |d| Facts {
            delivery: Some(d),
            ..answered
        };
        assert_eq!(s(recorded(&ok)), Status::Delivered);
        // Answered before it was deleted: the answer's fate decides.
        let answered_deleted = Facts {
            deleted: true,
            ..recorded(&ok)
        };
        assert_eq!(s(answered_deleted), Status::Delivered);
        assert_eq!(s(recorded(&failed_delivery)), Status::DeliveryFailed);
    }
}
